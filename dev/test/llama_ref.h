/*
The CPU reference Llama of dev/test/README.md: forward, hand-written backward (with tied embeddings
the lm_head is wte, and the gradients of both uses sum into wte's), RoPE with llama3 scaling, AdamW
with global gradient-norm clipping, gradient accumulation, and the fp8 emulation of the GPU
trainer's fp8 linears (per-tensor delayed scaling with llmc/fp8.h). It is the yardstick for the
GPU trainer (test_llama_fp8.cu) and is itself checked against finite differences and the PyTorch
fixtures (dev/test/test_ref.h), and against transformers through dev/test/tools/ref_logits.c
(dev/test/test_hf.py). Written to be read, not to be fast: plain loops over row-major arrays, the
arithmetic in double and every stored value rounded to ref_real, so the fp32 reference rounds where
an fp32 implementation stores a tensor (and where fp8 emulation casts), not inside each sum.

ref_real is float (the fp32 reference). Defining LLAMA_REF_DOUBLE before including this header makes
it double: dev/test/gradcheck.c compiles such a copy, in its own translation unit, for finite
differences precise enough to check every gradient. Every function is static, so the two copies
never meet. Plain C that also compiles as C++ (nvcc).

Loss masks: a target of -1 (the trainer's ignore index, llmc/dataloader.h) is not learned: it adds
nothing to the loss and its dlogits row is 0. The step's loss is then the mean over the learned
targets of all its micro-batches (their summed losses / their count), not the mean of per-micro-batch
means; with every target learned the arithmetic is the one before masks.

Document masking (ref_set_doc_mask, off by default): a packed row holds several documents, each
starting at the document-start id (the BOS the shards carry; a row's first position always starts
one). A query attends only to the keys of its own document, causally, and RoPE counts positions from
0 at each document start, so each document computes what it would alone in a row of its own.

bf16 master weights (ref_set_master_bf16, off by default; -master_weights bf16): the params are bf16
values and AdamW stores each update as the GPU's does, the fp32 value rounded stochastically with
the element's hashed bits (llmc/bf16_round.h). The moments stay exact, as they do here with either
-adam_moments.

Usage: ref_init, ref_init_weights (or write params), then ref_train_step per optimizer step; or
ref_compute_grads for one step's gradient without an update; ref_forward/ref_backward are the
micro-steps of the current optimizer step. ref_free at the end.
*/
#ifndef DEV_TEST_LLAMA_REF_H
#define DEV_TEST_LLAMA_REF_H

#include <math.h>
#include <string.h>
#include "llmc/llama_config.h" // LlamaConfig, parameter order
#include "llmc/fp8_layout.h"   // fp8 state layout, tensor kinds and indices
#include "llmc/utils.h"        // FATAL, mallocCheck, callocCheck, random_normal
#include "llmc/fp8.h"          // fp8_quantize, fp8_compute_scale, fp8_update_state
#include "llmc/bf16_round.h"   // bf16_round_stochastic, bf16_round_weight_bits: bf16 master weights' rounding

#ifdef LLAMA_REF_DOUBLE
typedef double ref_real;
#else
typedef float ref_real;
#endif

// Activations of one micro-step (N = B*T tokens), kept for the backward, and the backward's scratch.
#define NUM_REF_ACTS 28
typedef struct {
    ref_real *x;        // (L+1, N, C) residual stream entering each layer; x[L] enters the final norm
    ref_real *h;        // (L, N, C) residual stream after the attention block
    ref_real *ln1;      // (L, N, C) attention RMSNorm output, input of qkv
    ref_real *ln1_rstd; // (L, N)
    ref_real *qkv;      // (L, N, (NH + 2*NKV)*HS) q and k after RoPE, v
    ref_real *att;      // (L, B, NH, T, T) softmax probabilities (0 above the diagonal and before a query's document)
    ref_real *atty;     // (L, N, C) attention output, input of wo
    ref_real *ln2;      // (L, N, C) MLP RMSNorm output, input of w13
    ref_real *ln2_rstd; // (L, N)
    ref_real *gu;       // (L, N, 2*FF) w13 output: gate | up
    ref_real *swi;      // (L, N, FF) silu(gate) * up, input of w2
    ref_real *lnf;      // (N, C) final RMSNorm output, input of lm_head
    ref_real *lnf_rstd; // (N)
    ref_real *logits;   // (N, V)
    ref_real *lse;      // (N) log-sum-exp of each row of logits
    // fp8 emulation only (empty otherwise): the decoded E4M3 copy of each fp8 linear's input, in the
    // scaled domain, which the forward multiplies and the weight gradient reuses
    ref_real *xq_qkv;   // (L, N, C)
    ref_real *xq_wo;    // (L, N, C)
    ref_real *xq_w13;   // (L, N, C)
    ref_real *xq_w2;    // (L, N, FF)
    ref_real *xq_lm;    // (N, C) with fp8_lm_head
    ref_real *dyq;      // (N, widest linear output) the decoded E5M2 copy of the dY being back-propagated
    // backward scratch
    ref_real *dres;     // (N, C) gradient of the residual stream
    ref_real *dln;      // (N, C) gradient of a RMSNorm output
    ref_real *datty;    // (N, C)
    ref_real *dqkv;     // (N, (NH + 2*NKV)*HS)
    ref_real *dgu;      // (N, 2*FF)
    ref_real *dswi;     // (N, FF)
    ref_real *dlogits;  // (N, V)
} RefActs;

typedef struct {
    LlamaConfig cfg;
    int B, T;
    size_t num_params;
    size_t param_sizes[NUM_PARAM_TENSORS];
    ref_real *params, *grads, *m, *v; // (num_params) each; m and v are AdamW's moments
    int master_bf16;   // the params are bf16 master weights (-master_weights bf16; ref_set_master_bf16)
    ref_real *param_ptr[NUM_PARAM_TENSORS], *grad_ptr[NUM_PARAM_TENSORS];
    ref_real *logits;  // (B, T, V) of the last forward
    // fp8 emulation of the block linears (and of lm_head with fp8_lm_head)
    int fp8, fp8_current, fp8_lm_head, fp8_history, fp8_margin;
    Fp8StateLayout fp8_layout;
    float *fp8_state;    // the GPU's state buffer, layout of llmc/fp8_layout.h (NULL without fp8)
    uint64_t *fp8_counts; // (FP8_COUNTS per fp8 tensor, llmc/fp8.h) underflows and saturations of tensor t's
                          // casts in the current step, all micro-steps (fp8_underflows, fp8_saturates); NULL without fp8
    ref_real *params_fp8; // (num_params) decoded E4M3 copies of the fp8 linears' weights (scaled domain)
    int fp8_bf16_inputs; // round every fp8 cast's input to bf16 first (the GPU casts bf16 values): the
                         // tests use the difference this makes as the noise floor of GPU-vs-reference
    int step;          // optimizer steps taken
    int micro_step;    // micro-step of the last forward within the current step, -1 before the first
    int w_fp8_step;    // the step whose weights params_fp8 holds, -1 for none
    // fp8 grains (the section "fp8 block scaling" below); fp8_grain NULL: every fp8 linear per-tensor
    int *fp8_grain;       // (fp8 linears) FP8_GRAIN_* of each linear
    int *fp8_over_steps;  // (fp8 linears) consecutive steps over ref_fp8_auto_grain's threshold
    int fp8_block_pow2;   // block scales rounded down to a power of two
    float *fp8_w_sinv;    // block (or row) scale_invs of every block (row) linear's W, at fp8_w_sinv_off[lin]
    size_t *fp8_w_sinv_off;
    ref_real *fp8_tq, *fp8_tr; // block scratch: a transposed operand's codes, a transposed fp32 operand
    float *fp8_sinv_a, *fp8_sinv_b; // block scratch: the scale_invs of a GEMM's two operands
    // Called, when set, with every linear's operands as they reach it (X and W in the forward, dY in
    // the backward), fp8 or not: dev/test/tools/fp8_grain_study.c measures the candidate grains on them.
    void (*fp8_observer)(void *ctx, int lin, int kind, const ref_real *values, int rows, int cols);
    void *fp8_observer_ctx;
    RefActs acts;
    ref_real *act_memory;
    int *inputs, *targets; // (B, T) of the last forward
    double loss_sum;       // the last forward's summed loss over its learned targets (those not -1)
    int loss_count;        // and their number
    // document masking (section "document masking" below); doc_pos NULL: off
    int doc_start_id;
    int *doc_pos;          // (B, T) each token's position in its document, from the last forward's inputs
} RefModel;

