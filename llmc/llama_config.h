/*
The Llama model's shape: hyperparameters, named presets, and the layout of the parameter tensors
(the fp8 scaling state's is llmc/fp8_layout.h). Shared by the GPU trainer, the CPU reference
(dev/test), the PyTorch reference (dev/reference, which mirrors these orders) and the checkpoint
format, so every one of them agrees on which float is which. Plain C.

Parameter tensors, in this order, each contiguous, all layers of one kind together (llm.c style):
   0 wte      (V, C)                  token embedding
   1 ln1w     (L, C)                  attention RMSNorm weight
   2 wqkv     (L, (NH + 2*NKV)*HS, C) rows: NH query heads, then NKV key heads, then NKV value heads
   3 wo       (L, C, NH*HS)
   4 ln2w     (L, C)                  MLP RMSNorm weight
   5 w13      (L, 2*FF, C)            rows [0, FF) = w1 (gate), rows [FF, 2*FF) = w3 (up)
   6 w2       (L, C, FF)
   7 lnfw     (C)                     final RMSNorm weight
   8 lm_head  (V, C)                  output layer; empty (0 elements) with tied embeddings, where
                                      the output layer is wte itself
*/
#ifndef LLMC_LLAMA_CONFIG_H
#define LLMC_LLAMA_CONFIG_H

#include <math.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    int V;             // vocabulary size
    int L;             // number of layers
    int C;             // model width
    int NH;            // query heads
    int NKV;           // key/value heads (NH % NKV == 0; NKV == NH is plain multi-head attention)
    int FF;            // MLP hidden width (SwiGLU)
    int max_T;         // longest sequence the model is set up for
    float rope_theta;  // 10000 for Llama 2, 500000 for Llama 3
    float norm_eps;    // RMSNorm epsilon
    int tied_embeddings; // 1: lm_head is wte (SmolLM2, Llama 3.2 1B/3B)
    int rope_scaling;    // ROPE_DEFAULT, or ROPE_LLAMA3 (Llama 3.1/3.2: the fields below)
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_T; // the context the frequencies were trained for (original_max_position_embeddings)
} LlamaConfig;

enum { ROPE_DEFAULT, ROPE_LLAMA3 };

enum { NUM_PARAM_TENSORS = 9 };
enum { P_WTE, P_LN1W, P_WQKV, P_WO, P_LN2W, P_W13, P_W2, P_LNFW, P_LM_HEAD };
enum { LIN_QKV, LIN_WO, LIN_W13, LIN_W2, LINS_PER_LAYER };

static const char *const PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "ln1w", "wqkv", "wo", "ln2w", "w13", "w2", "lnfw", "lm_head"};
static const char *const LINEAR_NAMES[LINS_PER_LAYER + 1] = {"qkv", "wo", "w13", "w2", "lm_head"};

static inline int config_head_size(const LlamaConfig *c) { return c->C / c->NH; }
static inline int config_qkv_width(const LlamaConfig *c) { return (c->NH + 2 * c->NKV) * (c->C / c->NH); }

// A linear's shape, y (N, OUT) = x (N, IN) w^T, and the parameter tensor that holds its w: linear `lin`
// is LIN_* or LINS_PER_LAYER, the lm_head (LINEAR_NAMES).
static inline int linear_in(const LlamaConfig *c, int lin) { return lin == LIN_W2 ? c->FF : c->C; }
static inline int linear_out(const LlamaConfig *c, int lin) {
    return lin == LIN_QKV ? config_qkv_width(c) : lin == LIN_W13 ? 2 * c->FF : lin == LINS_PER_LAYER ? c->V : c->C;
}
static const int LINEAR_PARAM[LINS_PER_LAYER + 1] = {P_WQKV, P_WO, P_W13, P_W2, P_LM_HEAD};

// Element count of each parameter tensor; returns the total.
static size_t param_sizes(const LlamaConfig *c, size_t sizes[NUM_PARAM_TENSORS]) {
    size_t V = c->V, L = c->L, C = c->C, FF = c->FF, QKV = config_qkv_width(c);
    sizes[P_WTE] = V * C;
    sizes[P_LN1W] = L * C;
    sizes[P_WQKV] = L * QKV * C;
    sizes[P_WO] = L * C * C;
    sizes[P_LN2W] = L * C;
    sizes[P_W13] = L * 2 * FF * C;
    sizes[P_W2] = L * C * FF;
    sizes[P_LNFW] = C;
    sizes[P_LM_HEAD] = c->tied_embeddings ? 0 : V * C;
    size_t total = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) total += sizes[i];
    return total;
}