static void ref_act_sizes(RefModel *model, size_t sizes[NUM_REF_ACTS], ref_real **ptrs[NUM_REF_ACTS]) {
    const LlamaConfig *c = &model->cfg;
    size_t N = (size_t)model->B * model->T, L = c->L, C = c->C, FF = c->FF, V = c->V;
    size_t QKV = config_qkv_width(c), ATT = (size_t)model->B * c->NH * model->T * model->T;
    size_t widest = V > QKV ? V : QKV; // the widest linear output: lm_head, qkv, w13 or wo/w2
    if (2 * FF > widest) widest = 2 * FF;
    if (C > widest) widest = C;
    // multipliers that give the fp8-only buffers size 0 when they are not used
    size_t f8 = model->fp8 ? 1 : 0, f8lm = model->fp8 && model->fp8_lm_head ? 1 : 0;
    RefActs *a = &model->acts;
    size_t s[NUM_REF_ACTS] = {(L + 1) * N * C, L * N * C, L * N * C, L * N, L * N * QKV, L * ATT,
                              L * N * C, L * N * C, L * N, L * N * 2 * FF, L * N * FF, N * C, N, N * V, N,
                              f8 * L * N * C, f8 * L * N * C, f8 * L * N * C, f8 * L * N * FF, f8lm * N * C, f8 * N * widest,
                              N * C, N * C, N * C, N * QKV, N * 2 * FF, N * FF, N * V};
    ref_real **p[NUM_REF_ACTS] = {&a->x, &a->h, &a->ln1, &a->ln1_rstd, &a->qkv, &a->att, &a->atty, &a->ln2,
                                  &a->ln2_rstd, &a->gu, &a->swi, &a->lnf, &a->lnf_rstd, &a->logits, &a->lse,
                                  &a->xq_qkv, &a->xq_wo, &a->xq_w13, &a->xq_w2, &a->xq_lm, &a->dyq,
                                  &a->dres, &a->dln, &a->datty, &a->dqkv, &a->dgu, &a->dswi, &a->dlogits};
    memcpy(sizes, s, sizeof(s));
    memcpy(ptrs, p, sizeof(p));
}

static void ref_init(RefModel *model, const LlamaConfig *cfg, int B, int T, int fp8, int fp8_current, int fp8_lm_head,
                     int fp8_history, int fp8_margin) {
    const char *bad = config_check(cfg);
    if (bad != NULL) FATAL("reference model: bad config: %s", bad);
    if (B <= 0 || T <= 0 || T > cfg->max_T) FATAL("reference model: need B > 0 and 0 < T <= max_T (%d), got B %d T %d", cfg->max_T, B, T);
    if (fp8 && fp8_history < 1) FATAL("reference model: fp8 amax history length must be >= 1, got %d", fp8_history);
    // as in the trainer: an fp8 lm_head would need its own fp8 weight copy, and a tied one has no storage
    if (fp8 && fp8_lm_head && cfg->tied_embeddings) FATAL("reference model: fp8_lm_head cannot be used with tied embeddings");
    memset(model, 0, sizeof(*model));
    model->cfg = *cfg;
    model->B = B;
    model->T = T;
    model->num_params = param_sizes(cfg, model->param_sizes);
    model->params = (ref_real *)callocCheck(model->num_params, sizeof(ref_real));
    model->grads = (ref_real *)callocCheck(model->num_params, sizeof(ref_real));
    model->m = (ref_real *)callocCheck(model->num_params, sizeof(ref_real));
    model->v = (ref_real *)callocCheck(model->num_params, sizeof(ref_real));
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        model->param_ptr[i] = model->params + off;
        model->grad_ptr[i] = model->grads + off;
        off += model->param_sizes[i];
    }
    if (cfg->tied_embeddings) { // lm_head is wte: the logits read it, and their gradient adds into wte's
        model->param_ptr[P_LM_HEAD] = model->param_ptr[P_WTE];
        model->grad_ptr[P_LM_HEAD] = model->grad_ptr[P_WTE];
    }
    model->fp8 = fp8;
    model->fp8_current = fp8_current;
    model->fp8_lm_head = fp8_lm_head;
    model->fp8_history = fp8_history;
    model->fp8_margin = fp8_margin;
    if (fp8) {
        model->fp8_layout = fp8_state_layout(fp8_num_tensors(cfg, fp8_lm_head), fp8_history);
        model->fp8_state = (float *)mallocCheck(model->fp8_layout.total * sizeof(float));
        fp8_state_init(model->fp8_state, model->fp8_layout);
        model->fp8_counts = (uint64_t *)callocCheck(FP8_COUNTS * (size_t)model->fp8_layout.num_tensors, sizeof(uint64_t));
        model->params_fp8 = (ref_real *)callocCheck(model->num_params, sizeof(ref_real));
    }
    size_t sizes[NUM_REF_ACTS], total = 0;
    ref_real **ptrs[NUM_REF_ACTS];
    ref_act_sizes(model, sizes, ptrs);
    for (int i = 0; i < NUM_REF_ACTS; i++) total += sizes[i];
    model->act_memory = (ref_real *)callocCheck(total, sizeof(ref_real));
    off = 0;
    for (int i = 0; i < NUM_REF_ACTS; i++) {
        *ptrs[i] = model->act_memory + off;
        off += sizes[i];
    }
    model->logits = model->acts.logits;
    model->inputs = (int *)callocCheck((size_t)B * T, sizeof(int));
    model->targets = (int *)callocCheck((size_t)B * T, sizeof(int));
    model->micro_step = -1;
    model->w_fp8_step = -1;
}

static void ref_free(RefModel *model) {
    free(model->params);
    free(model->grads);
    free(model->m);
    free(model->v);
    free(model->fp8_state);
    free(model->fp8_counts);
    free(model->params_fp8);
    free(model->fp8_grain);
    free(model->fp8_over_steps);
    free(model->fp8_w_sinv);
    free(model->fp8_w_sinv_off);
    free(model->fp8_tq);
    free(model->fp8_tr);
    free(model->fp8_sinv_a);
    free(model->fp8_sinv_b);
    free(model->act_memory);
    free(model->inputs);
    free(model->targets);
    free(model->doc_pos);
    memset(model, 0, sizeof(*model));
}

// GPT-2/llm.c-style init: normal(0, 0.02), the residual projections wo and w2 scaled down by
// sqrt(2L) (each layer adds two of them to the residual stream), RMSNorm weights 1. One draw per
// element of each matrix, tensors in llama_config.h order; norm weights take no draws.
static void ref_init_weights(RefModel *model, uint64_t seed) {
    uint64_t rng = seed;
    double resid_std = 0.02 / sqrt(2.0 * model->cfg.L);
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        ref_real *w = model->param_ptr[p];
        int is_norm = !param_is_decayed(p);
        double std = (p == P_WO || p == P_W2) ? resid_std : 0.02;
        for (size_t i = 0; i < model->param_sizes[p]; i++) {
            w[i] = is_norm ? (ref_real)1.0 : (ref_real)(std * random_normal(&rng));
        }
    }
}

// ----------------------------------------------------------------------------------------------
// fp8 emulation

// A linear's fp8 grain (FP8_GRAIN_*, llmc/fp8_layout.h; the section "fp8 block scaling" below): one
// scale per tensor, one per block, or none: the linear has fallen back to the unquantized GEMM (bf16
// on the GPU).

static int ref_linear_is_fp8(const RefModel *model, int lin) {
    return model->fp8 && (lin < LINS_PER_LAYER * model->cfg.L || model->fp8_lm_head) &&
           !(model->fp8_grain != NULL && model->fp8_grain[lin] == FP8_GRAIN_BF16);
}

// Live scaling: in the first optimizer step the first cast of every tensor sets its scale from its
// own amax (there is no history yet); with the `current` recipe every cast does.
static int ref_fp8_live(const RefModel *model) {
    return model->fp8_current || (model->step == 0 && model->micro_step == 0);
}

// Round to the nearest bf16 (ties to even), as the GPU's bf16 activations are.
static float ref_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x; // inf, NaN
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

// From now on the params are bf16 master weights: each rounded to the nearest bf16 (as the trainer
// loads fp32 weights into them), and AdamW stores its updates as bf16 (ref_master_store).
static void ref_set_master_bf16(RefModel *model) {
    model->master_bf16 = 1;
    for (size_t i = 0; i < model->num_params; i++) model->params[i] = ref_round_bf16((float)model->params[i]);
}

// The weight AdamW stores for element i (the model-wide index) at the 1-based step t: w itself, or with
// bf16 master weights w in fp32 rounded stochastically to bf16 with the element's bits, as the GPU does.
static ref_real ref_master_store(const RefModel *model, double w, size_t i, int t) {
    if (!model->master_bf16) return (ref_real)w;
    return (ref_real)bf16_bits_to_float(bf16_round_stochastic((float)w, bf16_round_weight_bits(i, t) & 0xffffu));
}

// Casts n values of fp8 tensor t into out (decoded, in the scaled domain), recording their amax in
// the tensor's slot (max over the step's micro-steps; a NaN sticks, as with the GPU's atomic max).
static void ref_fp8_cast(RefModel *model, int t, const ref_real *in, ref_real *out, size_t n, int live) {
    float *state = model->fp8_state;
    Fp8StateLayout lay = model->fp8_layout;
    Fp8Format fmt = fp8_kind_format(t % FP8_KINDS);
    float amax = 0.0f;
    const int round_in = model->fp8_bf16_inputs;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(round_in ? ref_round_bf16((float)in[i]) : (float)in[i]);
        if (isnan(a)) { amax = a; break; }
        if (a > amax) amax = a;
    }
    float *slot = state + lay.amax_slot + t;
    if (amax > *slot || isnan(amax)) *slot = amax;
    if (live) {
        state[lay.scale + t] = fp8_compute_scale(amax, fp8_format_max(fmt), model->fp8_margin, state[lay.scale + t]);
        state[lay.scale_inv + t] = 1.0f / state[lay.scale + t];
    }
    float scale = state[lay.scale + t];
    uint64_t under = 0, sat = 0;
    for (size_t i = 0; i < n; i++) {
        float x = round_in ? ref_round_bf16((float)in[i]) : (float)in[i];
        out[i] = (ref_real)fp8_quantize(x, scale, fmt);
        under += fp8_underflows(x, scale, fmt);
        sat += fp8_saturates(x, scale, fmt);
    }
    model->fp8_counts[FP8_COUNTS * t + FP8_UNDERFLOWS] += under;
    model->fp8_counts[FP8_COUNTS * t + FP8_SATURATIONS] += sat;
}

// ----------------------------------------------------------------------------------------------
// fp8 block scaling (issue 34; the spec is dev/results/fp8_outliers/design.md)
//
// A block linear (grain FP8_GRAIN_BLOCK, set per linear by ref_set_fp8_grain, or by the fallback
// ref_fp8_auto_grain, which can also take a linear off fp8: FP8_GRAIN_BF16) casts every operand of
// its GEMMs with one scale per block: 1x128 along the GEMM's reduction dimension for X, dY and their
// transposes, 128x128 for W, each block's scale from the values being cast (current scaling, as in
// DeepSeek-V3 and TransformerEngine's Float8BlockScaling), and each GEMM multiplies every 128-long
// partial sum by its two blocks' scale_invs: cuBLASLt's block-scaled fp8 GEMM on Hopper
// (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F x VEC128_32F or BLK128x128_32F), in its TN form, so
// wgrad casts dY^T and X^T afresh from the unquantized values. The per-tensor state (slot, history,
// scale) still records each tensor's amax, and the health counts count every cast, for the logs.

#define FP8_BLOCK 128

static size_t ref_ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// The number of scales of a (rows, cols) operand cast in blocks of br rows x FP8_BLOCK columns.
static size_t ref_fp8_block_count(size_t rows, size_t cols, int br) { return ref_ceil_div(rows, br) * ref_ceil_div(cols, FP8_BLOCK); }

// A block's scale: the per-tensor formula with margin 0 (fmax / amax; 1 for a block of zeros or with a
// NaN or inf; FLT_MAX for a tiny amax), with pow2 rounded down to a power of two (TE's
// force_pow_2_scales), which makes scale_inv exact too.
static float ref_fp8_block_scale(float amax, float fmax, int pow2) {
    float scale = fp8_compute_scale(amax, fmax, 0, 1.0f);
    return pow2 ? ldexpf(1.0f, ilogbf(scale)) : scale;
}

// Casts the (rows, cols) row-major `in` with one scale per block of br rows x bc columns, the last
// blocks of a row or column partial: out gets the decoded codes (scaled domain),
// sinv[(r / br) * ceil(cols / bc) + c / bc] the block's 1 / scale. Adds the cast's underflows and
// saturations to counts; returns the largest |value| (NaN if there is one).
static float ref_fp8_tile_cast(const ref_real *in, size_t rows, size_t cols, size_t br, size_t bc, Fp8Format fmt,
                               int pow2, int round_bf16, ref_real *out, float *sinv, uint64_t counts[FP8_COUNTS]) {
    size_t nbc = ref_ceil_div(cols, bc);
    float tensor_amax = 0.0f;
    for (size_t r0 = 0; r0 < rows; r0 += br) {
        size_t r1 = r0 + br < rows ? r0 + br : rows;
        for (size_t c0 = 0; c0 < cols; c0 += bc) {
            size_t c1 = c0 + bc < cols ? c0 + bc : cols;
            float amax = 0.0f;
            for (size_t r = r0; r < r1 && !isnan(amax); r++) {
                for (size_t c = c0; c < c1; c++) {
                    float a = fabsf(round_bf16 ? ref_round_bf16((float)in[r * cols + c]) : (float)in[r * cols + c]);
                    if (isnan(a)) { amax = a; break; }
                    if (a > amax) amax = a;
                }
            }
            if (!isnan(tensor_amax) && (isnan(amax) || amax > tensor_amax)) tensor_amax = amax;
            float scale = ref_fp8_block_scale(amax, fp8_format_max(fmt), pow2);
            sinv[(r0 / br) * nbc + c0 / bc] = 1.0f / scale;
            for (size_t r = r0; r < r1; r++) {
                for (size_t c = c0; c < c1; c++) {
                    float x = round_bf16 ? ref_round_bf16((float)in[r * cols + c]) : (float)in[r * cols + c];
                    out[r * cols + c] = (ref_real)fp8_quantize(x, scale, fmt);
                    counts[FP8_UNDERFLOWS] += fp8_underflows(x, scale, fmt);
                    counts[FP8_SATURATIONS] += fp8_saturates(x, scale, fmt);
                }
            }
        }
    }
    return tensor_amax;
}

// The block cast: blocks of br rows (1 or FP8_BLOCK) x FP8_BLOCK columns.
static float ref_fp8_block_cast(const ref_real *in, size_t rows, size_t cols, int br, Fp8Format fmt, int pow2,
                                int round_bf16, ref_real *out, float *sinv, uint64_t counts[FP8_COUNTS]) {
    return ref_fp8_tile_cast(in, rows, cols, br, FP8_BLOCK, fmt, pow2, round_bf16, out, sinv, counts);
}

// out (I, J) = (or += with accumulate) the sum over the reduction blocks kb of bk columns of
// (sum over k in kb of a[i, k] b[j, k]) * sa[i / bra][kb] * sb[j / brb][kb], a (I, K) and b (J, K)
// row-major with scales laid out as ref_fp8_tile_cast writes them; the sums in double, rounded once
// before the accumulation, as ref_matmul_backward's weight gradient is.
static void ref_fp8_tile_gemm(ref_real *out, const ref_real *a, const float *sa, int bra, const ref_real *b,
                              const float *sb, int brb, int I, int J, int K, size_t bk, int accumulate) {
    size_t nkb = ref_ceil_div(K, bk);
    for (int i = 0; i < I; i++) {
        for (int j = 0; j < J; j++) {
            double acc = 0.0;
            for (size_t kb = 0; kb < nkb; kb++) {
                size_t k1 = (kb + 1) * bk < (size_t)K ? (kb + 1) * bk : (size_t)K;
                double part = 0.0;
                for (size_t k = kb * bk; k < k1; k++) part += (double)a[(size_t)i * K + k] * b[(size_t)j * K + k];
                acc += part * sa[(i / bra) * nkb + kb] * sb[(j / brb) * nkb + kb];
            }
            out[(size_t)i * J + j] = accumulate ? out[(size_t)i * J + j] + (ref_real)acc : (ref_real)acc;
        }
    }
}

// The block GEMM: 128-long reduction blocks.
static void ref_fp8_block_gemm(ref_real *out, const ref_real *a, const float *sa, int bra, const ref_real *b,
                               const float *sb, int brb, int I, int J, int K, int accumulate) {
    ref_fp8_tile_gemm(out, a, sa, bra, b, sb, brb, I, J, K, FP8_BLOCK, accumulate);
}

static void ref_transpose(ref_real *out, const ref_real *in, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) out[c * rows + r] = in[r * cols + c];
}

static int ref_linear_is_block(const RefModel *model, int lin) {
    return model->fp8_grain != NULL && model->fp8_grain[lin] == FP8_GRAIN_BLOCK;
}

// (M, K) of fp8 linear lin's weight and its offset in params
static void ref_linear_shape(const RefModel *model, int lin, int *M, int *K, size_t *off) {
    const LlamaConfig *c = &model->cfg;
    int l = lin / LINS_PER_LAYER, k = lin % LINS_PER_LAYER;
    const int ptensor[LINS_PER_LAYER] = {P_WQKV, P_WO, P_W13, P_W2};
    const int rows[LINS_PER_LAYER] = {config_qkv_width(c), c->C, 2 * c->FF, c->C};
    const int cols[LINS_PER_LAYER] = {c->C, c->C, c->C, c->FF};
    if (l == c->L) { // the fp8 lm_head
        *M = c->V; *K = c->C; *off = model->param_ptr[P_LM_HEAD] - model->params;
        return;
    }
    *M = rows[k]; *K = cols[k];
    *off = (size_t)(model->param_ptr[ptensor[k]] - model->params) + (size_t)l * rows[k] * cols[k];
}

// A block cast's amax into tensor t's slot (NaN sticks) and its counts into the step's.
static void ref_fp8_block_record(RefModel *model, int t, float amax, const uint64_t counts[FP8_COUNTS]) {
    float *slot = model->fp8_state + model->fp8_layout.amax_slot + t;
    if (amax > *slot || isnan(amax)) *slot = amax;
    for (int i = 0; i < FP8_COUNTS; i++) model->fp8_counts[FP8_COUNTS * t + i] += counts[i];
}