// Weight decay applies to 2-D tensors only (matrices and embeddings), not to norm weights.
static inline int param_is_decayed(int p) { return !(p == P_LN1W || p == P_LN2W || p == P_LNFW); }
// 1 if tensor p holds one slice per layer (L of them, one after another), 0 for the model-wide ones.
static inline int param_is_per_layer(int p) { return p != P_WTE && p != P_LNFW && p != P_LM_HEAD; }

// Named presets; returns 0 if the name is unknown. V is a default the tokenizer/data may override.
static int config_from_preset(const char *name, LlamaConfig *c) {
    LlamaConfig tiny   = {32000, 4, 256, 4, 2, 768, 256, 10000.0f, 1e-5f};
    // docs/baselines.md's convergence config, so losses compare with PyTorch's there.
    LlamaConfig m125   = {32000, 12, 768, 12, 12, 2048, 1024, 10000.0f, 1e-5f};
    LlamaConfig l1b    = {32000, 18, 2048, 16, 16, 5632, 2048, 10000.0f, 1e-5f};
    LlamaConfig l2_7b  = {32000, 32, 4096, 32, 32, 11008, 4096, 10000.0f, 1e-5f};
    LlamaConfig l3_8b  = {128256, 32, 4096, 32, 8, 14336, 8192, 500000.0f, 1e-5f};
    LlamaConfig l31_8b = {128256, 32, 4096, 32, 8, 14336, 8192, 500000.0f, 1e-5f, 0, ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 8192};
    LlamaConfig l32_1b = {128256, 16, 2048, 32, 8, 8192, 8192, 500000.0f, 1e-5f, 1, ROPE_LLAMA3, 32.0f, 1.0f, 4.0f, 8192};
    // SmolLM2-135M (docs/hf_interop.md): GQA 9/3, head size 64, tied, no RoPE scaling
    LlamaConfig smol   = {49152, 30, 576, 9, 3, 1536, 8192, 100000.0f, 1e-5f, 1};
    if (strcmp(name, "tiny") == 0) { *c = tiny; return 1; }
    if (strcmp(name, "125m") == 0) { *c = m125; return 1; }
    if (strcmp(name, "1b") == 0) { *c = l1b; return 1; }
    if (strcmp(name, "llama2-7b") == 0) { *c = l2_7b; return 1; }
    if (strcmp(name, "llama3-8b") == 0) { *c = l3_8b; return 1; }
    if (strcmp(name, "llama3.1-8b") == 0) { *c = l31_8b; return 1; }
    if (strcmp(name, "llama3.2-1b") == 0) { *c = l32_1b; return 1; }
    if (strcmp(name, "smollm2-135m") == 0) { *c = smol; return 1; }
    return 0;
}

// Returns NULL if the config is usable, else a message saying what is wrong.
static const char *config_check(const LlamaConfig *c) {
    if (c->V <= 0 || c->L <= 0 || c->C <= 0 || c->NH <= 0 || c->NKV <= 0 || c->FF <= 0 || c->max_T <= 0)
        return "every dimension (V, L, C, NH, NKV, FF, max_T) must be positive";
    if (c->C % c->NH != 0) return "C must be a multiple of NH (head size = C / NH)";
    if (c->NH % c->NKV != 0) return "NH must be a multiple of NKV (grouped-query attention)";
    if ((c->C / c->NH) % 2 != 0) return "head size C / NH must be even (RoPE rotates pairs)";
    if (!(c->rope_theta > 0.0f)) return "rope_theta must be positive";
    if (c->tied_embeddings != 0 && c->tied_embeddings != 1) return "tied_embeddings must be 0 or 1";
    if (c->rope_scaling != ROPE_DEFAULT && c->rope_scaling != ROPE_LLAMA3) return "rope_scaling must be 0 (default) or 1 (llama3)";
    if (c->rope_scaling == ROPE_LLAMA3 && !(c->rope_factor > 0.0f && c->rope_low_freq_factor > 0.0f &&
                                            c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_T > 0))
        return "llama3 RoPE scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original context > 0";
    return NULL;
}

// The inverse frequency of RoPE pair i (of HS/2) in double precision: theta^(-2i/HS), and with
// llama3 scaling (Llama 3.1/3.2, transformers' _compute_llama3_parameters) long wavelengths divided
// by the factor, short ones kept, the band between interpolated smoothly.
static double rope_inv_freq(const LlamaConfig *c, int i, int HS) {
    double f = pow((double)c->rope_theta, -2.0 * i / HS);
    if (c->rope_scaling != ROPE_LLAMA3) return f;
    double wavelen = 2.0 * 3.14159265358979323846 / f, old_T = c->rope_original_T;
    double low = c->rope_low_freq_factor, high = c->rope_high_freq_factor, factor = c->rope_factor;
    if (wavelen < old_T / high) return f;
    if (wavelen > old_T / low) return f / factor;
    double s = (old_T / wavelen - low) / (high - low);
    return (1.0 - s) * f / factor + s * f;
}

#endif