// The grain state and the block scratch, allocated on the first grain change.
static void ref_fp8_grain_alloc(RefModel *model) {
    int nlin = fp8_num_linears(&model->cfg, model->fp8_lm_head);
    model->fp8_grain = (int *)callocCheck(nlin, sizeof(int));
    model->fp8_over_steps = (int *)callocCheck(nlin, sizeof(int));
    model->fp8_w_sinv_off = (size_t *)mallocCheck(nlin * sizeof(size_t));
    size_t total = 0, N = (size_t)model->B * model->T, widest = 0, wmax = 0;
    for (int i = 0; i < nlin; i++) {
        int M, K;
        size_t off;
        ref_linear_shape(model, i, &M, &K, &off);
        model->fp8_w_sinv_off[i] = total;
        size_t grid = ref_fp8_block_count(M, K, FP8_BLOCK);
        total += grid > (size_t)M ? grid : (size_t)M; // a block linear's grid, or a row linear's M row scales
        if ((size_t)(M > K ? M : K) > widest) widest = M > K ? M : K;
        if ((size_t)M * K > wmax) wmax = (size_t)M * K;
    }
    model->fp8_w_sinv = (float *)mallocCheck(total * sizeof(float));
    // scratch for the largest transposed operand (W^T, X^T, dY^T) and the scales of either GEMM operand
    size_t big = N * widest > wmax ? N * widest : wmax, nmax = N > widest ? N : widest;
    model->fp8_tq = (ref_real *)mallocCheck(big * sizeof(ref_real));
    model->fp8_tr = (ref_real *)mallocCheck(big * sizeof(ref_real));
    model->fp8_sinv_a = (float *)mallocCheck(nmax * ref_ceil_div(nmax, FP8_BLOCK) * sizeof(float));
    model->fp8_sinv_b = (float *)mallocCheck(nmax * ref_ceil_div(nmax, FP8_BLOCK) * sizeof(float));
}

// Sets fp8 linear lin's grain (FP8_GRAIN_*), with power-of-two block scales if pow2 (one setting for
// the model). Only between optimizer steps: a step's weights are cast in their linear's grain once,
// before its first forward.
static void ref_set_fp8_grain(RefModel *model, int lin, int grain, int pow2) {
    int nlin = fp8_num_linears(&model->cfg, model->fp8_lm_head);
    if (!model->fp8) FATAL("reference model: fp8 grains need fp8 emulation");
    if (lin < 0 || lin >= nlin) FATAL("reference model: fp8 linear %d is not in [0, %d)", lin, nlin);
    if (grain < FP8_GRAIN_TENSOR || grain >= FP8_GRAINS) FATAL("reference model: unknown fp8 grain %d", grain);
    if (model->micro_step != -1 || model->w_fp8_step == model->step)
        FATAL("reference model: fp8 grains change between optimizer steps only (step %d has begun)", model->step);
    if (model->fp8_grain == NULL) ref_fp8_grain_alloc(model);
    model->fp8_grain[lin] = grain;
    model->fp8_block_pow2 = pow2;
}

// The fallback of issue 34, called after each optimizer step (ref_train_step) that ran grad_accum
// micro-steps: a per-tensor fp8 linear whose X, W or dY lost more than `threshold` of the values its
// casts cast in the step (underflows plus saturations: the step's fp8_counts) in each of `patience`
// consecutive steps takes grain `target` (FP8_GRAIN_BLOCK, FP8_GRAIN_BF16 or FP8_GRAIN_ROW) from the next step on,
// for good. Returns the number of linears switched by this call.
static int ref_fp8_auto_grain(RefModel *model, int grad_accum, double threshold, int patience, int target) {
    if (!model->fp8) FATAL("reference model: the fp8 fallback needs fp8 emulation");
    if (target != FP8_GRAIN_BLOCK && target != FP8_GRAIN_BF16 && target != FP8_GRAIN_ROW)
        FATAL("reference model: fp8 fallback grain must be block, bf16 or row, got %d", target);
    if (patience < 1) FATAL("reference model: fp8 fallback patience must be >= 1, got %d", patience);
    if (model->fp8_grain == NULL) ref_fp8_grain_alloc(model);
    int nlin = fp8_num_linears(&model->cfg, model->fp8_lm_head), switched = 0;
    size_t tokens = (size_t)grad_accum * model->B * model->T;
    for (int lin = 0; lin < nlin; lin++) {
        if (model->fp8_grain[lin] != FP8_GRAIN_TENSOR || !ref_linear_is_fp8(model, lin)) continue;
        int M, K;
        size_t off;
        ref_linear_shape(model, lin, &M, &K, &off);
        const size_t values[FP8_KINDS] = {tokens * K, (size_t)M * K, tokens * M};
        int over = 0;
        for (int kind = 0; kind < FP8_KINDS; kind++) {
            const uint64_t *c = model->fp8_counts + FP8_COUNTS * (FP8_KINDS * lin + kind);
            if ((double)(c[FP8_UNDERFLOWS] + c[FP8_SATURATIONS]) > threshold * (double)values[kind]) over = 1;
        }
        model->fp8_over_steps[lin] = over ? model->fp8_over_steps[lin] + 1 : 0;
        if (model->fp8_over_steps[lin] >= patience) {
            ref_set_fp8_grain(model, lin, target, model->fp8_block_pow2);
            switched++;
        }
    }
    return switched;
}

// W of a block linear, cast in 128x128 blocks (with the other weights, once per optimizer step).
static void ref_fp8_cast_weight_block(RefModel *model, int lin) {
    int M, K;
    size_t off;
    ref_linear_shape(model, lin, &M, &K, &off);
    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_block_cast(model->params + off, M, K, FP8_BLOCK, FP8_E4M3, model->fp8_block_pow2, model->fp8_bf16_inputs,
                                    model->params_fp8 + off, model->fp8_w_sinv + model->fp8_w_sinv_off[lin], counts);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_W, amax, counts);
}

// Forward of a block linear: X (N, K) in 1x128 blocks along K times the 128x128-block W (M, K).
static void ref_linear_forward_block(RefModel *model, int lin, ref_real *out, const ref_real *inp, ref_real *xq, size_t w,
                                     int N, int K, int M) {
    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_block_cast(inp, N, K, 1, FP8_E4M3, model->fp8_block_pow2, model->fp8_bf16_inputs, xq, model->fp8_sinv_a, counts);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_X, amax, counts);
    ref_fp8_block_gemm(out, xq, model->fp8_sinv_a, 1, model->params_fp8 + w, model->fp8_w_sinv + model->fp8_w_sinv_off[lin],
                       FP8_BLOCK, N, M, K, 0);
}

// Its backward. dgrad dX = dY W: dY (N, M) in 1x128 blocks along M times W^T (K, M), W's own codes
// and 128x128 blocks transposed. wgrad dW += dY^T X: dY^T (M, N) and X^T (K, N), each cast afresh in
// 1x128 blocks along the tokens.
static void ref_linear_backward_block(RefModel *model, int lin, ref_real *dinp, const ref_real *dout, const ref_real *inp,
                                      size_t w, int N, int K, int M) {
    int pow2 = model->fp8_block_pow2, rb = model->fp8_bf16_inputs;
    uint64_t cx[FP8_COUNTS] = {0, 0}, cdy[FP8_COUNTS] = {0, 0};
    ref_real *dyq = model->acts.dyq, *tq = model->fp8_tq, *tr = model->fp8_tr;
    float *sa = model->fp8_sinv_a, *sb = model->fp8_sinv_b;
    const float *sw = model->fp8_w_sinv + model->fp8_w_sinv_off[lin];
    size_t mb = ref_ceil_div(M, FP8_BLOCK), kb = ref_ceil_div(K, FP8_BLOCK);
    float amax_dy = ref_fp8_block_cast(dout, N, M, 1, FP8_E5M2, pow2, rb, dyq, sa, cdy);
    ref_transpose(tq, model->params_fp8 + w, M, K);
    for (size_t i = 0; i < mb; i++)
        for (size_t j = 0; j < kb; j++) sb[j * mb + i] = sw[i * kb + j];
    ref_fp8_block_gemm(dinp, dyq, sa, 1, tq, sb, FP8_BLOCK, N, K, M, 0);
    ref_transpose(tr, dout, N, M);
    float amax_dyt = ref_fp8_block_cast(tr, M, N, 1, FP8_E5M2, pow2, rb, dyq, sa, cdy);
    ref_transpose(tr, inp, N, K);
    float amax_x = ref_fp8_block_cast(tr, K, N, 1, FP8_E4M3, pow2, rb, tq, sb, cx);
    ref_fp8_block_gemm(model->grads + w, dyq, sa, 1, tq, sb, 1, M, K, N, 1);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_DY, isnan(amax_dyt) || amax_dyt > amax_dy ? amax_dyt : amax_dy, cdy);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_X, amax_x, cx);
}

// ----------------------------------------------------------------------------------------------
// fp8 row-wise scaling (issue 42; torchao's "rowwise" recipe)
//
// A row linear (grain FP8_GRAIN_ROW) casts every operand of its GEMMs with one scale per row along
// that GEMM's reduction dimension: block scaling with a block as long as the reduction dimension.
// fprop: X per token (over K), W per output row (over K); dgrad: dY per token (over M), W^T per row,
// i.e. W per input column (over M); wgrad: dY^T and X^T per row, i.e. dY and X per column (over the
// tokens). Every operand in E4M3, dY too, each scale from the row being cast (current scaling),
// fp8_compute_scale(amax, 448, 0, 1) rounded down to a power of two (torchao's
// round_scales_to_power_of_2), so x * scale and scale_inv are exact. The GEMM multiplies the sum of
// element (i, j) by the scale_invs of A's row i and B's row j: cuBLASLt's OUTER_VEC_32F scale mode.

// Casts the (rows, cols) row-major `in` with one scale per row: sinv[r] is row r's 1 / scale.
static float ref_fp8_row_cast(const ref_real *in, size_t rows, size_t cols, int round_bf16, ref_real *out, float *sinv,
                              uint64_t counts[FP8_COUNTS]) {
    return ref_fp8_tile_cast(in, rows, cols, 1, cols > 0 ? cols : 1, FP8_E4M3, 1, round_bf16, out, sinv, counts);
}

// out (I, J) = (or += with accumulate) (sum over k of a[i, k] b[j, k]) * sa[i] * sb[j], a (I, K) and
// b (J, K) row-major with their row scale_invs.
static void ref_fp8_row_gemm(ref_real *out, const ref_real *a, const float *sa, const ref_real *b, const float *sb,
                             int I, int J, int K, int accumulate) {
    ref_fp8_tile_gemm(out, a, sa, 1, b, sb, 1, I, J, K, K > 0 ? K : 1, accumulate);
}

static int ref_linear_is_row(const RefModel *model, int lin) {
    return model->fp8_grain != NULL && model->fp8_grain[lin] == FP8_GRAIN_ROW;
}

// W of a row linear, cast per output row (with the other weights, once per optimizer step).
static void ref_fp8_cast_weight_row(RefModel *model, int lin) {
    int M, K;
    size_t off;
    ref_linear_shape(model, lin, &M, &K, &off);
    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_row_cast(model->params + off, M, K, model->fp8_bf16_inputs, model->params_fp8 + off,
                                  model->fp8_w_sinv + model->fp8_w_sinv_off[lin], counts);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_W, amax, counts);
}

// Forward of a row linear: X (N, K) per token times W (M, K) per output row.
static void ref_linear_forward_row(RefModel *model, int lin, ref_real *out, const ref_real *inp, ref_real *xq, size_t w,
                                   int N, int K, int M) {
    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_row_cast(inp, N, K, model->fp8_bf16_inputs, xq, model->fp8_sinv_a, counts);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_X, amax, counts);
    ref_fp8_row_gemm(out, xq, model->fp8_sinv_a, model->params_fp8 + w, model->fp8_w_sinv + model->fp8_w_sinv_off[lin],
                     N, M, K, 0);
}

// Its backward. dgrad dX = dY W: dY (N, M) per token times W^T (K, M) per row, cast afresh from the
// weights before each dgrad (its counts kept nowhere: W's are its row-wise cast's). wgrad dW += dY^T X:
// dY^T (M, N) and X^T (K, N), each cast afresh per row, i.e. per column of dY and X over the tokens.
static void ref_linear_backward_row(RefModel *model, int lin, ref_real *dinp, const ref_real *dout, const ref_real *inp,
                                    size_t w, int N, int K, int M) {
    int rb = model->fp8_bf16_inputs;
    uint64_t cx[FP8_COUNTS] = {0, 0}, cdy[FP8_COUNTS] = {0, 0}, cwt[FP8_COUNTS] = {0, 0};
    ref_real *dyq = model->acts.dyq, *tq = model->fp8_tq, *tr = model->fp8_tr;
    float *sa = model->fp8_sinv_a, *sb = model->fp8_sinv_b;
    float amax_dy = ref_fp8_row_cast(dout, N, M, rb, dyq, sa, cdy);
    ref_transpose(tr, model->params + w, M, K);
    ref_fp8_row_cast(tr, K, M, rb, tq, sb, cwt);
    ref_fp8_row_gemm(dinp, dyq, sa, tq, sb, N, K, M, 0);
    ref_transpose(tr, dout, N, M);
    float amax_dyt = ref_fp8_row_cast(tr, M, N, rb, dyq, sa, cdy);
    ref_transpose(tr, inp, N, K);
    float amax_x = ref_fp8_row_cast(tr, K, N, rb, tq, sb, cx);
    ref_fp8_row_gemm(model->grads + w, dyq, sa, tq, sb, M, K, N, 1);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_DY, isnan(amax_dyt) || amax_dyt > amax_dy ? amax_dyt : amax_dy,
                         cdy);
    ref_fp8_block_record(model, FP8_KINDS * lin + FP8_X, amax_x, cx);
}

static float ref_fp8_scale_inv(const RefModel *model, int lin, int kind) {
    return model->fp8_state[model->fp8_layout.scale_inv + FP8_KINDS * lin + kind];
}

// W of every fp8 linear is cast once per optimizer step, before its first forward (TE's weight
// caching), with the scale current then (live in the first step).
static void ref_fp8_cast_weights(RefModel *model) {
    const LlamaConfig *c = &model->cfg;
    size_t C = c->C, FF = c->FF, QKV = config_qkv_width(c);
    int live = model->fp8_current || model->step == 0;
    const int ptensor[LINS_PER_LAYER] = {P_WQKV, P_WO, P_W13, P_W2};
    const size_t per_layer[LINS_PER_LAYER] = {QKV * C, C * C, 2 * FF * C, C * FF};
    for (int l = 0; l < c->L; l++) {
        for (int k = 0; k < LINS_PER_LAYER; k++) {
            size_t off = (model->param_ptr[ptensor[k]] - model->params) + l * per_layer[k];
            if (!ref_linear_is_fp8(model, LINS_PER_LAYER * l + k)) continue;
            if (ref_linear_is_block(model, LINS_PER_LAYER * l + k)) {
                ref_fp8_cast_weight_block(model, LINS_PER_LAYER * l + k);
                continue;
            }
            if (ref_linear_is_row(model, LINS_PER_LAYER * l + k)) {
                ref_fp8_cast_weight_row(model, LINS_PER_LAYER * l + k);
                continue;
            }
            ref_fp8_cast(model, fp8_tensor_index(l, k, FP8_W), model->params + off, model->params_fp8 + off,
                         per_layer[k], live);
        }
    }
    if (model->fp8_lm_head && ref_linear_is_block(model, LINS_PER_LAYER * c->L)) {
        ref_fp8_cast_weight_block(model, LINS_PER_LAYER * c->L);
    } else if (model->fp8_lm_head && ref_linear_is_row(model, LINS_PER_LAYER * c->L)) {
        ref_fp8_cast_weight_row(model, LINS_PER_LAYER * c->L);
    } else if (ref_linear_is_fp8(model, LINS_PER_LAYER * c->L)) {
        size_t off = model->param_ptr[P_LM_HEAD] - model->params;
        ref_fp8_cast(model, FP8_KINDS * LINS_PER_LAYER * c->L + FP8_W, model->params + off, model->params_fp8 + off,
                     model->param_sizes[P_LM_HEAD], live);
    }
    model->w_fp8_step = model->step;
}

// ----------------------------------------------------------------------------------------------
// layers; N tokens, row-major

// out (N, M) = alpha * inp (N, K) @ w (M, K)^T
static void ref_matmul_forward(ref_real *out, const ref_real *inp, const ref_real *w, int N, int K, int M, double alpha) {
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < M; o++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) sum += (double)inp[(size_t)n * K + k] * w[(size_t)o * K + k];
            out[(size_t)n * M + o] = (ref_real)(sum * alpha);
        }
    }
}

// dinp (N, K) = alpha_dx * dout @ w (overwritten); dw (M, K) += alpha_dw * dout^T @ inp
static void ref_matmul_backward(ref_real *dinp, ref_real *dw, const ref_real *dout, const ref_real *inp, const ref_real *w,
                            int N, int K, int M, double alpha_dx, double alpha_dw) {
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) {
            double sum = 0.0;
            for (int o = 0; o < M; o++) sum += (double)dout[(size_t)n * M + o] * w[(size_t)o * K + k];
            dinp[(size_t)n * K + k] = (ref_real)(sum * alpha_dx);
        }
    }
    for (int o = 0; o < M; o++) {
        for (int k = 0; k < K; k++) {
            double sum = 0.0;
            for (int n = 0; n < N; n++) sum += (double)dout[(size_t)n * M + o] * inp[(size_t)n * K + k];
            dw[(size_t)o * K + k] += (ref_real)(sum * alpha_dw);
        }
    }
}

// A linear out = inp @ w^T, w = rows [off, off + M*K) of parameter tensor p, global linear index lin.
// As an fp8 linear it multiplies the E4M3 copies of inp (made here, into xq) and of w (made once per
// step), then multiplies the sum by scale_inv(x) * scale_inv(w), that product rounded to fp32 first
// (as the PyTorch reference does).
static void ref_linear_forward(RefModel *model, int lin, ref_real *out, const ref_real *inp, ref_real *xq, int p, size_t off,
                           int N, int K, int M) {
    size_t w = (size_t)(model->param_ptr[p] - model->params) + off;
    if (model->fp8_observer != NULL) {
        model->fp8_observer(model->fp8_observer_ctx, lin, FP8_X, inp, N, K);
        model->fp8_observer(model->fp8_observer_ctx, lin, FP8_W, model->params + w, M, K);
    }
    if (!ref_linear_is_fp8(model, lin)) {
        ref_matmul_forward(out, inp, model->params + w, N, K, M, 1.0);
        return;
    }
    if (ref_linear_is_block(model, lin)) {
        ref_linear_forward_block(model, lin, out, inp, xq, w, N, K, M);
        return;
    }
    if (ref_linear_is_row(model, lin)) {
        ref_linear_forward_row(model, lin, out, inp, xq, w, N, K, M);
        return;
    }
    ref_fp8_cast(model, FP8_KINDS * lin + FP8_X, inp, xq, (size_t)N * K, ref_fp8_live(model));
    float alpha = ref_fp8_scale_inv(model, lin, FP8_X) * ref_fp8_scale_inv(model, lin, FP8_W);
    ref_matmul_forward(out, xq, model->params_fp8 + w, N, K, M, alpha);
}

// Its backward: dinp = dout @ w (overwritten), dw += dout^T @ inp. As an fp8 linear dout is cast to
// E5M2 first and both products use the fp8 copies the forward used.
static void ref_linear_backward(RefModel *model, int lin, ref_real *dinp, const ref_real *dout, const ref_real *inp,
                            const ref_real *xq, int p, size_t off, int N, int K, int M) {
    size_t w = (size_t)(model->param_ptr[p] - model->params) + off;
    if (model->fp8_observer != NULL) model->fp8_observer(model->fp8_observer_ctx, lin, FP8_DY, dout, N, M);
    if (!ref_linear_is_fp8(model, lin)) {
        ref_matmul_backward(dinp, model->grads + w, dout, inp, model->params + w, N, K, M, 1.0, 1.0);
        return;
    }
    if (ref_linear_is_block(model, lin)) {
        ref_linear_backward_block(model, lin, dinp, dout, inp, w, N, K, M);
        return;
    }
    if (ref_linear_is_row(model, lin)) {
        ref_linear_backward_row(model, lin, dinp, dout, inp, w, N, K, M);
        return;
    }
    ref_real *dyq = model->acts.dyq;
    ref_fp8_cast(model, FP8_KINDS * lin + FP8_DY, dout, dyq, (size_t)N * M, ref_fp8_live(model));
    float sdy = ref_fp8_scale_inv(model, lin, FP8_DY);
    ref_matmul_backward(dinp, model->grads + w, dyq, xq, model->params_fp8 + w, N, K, M,
                    sdy * ref_fp8_scale_inv(model, lin, FP8_W), sdy * ref_fp8_scale_inv(model, lin, FP8_X));
}

// y = x / sqrt(mean(x^2) + eps) * w, per row of C
static void ref_rmsnorm_forward(ref_real *out, ref_real *rstd, const ref_real *inp, const ref_real *w, int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        const ref_real *x = inp + (size_t)n * C;
        double ss = 0.0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = (ref_real)(x[i] * r * w[i]);
        rstd[n] = (ref_real)r;
    }
}

// With r = rstd: dx_j = r * (dy_j w_j - x_j r^2 mean_i(dy_i w_i x_i)), dw_i += dy_i x_i r.
// dinp is accumulated into (it is the residual stream's gradient).
static void ref_rmsnorm_backward(ref_real *dinp, ref_real *dw, const ref_real *dout, const ref_real *inp, const ref_real *w,
                             const ref_real *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const ref_real *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        double r = rstd[n], dot = 0.0;
        for (int i = 0; i < C; i++) dot += (double)dy[i] * w[i] * x[i];
        for (int i = 0; i < C; i++) {
            dinp[(size_t)n * C + i] += (ref_real)(r * (dy[i] * (double)w[i] - x[i] * r * r * dot / C));
            dw[i] += (ref_real)(dy[i] * (double)x[i] * r);
        }
    }
}

// RoPE on the q and k heads of qkv (B, T, (NH + 2*NKV)*HS): each adjacent pair (2i, 2i+1) of a head
// at position t rotates by t * rope_inv_freq(c, i, HS) (theta^(-2i/HS), with llama3 scaling if the
// config has it). dir = -1 applies the inverse rotation (the backward). pos (B, T), when not NULL,
// replaces t by each token's position in its document (document masking).
static void ref_rope(ref_real *qkv, const LlamaConfig *c, int B, int T, const int *pos, int dir) {
    int NH = c->NH, NKV = c->NKV, HS = config_head_size(c), width = config_qkv_width(c);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            ref_real *row = qkv + ((size_t)b * T + t) * width;
            int position = pos != NULL ? pos[(size_t)b * T + t] : t;
            for (int i = 0; i < HS / 2; i++) {
                double angle = position * rope_inv_freq(c, i, HS);
                double cs = cos(angle), sn = dir * sin(angle);
                for (int head = 0; head < NH + NKV; head++) { // the q heads, then the k heads
                    ref_real *p = row + head * HS + 2 * i;
                    double x0 = p[0], x1 = p[1];
                    p[0] = (ref_real)(x0 * cs - x1 * sn);
                    p[1] = (ref_real)(x0 * sn + x1 * cs);
                }
            }
        }
    }
}

// Causal grouped-query attention. Query head h reads key/value head h / (NH/NKV). pos (B, T), when
// not NULL, is each token's position in its document: query t then sees only the keys from its
// document's start, t - pos, to t (document masking); att is 0 outside them.
static void ref_attention_forward_docs(ref_real *out, ref_real *att, const ref_real *qkv, const int *pos, int B, int T,
                                       int NH, int NKV, int HS) {
    int width = (NH + 2 * NKV) * HS, group = NH / NKV, C = NH * HS;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int koff = (NH + h / group) * HS, voff = (NH + NKV + h / group) * HS;
            for (int t = 0; t < T; t++) {
                const ref_real *q = qkv + ((size_t)b * T + t) * width + h * HS;
                ref_real *p = att + (((size_t)b * NH + h) * T + t) * T;
                int first = pos != NULL ? t - pos[(size_t)b * T + t] : 0;
                double maxs = -INFINITY, sum = 0.0;
                for (int t2 = first; t2 <= t; t2++) {
                    const ref_real *k = qkv + ((size_t)b * T + t2) * width + koff;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += (double)q[d] * k[d];
                    p[t2] = (ref_real)(s * scale);
                    if (p[t2] > maxs) maxs = p[t2];
                }
                for (int t2 = first; t2 <= t; t2++) sum += exp(p[t2] - maxs);
                for (int t2 = 0; t2 < T; t2++) p[t2] = t2 >= first && t2 <= t ? (ref_real)(exp(p[t2] - maxs) / sum) : (ref_real)0.0;
                ref_real *y = out + ((size_t)b * T + t) * C + h * HS;
                for (int d = 0; d < HS; d++) {
                    double acc = 0.0;
                    for (int t2 = first; t2 <= t; t2++) acc += (double)p[t2] * qkv[((size_t)b * T + t2) * width + voff + d];
                    y[d] = (ref_real)acc;
                }
            }
        }
    }
}

// dqkv (overwritten) from dout: dv += p dy, dp = dy . v, ds = p (dp - sum(p dp)), dq = ds k / sqrt(HS),
// dk += ds q / sqrt(HS); the key/value gradients sum over the query heads of their group. pos as in
// the forward: only the keys a query saw get gradient from it.
static void ref_attention_backward_docs(ref_real *dqkv, const ref_real *dout, const ref_real *qkv, const ref_real *att,
                                        const int *pos, int B, int T, int NH, int NKV, int HS) {
    int width = (NH + 2 * NKV) * HS, group = NH / NKV, C = NH * HS;
    double scale = 1.0 / sqrt((double)HS);
    memset(dqkv, 0, (size_t)B * T * width * sizeof(ref_real));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int koff = (NH + h / group) * HS, voff = (NH + NKV + h / group) * HS;
            for (int t = 0; t < T; t++) {
                const ref_real *p = att + (((size_t)b * NH + h) * T + t) * T;
                const ref_real *dy = dout + ((size_t)b * T + t) * C + h * HS;
                const ref_real *q = qkv + ((size_t)b * T + t) * width + h * HS;
                ref_real *dq = dqkv + ((size_t)b * T + t) * width + h * HS;
                int first = pos != NULL ? t - pos[(size_t)b * T + t] : 0;
                double pdp = 0.0; // sum over t2 of p * dp
                for (int t2 = first; t2 <= t; t2++) {
                    const ref_real *v = qkv + ((size_t)b * T + t2) * width + voff;
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += (double)dy[d] * v[d];
                    pdp += p[t2] * dp;
                }
                for (int t2 = first; t2 <= t; t2++) {
                    size_t row = ((size_t)b * T + t2) * width;
                    const ref_real *k = qkv + row + koff, *v = qkv + row + voff;
                    ref_real *dk = dqkv + row + koff, *dv = dqkv + row + voff;
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += (double)dy[d] * v[d];
                    double ds = p[t2] * (dp - pdp) * scale;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += (ref_real)(ds * k[d]);
                        dk[d] += (ref_real)(ds * q[d]);
                        dv[d] += (ref_real)(p[t2] * (double)dy[d]);
                    }
                }
            }
        }
    }
}

// The plain causal attention over whole rows (test_llama_fp8.cu checks the GPU kernels against these).
static void ref_attention_forward(ref_real *out, ref_real *att, const ref_real *qkv, int B, int T, int NH, int NKV, int HS) {
    ref_attention_forward_docs(out, att, qkv, NULL, B, T, NH, NKV, HS);
}

static void ref_attention_backward(ref_real *dqkv, const ref_real *dout, const ref_real *qkv, const ref_real *att,
                                   int B, int T, int NH, int NKV, int HS) {
    ref_attention_backward_docs(dqkv, dout, qkv, att, NULL, B, T, NH, NKV, HS);
}

// out = silu(g) * u with [g | u] = gu, g = the first FF columns
static void ref_swiglu_forward(ref_real *out, const ref_real *gu, int N, int FF) {
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < FF; i++) {
            double g = gu[(size_t)n * 2 * FF + i], u = gu[(size_t)n * 2 * FF + FF + i];
            out[(size_t)n * FF + i] = (ref_real)(g / (1.0 + exp(-g)) * u);
        }
    }
}

// d silu(g)/dg = sig(g) (1 + g (1 - sig(g)))
static void ref_swiglu_backward(ref_real *dgu, const ref_real *dout, const ref_real *gu, int N, int FF) {
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < FF; i++) {
            double g = gu[(size_t)n * 2 * FF + i], u = gu[(size_t)n * 2 * FF + FF + i];
            double sig = 1.0 / (1.0 + exp(-g)), dy = dout[(size_t)n * FF + i];
            dgu[(size_t)n * 2 * FF + i] = (ref_real)(dy * u * sig * (1.0 + g * (1.0 - sig)));
            dgu[(size_t)n * 2 * FF + FF + i] = (ref_real)(dy * g * sig);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// document masking

// Each token's position in its document: 0 at a row's first token and at every document-start id,
// one more than its predecessor's otherwise. The reference's own statement of the rule, independent of
// llmc/doc_mask.h (the trainer's), so that a test of the trainer against it checks the helper too.
static void ref_doc_positions(int *pos, const int *inputs, int B, int T, int doc_start_id) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            pos[i] = (t == 0 || inputs[i] == doc_start_id) ? 0 : pos[i - 1] + 1;
        }
    }
}

// Turns document masking on for every later forward and backward; doc_start_id is the token id that
// starts a document (the tokenizer's BOS).
static void ref_set_doc_mask(RefModel *model, int doc_start_id) {
    if (doc_start_id < 0 || doc_start_id >= model->cfg.V)
        FATAL("reference model: document-start id %d is outside the vocabulary [0, %d)", doc_start_id, model->cfg.V);
    model->doc_start_id = doc_start_id;
    if (model->doc_pos == NULL) model->doc_pos = (int *)callocCheck((size_t)model->B * model->T, sizeof(int));
}

// ----------------------------------------------------------------------------------------------
// the model

static void ref_check_tokens(const int *tokens, int n, int V, const char *what) {
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) FATAL("reference model: %s[%d] = %d is outside the vocabulary [0, %d)", what, i, tokens[i], V);
    }
}

// A target is a token id or -1 (not learned).
static void ref_check_targets(const int *targets, int n, int V) {
    for (int i = 0; i < n; i++) {
        if (targets[i] < -1 || targets[i] >= V)
            FATAL("reference model: targets[%d] = %d is outside the vocabulary [0, %d) and not -1 (masked)", i, targets[i], V);
    }
}

// One micro-step's forward on inputs/targets (B, T). Returns the mean cross-entropy loss over the
// learned targets (NaN if none is), their sum and count in loss_sum, loss_count; the logits
// stay in model->logits. In fp8 emulation the first forward of an optimizer step also casts the weights.
static ref_real ref_forward(RefModel *model, const int *inputs, const int *targets) {
    const LlamaConfig *c = &model->cfg;
    int B = model->B, T = model->T, N = B * T, L = c->L, C = c->C, FF = c->FF, V = c->V;
    int NH = c->NH, NKV = c->NKV, HS = config_head_size(c), QKV = config_qkv_width(c);
    ref_check_tokens(inputs, N, V, "inputs");
    ref_check_targets(targets, N, V);
    memcpy(model->inputs, inputs, N * sizeof(int));
    memcpy(model->targets, targets, N * sizeof(int));
    if (model->doc_pos != NULL) ref_doc_positions(model->doc_pos, inputs, B, T, model->doc_start_id);
    model->micro_step++;
    if (model->fp8 && model->w_fp8_step != model->step) ref_fp8_cast_weights(model);
    RefActs *a = &model->acts;
    ref_real *const *P = model->param_ptr;
    size_t NC = (size_t)N * C;
    for (int n = 0; n < N; n++) memcpy(a->x + (size_t)n * C, P[P_WTE] + (size_t)inputs[n] * C, C * sizeof(ref_real));
    for (int l = 0; l < L; l++) {
        ref_real *x = a->x + l * NC, *h = a->h + l * NC, *xout = a->x + (l + 1) * NC;
        ref_real *ln1 = a->ln1 + l * NC, *qkv = a->qkv + (size_t)l * N * QKV, *atty = a->atty + l * NC;
        ref_real *ln2 = a->ln2 + l * NC, *gu = a->gu + (size_t)l * N * 2 * FF, *swi = a->swi + (size_t)l * N * FF;
        size_t wqkv = (size_t)l * QKV * C, wo = (size_t)l * C * C, w13 = (size_t)l * 2 * FF * C, w2 = (size_t)l * C * FF;
        int lin = LINS_PER_LAYER * l;
        ref_rmsnorm_forward(ln1, a->ln1_rstd + (size_t)l * N, x, P[P_LN1W] + (size_t)l * C, N, C, c->norm_eps);
        ref_linear_forward(model, lin + LIN_QKV, qkv, ln1, a->xq_qkv + l * NC, P_WQKV, wqkv, N, C, QKV);
        ref_rope(qkv, c, B, T, model->doc_pos, 1);
        ref_attention_forward_docs(atty, a->att + (size_t)l * B * NH * T * T, qkv, model->doc_pos, B, T, NH, NKV, HS);
        ref_linear_forward(model, lin + LIN_WO, h, atty, a->xq_wo + l * NC, P_WO, wo, N, C, C);
        for (size_t i = 0; i < NC; i++) h[i] += x[i];
        ref_rmsnorm_forward(ln2, a->ln2_rstd + (size_t)l * N, h, P[P_LN2W] + (size_t)l * C, N, C, c->norm_eps);
        ref_linear_forward(model, lin + LIN_W13, gu, ln2, a->xq_w13 + l * NC, P_W13, w13, N, C, 2 * FF);
        ref_swiglu_forward(swi, gu, N, FF);
        ref_linear_forward(model, lin + LIN_W2, xout, swi, a->xq_w2 + (size_t)l * N * FF, P_W2, w2, N, FF, C);
        for (size_t i = 0; i < NC; i++) xout[i] += h[i];
    }
    ref_rmsnorm_forward(a->lnf, a->lnf_rstd, a->x + L * NC, P[P_LNFW], N, C, c->norm_eps);
    ref_linear_forward(model, LINS_PER_LAYER * L, a->logits, a->lnf, a->xq_lm, P_LM_HEAD, 0, N, C, V);
    double loss = 0.0;
    int count = 0;
    for (int n = 0; n < N; n++) {
        const ref_real *row = a->logits + (size_t)n * V;
        double maxv = -INFINITY, sum = 0.0;
        for (int i = 0; i < V; i++) if (row[i] > maxv) maxv = row[i];
        for (int i = 0; i < V; i++) sum += exp(row[i] - maxv);
        double lse = maxv + log(sum);
        a->lse[n] = (ref_real)lse;
        if (targets[n] < 0) continue;
        loss += lse - row[targets[n]];
        count++;
    }
    model->loss_sum = loss;
    model->loss_count = count;
    return count > 0 ? (ref_real)(loss / count) : (ref_real)NAN;
}

// Backward of the last forward for the loss sum over its learned targets times num / den (a masked
// row's dlogits are 0); accumulates into grads. The two callers below.
static void ref_backward_scaled(RefModel *model, double num, double den) {
    if (model->micro_step < 0) FATAL("reference model: ref_backward called without a forward in this step");
    const LlamaConfig *c = &model->cfg;
    int B = model->B, T = model->T, N = B * T, L = c->L, C = c->C, FF = c->FF, V = c->V;
    int NH = c->NH, NKV = c->NKV, HS = config_head_size(c), QKV = config_qkv_width(c);
    RefActs *a = &model->acts;
    ref_real *const *P = model->param_ptr, *const *G = model->grad_ptr;
    size_t NC = (size_t)N * C;
    // d(cross-entropy)/dlogits = softmax - onehot(target), scaled
    for (int n = 0; n < N; n++) {
        const ref_real *row = a->logits + (size_t)n * V;
        ref_real *drow = a->dlogits + (size_t)n * V;
        for (int i = 0; i < V; i++) {
            double p = exp(row[i] - (double)a->lse[n]);
            drow[i] = model->targets[n] < 0 ? (ref_real)0 : (ref_real)((p - (i == model->targets[n] ? 1.0 : 0.0)) * num / den);
        }
    }
    ref_linear_backward(model, LINS_PER_LAYER * L, a->dln, a->dlogits, a->lnf, a->xq_lm, P_LM_HEAD, 0, N, C, V);
    memset(a->dres, 0, NC * sizeof(ref_real));
    ref_rmsnorm_backward(a->dres, G[P_LNFW], a->dln, a->x + L * NC, P[P_LNFW], a->lnf_rstd, N, C);
    for (int l = L - 1; l >= 0; l--) {
        ref_real *x = a->x + l * NC, *h = a->h + l * NC;
        ref_real *ln1 = a->ln1 + l * NC, *qkv = a->qkv + (size_t)l * N * QKV, *atty = a->atty + l * NC;
        ref_real *ln2 = a->ln2 + l * NC, *gu = a->gu + (size_t)l * N * 2 * FF, *swi = a->swi + (size_t)l * N * FF;
        size_t wqkv = (size_t)l * QKV * C, wo = (size_t)l * C * C, w13 = (size_t)l * 2 * FF * C, w2 = (size_t)l * C * FF;
        int lin = LINS_PER_LAYER * l;
        // dres is the gradient at this layer's output: it reaches w2 directly and h through the residual
        ref_linear_backward(model, lin + LIN_W2, a->dswi, a->dres, swi, a->xq_w2 + (size_t)l * N * FF, P_W2, w2, N, FF, C);
        ref_swiglu_backward(a->dgu, a->dswi, gu, N, FF);
        ref_linear_backward(model, lin + LIN_W13, a->dln, a->dgu, ln2, a->xq_w13 + l * NC, P_W13, w13, N, C, 2 * FF);
        ref_rmsnorm_backward(a->dres, G[P_LN2W] + (size_t)l * C, a->dln, h, P[P_LN2W] + (size_t)l * C,
                         a->ln2_rstd + (size_t)l * N, N, C);
        // now dres is the gradient at h
        ref_linear_backward(model, lin + LIN_WO, a->datty, a->dres, atty, a->xq_wo + l * NC, P_WO, wo, N, C, C);
        ref_attention_backward_docs(a->dqkv, a->datty, qkv, a->att + (size_t)l * B * NH * T * T, model->doc_pos, B, T, NH, NKV, HS);
        ref_rope(a->dqkv, c, B, T, model->doc_pos, -1); // a rotation's transpose is its inverse
        ref_linear_backward(model, lin + LIN_QKV, a->dln, a->dqkv, ln1, a->xq_qkv + l * NC, P_WQKV, wqkv, N, C, QKV);
        ref_rmsnorm_backward(a->dres, G[P_LN1W] + (size_t)l * C, a->dln, x, P[P_LN1W] + (size_t)l * C,
                         a->ln1_rstd + (size_t)l * N, N, C);
    }
    for (int n = 0; n < N; n++) {
        ref_real *dw = G[P_WTE] + (size_t)model->inputs[n] * C;
        for (int i = 0; i < C; i++) dw[i] += a->dres[(size_t)n * C + i];
    }
}

// Backward of the last forward, for its mean loss scaled by dloss (1/grad_accum); every target learned.
static void ref_backward(RefModel *model, ref_real dloss) {
    ref_backward_scaled(model, dloss, model->B * model->T);
}

// Backward of the last forward for its share of a step's masked loss: each learned target's loss
// weighs 1 / total, total the learned targets of the whole step (every micro-batch).
static void ref_backward_masked(RefModel *model, long long total) {
    ref_backward_scaled(model, 1.0, (double)total);
}

// One optimizer step's gradient, up to but excluding the fp8 state update, clipping and AdamW:
// zeroes the gradient, then forward + backward of each of grad_accum micro-batches (inputs and
// targets hold grad_accum * B * T tokens). Returns the loss: with every target learned, each
// micro-batch's mean loss scaled by 1/grad_accum; with masked targets (-1), the learned targets'
// summed loss over the step's count of them (NaN if none), each weighing 1 / that count.
static ref_real ref_compute_grads(RefModel *model, const int *inputs, const int *targets, int grad_accum) {
    if (grad_accum < 1) FATAL("reference model: grad_accum must be >= 1, got %d", grad_accum);
    size_t BT = (size_t)model->B * model->T;
    memset(model->grads, 0, model->num_params * sizeof(ref_real));
    if (model->fp8) memset(model->fp8_counts, 0, FP8_COUNTS * (size_t)model->fp8_layout.num_tensors * sizeof(uint64_t));
    model->micro_step = -1;
    long long total = 0;
    for (size_t i = 0; i < (size_t)grad_accum * BT; i++) total += targets[i] >= 0;
    double loss = 0.0;
    for (int k = 0; k < grad_accum; k++) {
        if (total == (long long)grad_accum * (long long)BT) {
            loss += ref_forward(model, inputs + k * BT, targets + k * BT);
            ref_backward(model, (ref_real)(1.0 / grad_accum));
        } else {
            ref_forward(model, inputs + k * BT, targets + k * BT);
            loss += model->loss_sum;
            ref_backward_masked(model, total);
        }
    }
    if (total == (long long)grad_accum * (long long)BT) return (ref_real)(loss / grad_accum);
    return total > 0 ? (ref_real)(loss / (double)total) : (ref_real)NAN;
}

// A full optimizer step: gradient, fp8 state update (after the last backward, before the update),
// global-norm clipping (grad_clip > 0), AdamW. Returns the mean loss; grad_norm (may be NULL) gets
// the norm before clipping.
static ref_real ref_train_step(RefModel *model, const int *inputs, const int *targets, int grad_accum, float lr,
                               float beta1, float beta2, float eps, float weight_decay, float grad_clip, ref_real *grad_norm) {
    ref_real loss = ref_compute_grads(model, inputs, targets, grad_accum);
    if (model->fp8) fp8_update_state(model->fp8_state, model->fp8_layout, model->fp8_margin);
    double ss = 0.0;
    for (size_t i = 0; i < model->num_params; i++) ss += (double)model->grads[i] * model->grads[i];
    double norm = sqrt(ss);
    if (grad_norm != NULL) *grad_norm = (ref_real)norm;
    if (grad_clip > 0.0f && norm > grad_clip) {
        double s = grad_clip / norm;
        for (size_t i = 0; i < model->num_params; i++) model->grads[i] = (ref_real)(model->grads[i] * s);
    }
    int t = model->step + 1;
    double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        size_t off = model->param_ptr[p] - model->params;
        double wd = param_is_decayed(p) ? weight_decay : 0.0;
        for (size_t i = off; i < off + model->param_sizes[p]; i++) {
            double g = model->grads[i];
            double m = beta1 * (double)model->m[i] + (1.0 - beta1) * g;
            double v = beta2 * (double)model->v[i] + (1.0 - beta2) * g * g;
            model->m[i] = (ref_real)m;
            model->v[i] = (ref_real)v;
            double p_old = model->params[i];
            model->params[i] = ref_master_store(model, p_old - lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * p_old), i, t);
        }
    }
    model->step++;
    model->micro_step = -1;
    return loss;
}

// HellaSwag scoring, lm-eval's way (llmc/hellaswag.h scores the trainer's forward the same): the
// log-probability of an ending of n tokens after a context of c tokens, the sum over k of
// log softmax(logits at position c - 1 + k)[ending[k]], from one forward of context + ending[:-1].
// The model must have B 1 and T >= c + n - 1; positions past the row hold token 0, which changes
// nothing before them (attention is causal).
static double ref_ending_logprob(RefModel *model, const int *ctx, int c, const int *ending, int n) {
    int T = model->T, V = model->cfg.V;
    if (model->B != 1 || c < 1 || n < 1 || c + n - 1 > T) FATAL("reference model: an ending of %d tokens after %d does not fit B 1 x T %d", n, c, T);
    int *row = (int *)callocCheck((size_t)T, sizeof(int));
    for (int t = 0; t < c + n - 1; t++) row[t] = t < c ? ctx[t] : ending[t - c];
    ref_forward(model, row, row);
    double sum = 0.0;
    for (int k = 0; k < n; k++) {
        size_t pos = (size_t)(c - 1 + k);
        sum += (double)model->acts.logits[pos * V + ending[k]] - (double)model->acts.lse[pos];
    }
    free(row);
    return sum;
}

#endif
