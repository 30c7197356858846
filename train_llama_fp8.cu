/*
train_llama_fp8: trains a Llama on one GPU (or all GPUs of a node) with every block linear (qkv, wo,
w1|w3, w2) as an fp8 GEMM with per-tensor DELAYED scaling, or in bf16 (-precision bf16), the
baseline it is compared against. Reads top to bottom: config -> parameters and activations ->
forward -> backward -> update -> checkpoints -> main loop.

fp8 in one paragraph (details: docs/fp8_recipe.md, dev/test/README.md): X and W are cast
to E4M3 and dY to E5M2 by the kernels that produce them, each multiplying by its tensor's current
scale and recording the tensor's amax into a per-step slot; after the last backward of an optimizer
step one kernel rolls every amax history and recomputes every scale. The first step (and every cast
under -fp8_recipe current) instead measures the amax first and scales from it ("live").

Several GPUs (-ngpu N, or mpirun -np N): data parallel over NCCL with ZeRO-1 (llmc/multi_gpu.cuh;
the layout: llmc/zero_layout.h). Each rank reads its own batches, reduce-scatters the
gradients of each layer while the backward pass goes on with the layer below, updates its shard of
the fp32 master weights (-master_weights bf16: of the bf16 weights, in place) and AdamW state, and
all-gathers the bf16 weights. Once per optimizer step
every amax slot is MAX-reduced across the ranks (one NCCL call) before the scales are updated, so
every rank casts with the same scales. With one GPU none of this runs: no NCCL call is made.
*/
#include <math.h>
#include <limits.h>
#include <float.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <fcntl.h>
#include "llmc/utils.h"            // FATAL, checked file I/O, random numbers
#include "llmc/options.h"          // OptSpec: the option table's rows; parsing, defaults, usage, the options line
#include "llmc/stop_signal.h"      // stop on SIGTERM/SIGINT/SIGHUP/SIGUSR1 after the step in flight, with a checkpoint
#include "llmc/llama_config.h"     // LlamaConfig, presets, the parameter layout
#include "llmc/fp8_layout.h"       // fp8 tensor kinds and indices (fp8_tensor), the fp8 state buffer's layout
#include "llmc/model_file.h"       // the model file's header table and checksums
#include "llmc/checkpoint.h"       // checkpoint names, -keep, the sequence, -check 1's plan of -o; their files
#include "llmc/cuda_common.cuh"    // cudaCheck, floatX, fp8 types, Fp8Cast
#include "llmc/fp8.h"              // fp8 format maxima, fp8_compute_scale
#include "llmc/dataloader.h"       // DataLoader: token shards or the built-in synthetic corpus
#include "llmc/tokenizer.h"        // Tokenizer: decode table for samples
#include "llmc/schedule.h"         // lr_at_step
#include "llmc/mfu.h"              // model_flops_per_token, gpu_bf16_peak_tflops
#include "llmc/encoder.cuh"        // encoder_forward, encoder_backward
#include "llmc/rmsnorm.cuh"        // rmsnorm_forward, fused_residual_rmsnorm_forward, rmsnorm_backward
#include "llmc/rope.cuh"           // rope_freqs, rope_forward, rope_backward
#include "llmc/attention.cuh"      // attention_forward, attention_backward (cuDNN or plain)
#include "llmc/swiglu.cuh"         // swiglu_forward, swiglu_backward
#include "llmc/matmul.cuh"         // cuBLASLt bf16 and fp8 GEMMs
#include "llmc/fp8_scaling.cuh"    // fp8_cast, fp8_transpose, amax, scale updates
#include "llmc/fused_classifier.cuh" // fused_classifier: softmax + cross-entropy + dlogits
#include "llmc/adamw.cuh"          // adamw_update
#include "llmc/global_norm.cuh"    // global_norm_squared
#include "llmc/zero_layout.h"      // ZeroLayout: the ZeRO-1 buckets and shards, backward_stage
#include "llmc/reshard.h"          // reshard_plan, reshard_fill: a checkpoint's moments on another number of GPUs
#include "llmc/multi_gpu.cuh"      // MultiGpu: launch, NCCL collectives with deadlines
#include "llmc/fp8_state.cuh"      // Fp8State, Fp8Pass: the fp8 scales and amaxes, the casts' site protocol, fp8_end_step
#include "llmc/linear.cuh"         // Linears: each linear in its fp8 recipe (llmc/recipe.cuh), the fp8 fallback
#include "llmc/hellaswag.h"        // HellaSwag: the eval file, its rows, acc / acc_norm as lm-eval scores them
#include "llmc/bpb.h"              // target_text_bytes: bits per byte of the val set
#include "llmc/run_log.h"          // RunLog: an event to stdout, main.log and metrics.jsonl in one call; -o checked
#include "llmc/model_options.h"    // ModelOptions: how the model trains besides its shape (B, T, precision, fp8 recipe)
#include "llmc/memory_fit.h"       // memory_refusal, memory_fit_hint, plan_80gb_line: what fits a GPU, given the plan

// ----------------------------------------------------------------------------------------------
// Options: one row per flag (OPTION_SPECS) holds its field, type, default, range or choices and
// help. The parser, the defaults (default_options parses every row's default as if it were typed),
// the range checks (naming the flag), the usage text and main.log's options line (llmc/options.h)
// all read the rows, so a new option is its field here (or in ModelOptions, for the model's) and one
// row. Rules between options, and the model's options derived from several: checked_options.

typedef struct {
    char train_pattern[2048], val_pattern[512], tokenizer_path[512], log_dir[512], preset[64], init_from[512];
    ModelOptions model;    // the model's options as their rows set them (doc_start_id, fp8_fallback_millionths: no row)
    int total_batch, max_steps, warmup, val_every, val_batches, sample_every, gen_tokens;
    int ckpt_every, resume, overwrite, seed, shuffle, fp8_log, fp8_dump, ngpu, deterministic;
    int keep, check_only, data_changed_continue;
    float lr, final_lr_frac, weight_decay, grad_clip, beta1, beta2, fp8_fallback_threshold;
    // model overrides (0: keep the preset's)
    int V, L, C, NH, NKV, FF;
    float rope_theta;
    char hellaswag_path[512], hellaswag_preds[512]; // -hs, -hs_preds
    int hellaswag_items;                            // -hs_items
} Options;

// A choice row's words, each with the value it stores in the row's int field; each list ends at a NULL word.
static const OptWord PRECISION_WORDS[] = {{"fp8", PREC_FP8}, {"bf16", PREC_BF16}, {NULL, 0}};
static const OptWord MOMENTS_WORDS[] = {{"fp32", 0}, {"bf16", 1}, {NULL, 0}};
static const OptWord MASTER_WORDS[] = {{"fp32", 0}, {"bf16", 1}, {NULL, 0}};
static const OptWord DATA_CHANGED_WORDS[] = {{"refuse", 0}, {"continue", 1}, {NULL, 0}};
static const OptWord RECIPE_WORDS[] = {{"delayed", 0}, {"current", 1}, {NULL, 0}};
static const OptWord GRAIN_WORDS[] = {{"tensor", FP8_GRAIN_TENSOR}, {"block", FP8_GRAIN_BLOCK}, {"row", FP8_GRAIN_ROW},
                                      {NULL, 0}};
static const OptWord FALLBACK_WORDS[] = {{"off", 0}, {"block", FP8_GRAIN_BLOCK}, {"bf16", FP8_GRAIN_BF16}, {"row", FP8_GRAIN_ROW},
                                         {NULL, 0}};

#define OPT_FIELD(field) offsetof(Options, field), sizeof(((Options *)0)->field) // a row's field (llmc/options.h)

// TE's default history length, the longest in use: the scale update rolls each tensor's history in
// one thread (llmc/fp8_scaling.cuh), and the state file holds NT * H floats of it.
#define FP8_HISTORY_MAX 1024
// fp8_scaling.cuh's own bound (fp8_check_margin). Within it every scale_inv = amax * 2^margin / fmax
// stays finite for any amax up to 2^36 (E4M3: 2^36 * 2^100 / 448 < 2^128), and 2^margin is exact.
#define FP8_MARGIN_MAX 100
// The model a run builds without -e or -init_from
#define DEFAULT_PRESET "125m"

// The defaults make the first run: TinyShakespeare (Llama 2 tokenizer, shipped in the repository),
// 160 steps of 125m (~8 epochs, about 30 s of training on an H200): val loss still falls there; it
// starts to overfit after ~200 steps.
static const OptSpec OPTION_SPECS[] = {
    OPT_S("-i", train_pattern, "dev/data/tinyshakespeare/tinyshakespeare_llama2_train.bin",
          "train token shards (glob), or a mixture of globs with weights 'A:0.7,B:0.3'; 'synthetic' for the built-in synthetic corpus (tests, benchmarks)"),
    OPT_S("-j", val_pattern, "dev/data/tinyshakespeare/tinyshakespeare_llama2_val.bin", "val token shards (glob); '' for none"),
    OPT_S("-tok", tokenizer_path, "dev/data/tinyshakespeare/llama2_tokenizer.bin", "tokenizer decode table (samples print ids without it)"),
    OPT_S("-o", log_dir, "log", "log directory: main.log, fp8.log, checkpoints ('' for none)"),
    OPT_S("-e", preset, "",
          "model preset: tiny, 125m, 1b, llama2-7b, llama3-8b, llama3.1-8b, llama3.2-1b, smollm2-135m ("
          "'': " DEFAULT_PRESET ")"),
    OPT_S("-init_from", init_from, "", "start from this model file's weights and shape (scripts/hf_import.py makes one); fresh optimizer, step 0"),
    OPT_C("-precision", model.precision, "fp8", PRECISION_WORDS,
          "fp8 GEMMs in the block linears, or the bf16 baseline"),
    OPT_I("-ngpu", ngpu, "0", 0, INT_MAX, "GPUs of this node to train on (data parallel); under mpirun leave it out"),
    OPT_I("-b", model.B, "16", 1, INT_MAX, "micro-batch size (sequences per GPU)"),
    OPT_I("-t", model.T, "1024", 2, INT_MAX, "sequence length"),
    OPT_I("-d", total_batch, "0", 0, INT_MAX, "total batch in tokens (gradient accumulation fills it); 0 = B*T*ngpu"),
    OPT_I("-x", max_steps, "160", -1, INT_MAX, "optimizer steps; -1 = one epoch of the training data; 0 = evaluate only (val loss, a sample with -s > 0), reading no training data (-i) and writing nothing"),
    OPT_F("-l", lr, "6e-4", 0, FLT_MAX, "peak learning rate"),
    OPT_I("-u", warmup, "20", 0, INT_MAX, "warmup steps (linear)"),
    OPT_F("-q", final_lr_frac, "0.1", 0, 1, "final learning rate as a fraction of the peak (cosine decay)"),
    OPT_F("-c", weight_decay, "0.1", 0, FLT_MAX, "AdamW weight decay (2-D tensors only)"),
    OPT_F("-clip", grad_clip, "1.0", 0, FLT_MAX, "global gradient-norm clip (0: off)"),
    // below 1: AdamW's bias correction divides by 1 - beta^t
    OPT_F("-beta1", beta1, "0.9", 0, 0.999999, "AdamW beta1"),
    OPT_F("-beta2", beta2, "0.95", 0, 0.999999, "AdamW beta2"),
    OPT_C("-adam_moments", model.moments_bf16, "bf16", MOMENTS_WORDS,
          "AdamW m and v in bf16 (stochastically rounded; against fp32: 4 bytes/param less memory, 8 less optimizer traffic, 7B fp8 +2.5% tokens/s, val loss unchanged within seed spread) or fp32 (needed to resume a checkpoint written with fp32 moments)"),
    OPT_C("-master_weights", model.master_bf16, "fp32", MASTER_WORDS,
          "AdamW's master weights: fp32 (the most accurate) or bf16 (no fp32 copy: AdamW updates the bf16 weights"
          " in place, rounding stochastically, as llm.q does; 4 bytes/param less memory, 3 in fp8 on one GPU with"
          " delayed scaling, whose fp8 weight cache then needs its own byte; a checkpoint resumes only with the"
          " setting it was written with)"),
    OPT_I("-v", val_every, "20", 0, INT_MAX, "evaluate val loss every N steps (0: never; always at the end)"),
    OPT_I("-m", val_batches, "20", 0, INT_MAX, "val batches per evaluation (shared out over the GPUs)"),
    OPT_S("-hs", hellaswag_path, "", "HellaSwag eval file (dev/data/prepare_hellaswag.py): acc and acc_norm at every val step, at the end and with -x 0 ('' for none)"),
    OPT_I("-hs_items", hellaswag_items, "0", 0, INT_MAX, "HellaSwag items per evaluation, the file's first (0: all)"),
    OPT_S("-hs_preds", hellaswag_preds, "", "write each HellaSwag item's 4 log-probabilities and predictions of the last evaluation to this file ('' for none)"),
    OPT_I("-s", sample_every, "80", 0, INT_MAX, "sample text every N steps (0: never)"),
    OPT_I("-g", gen_tokens, "64", 0, INT_MAX, "tokens to generate per sample"),
    OPT_I("-n", ckpt_every, "0", 0, INT_MAX, "checkpoint every N steps (0: only at the end)"),
    OPT_I("-keep", keep, "0", 0, INT_MAX, "keep the run's K newest complete checkpoints in -o, removing older ones once a newer one is complete on every GPU (0: keep all)"),
    OPT_B("-check", check_only, "0", "1: check every input (data, decode table, -init_from's checksum, -hs, -o) and print the run's plan"
          " (model, device memory per GPU, tokens per step, steps per pass over each data set, checkpoints), then exit; needs no GPU"),
    OPT_B("-y", resume, "0", "1: resume from the latest checkpoint in the log directory (with -x 0: evaluate it)"),
    OPT_B("-overwrite", overwrite, "0", "1: start a new run in a log directory that holds another run's checkpoints (kept, never resumed or removed by -keep; one at a step the new run writes is replaced)"),
    OPT_B("-r", model.recompute, "0", "recompute in backward: 0 none, 1 SwiGLU output (saves memory)"),
    OPT_B("-adam_offload", model.adam_offload, "0",
          "AdamW's m and v in pinned host memory, read and written by the AdamW kernel over PCIe: their device memory"
          " (4 bytes/param with bf16 moments) saved for a slower optimizer step (suits runs with gradient accumulation)"),
    OPT_B("-cuda_graph", model.cuda_graph, "1",
          "1: one GPU replays each step's forward and backward as one CUDA graph (from the second step; the same"
          " results, fewer launches); 0: launch kernel by kernel"),
    OPT_B("-deterministic", deterministic, "0", "1: bit-reproducible runs and resumes (deterministic attention backward, heuristic GEMM algorithms); 0: faster"),
    OPT_B("-doc_mask", model.doc_mask, "0",
          "1: a token attends only to its own document (each starts at the decode table's document-start id, -tok)"
          " and RoPE positions restart there; on cuDNN with an additive (B, 1, T, T) mask where it takes the shape,"
          " else the plain kernels (slower: docs/attention.md)"),
    OPT_I("-seed", seed, "1337", 0, INT_MAX, "seed for init, data shuffling and sampling"),
    OPT_B("-shuffle", shuffle, "0", "1: shuffle batch order each epoch"),
    OPT_C("-data_changed", data_changed_continue, "refuse", DATA_CHANGED_WORDS,
          "a resume whose data differs from the checkpoint's record (shards added, removed or changed; other mixture sets or weights):"
          " refuse, naming the file, or continue (each changed set starts its next epoch at its first shard)"),
    OPT_C("-fp8_recipe", model.fp8_current, "delayed", RECIPE_WORDS,
          "delayed (amax history) or current (amax of this tensor now)"),
    OPT_I("-fp8_history", model.fp8_history, "16", 1, FP8_HISTORY_MAX, "amax history length"),
    OPT_I("-fp8_margin", model.fp8_margin, "0", 0, FP8_MARGIN_MAX, "scale margin: scale = fp8_max / (amax * 2^margin)"),
    OPT_B("-fp8_weight_cache", model.fp8_weight_cache, "1",
          "1: fp8 weights made once per step (by AdamW on one GPU); 0: cast per layer when used (several GPUs or"
          " -master_weights bf16: saves 1 byte/param)"),
    OPT_B("-fp8_lm_head", model.fp8_lm_head, "0", "1: lm_head as an fp8 linear too (the recipe keeps it bf16)"),
    OPT_C("-fp8_grain", model.fp8_grain, "tensor", GRAIN_WORDS,
          "fp8 scales of the linears: tensor (one per tensor, -fp8_recipe's), block (every linear from step 0: one per 1x128 block of X"
          " and dY, per 128x128 of W, from its own amax; block-scaled GEMMs, ~1.25x the time of per-tensor ones; cuBLASLt 12.9+ on Hopper)"
          " or row (every linear from step 0: one power-of-two scale per row of each GEMM operand along its reduction dimension,"
          " E4M3 throughout, torchao's rowwise; cuBLASLt's outer-vector scaled GEMMs, probed at start-up)"),
    OPT_C("-fp8_fallback", model.fp8_fallback, "off", FALLBACK_WORDS,
          "a per-tensor linear whose X, W or dY loses (underflow + saturation) more than -fp8_fallback_threshold of its values in"
          " -fp8_fallback_patience steps in a row leaves per-tensor scaling for good, to block scaling, to bf16 or to row-wise scaling"
          " (for fine-tuning a pretrained model: docs/fp8_recipe.md); off: never"),
    OPT_F("-fp8_fallback_threshold", fp8_fallback_threshold, "0.01", 0, 1,
          "the fallback's threshold: the fraction of a tensor's values cast in a step that it may lose (rounded to millionths)"),
    OPT_I("-fp8_fallback_patience", model.fp8_fallback_patience, "3", 1, INT_MAX,
          "the fallback's patience: steps in a row over the threshold before a linear switches"),
    OPT_I("-fp8_log", fp8_log, "0", 0, INT_MAX, "write every linear's amaxes, scales and fp8 health (underflow, saturation) to fp8.log every N steps (0: never)"),
    OPT_B("-fp8_dump", fp8_dump, "0", "1: at the end each GPU writes its whole fp8 state to fp8_state_rank<r>.bin in -o (ranks must agree)"),
    // config_check refuses a shape that cannot be built
    OPT_I("-V", V, "0", 0, INT_MAX, "override vocabulary size (0: the tokenizer's / data's / preset's)"),
    OPT_I("-L", L, "0", 0, INT_MAX, "override number of layers (0: the preset's)"),
    OPT_I("-C", C, "0", 0, INT_MAX, "override model width (0: the preset's)"),
    OPT_I("-NH", NH, "0", 0, INT_MAX, "override query heads (0: the preset's)"),
    OPT_I("-NKV", NKV, "0", 0, INT_MAX, "override key/value heads (0: the preset's)"),
    OPT_I("-FF", FF, "0", 0, INT_MAX, "override MLP hidden width (0: the preset's)"),
    OPT_F("-rope_theta", rope_theta, "0", 0, FLT_MAX, "override RoPE theta (0: the preset's)"),
};
#define NUM_OPTIONS ((int)(sizeof(OPTION_SPECS) / sizeof(OPTION_SPECS[0])))

// -h's first line, after "usage: <program> [options]"
static const char OPTIONS_ABOUT[] = "(fp8 training by default; -precision bf16 for the baseline)";

static Options default_options(void) {
    Options o;
    options_default(&o, sizeof(o), OPTION_SPECS, NUM_OPTIONS);
    return o;
}

static Options parse_options(int argc, char **argv) {
    Options o = default_options();
    options_parse(&o, OPTION_SPECS, NUM_OPTIONS, OPTIONS_ABOUT, argc, argv);
    return o;
}

// The model's options as the run takes them: the rows' (o->model), with the fallback's threshold in
// millionths and its patience, both 0 when the fallback is off (so a checkpoint records them).
// checked_options adds the document-start id, from the decode table.
static ModelOptions model_options_of(const Options *o) {
    ModelOptions mo = o->model;
    mo.fp8_fallback_millionths = mo.fp8_fallback ? (int)lround(o->fp8_fallback_threshold * 1e6) : 0;
    if (!mo.fp8_fallback) mo.fp8_fallback_patience = 0;
    return mo;
}

// ----------------------------------------------------------------------------------------------
// The model: parameters (bf16 copies the GEMMs read, fp32 master weights and AdamW state), the fp8
// state and fp8 weight copies, activations saved for backward, and scratch.

typedef struct {
    floatX *encoded;     // (B, T, C) embedding output = residual stream into layer 0
    floatX *res2;        // (L, B, T, C) residual after attention
    floatX *res3;        // (L, B, T, C) residual after the MLP (into layer l+1)
    floatX *ln1, *ln2;   // (L, B, T, C) bf16 norm outputs = X of qkv / w13 (bf16 mode only)
    float *ln1_rstd, *ln2_rstd; // (L, B, T)
    floatX *qkv;         // (L, B, T, (NH + 2*NKV)*HS) after RoPE
    floatX *atty;        // (L, B, T, C) attention output = X of wo
    float *att_stats;    // (L, B, NH, T) softmax log-sum-exp
    floatX *fch;         // (L, B, T, 2*FF) w13 output [gate | up]
    floatX *swiglu;      // (L or 1 with -r 1, B, T, FF) = X of w2 (bf16 mode only)
    floatX *lnf;         // (B, T, C)
    float *lnf_rstd;     // (B, T)
    floatX *logits;      // (B, T, V), overwritten in place by dlogits
    float *losses;       // (B, T)
    // fp8 copies of the linear inputs, kept for backward instead of bf16 (half the bytes)
    fp8e4 *ln1_fp8, *ln2_fp8; // (L, B, T, C)
    fp8e4 *atty_fp8;     // (B, T, C) one layer's: the backward recasts the saved bf16 output straight to X^T
    fp8e4 *lnf_fp8;      // (B, T, C) X of lm_head with -fp8_lm_head 1
    fp8e4 *swiglu_fp8;   // (L, FF, B*T) X^T of w2 per layer, written by SwiGLU's forward for w2's wgrad;
                         // NULL with -r 1 (the backward recomputes X^T into x_fp8_t)
    // scratch
    floatX *proj;        // (B, T, C) output of wo / w2 before the residual add
    floatX *dres;        // (B, T, C) gradient of the residual stream
    floatX *dbtc;        // (B, T, C) gradient into a norm / attention output
    floatX *dqkv;        // (B, T, QKV)
    floatX *dfch;        // (B, T, 2*FF) (bf16 mode only: fp8 mode keeps just the E5M2 copy)
    floatX *dswiglu;     // (B, T, FF)
    floatX *live_bf16;   // (B, T, max(C, 2*FF, QKV)) bf16 staging for live (current) scaling
    fp8e5 *dy_fp8, *dy_fp8_t; // (B, T, max(QKV, C, 2*FF)) the dY being consumed and its transpose
    fp8e4 *x_fp8_t;      // (B, T, max(C, FF)) X^T for wgrad
    fp8e4 *x_fp8;        // (B, T, FF) one layer's X of w2 row-major, for its fprop only: the memory of
                         // x_fp8_t, which only the backward uses (the saved copy is swiglu_fp8's X^T)
    float *rmsnorm_scratch;
    int *inputs, *targets; // (B, T) on the device
    int *doc_pos;          // (B, T) each input's position in its document, from the inputs (-doc_mask 1; else NULL)
    floatX *doc_bias;      // (B, 1, T, T) the same mask as cuDNN's additive bias, from doc_pos (-doc_mask 1 on a shape cuDNN takes; else NULL)
} Activations;

// The flag that gives linears `grain` (into buf), or NULL when no linear can take it: main's start-up
// check of the GEMMs a grain needs names it (block: cuBLASLt 12.9+ on Hopper, matmul_fp8_block_check; row:
// a cuBLASLt that runs outer-vector scales on this GPU, matmul_fp8_row_check), before any step.
static const char *fp8_grain_flag(const ModelOptions *mo, int grain, char buf[32]) {
    const char *flag = mo->fp8_grain == grain ? "-fp8_grain" : mo->fp8_fallback == grain ? "-fp8_fallback" : NULL;
    if (mo->precision != PREC_FP8 || flag == NULL) return NULL;
    snprintf(buf, 32, "%s %s", flag, FP8_GRAIN_NAMES[grain]);
    return buf;
}

#ifdef TESTING
// The tests' model: the command line's defaults for a B x T model of one precision, except fp32 AdamW
// moments (the C reference's; a test sets moments_bf16). The master weights are the default's, fp32.
static ModelOptions model_options(int B, int T, int precision) {
    Options o = default_options();
    o.model.B = B; o.model.T = T; o.model.precision = precision;
    o.model.moments_bf16 = 0;
    return model_options_of(&o);
}
#endif

// The fp8 mode, derived from the options once (fp8_mode): which linears are fp8, how scales are set,
// where the E4M3 weights live and who writes them. Forward, backward and update read only this.
//   X: cast by the kernel that produces it (the norms, SwiGLU; the attention output by a cast), E4M3,
//      kept for backward (the norms' per layer; SwiGLU's per layer as X^T, the layout w2's wgrad
//      reads, or with -r 1 not at all; wo's X^T is recast from the bf16 output).
//   dY: cast by the kernel that produces it (norm backward, SwiGLU backward, RoPE backward; the
//      lm_head's dlogits by a cast), E5M2, one layer's at a time.
//   W: E4M3 of bf16(master), each layer its own tensor with its own scale; see w_cache, w_by_adamw.
typedef struct {
    int on;          // the block linears are fp8 GEMMs (-precision fp8)
    int live_always; // every cast measures its amax first (-fp8_recipe current); else only step 0's first
    int lm_head;     // the lm_head is an fp8 linear too (-fp8_lm_head 1)
    int w_cache;     // 1: every layer's E4M3 W made once per step (w_fp8); 0: one layer's, cast right before each use
    int w_by_adamw;  // the cache on one GPU with delayed scaling and fp32 master weights: AdamW writes it from the
                     // fp32 master into the linears' bf16 parameters, which fp8 mode then never holds (the cache
                     // costs no memory); bf16 master weights are those parameters, so the cache has its own bytes
} Fp8Mode;

static Fp8Mode fp8_mode(const ModelOptions *o, int world) {
    Fp8Mode f;
    memset(&f, 0, sizeof(f));
    if (o->precision != PREC_FP8) return f;
    f.on = 1;
    f.live_always = o->fp8_current;
    f.lm_head = o->fp8_lm_head;
    f.w_cache = o->fp8_weight_cache;
    f.w_by_adamw = o->fp8_weight_cache && world == 1 && !o->fp8_current && !o->master_bf16;
    return f;
}

// What the linears read of the options and the fp8 mode (llmc/recipe.cuh), on `world` GPUs.
static LinearOptions linear_options(const ModelOptions *o, Fp8Mode f, int world) {
    LinearOptions lo = {f.on, f.lm_head, o->B * o->T, o->recompute, f.w_cache, f.w_by_adamw, world, o->fp8_grain,
                        o->fp8_fallback, {o->fp8_fallback_millionths, o->fp8_fallback_patience}};
    return lo;
}

// What a captured step graph (train_step) was captured with: a graph keeps every pointer, so it is
// captured again when one of these moves.
typedef struct {
    const int *inputs, *targets; // the pinned host batches the step copies from
    float *losses;               // and the pinned host losses it copies to
    int grad_accum;
    float dloss;                 // the loss scale, a kernel argument
    const void *token_lists, *cudnn_workspace; // the embedding backward's device lists, cuDNN's workspace
    int fp8_grain_changes;       // the linears' fp8 grains (they only change one way, each change counted)
} StepGraphKey;

typedef struct {
    cudaGraphExec_t exec; // NULL: none captured
    StepGraphKey key;
    int steps;            // train_step calls in this process
    int captures, replays;
    int grains_run;       // the fp8_grain_changes of the last step it was asked to run
} StepGraph;

typedef struct {
    LlamaConfig cfg;
    ModelOptions opt;
    Fp8Mode fp8;
    size_t param_sizes[NUM_PARAM_TENSORS], num_params;
    MultiGpu *mg;                    // the data-parallel ranks (world 1: no collectives)
    ZeroLayout zero;                 // the buckets and this rank's shard (llmc/zero_layout.h); one GPU: one shard of everything
    floatX *params_memory, *param[NUM_PARAM_TENSORS]; // zero.padded: the whole model on every rank
    floatX *grads_memory, *grad[NUM_PARAM_TENSORS];   // zero.padded: this rank's gradients
    floatX *grad_shard;              // (zero.shard) the reduced gradients of this rank's shard (one GPU: grads_memory)
    float *master;                   // (zero.shard) fp32: this rank's shard (ZeRO-1); NULL with -master_weights bf16
                                     // (the bf16 parameters are the master, each rank updating its shard of them)
    void *adam_m, *adam_v;           // (zero.shard) each, fp32 or (opt.moments_bf16) bf16: AdamW's moments of the shard,
                                     // on the GPU or (moments_on_host) in mapped pinned host memory
    int moments_on_host;             // moments_alloc pinned them in host memory (-adam_offload 1): freed, saved as such
    float *norm_device, *norm_host;  // the gradient norm, and its pinned copy (reading it never blocks outside mg_wait)
    Fp8State fp8_state;                    // scales, amax histories, health counts (llmc/fp8_state.cuh); fp8 mode only
    int w_fp8_stale;                       // the weights changed outside AdamW: recast before the next step
    Linears linears;                       // every linear in its fp8 recipe (or bf16), their scratch (llmc/linear.cuh)
    float *rope_freqs;
    Activations acts;
    EncoderBackward enc_bwd;
    StepGraph graph;
    int loss_masked;   // the train data has loss masks: the ranks sum their learned-target counts every step
    int step;          // optimizer steps completed
    int adam_t;        // AdamW updates applied (bias correction; a skipped step does not count)
    size_t bytes_allocated;
    void *allocations[64]; // every device buffer above, for model_free
    int num_allocations;
} Model;

// 1 if a GEMM writes the gradient (the block linears and the lm_head), 0 if kernels add into it
static int param_grad_from_gemm(int p) {
    for (int lin = 0; lin < LINS_PER_LAYER + 1; lin++) if (LINEAR_PARAM[lin] == p) return 1;
    return 0;
}

static void *model_alloc(Model *m, size_t bytes, const char *what) {
    if (m->num_allocations == (int)(sizeof(m->allocations) / sizeof(m->allocations[0]))) FATAL("model_alloc: too many buffers");
    m->bytes_allocated += bytes;
    return m->allocations[m->num_allocations++] = cudaMallocCheck(bytes, what);
}

// Bytes of one AdamW moment (m or v) of a shard of `shard` elements, bf16 or fp32.
static size_t moment_bytes(size_t shard, int moments_bf16) { return shard * (moments_bf16 ? sizeof(floatX) : sizeof(float)); }
// Bytes of each AdamW moment (m, v) of this rank's shard.
static size_t moments_size(const Model *m) { return moment_bytes(m->zero.shard, m->opt.moments_bf16); }

// One AdamW moment of `bytes`, zeroed: device memory, or with -adam_offload 1 pinned host memory mapped
// into the device's address space (unified addressing: the host pointer is the kernels' pointer), so
// adamw_update reads and writes it over PCIe with no copy and no device memory.
static void *moments_alloc(Model *m, size_t bytes, const char *what) {
    if (!m->opt.adam_offload) {
        void *d = model_alloc(m, bytes, what);
        cudaCheck(cudaMemset(d, 0, bytes));
        return d;
    }
    void *h = NULL;
    if (cudaHostAlloc(&h, bytes, cudaHostAllocMapped) != cudaSuccess)
        FATAL("-adam_offload 1: could not pin %.2f GiB of host memory for %s (the host has too little free, or a"
              " limit on locked memory: ulimit -l)", bytes / 1073741824.0, what);
    m->moments_on_host = 1;
    memset(h, 0, bytes);
    return h;
}

// mg: the data-parallel ranks; NULL (the tests) for one GPU.
static void model_init(Model *m, const LlamaConfig *cfg, const ModelOptions *opt, MultiGpu *mg) {
    memset(m, 0, sizeof(*m));
    // AdamW writes an fp8 linear's E4M3 weights into its bf16 parameters: a tied lm_head is the embedding
    if (cfg->tied_embeddings && opt->precision == PREC_FP8 && opt->fp8_lm_head) FATAL("-fp8_lm_head 1 cannot be used with tied embeddings");
    m->cfg = *cfg;
    m->opt = *opt;
    m->mg = mg ? mg : mg_single_gpu();
    m->fp8 = fp8_mode(opt, m->mg->world);
    const LlamaConfig *c = cfg;
    size_t N = (size_t)opt->B * opt->T, L = c->L, C = c->C, FF = c->FF, V = c->V, QKV = config_qkv_width(c);
    int fp8 = m->fp8.on;

    m->num_params = param_sizes(c, m->param_sizes);
    m->zero = zero_layout(c, m->param_sizes, m->mg->rank, m->mg->world);
    m->params_memory = (floatX *)model_alloc(m, m->zero.padded * sizeof(floatX), "bf16 parameters");
    m->grads_memory = (floatX *)model_alloc(m, m->zero.padded * sizeof(floatX), "bf16 gradients");
    cudaCheck(cudaMemset(m->grads_memory, 0, m->zero.padded * sizeof(floatX))); // the padding stays zero
    if (!opt->master_bf16) m->master = (float *)model_alloc(m, m->zero.shard * sizeof(float), "fp32 master weights");
    m->adam_m = moments_alloc(m, moments_size(m), "AdamW m");
    m->adam_v = moments_alloc(m, moments_size(m), "AdamW v");
    m->grad_shard = m->grads_memory;
    if (m->mg->world > 1) {
        m->grad_shard = (floatX *)model_alloc(m, m->zero.shard * sizeof(floatX), "bf16 gradient shard");
        // no AdamW piece covers the padding: zero once, it travels in the all-gathers as zeros
        cudaCheck(cudaMemset(m->params_memory, 0, m->zero.padded * sizeof(floatX)));
        if (m->master) cudaCheck(cudaMemset(m->master, 0, m->zero.shard * sizeof(float)));
    }
    cudaCheck(cudaMallocHost(&m->norm_host, sizeof(float)));
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        m->param[i] = m->params_memory + off;
        m->grad[i] = m->grads_memory + off;
        off += m->param_sizes[i];
    }
    if (c->tied_embeddings) { // one tensor: the lm_head's GEMMs read wte and add their gradient into wte's
        m->param[P_LM_HEAD] = m->param[P_WTE];
        m->grad[P_LM_HEAD] = m->grad[P_WTE];
    }

    if (fp8) {
        Fp8StateLayout lay = fp8_state_layout(fp8_num_tensors(c, m->fp8.lm_head), opt->fp8_history);
        m->bytes_allocated += fp8_state_create(&m->fp8_state, lay, opt->fp8_margin, m->mg);
        m->w_fp8_stale = 1;
    }
    LinearOptions lo = linear_options(opt, m->fp8, m->mg->world);
    linears_init(&m->linears, c, &lo, &m->fp8_state, m->param, m->grad, m->params_memory, m->master,
                 &m->bytes_allocated);

    m->rope_freqs = (float *)model_alloc(m, (size_t)opt->T * (c->C / c->NH) * sizeof(float), "RoPE table");
    rope_freqs(m->rope_freqs, c, opt->T);

    Activations *a = &m->acts;
    size_t swiglu_layers = opt->recompute >= 1 ? 1 : L;
    size_t widest = C > 2 * FF ? C : 2 * FF;
    if (QKV > widest) widest = QKV;
    size_t widest_dy = m->fp8.lm_head && V > widest ? V : widest; // the lm_head's dY is (B, T, V)
    a->encoded = (floatX *)model_alloc(m, N * C * sizeof(floatX), "activations: embedding");
    a->res2 = (floatX *)model_alloc(m, L * N * C * sizeof(floatX), "activations: residual");
    a->res3 = (floatX *)model_alloc(m, L * N * C * sizeof(floatX), "activations: residual");
    a->ln1_rstd = (float *)model_alloc(m, L * N * sizeof(float), "activations: rstd");
    a->ln2_rstd = (float *)model_alloc(m, L * N * sizeof(float), "activations: rstd");
    a->qkv = (floatX *)model_alloc(m, L * N * QKV * sizeof(floatX), "activations: qkv");
    a->atty = (floatX *)model_alloc(m, L * N * C * sizeof(floatX), "activations: attention output");
    a->att_stats = (float *)model_alloc(m, L * N * c->NH * sizeof(float), "activations: attention stats");
    a->fch = (floatX *)model_alloc(m, L * N * 2 * FF * sizeof(floatX), "activations: w13 output");
    if (fp8) {
        a->ln1_fp8 = (fp8e4 *)model_alloc(m, L * N * C, "activations: fp8 norm outputs");
        a->ln2_fp8 = (fp8e4 *)model_alloc(m, L * N * C, "activations: fp8 norm outputs");
        a->atty_fp8 = (fp8e4 *)model_alloc(m, N * C, "scratch: fp8 attention output");
        if (opt->recompute == 0) a->swiglu_fp8 = (fp8e4 *)model_alloc(m, L * N * FF, "activations: fp8 SwiGLU output (X^T)");
        a->live_bf16 = (floatX *)model_alloc(m, N * widest * sizeof(floatX), "scratch: live-scaling staging");
        fp8_state_stage(&m->fp8_state, a->live_bf16);
        a->dy_fp8 = (fp8e5 *)model_alloc(m, N * widest_dy, "scratch: fp8 dY");
        a->dy_fp8_t = (fp8e5 *)model_alloc(m, N * widest_dy, "scratch: fp8 dY^T");
        if (m->fp8.lm_head) a->lnf_fp8 = (fp8e4 *)model_alloc(m, N * C, "activations: fp8 final norm");
        a->x_fp8_t = (fp8e4 *)model_alloc(m, N * (C > FF ? C : FF), "scratch: fp8 X^T");
        a->x_fp8 = a->x_fp8_t;
        linears_use_scratch(&m->linears, a->x_fp8, a->x_fp8_t, a->dy_fp8, a->dy_fp8_t);
    } else {
        a->ln1 = (floatX *)model_alloc(m, L * N * C * sizeof(floatX), "activations: norm outputs");
        a->ln2 = (floatX *)model_alloc(m, L * N * C * sizeof(floatX), "activations: norm outputs");
        a->swiglu = (floatX *)model_alloc(m, swiglu_layers * N * FF * sizeof(floatX), "activations: SwiGLU output");
        a->dfch = (floatX *)model_alloc(m, N * 2 * FF * sizeof(floatX), "scratch: w13 gradient");
    }
    a->lnf = (floatX *)model_alloc(m, N * C * sizeof(floatX), "activations: final norm");
    a->lnf_rstd = (float *)model_alloc(m, N * sizeof(float), "activations: rstd");
    a->logits = (floatX *)model_alloc(m, N * V * sizeof(floatX), "activations: logits");
    a->losses = (float *)model_alloc(m, N * sizeof(float), "activations: losses");
    a->proj = (floatX *)model_alloc(m, N * C * sizeof(floatX), "scratch: projection");
    a->dres = (floatX *)model_alloc(m, N * C * sizeof(floatX), "scratch: residual gradient");
    a->dbtc = (floatX *)model_alloc(m, N * C * sizeof(floatX), "scratch: gradient");
    a->dqkv = (floatX *)model_alloc(m, N * QKV * sizeof(floatX), "scratch: qkv gradient");
    a->dswiglu = (floatX *)model_alloc(m, N * FF * sizeof(floatX), "scratch: SwiGLU gradient");
    a->rmsnorm_scratch = (float *)model_alloc(m, rmsnorm_backward_scratch_floats((int)N, (int)C) * sizeof(float), "scratch: rmsnorm");
    a->inputs = (int *)model_alloc(m, N * sizeof(int), "token buffers");
    a->targets = (int *)model_alloc(m, N * sizeof(int), "token buffers");
    if (opt->doc_mask) a->doc_pos = (int *)model_alloc(m, N * sizeof(int), "document positions");
    if (opt->doc_mask && attention_doc_bias_wanted(opt->T, c->NH, c->NKV, (int)C / c->NH))
        a->doc_bias = (floatX *)model_alloc(m, N * opt->T * sizeof(floatX), "document mask bias (cuDNN)");
    encoder_backward_init(&m->enc_bwd, (int)N, (int)C);
    m->norm_device = (float *)model_alloc(m, sizeof(float), "gradient norm");
    linears_start(&m->linears); // every fp8 linear of -fp8_grain's grain from step 0
}

// The device memory model_init allocates (its bytes_allocated) for this config and these options on
// `world` GPUs, computed without a GPU: -check 1 prints it, and the GPU test holds it to model_init's
// count. Not in it: the CUDA context, cuBLAS's and cuDNN's workspaces, the embedding backward's token
// lists, and the buffers of linears the fp8 fallback switches later (linear_buffer_bytes each).
static size_t model_memory_plan(const LlamaConfig *c, const ModelOptions *o, int world) {
    size_t sizes[NUM_PARAM_TENSORS];
    param_sizes(c, sizes);
    ZeroLayout z = zero_layout(c, sizes, 0, world);
    Fp8Mode f = fp8_mode(o, world);
    size_t N = (size_t)o->B * o->T, L = c->L, C = c->C, FF = c->FF, V = c->V, QKV = config_qkv_width(c), X = sizeof(floatX);
    size_t moments = o->adam_offload ? 0 : moment_bytes(z.shard, o->moments_bf16); // offloaded: host memory
    size_t master = o->master_bf16 ? 0 : z.shard * sizeof(float); // bf16: the parameters are the master
    // params, grads, master, m, v, grad shard
    size_t b = 2 * z.padded * X + master + 2 * moments + (world > 1 ? z.shard * X : 0);
    zero_layout_free(&z);
    if (f.on) {
        b += fp8_state_bytes(fp8_state_layout(fp8_num_tensors(c, f.lm_head), o->fp8_history));
        LinearOptions lo = linear_options(o, f, world);
        b += linears_memory_plan(c, &lo);
    }
    b += (size_t)o->T * (C / c->NH) * sizeof(float); // RoPE table
    size_t widest = C > 2 * FF ? C : 2 * FF;
    if (QKV > widest) widest = QKV;
    size_t widest_dy = f.lm_head && V > widest ? V : widest;
    b += N * C * X + 2 * L * N * C * X + 2 * L * N * sizeof(float) + L * N * QKV * X + L * N * C * X + L * N * c->NH * sizeof(float) + L * N * 2 * FF * X;
    if (f.on) b += 2 * L * N * C + N * C + (o->recompute == 0 ? L * N * FF : 0) + N * widest * X + 2 * N * widest_dy + (f.lm_head ? N * C : 0) + N * (C > FF ? C : FF);
    else b += 2 * L * N * C * X + (o->recompute >= 1 ? 1 : L) * N * FF * X + N * 2 * FF * X;
    b += N * C * X + N * sizeof(float) + N * V * X + N * sizeof(float) + 3 * N * C * X + N * QKV * X + N * FF * X; // lnf .. dswiglu
    b += rmsnorm_backward_scratch_floats((int)N, (int)C) * sizeof(float) + 2 * N * sizeof(int) + sizeof(float); // .. gradient norm
    if (o->doc_mask) b += N * sizeof(int);
    if (o->doc_mask && attention_doc_bias_wanted(o->T, c->NH, c->NKV, c->C / c->NH)) b += N * o->T * X;
    return b;
}

// The pinned host memory model_init takes on each of `world` GPUs: AdamW's m and v of its shard with
// -adam_offload 1, else none.
static size_t moments_host_plan(const LlamaConfig *c, const ModelOptions *o, int world) {
    if (!o->adam_offload) return 0;
    size_t sizes[NUM_PARAM_TENSORS];
    param_sizes(c, sizes);
    ZeroLayout z = zero_layout(c, sizes, 0, world);
    size_t b = 2 * moment_bytes(z.shard, o->moments_bf16);
    zero_layout_free(&z);
    return b;
}

static void model_free(Model *m) {
    for (int i = 0; i < m->num_allocations; i++) cudaCheck(cudaFree(m->allocations[i]));
    if (m->moments_on_host) { cudaCheck(cudaFreeHost(m->adam_m)); cudaCheck(cudaFreeHost(m->adam_v)); }
    linears_free(&m->linears);
    encoder_backward_free(&m->enc_bwd);
    fp8_state_free(&m->fp8_state);
    if (m->graph.exec) cudaCheck(cudaGraphExecDestroy(m->graph.exec));
    cudaCheck(cudaFreeHost(m->norm_host));
    zero_layout_free(&m->zero);
    memset(m, 0, sizeof(*m));
}

// Random init (README): normal(0, 0.02); wo and w2 normal(0, 0.02/sqrt(2L)); norm weights 1.
// Drawn on the host from the seed so every GPU count and precision starts from identical weights.
static void model_init_weights(Model *m, uint64_t seed, float *host_out) {
    // Chunks of 2^20 values draw from their own streams (seeded by seed, tensor and chunk), so the
    // weights are the same for any number of threads: a 7B model takes seconds, not minutes.
    const size_t CHUNK = (size_t)1 << 20;
    size_t off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        float std = (p == P_WO || p == P_W2) ? 0.02f / sqrtf(2.0f * m->cfg.L) : 0.02f;
        int is_norm = p == P_LN1W || p == P_LN2W || p == P_LNFW;
        float *out = host_out + off;
        size_t n = m->param_sizes[p];
        long long chunks = (long long)CEIL_DIV(n, CHUNK);
        #pragma omp parallel for schedule(dynamic)
        for (long long k = 0; k < chunks; k++) {
            uint64_t rng = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(p + 1) << 48) ^ ((uint64_t)k * 0xD1B54A32D192ED03ull);
            rng = rng ? rng : 1;
            size_t end = (size_t)(k + 1) * CHUNK < n ? (size_t)(k + 1) * CHUNK : n;
            for (size_t i = (size_t)k * CHUNK; i < end; i++) out[i] = is_norm ? 1.0f : std * random_normal(&rng);
        }
        off += n;
    }
}

// Several GPUs or bf16 master weights: the fp32 weights [first, first + n) of the flat vector (host)
// into the part of this rank's fp32 master shard they overlap (if there is one) and into the bf16
// parameters (every rank holds all of those), through `staging`, a device buffer of n floats or more.
static void model_set_weight_range(Model *m, const float *host, size_t first, size_t n, float *staging) {
    for (int i = 0; m->master && i < m->zero.num_pieces; i++) {
        const ShardPiece *p = &m->zero.pieces[i];
        size_t a = p->flat > first ? p->flat : first, e = p->flat + p->count < first + n ? p->flat + p->count : first + n;
        if (a < e) cudaCheck(cudaMemcpy(m->master + p->local + (a - p->flat), host + (a - first), (e - a) * sizeof(float), cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaMemcpy(staging, host, n * sizeof(float), cudaMemcpyHostToDevice)); // waits for the last range's kernel
    init_from_master(m->params_memory + first, staging, n, 0);
}

// read_sections' sink of a model file's weights on several GPUs or into bf16 master weights (load_model_file).
typedef struct { Model *m; float *staging; } WeightSink;
static void weight_sink(void *ctx, const void *chunk, size_t offset, size_t n) {
    WeightSink *w = (WeightSink *)ctx;
    model_set_weight_range(w->m, (const float *)chunk, offset / sizeof(float), n / sizeof(float), w->staging);
}

// Load fp32 weights (host, num_params) into the master copy and the bf16 parameters. With several
// GPUs each rank keeps its shard of the fp32 copy and the whole model in bf16; with bf16 master
// weights the bf16 parameters (round to nearest) are all there is.
static void model_set_weights(Model *m, const float *host) {
    m->w_fp8_stale = 1;
    if (m->mg->world == 1 && m->master) {
        cudaCheck(cudaMemcpy(m->master, host, m->num_params * sizeof(float), cudaMemcpyHostToDevice));
        init_from_master(m->params_memory, m->master, m->num_params, 0);
        cudaCheck(cudaDeviceSynchronize());
        return;
    }
    size_t chunk = m->num_params < ((size_t)16 << 20) ? m->num_params : ((size_t)16 << 20);
    float *staging = (float *)cudaMallocCheck(chunk * sizeof(float), "weight upload staging");
    for (size_t off = 0; off < m->num_params; off += chunk) {
        size_t k = m->num_params - off < chunk ? m->num_params - off : chunk;
        model_set_weight_range(m, host + off, off, k, staging);
    }
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(staging));
}

// ----------------------------------------------------------------------------------------------
// Passes, and the fp8 weights

// What a forward or backward pass is for, handed to it (and on to its casts) as an argument: the
// model holds no mode that callers would set and reset around a pass.
typedef struct {
    int micro;        // micro-step within the optimizer step: wgrad and the embedding's backward add into the gradient after 0
    int reduce_grads; // the last micro-step of a multi-GPU step: the backward reduce-scatters each bucket once it is final
    Fp8Pass fp8;      // whether the fp8 casts record amaxes and counts, and whether they scale live
} Pass;

// The fp8 mode of micro-step `micro` of the optimizer step after m->step ones: its casts record. They
// scale live (measure the amax before casting) in the first step's first micro-step, which has no
// history yet, and always under -fp8_recipe current; otherwise with the delayed scale.
static Fp8Pass fp8_train_pass(const Model *m, int micro) {
    Fp8Pass f = {1, m->fp8.live_always || (m->step == 0 && micro == 0)};
    return f;
}

// A training pass of micro-step `micro` (step_passes sets reduce_grads for the last one of several GPUs).
static Pass train_pass(const Model *m, int micro) {
    Pass p = {micro, 0, fp8_train_pass(m, micro)};
    return p;
}

// Evaluation and sampling: the casts use the scales but record no amax and count nothing, so the fp8
// state stays as training left it; under -fp8_recipe current they still scale live (that recipe has
// no delayed scale to fall back on).
static Pass eval_pass(const Model *m) {
    Pass p = {0, 0, {0, m->fp8.live_always}};
    return p;
}

// E4M3 copies of every block weight, each layer's W its own tensor with its own scale (a linear of
// another grain: in its grain; llmc/linear.cuh), for the next step: right after the update (multi-GPU:
// after the gather; one GPU: AdamW makes them itself, see model_update), and when weights were set or
// the update skipped. The weights' amaxes go to the next step's slots. With the cache in the bf16
// parameters, bf16(master) is staged in the gradient buffer, which holds nothing between steps: the
// cast is the same as AdamW's, byte for byte.
static void fp8_cast_weights(Model *m, cudaStream_t stream) {
    m->w_fp8_stale = 0;
    if (!m->fp8.w_cache) return; // linear_forward casts each layer's W when it needs it
    Fp8Pass p = fp8_train_pass(m, 0); // as the next step's first micro-step casts: recorded, live in the first step
    const floatX *src = m->params_memory;
    if (m->fp8.w_by_adamw) {
        init_from_master(m->grads_memory, m->master, m->num_params, stream);
        src = m->grads_memory;
    }
    linears_cast_weights(&m->linears, p, src, stream);
}

// ----------------------------------------------------------------------------------------------
// Forward. With targets, also the loss and (in place) dlogits scaled by dloss; returns nothing:
// per-token losses are in acts.losses.

static floatX *layer_ptr(floatX *base, int l, size_t per_layer) { return base ? base + l * per_layer : NULL; }
static fp8e4 *layer_ptr8(fp8e4 *base, int l, size_t per_layer) { return base ? base + l * per_layer : NULL; }

static void model_forward(Model *m, Pass p, int with_targets, float dloss, cudaStream_t stream) {
    const LlamaConfig *c = &m->cfg;
    Activations *a = &m->acts;
    Fp8State *fs = &m->fp8_state;
    Linears *lins = &m->linears;
    int B = m->opt.B, T = m->opt.T, N = B * T, C = c->C, FF = c->FF, NH = c->NH, NKV = c->NKV, HS = C / NH;
    size_t NC = (size_t)N * C, NQKV = (size_t)N * config_qkv_width(c), NFF = (size_t)N * FF;
    size_t swiglu_stride = m->opt.recompute >= 1 ? 0 : NFF;

    encoder_forward(a->encoded, a->inputs, m->param[P_WTE], N, C, stream);
    if (a->doc_pos) doc_positions(a->doc_pos, a->inputs, B, T, m->opt.doc_start_id, stream); // the backward reads them too
    if (a->doc_bias) doc_bias_forward(a->doc_bias, a->doc_pos, B, T, stream); // the same mask as cuDNN's bias, for both passes
    Fp8Site s = linear_x_site(lins, 0, LIN_QKV, p.fp8, a->ln1_fp8, NULL, a->ln1);
    rmsnorm_forward(s.bf16, a->ln1_rstd, a->encoded, m->param[P_LN1W], N, C, c->norm_eps, s.cast, stream);
    fp8_site_finish(fs, &s, stream);

    for (int l = 0; l < c->L; l++) {
        const floatX *res_in = l == 0 ? a->encoded : a->res3 + (l - 1) * NC;
        floatX *qkv = a->qkv + l * NQKV, *atty = a->atty + l * NC, *fch = a->fch + l * 2 * NFF;
        floatX *res2 = a->res2 + l * NC, *res3 = a->res3 + l * NC;
        float *stats = a->att_stats + (size_t)l * N * NH;

        linear_forward(lins, l, LIN_QKV, p.fp8, qkv, layer_ptr(a->ln1, l, NC), layer_ptr8(a->ln1_fp8, l, NC), stream);
        rope_forward(qkv, m->rope_freqs, a->doc_pos, B, T, NH, NKV, HS, stream);
        attention_forward(atty, stats, qkv, a->doc_pos, a->doc_bias, B, T, NH, NKV, HS, stream);
        linear_x_existing(lins, l, LIN_WO, p.fp8, a->atty_fp8, atty, stream);
        linear_forward(lins, l, LIN_WO, p.fp8, a->proj, atty, a->atty_fp8, stream);

        s = linear_x_site(lins, l, LIN_W13, p.fp8, layer_ptr8(a->ln2_fp8, l, NC), NULL, layer_ptr(a->ln2, l, NC));
        fused_residual_rmsnorm_forward(res2, s.bf16, a->ln2_rstd + (size_t)l * N, res_in, a->proj,
                                       m->param[P_LN2W] + (size_t)l * C, N, C, c->norm_eps, s.cast, stream);
        fp8_site_finish(fs, &s, stream);
        linear_forward(lins, l, LIN_W13, p.fp8, fch, layer_ptr(a->ln2, l, NC), layer_ptr8(a->ln2_fp8, l, NC), stream);

        // w2's X: fprop reads it row-major (N, FF), wgrad as X^T (FF, N) (fp8 GEMMs are TN only).
        // SwiGLU writes the row-major codes to one layer's scratch (x_fp8) and, with -r 0, X^T straight
        // into the saved buffer, so the backward has no transpose of X to do; -r 1 saves nothing.
        s = linear_x_site(lins, l, LIN_W2, p.fp8, a->x_fp8, layer_ptr8(a->swiglu_fp8, l, NFF),
                          layer_ptr(a->swiglu, l, swiglu_stride));
        swiglu_forward(s.bf16, fch, N, FF, s.cast, s.cast_t, stream);
        fp8_site_finish(fs, &s, stream);
        linear_forward(lins, l, LIN_W2, p.fp8, a->proj, s.bf16, a->x_fp8, stream); // s.bf16: a bf16 w2's X

        if (l + 1 < c->L) { // the next layer's attention norm, fused with this layer's residual add
            s = linear_x_site(lins, l + 1, LIN_QKV, p.fp8, layer_ptr8(a->ln1_fp8, l + 1, NC), NULL,
                              layer_ptr(a->ln1, l + 1, NC));
            fused_residual_rmsnorm_forward(res3, s.bf16, a->ln1_rstd + (size_t)(l + 1) * N, res2, a->proj,
                                           m->param[P_LN1W] + (size_t)(l + 1) * C, N, C, c->norm_eps, s.cast, stream);
            fp8_site_finish(fs, &s, stream);
        } else { // the final norm: with -fp8_lm_head 1 it also writes the lm_head's E4M3 X
            s = linear_x_site(lins, 0, LIN_LM_HEAD, p.fp8, a->lnf_fp8, NULL, a->lnf);
            fused_residual_rmsnorm_forward(res3, s.bf16, a->lnf_rstd, res2, a->proj, m->param[P_LNFW], N, C,
                                           c->norm_eps, s.cast, stream);
            fp8_site_finish(fs, &s, stream);
        }
    }
    linear_forward(lins, 0, LIN_LM_HEAD, p.fp8, a->logits, a->lnf, a->lnf_fp8, stream); // bf16 without -fp8_lm_head 1
    if (with_targets) fused_classifier(a->logits, a->losses, a->targets, N, c->V, dloss, 1, stream);
}

// ----------------------------------------------------------------------------------------------
// Backward: gradients accumulate into m->grad (zeroed once per optimizer step). Needs the forward's
// dlogits in acts.logits. Every dY of an fp8 linear is cast by the kernel that produces it.

// In the last micro-step of a multi-GPU step: reduce-scatter, in one NCCL group on the comm stream,
// every bucket that backward stage `stage` has made final (llmc/zero_layout.h). The compute stream does
// not wait: the layers it works on next write other buckets.
static void reduce_finished_grads(Model *m, Pass p, int stage, cudaStream_t stream) {
    if (!p.reduce_grads) return;
    MultiGpu *mg = m->mg;
    mg_group_start(mg);
    for (int k = 0; k < m->zero.num_buckets; k++) {
        const GradBucket *b = &m->zero.buckets[k];
        if (b->stage == stage) {
            mg_reducescatter_bf16(mg, m->grads_memory + b->start, m->grad_shard + b->shard, b->count / mg->world, MG_SUM, stream);
        }
    }
    mg_group_end(mg);
}

// The embedding's backward needs micro-step k's tokens grouped on the host into list slot k
// (llmc/encoder.cuh) before model_backward is queued for it. train_step groups all of a step's
// micro-batches first, so that a CUDA graph of the step replays them all.
static void model_group_tokens(Model *m, int micro, const int *inputs_host) {
    encoder_backward_reserve(&m->enc_bwd, micro + 1);
    encoder_backward_group(&m->enc_bwd, micro, inputs_host, m->opt.B * m->opt.T);
}

static void model_backward(Model *m, Pass p, cudaStream_t stream) {
    const LlamaConfig *c = &m->cfg;
    Activations *a = &m->acts;
    Fp8State *fs = &m->fp8_state;
    Linears *lins = &m->linears;
    int B = m->opt.B, T = m->opt.T, N = B * T, C = c->C, FF = c->FF, NH = c->NH, NKV = c->NKV, HS = C / NH;
    size_t NC = (size_t)N * C, NQKV = (size_t)N * config_qkv_width(c), NFF = (size_t)N * FF;
    size_t swiglu_stride = m->opt.recompute >= 1 ? 0 : NFF;

    // dlogits (in place of the logits) are the lm_head's dY; a bf16 GEMM without -fp8_lm_head 1
    linear_dy_existing(lins, 0, LIN_LM_HEAD, p.fp8, a->logits, stream);
    linear_backward(lins, 0, LIN_LM_HEAD, p.fp8, p.micro > 0, a->dbtc, a->logits, a->lnf, a->lnf_fp8, NULL, 0, stream);
    cudaCheck(cudaMemsetAsync(a->dres, 0, NC * sizeof(floatX), stream));
    Fp8Site s = linear_dy_site(lins, c->L - 1, LIN_W2, p.fp8, a->dres);
    rmsnorm_backward(a->dres, m->grad[P_LNFW], a->rmsnorm_scratch, a->dbtc, a->res3 + (c->L - 1) * NC,
                     m->param[P_LNFW], a->lnf_rstd, N, C, s.cast, stream);
    fp8_site_finish(fs, &s, stream);
    reduce_finished_grads(m, p, backward_stage(c, P_LNFW, 0), stream);

    for (int l = c->L - 1; l >= 0; l--) {
        const floatX *res_in = l == 0 ? a->encoded : a->res3 + (l - 1) * NC;
        floatX *qkv = a->qkv + l * NQKV, *atty = a->atty + l * NC, *fch = a->fch + l * 2 * NFF;
        float *stats = a->att_stats + (size_t)l * N * NH;

        // MLP: w2, SwiGLU, w13, then the norm that fed it. w2's wgrad reads X^T: -r 0 saved it in the
        // forward; -r 1 recomputes it here, X^T only (nothing reads the row-major codes now)
        const fp8e4 *w2_x_t = layer_ptr8(a->swiglu_fp8, l, NFF);
        floatX *w2_x = layer_ptr(a->swiglu, l, swiglu_stride);
        if (m->opt.recompute >= 1) { // per-tensor: the forward's scale, so the same fp8 values; no amax or count again
            fp8e4 *x_t = NULL;
            Fp8Cast cast = linear_recompute_x(lins, l, &x_t, &w2_x);
            swiglu_forward(w2_x, fch, N, FF, cast, x_t, stream);
            w2_x_t = x_t;
        }
        linear_backward(lins, l, LIN_W2, p.fp8, p.micro > 0, a->dswiglu, a->dres, w2_x, NULL, w2_x_t, 0, stream);
        // fp8 mode reads only the E5M2 dY of w13 (dfch is not allocated): no bf16 copy unless live
        // scaling needs one to cast from
        s = linear_dy_site(lins, l, LIN_W13, p.fp8, a->dfch);
        // with delayed scaling SwiGLU's backward also writes dY^T, so w13's wgrad needs no transpose pass
        void *dy_t = s.cast.out != NULL ? a->dy_fp8_t : NULL;
        swiglu_backward(s.bf16, a->dswiglu, fch, N, FF, s.cast, dy_t, stream);
        fp8_site_finish(fs, &s, stream);
        linear_backward(lins, l, LIN_W13, p.fp8, p.micro > 0, a->dbtc, s.bf16, layer_ptr(a->ln2, l, NC),
                        layer_ptr8(a->ln2_fp8, l, NC), NULL, dy_t != NULL, stream);
        s = linear_dy_site(lins, l, LIN_WO, p.fp8, a->dres);
        rmsnorm_backward(a->dres, m->grad[P_LN2W] + (size_t)l * C, a->rmsnorm_scratch, a->dbtc, a->res2 + l * NC,
                         m->param[P_LN2W] + (size_t)l * C, a->ln2_rstd + (size_t)l * N, N, C, s.cast, stream);
        fp8_site_finish(fs, &s, stream);

        // attention: wo, the fused attention, RoPE, qkv, then the norm that fed it
        // X^T recast from the bf16 output
        linear_backward(lins, l, LIN_WO, p.fp8, p.micro > 0, a->dbtc, a->dres, atty, NULL, NULL, 0, stream);
        attention_backward(a->dqkv, a->dbtc, qkv, atty, stats, a->doc_pos, a->doc_bias, B, T, NH, NKV, HS, stream);
        s = linear_dy_site(lins, l, LIN_QKV, p.fp8, a->dqkv);
        rope_backward(a->dqkv, m->rope_freqs, a->doc_pos, B, T, NH, NKV, HS, s.cast, stream);
        fp8_site_finish(fs, &s, stream);
        linear_backward(lins, l, LIN_QKV, p.fp8, p.micro > 0, a->dbtc, a->dqkv, layer_ptr(a->ln1, l, NC),
                        layer_ptr8(a->ln1_fp8, l, NC), NULL, 0, stream);
        s = l > 0 ? linear_dy_site(lins, l - 1, LIN_W2, p.fp8, a->dres) : fp8_site(fs, p.fp8, -1, NULL, a->dres, NC);
        rmsnorm_backward(a->dres, m->grad[P_LN1W] + (size_t)l * C, a->rmsnorm_scratch, a->dbtc, res_in,
                         m->param[P_LN1W] + (size_t)l * C, a->ln1_rstd + (size_t)l * N, N, C, s.cast, stream);
        fp8_site_finish(fs, &s, stream);
        reduce_finished_grads(m, p, backward_stage(c, P_LN1W, l), stream); // layer l is done
    }
    encoder_backward_launch(&m->enc_bwd, p.micro, m->grad[P_WTE], a->dres, N, C, stream);
    reduce_finished_grads(m, p, backward_stage(c, P_WTE, 0), stream);
}

// ----------------------------------------------------------------------------------------------
// Update: the end of an optimizer step, after its last backward (model_update). Its recipe: the fp8
// scales move on, the global gradient norm, AdamW clipped by it, the updated weights gathered (several
// GPUs) and cast to fp8 for the next step. A non-finite norm skips AdamW: the weights stay as they were.

typedef struct { float lr, beta1, beta2, eps, weight_decay, grad_clip; } AdamWParams;

// What a step reports: the mean loss over every rank's learned targets (NaN when the step has none;
// train_step fills it in), the gradient norm before clipping, and whether the update was skipped.
typedef struct { float loss, norm; int skipped; } StepResult;

// The global gradient norm, the same on every rank: the squared norm of this rank's shard once the
// backward's reduce-scatters have filled it, summed over the ranks, read on the host.
static float gradient_norm(Model *m, cudaStream_t stream) {
    MultiGpu *mg = m->mg;
    mg_join(mg, stream); // the reduce-scattered gradients
    global_norm_squared(m->norm_device, m->grad_shard, m->zero.shard, stream);
    mg_allreduce_sum_f32(mg, m->norm_device, 1, stream); // the shards' squared norms add up to the whole one
    mg_join(mg, stream);
    cudaCheck(cudaMemcpyAsync(m->norm_host, m->norm_device, sizeof(float), cudaMemcpyDeviceToHost, stream));
    mg_wait(mg, stream, "the gradient norm");
    return sqrtf(*m->norm_host);
}

// AdamW on this rank's shard, piece by piece (llmc/zero_layout.h), the gradient scaled by clip. With
// fp8.w_by_adamw an fp8 linear's piece is its whole tensor, and AdamW writes every layer's E4M3 W
// instead of the bf16 weights, recording its amax and counts for the next step's scales. With bf16
// master weights (no m->master) AdamW updates the shard's bf16 parameters in place.
static void optimizer_step(Model *m, const AdamWParams *h, float clip, cudaStream_t stream) {
    size_t mb = m->opt.moments_bf16 ? sizeof(floatX) : sizeof(float);
    m->adam_t++;
    for (int i = 0; i < m->zero.num_pieces; i++) {
        const ShardPiece *p = &m->zero.pieces[i];
        AdamWSlice s = {m->master ? m->master + p->local : NULL, m->params_memory + p->flat, m->grad_shard + p->local,
                        (char *)m->adam_m + p->local * mb, (char *)m->adam_v + p->local * mb, m->opt.moments_bf16,
                        p->count, p->flat};
        linears_adamw_cast(&m->linears, p->tensor, &s); // fp8.w_by_adamw: one piece = the whole tensor, its E4M3 W
        AdamWStep step = {h->lr, h->beta1, h->beta2, h->eps, param_is_decayed(p->tensor) ? h->weight_decay : 0.0f, clip, m->adam_t};
        adamw_update(&s, &step, stream);
    }
}

#define GATHERS_PER_GROUP 512 // NCCL takes at most 2048 operations in one group

// Several GPUs: every rank's updated part of every bucket into every rank's bf16 parameters (in
// place). The compute stream waits for it: the next step's weight casts and forward read them all.
static void gather_params(Model *m, cudaStream_t stream) {
    MultiGpu *mg = m->mg;
    if (mg->world == 1) return;
    for (int k0 = 0; k0 < m->zero.num_buckets; k0 += GATHERS_PER_GROUP) {
        mg_group_start(mg);
        for (int k = k0; k < m->zero.num_buckets && k < k0 + GATHERS_PER_GROUP; k++) {
            const GradBucket *b = &m->zero.buckets[k];
            size_t part = b->count / mg->world;
            mg_allgather_bf16(mg, m->params_memory + b->start + (size_t)mg->rank * part, m->params_memory + b->start, part, stream);
        }
        mg_group_end(mg);
    }
    mg_join(mg, stream);
}

// The end of an optimizer step, its numbers those of docs/fp8_recipe.md "The end of an optimizer
// step". Every rank reads the same reduced norm, so all skip or none; and the same health counts,
// so the fallback switches the same linears on every rank.
static StepResult model_update(Model *m, const AdamWParams *h, int grad_accum, cudaStream_t stream) {
    fp8_no_open_site(&m->fp8_state, "model_update");
    if (m->fp8.on) fp8_end_step(&m->fp8_state, stream); // 1-3: amaxes and counts reduced, histories rolled, new scales
    linears_counts_to_host(&m->linears, stream); // the fallback's: the step's counts, on the host with the norm
    StepResult r = {NAN, gradient_norm(m, stream), 0};  // 4 (the loss is train_step's)
    r.skipped = !isfinite(r.norm);
    m->step++;
    // 4b: the fallback's switches take effect from the next step on, its weights (5, 6) included
    linears_fallback_step(&m->linears, grad_accum);
    if (!r.skipped) {
        float clip = h->grad_clip > 0.0f && r.norm > h->grad_clip ? h->grad_clip / r.norm : 1.0f;
        optimizer_step(m, h, clip, stream); // 5
        gather_params(m, stream);           // 6: several GPUs
        // AdamW cast every linear per-tensor: the others again in their grain
        if (m->fp8.w_by_adamw) linears_regrain(&m->linears, fp8_train_pass(m, 0), stream);
    }
    // 6: the next step's E4M3 weights where AdamW did not write them; after a skipped update too
    // (the same weights, but the scales moved on)
    if (m->fp8.on && (r.skipped || !m->fp8.w_by_adamw)) fp8_cast_weights(m, stream);
    return r;
}

// The start of an optimizer step: the fp8 weights recast if the weights changed outside AdamW (the
// recast may stage bf16 weights in the gradient buffer, so it comes before the step's gradients).
static void recast_stale_weights(Model *m, cudaStream_t stream) {
    if (m->fp8.on && m->w_fp8_stale) fp8_cast_weights(m, stream);
}

// The gradients that kernels add into, zeroed once per step (embedding, norm weights: ~4% of the
// bytes of all gradients); the GEMMs overwrite theirs (the linears', the lm_head's) in micro-step 0.
static void zero_added_grads(Model *m, cudaStream_t stream) {
    for (int p = 0; p < NUM_PARAM_TENSORS; p++)
        if (!param_grad_from_gemm(p)) cudaCheck(cudaMemsetAsync(m->grad[p], 0, m->param_sizes[p] * sizeof(floatX), stream));
}

// A step's host buffers: grad_accum micro-batches of B*T inputs and targets (micro-batch k at k*B*T;
// a target -1 is loss-masked), and the per-token losses the step copies back. The trainer's are
// pinned, so the copies run asynchronously and a CUDA graph can replay them.
typedef struct { const int *inputs, *targets; float *losses; int grad_accum; } StepBuffers;

// The forward and backward passes of a step, micro-step by micro-step, the tokens already grouped
// (model_group_tokens).
static void step_passes(Model *m, const StepBuffers *b, float dloss, cudaStream_t stream) {
    MultiGpu *mg = m->mg;
    int N = m->opt.B * m->opt.T;
    zero_added_grads(m, stream);
    for (int micro = 0; micro < b->grad_accum; micro++) {
        Pass p = train_pass(m, micro);
        cudaCheck(cudaMemcpyAsync(m->acts.inputs, b->inputs + (size_t)micro * N, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(m->acts.targets, b->targets + (size_t)micro * N, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        model_forward(m, p, 1, dloss, stream);
        cudaCheck(cudaMemcpyAsync(b->losses + (size_t)micro * N, m->acts.losses, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
        p.reduce_grads = mg->world > 1 && micro == b->grad_accum - 1; // gradients are final in the last micro-step only
        model_backward(m, p, stream);
    }
}

static int is_pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); // not an error here: the pointer is just not one CUDA knows
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

// -cuda_graph 1: step_passes as one CUDA graph, so that its ~40 kernels per layer cost one launch
// instead of one each (at small batches launches are much of a step: dev/results/step_profile_125m_fp8.md).
// The kernels and their order are the same, so are the results, bit for bit. One GPU only, and not
// in a process's first step (it builds the attention plans and tunes the GEMMs, which synchronize),
// nor with pageable host buffers (a graph cannot copy from them) or a test's GEMM probe (it reads
// the device mid-step). The graph replays what it was captured with: the host keeps the batches,
// losses and token lists in the same pinned buffers, and anything that moves one (StepGraphKey)
// captures it again. Returns 0 if this step cannot run as a graph.
static int step_passes_graph(Model *m, const StepBuffers *b, float dloss, cudaStream_t stream) {
    StepGraph *g = &m->graph;
    // the first step after a grain changed (a fallback's switch) may build and tune GEMM plans of new
    // kinds and shapes, which synchronizes: it runs kernel by kernel, and the next one is captured
    int new_grains = m->linears.grain_changes != g->grains_run;
    g->grains_run = m->linears.grain_changes;
    if (!m->opt.cuda_graph || m->mg->world > 1 || g->steps < 2 || new_grains) return 0;
    if (!is_pinned(b->inputs) || !is_pinned(b->targets) || !is_pinned(b->losses)) return 0;
#ifdef TESTING
    if (g_fp8_gemm_probe) return 0;
#endif
    StepGraphKey key;
    memset(&key, 0, sizeof(key)); // compared with memcmp
    key.inputs = b->inputs; key.targets = b->targets; key.losses = b->losses; key.grad_accum = b->grad_accum; key.dloss = dloss;
    key.token_lists = m->enc_bwd.device_list; key.cudnn_workspace = attention_workspace();
    key.fp8_grain_changes = m->linears.grain_changes;
    if (g->exec == NULL || memcmp(&key, &g->key, sizeof(key)) != 0) {
        if (g->exec) cudaCheck(cudaGraphExecDestroy(g->exec));
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        step_passes(m, b, dloss, stream);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&g->exec, graph, 0));
        size_t nodes = 0;
        cudaCheck(cudaGraphGetNodes(graph, NULL, &nodes));
        cudaCheck(cudaGraphDestroy(graph));
        g->key = key;
        g->captures++;
        printf("cuda graph: step %d's forward and backward captured (%zu nodes%s); replayed from here on\n", m->step + 1,
               nodes, g->captures > 1 ? ", again: a buffer it uses, the loss scale or a linear's fp8 grain changed" : "");
    }
    cudaCheck(cudaGraphLaunch(g->exec, stream));
    g->replays++;
    return 1;
}

// The step's learned targets (not -1) summed over the ranks, from this rank's count: one all-reduce
// when the train data has loss masks (every rank's flag is the same: they read the same files), none
// without (then every rank learns all of its targets).
static long long step_unmasked_total(Model *m, long long unmasked) {
    MultiGpu *mg = m->mg;
    if (mg->world == 1) return unmasked;
    if (!m->loss_masked) return unmasked * mg->world;
    unsigned long long *h = (unsigned long long *)mg->host_scratch;
    h[0] = (unsigned long long)unmasked;
    cudaCheck(cudaMemcpyAsync(mg->scratch, h, sizeof(*h), cudaMemcpyHostToDevice, mg->comm_stream));
    mg_allreduce_sum_u64(mg, (unsigned long long *)mg->scratch, 1, mg->comm_stream);
    cudaCheck(cudaMemcpyAsync(h, mg->scratch, sizeof(*h), cudaMemcpyDeviceToHost, mg->comm_stream));
    mg_wait(mg, mg->comm_stream, "the step's learned-target count across ranks");
    return (long long)h[0];
}

// The step's learned targets (not -1) on every rank together, from this rank's grad_accum micro-batches
// of B*T targets each (b->targets); this rank's own count in *unmasked.
static long long step_learned_targets(Model *m, const StepBuffers *b, long long *unmasked) {
    size_t n = (size_t)b->grad_accum * m->opt.B * m->opt.T;
    *unmasked = 0;
    for (size_t i = 0; i < n; i++) *unmasked += b->targets[i] >= 0;
    return step_unmasked_total(m, *unmasked);
}

// dlogits' scale: the loss is the mean over the step's learned targets on every rank (all micro-steps
// together, not a mean of per-micro-step means), so each learned target's loss weighs 1 / total and the
// ranks' gradients just add (MG_SUM, exact). With every target learned that is 1 / (B*T*grad_accum*world),
// computed as it always was; with none learned the step has no gradient.
static float step_loss_scale(long long total, int N, int grad_accum, int world) {
    if (total == (long long)N * grad_accum * world) return 1.0f / ((float)N * grad_accum * world);
    return total > 0 ? (float)(1.0 / (double)total) : 0.0f;
}

// One optimizer step over the grad_accum micro-batches of b; the losses come back in b->losses.
// With several GPUs every fp8 scale is the same on all ranks (llmc/fp8_state.cuh).
// The tokens are grouped for the embedding's backward before anything is queued; the last step's
// copies of the lists are done by then (model_update waited for its backward). A step with a masked
// target runs outside a CUDA graph: its loss scale differs from step to step, and a graph bakes it in.
static StepResult train_step(Model *m, const StepBuffers *b, const AdamWParams *h, cudaStream_t stream) {
    MultiGpu *mg = m->mg;
    int N = m->opt.B * m->opt.T, grad_accum = b->grad_accum;
    long long unmasked, total = step_learned_targets(m, b, &unmasked);
    int all_learned = total == (long long)N * grad_accum * mg->world;
    float dloss = step_loss_scale(total, N, grad_accum, mg->world);
    m->graph.steps++;
    encoder_backward_reserve(&m->enc_bwd, grad_accum);
    for (int micro = 0; micro < grad_accum; micro++) model_group_tokens(m, micro, b->inputs + (size_t)micro * N);
    recast_stale_weights(m, stream);
    if (unmasked < (long long)grad_accum * N || !step_passes_graph(m, b, dloss, stream)) step_passes(m, b, dloss, stream);
    StepResult r = model_update(m, h, grad_accum, stream); // waits for the stream up to the norm, losses included
    double sum = 0.0; // a masked target's loss is 0
    for (size_t i = 0; i < (size_t)grad_accum * N; i++) sum += b->losses[i];
    if (all_learned) {
        float loss = (float)(sum / ((double)grad_accum * N));
        // every rank reports, and decides on, the same mean
        r.loss = mg->world == 1 ? loss : mg_allreduce_sum_float(mg, loss) / mg->world;
        return r;
    }
    float step_sum = mg->world == 1 ? (float)sum : mg_allreduce_sum_float(mg, (float)sum);
    r.loss = total > 0 ? (float)(step_sum / (double)total) : NAN;
    return r;
}

// The next grad_accum micro-batches of the loader, gathered for train_step.
static void next_batches(DataLoader *dl, int grad_accum, int *inputs, int *targets) {
    size_t N = (size_t)dl->B * dl->T;
    for (int k = 0; k < grad_accum; k++) {
        dataloader_next_batch(dl);
        memcpy(inputs + k * N, dl->inputs, N * sizeof(int));
        memcpy(targets + k * N, dl->targets, N * sizeof(int));
    }
}

// The mean of the per-token losses of one batch.
static float batch_mean_loss(const float *losses, int N) {
    double sum = 0.0;
    for (int k = 0; k < N; k++) sum += losses[k];
    return (float)(sum / N);
}

// A loss-masked batch's summed loss over its learned targets (targets >= 0), their count in *count.
static float batch_learned_loss(const float *losses, const int *targets, int N, float *count) {
    double sum = 0.0;
    int learned = 0;
    for (int k = 0; k < N; k++) {
        if (targets[k] < 0) continue;
        sum += losses[k];
        learned++;
    }
    *count = (float)learned;
    return (float)sum;
}

// The val loss from every val position's loss, summed in position order: the same number at any
// world size. Without loss masks (position_count NULL) the mean of the positions' mean losses; with
// them the mean over every learned target (position_loss: each position's summed loss,
// position_count: its learned targets), as the training step's loss is.
static float val_loss_mean(const float *position_loss, const float *position_count, int positions) {
    double sum = 0.0, count = 0.0;
    for (int p = 0; p < positions; p++) {
        sum += position_loss[p];
        count += position_count ? position_count[p] : 1.0;
    }
    return (float)(sum / count);
}

// Sums `values` (one per val position, zero where another rank owns the position) over the ranks,
// N entries at a time through acts.losses (free after the forwards) and the pinned host_losses (a
// copy to pageable memory would wait for the collective outside mg_wait).
static void sum_over_ranks(Model *m, float *values, int positions, float *host_losses, cudaStream_t stream) {
    MultiGpu *mg = m->mg;
    int N = m->opt.B * m->opt.T;
    for (int first = 0; mg->world > 1 && first < positions; first += N) {
        int n = positions - first < N ? positions - first : N;
        memcpy(host_losses, values + first, n * sizeof(float));
        cudaCheck(cudaMemcpyAsync(m->acts.losses, host_losses, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        mg_allreduce_sum_f32(mg, m->acts.losses, n, stream);
        mg_join(mg, stream);
        cudaCheck(cudaMemcpyAsync(host_losses, m->acts.losses, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        mg_wait(mg, stream, "the val losses of all ranks");
        memcpy(values + first, host_losses, n * sizeof(float));
    }
}

// Mean val loss over the first `positions` batch positions of the val data (llmc/dataloader.h,
// "Evaluation"): the ranks share them out, each evaluated by one rank, and every rank runs the same
// number of forwards. Each rank fills its positions' entries of a vector that is zero elsewhere, so
// the sum over ranks adds only zeros to each entry: exact, whatever the order. Val data with loss
// masks gives the mean over its learned targets (a masked target's loss is 0 and not counted).
// Evaluation records no amax, so it leaves the fp8 state exactly as training would have it.
static float evaluate(Model *m, DataLoader *val, int positions, float *host_losses, cudaStream_t stream) {
    MultiGpu *mg = m->mg;
    int N = m->opt.B * m->opt.T;
    float *position_loss = (float *)callocCheck(positions, sizeof(float));
    float *position_count = val->masked ? (float *)callocCheck(positions, sizeof(float)) : NULL;
    for (int64_t s = 0; s < dataloader_eval_steps(positions, mg->world); s++) {
        int own;
        int64_t p = dataloader_eval_position(positions, mg->world, mg->rank, s, &own);
        dataloader_read_position(val, p);
        cudaCheck(cudaMemcpyAsync(m->acts.inputs, val->inputs, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(m->acts.targets, val->targets, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        model_forward(m, eval_pass(m), 1, 0.0f, stream);
        cudaCheck(cudaMemcpyAsync(host_losses, m->acts.losses, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
        mg_wait(mg, stream, "a validation batch");
        if (own && position_count) position_loss[p] = batch_learned_loss(host_losses, val->targets, N, &position_count[p]);
        else if (own) position_loss[p] = batch_mean_loss(host_losses, N);
    }
    sum_over_ranks(m, position_loss, positions, host_losses, stream);
    if (position_count) sum_over_ranks(m, position_count, positions, host_losses, stream);
    float loss = val_loss_mean(position_loss, position_count, positions);
    free(position_loss);
    free(position_count);
    return loss;
}

// Sample gen_tokens tokens after the document-start token (row 0 of the batch; the model is causal,
// so the rest of the batch does not matter). Each new token costs one full forward: simple, and
// cheap next to training. Every rank samples (the same weights, the same rng), so the ranks stay in
// step and keep equal rngs; only the main rank prints and logs.
static void sample_text(Model *m, Tokenizer *tok, int have_tok, int bos, int gen_tokens, uint64_t *rng,
                        const RunLog *rl, cudaStream_t stream) {
    int print = rl->main_rank, N = m->opt.B * m->opt.T, V = m->cfg.V;
    int *tokens = (int *)callocCheck(N, sizeof(int));
    floatX *row = (floatX *)mallocCheck(V * sizeof(floatX));
    float *probs = (float *)mallocCheck(V * sizeof(float));
    tokens[0] = bos;
    if (gen_tokens > m->opt.T - 1) gen_tokens = m->opt.T - 1;
    if (print) printf("sample: ");
    for (int t = 1; t <= gen_tokens; t++) {
        cudaCheck(cudaMemcpyAsync(m->acts.inputs, tokens, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        model_forward(m, eval_pass(m), 0, 0.0f, stream);
        cudaCheck(cudaMemcpyAsync(row, m->acts.logits + (size_t)(t - 1) * V, V * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
        mg_wait(m->mg, stream, "a sampling step");
        float maxv = -FLT_MAX, sum = 0.0f;
        for (int v = 0; v < V; v++) maxv = fmaxf(maxv, __bfloat162float(row[v]));
        for (int v = 0; v < V; v++) sum += (probs[v] = expf(__bfloat162float(row[v]) - maxv));
        float r = random_f32(rng) * sum, acc = 0.0f;
        int next = V - 1;
        for (int v = 0; v < V; v++) { acc += probs[v]; if (r < acc) { next = v; break; } }
        tokens[t] = next;
        if (!print) continue;
        if (have_tok) tokenizer_safe_print(tokenizer_decode(tok, next)); else printf("%d ", next);
        fflush(stdout);
    }
    if (print) printf("\n");
    run_log_sample(rl, tokens + 1, gen_tokens);
    free(tokens); free(row); free(probs);
}

// ----------------------------------------------------------------------------------------------
// Checkpoints (format in README.md): model_SSSSSSSS.bin holds the config and the fp32 master
// weights (all of them: with several GPUs rank 0 gathers the shards and writes it; bf16 master
// weights widened to fp32, exactly);
// state_SSSSSSSS_RRRRR.bin holds one rank's AdamW m and v (its shard), the fp8 state, the data loader
// position and the sampling RNG. Both are written to a temporary name and renamed, carry a checksum
// of their header and body and the run's id, and are refused on any mismatch (llmc/checkpoint_file.h:
// the layout, write_sections, read_sections). When a checkpoint is complete, which one -y 1 takes and
// what -keep removes: llmc/checkpoint.h (this file supplies the files' contents and the ranks'
// collectives).

// Collectives that follow file I/O (the master gather after each rank's state write, the barriers
// after loading weights and after a checkpoint) wait this long, not the usual collective timeout:
// for a large model, reading or writing a file can take minutes, and the ranks need not take
// equally long.
#define IO_BARRIER_TIMEOUT_S 1800.0

// data: the train loader's resume record (dataloader_save_state: its position and shards), data_bytes
// of them, of a -i mixture of data_sets sets (0: one glob); a resume reads its size from the state
// file (word 18) first.
typedef struct { int step, grad_accum, world, rank; uint64_t rng; unsigned char *data; int data_bytes, data_sets; } TrainState;

// The state file's header words 2..27, the one list its writer and its reader use: on resume every
// checked word must equal this run's value (a mismatch names the field, and for a flag's word the
// flag that resumes the file: pass[0] for the value 0, pass[1] for 1), the others are read back.
// A word a trainer before its flag never wrote is 0 there: fp32 moments, no fp8 lm_head, per-tensor
// grains, no fallback and fp32 master weights. Each word is an int of the Model or of the TrainState (state_field).
typedef struct {
    int word;
    const char *name;
    int in_train_state; size_t offset; // the int: in the TrainState (1) or the Model (0), at this offset
    int checked;
    const char *pass[2];
} StateField;
#define IN_MODEL(field) 0, offsetof(Model, field)
#define IN_TRAIN(field) 1, offsetof(TrainState, field)
static const StateField STATE_FIELDS[] = {
    {2, "step", IN_MODEL(step), 1}, {3, "V", IN_MODEL(cfg.V), 1}, {4, "L", IN_MODEL(cfg.L), 1},
    {5, "C", IN_MODEL(cfg.C), 1}, {6, "NH", IN_MODEL(cfg.NH), 1}, {7, "NKV", IN_MODEL(cfg.NKV), 1},
    {8, "FF", IN_MODEL(cfg.FF), 1},
    {9, "micro-batch B", IN_MODEL(opt.B), 1}, {10, "sequence length T", IN_MODEL(opt.T), 1},
    {11, "gradient accumulation steps", IN_TRAIN(grad_accum), 1}, {12, "number of GPUs", IN_TRAIN(world), 1},
    {13, "rank", IN_TRAIN(rank), 1},
    {14, "precision (0 bf16, 1 fp8)", IN_MODEL(opt.precision), 1, {"-precision bf16", "-precision fp8"}},
    {15, "fp8 recipe (1 current)", IN_MODEL(opt.fp8_current), 1, {"-fp8_recipe delayed", "-fp8_recipe current"}},
    {16, "fp8 history length", IN_MODEL(opt.fp8_history), 1}, {17, "fp8 margin", IN_MODEL(opt.fp8_margin), 1},
    // the data loader's record says what differs, naming the file (dataloader_load_state): read back
    {22, "data sets of the -i mixture (0: one glob)", IN_TRAIN(data_sets), 0},
    {18, "data loader state size", IN_TRAIN(data_bytes), 0},
    {19, "AdamW updates applied", IN_MODEL(adam_t), 0}, // a skipped update does not count: read back
    {20, "-fp8_lm_head", IN_MODEL(fp8.lm_head), 1, {"-fp8_lm_head 0", "-fp8_lm_head 1"}},
    {21, "-adam_moments (0 fp32, 1 bf16)", IN_MODEL(opt.moments_bf16), 1,
     {"-adam_moments fp32 (the file's moments are fp32, the default before bf16)", "-adam_moments bf16"}},
    {23, "-fp8_grain (0 tensor, 1 block, 3 row)", IN_MODEL(opt.fp8_grain), 1, {"-fp8_grain tensor", "-fp8_grain block"}},
    {24, "-fp8_fallback (0 off, 1 block, 2 bf16, 3 row)", IN_MODEL(opt.fp8_fallback), 1,
     {"-fp8_fallback off", "-fp8_fallback block"}},
    {25, "-fp8_fallback_threshold in millionths (0 without -fp8_fallback)", IN_MODEL(opt.fp8_fallback_millionths), 1},
    {26, "-fp8_fallback_patience (0 without -fp8_fallback)", IN_MODEL(opt.fp8_fallback_patience), 1},
    {27, "-master_weights (0 fp32, 1 bf16)", IN_MODEL(opt.master_bf16), 1,
     {"-master_weights fp32", "-master_weights bf16"}},
};
#define NUM_STATE_FIELDS ((int)(sizeof(STATE_FIELDS) / sizeof(STATE_FIELDS[0])))

// The int that field f of the header is, in this model or train state.
static int *state_field(Model *m, TrainState *ts, const StateField *f) {
    return (int *)((f->in_train_state ? (char *)ts : (char *)m) + f->offset);
}

// The state file's header as this run writes it (h: 256 words), and what a state file's header must
// hold for this run to resume it (ex: the checked words; returns their count).
static void state_header(Model *m, TrainState *ts, int h[256]) {
    memset(h, 0, 256 * sizeof(int));
    h[0] = STATE_MAGIC; h[1] = CKPT_VERSION;
    for (int i = 0; i < NUM_STATE_FIELDS; i++) h[STATE_FIELDS[i].word] = *state_field(m, ts, &STATE_FIELDS[i]);
}

static int state_expect(Model *m, TrainState *ts, HeaderExpect ex[NUM_STATE_FIELDS]) {
    int n = 0;
    for (int i = 0; i < NUM_STATE_FIELDS; i++) {
        const StateField *f = &STATE_FIELDS[i];
        if (f->checked) ex[n++] = (HeaderExpect){f->word, *state_field(m, ts, f), f->name, {f->pass[0], f->pass[1]}};
    }
    return n;
}

// The words of a resumed state file's header that are read back, not checked (h: the file's header).
static void state_read_back(Model *m, TrainState *ts, const int h[256]) {
    for (int i = 0; i < NUM_STATE_FIELDS; i++)
        if (!STATE_FIELDS[i].checked) *state_field(m, ts, &STATE_FIELDS[i]) = h[STATE_FIELDS[i].word];
}

// The state file's body, in order: AdamW's moments of this rank's shard, the fp8 state, with
// -fp8_grain block or -fp8_fallback each fp8 linear's grain (a byte) and steps over the fallback's
// threshold (an int32), the sampling rng and the data loader's position.
#define NUM_STATE_SECTIONS 7
static void state_sections(Model *m, TrainState *ts, Section sec[NUM_STATE_SECTIONS]) {
    const Fp8State *fs = &m->fp8_state;
    size_t shard_bytes = moments_size(m), fp8_bytes = fs->buffer ? fs->layout.total * sizeof(float) : 0;
    size_t nlin = m->opt.fp8_grain || m->opt.fp8_fallback ? (size_t)fp8_num_linears(&m->cfg, m->fp8.lm_head) : 0;
    const int moments_on_device = !m->moments_on_host;
    const Section all[NUM_STATE_SECTIONS] = {{m->adam_m, shard_bytes, moments_on_device},
                                              {m->adam_v, shard_bytes, moments_on_device}, {fs->buffer, fp8_bytes, 1},
                                              {m->linears.grain, nlin, 0},
                                              {m->linears.over_steps, nlin * sizeof(int), 0},
                                              {&ts->rng, sizeof(ts->rng), 0},
                                              {ts->data, (size_t)ts->data_bytes, 0}};
    memcpy(sec, all, sizeof(all));
}

// The train loader's resume record into ts->data, sized by its shards' names (main: at the start and
// before each checkpoint).
static void data_state_save(TrainState *ts, const DataLoader *train) {
    ts->data_bytes = (int)dataloader_state_bytes(train);
    ts->data_sets = train->num_sets;
    free(ts->data);
    ts->data = (unsigned char *)mallocCheck((size_t)ts->data_bytes);
    dataloader_save_state(train, ts->data);
}

// A resumed run's training data at the checkpoint's position (the record in ts->data, from state_path).
// -x 0 draws no training batch (open_data read no -i for it), so it leaves the record unread.
static void resume_data(DataLoader *train, const TrainState *ts, const Options *o, const char *state_path) {
    if (o->max_steps == 0) return;
    dataloader_load_state(train, ts->data, (size_t)ts->data_bytes, state_path, o->data_changed_continue);
}

// Before a state file is read: ts->data sized as the file's record (header word 18, read back, not
// compared), so that the loader compares the record with this run's data and names what differs.
static void data_state_sized_from(TrainState *ts, const char *state_path) {
    int h[256];
    int64_t size = read_header(state_path, h);
    if (h[18] < 0 || h[18] > size) FATAL("checkpoint '%s' gives its data loader state %d bytes: the file is corrupt", state_path, h[18]);
    ts->data_bytes = h[18];
    free(ts->data);
    ts->data = (unsigned char *)mallocCheck((size_t)h[18] + 1); // + 1: never a malloc of 0
}

// Several GPUs: the whole fp32 master (num_params floats) into `host` on rank 0 (NULL on the others),
// one bucket at a time through a bucket-sized device buffer; every rank must call it. The compute
// stream must be idle (the main loop has waited for the step). Each rank arrives after writing its
// state file, so the waits have the I/O deadline: a rank whose disk is a minute slower is no failure.
static void gather_master(Model *m, float *host) {
    MultiGpu *mg = m->mg;
    size_t biggest = 0;
    for (int k = 0; k < m->zero.num_buckets; k++) if (m->zero.buckets[k].count > biggest) biggest = m->zero.buckets[k].count;
    float *bucket = (float *)cudaMallocCheck(biggest * sizeof(float), "checkpoint gather buffer");
    for (int k = 0; k < m->zero.num_buckets; k++) {
        const GradBucket *b = &m->zero.buckets[k];
        mg_allgather_bytes(mg, m->master + b->shard, bucket, b->count / mg->world * sizeof(float), mg->comm_stream);
        mg_wait_for(mg, mg->comm_stream, "gathering the master weights for a checkpoint (after every rank wrote its state file)",
                    IO_BARRIER_TIMEOUT_S);
        if (host != NULL && b->start < m->num_params) {
            size_t n = m->num_params - b->start < b->count ? m->num_params - b->start : b->count; // not the padding
            cudaCheck(cudaMemcpy(host + b->start, bucket, n * sizeof(float), cudaMemcpyDeviceToHost));
        }
    }
    cudaCheck(cudaFree(bucket));
}

// bf16 master weights: the whole model, num_params bf16 parameters (every rank holds them all after the
// step's gather), widened into `host` as fp32 (exact), a chunk at a time. The compute stream must be idle.
static void params_to_host(const Model *m, float *host) {
    const size_t chunk = CKPT_CHUNK / sizeof(floatX);
    uint16_t *bits = (uint16_t *)mallocCheck(chunk * sizeof(floatX));
    for (size_t off = 0; off < m->num_params; off += chunk) {
        size_t n = m->num_params - off < chunk ? m->num_params - off : chunk;
        cudaCheck(cudaMemcpy(bits, m->params_memory + off, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) host[off + i] = bf16_bits_to_float(bits[i]);
    }
    free(bits);
}

// The bytes of this step's whole checkpoint: the model file and every rank's state file (the ranks of
// one node write to the same disk).
static unsigned long long checkpoint_bytes(Model *m, TrainState *ts) {
    Section st[NUM_STATE_SECTIONS], ms[] = {{m->master, m->num_params * sizeof(float), 1}};
    state_sections(m, ts, st);
    return sections_file_bytes(ms, 1) + (unsigned long long)m->mg->world * sections_file_bytes(st, NUM_STATE_SECTIONS);
}

// The ranks as the checkpoint code (llmc/checkpoint.h) meets them: this rank's state file, the model
// file (the master gathered, rank 0 writes it) and agreements over NCCL, of the run `run`.
typedef struct { Model *m; TrainState *ts; uint64_t run; } CheckpointCtx;

static void write_state_file(void *ctx, const char *path) {
    CheckpointCtx *c = (CheckpointCtx *)ctx;
    int h[256];
    state_header(c->m, c->ts, h);
    header_set_run_id(h, c->run);
    Section st[NUM_STATE_SECTIONS];
    state_sections(c->m, c->ts, st);
    if (c->m->moments_on_host) cudaCheck(cudaDeviceSynchronize()); // AdamW's writes into the host moments landed
    write_sections(path, h, st, NUM_STATE_SECTIONS);
}

static void write_model_file(void *ctx, const char *path) {
    CheckpointCtx *c = (CheckpointCtx *)ctx;
    Model *m = c->m;
    size_t pbytes = m->num_params * sizeof(float);
    float *whole = NULL; // on rank 0: the gathered fp32 master (several GPUs) or the widened bf16 master
    if (m->master == NULL) {
        if (mg_is_main(m->mg)) params_to_host(m, whole = (float *)mallocCheck(pbytes));
    } else if (m->mg->world > 1) {
        if (mg_is_main(m->mg)) whole = (float *)mallocCheck(pbytes);
        gather_master(m, whole);
    }
    if (mg_is_main(m->mg)) {
        int h[256];
        model_header_put(h, &m->cfg, m->step);
        header_set_run_id(h, c->run);
        Section ms[] = {{whole ? whole : m->master, pbytes, whole == NULL}};
        write_sections(path, h, ms, 1);
    }
    free(whole);
}

// The largest v over the ranks. They may arrive minutes apart (each writes or reads its files), so
// they first meet under the file-I/O deadline.
static long long ranks_max(void *ctx, long long v) {
    MultiGpu *mg = ((CheckpointCtx *)ctx)->m->mg;
    mg_barrier(mg, IO_BARRIER_TIMEOUT_S);
    long long hi = v;
    mg_all_agree(mg, v, NULL, &hi);
    return hi;
}

static CheckpointRanks checkpoint_ranks(CheckpointCtx *c) {
    return (CheckpointRanks){c, c->m->mg->rank, c->m->mg->world, write_state_file, write_model_file, ranks_max};
}

// This step's checkpoint of run `run`, complete on every rank when it returns; then (-keep K) the
// older ones go (llmc/checkpoint.h's checkpoint_sequence).
static void checkpoint_step(Model *m, TrainState *ts, const char *dir, int keep, uint64_t run) {
    CheckpointCtx c = {m, ts, run};
    CheckpointRanks r = checkpoint_ranks(&c);
    checkpoint_sequence(&r, dir, m->step, run, keep, checkpoint_bytes(m, ts));
}

// Loads the fp32 weights of a model file into m (whose config must match).
static void load_model_file(Model *m, const char *path) {
    LlamaConfig file = read_model_config(path);
    const ModelHeaderField *f = model_config_mismatch(&file, &m->cfg);
    char a[32], b[32];
    if (f)
        FATAL("model file '%s' does not match this run: %s is %s in the file, %s here", path, f->name,
              model_field_text(&file, f, a, sizeof(a)), model_field_text(&m->cfg, f, b, sizeof(b)));
    size_t pbytes = m->num_params * sizeof(float);
    m->w_fp8_stale = 1;
    if (m->mg->world == 1 && m->master) { // straight into the fp32 master weights
        Section ms[] = {{m->master, pbytes, 1}};
        // the config was compared above; any step loads
        version2_notice(path, read_sections(path, MODEL_MAGIC, NULL, 0, ms, 1, NULL), mg_is_main(m->mg));
        init_from_master(m->params_memory, m->master, m->num_params, 0);
        cudaCheck(cudaDeviceSynchronize());
        return;
    }
    // several GPUs or bf16 master weights: a chunk at a time into this rank's shard of the fp32 master (if
    // any) and the bf16 weights, so a rank holds one chunk of the file in host memory, not the whole model
    WeightSink ws = {m, (float *)cudaMallocCheck(CKPT_CHUNK, "weight upload staging")};
    Section ms[] = {{NULL, pbytes, 0, weight_sink, &ws}};
    version2_notice(path, read_sections(path, MODEL_MAGIC, NULL, 0, ms, 1, NULL), mg_is_main(m->mg));
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(ws.staging));
}

// The state of a checkpoint written by another number of GPUs (h0: its rank 0's state file's header,
// which holds that number and its gradient accumulation), loaded into this rank. The total batch must
// stay the same (reshard_batch_problem: else refused, naming both GPU counts). This rank's shard of
// the AdamW moments is re-sliced from the old ranks' files (llmc/reshard.h), reading only the byte
// ranges it overlaps, a chunk at a time; the rest of the state is the same on every rank (the fp8
// state, the grains, the sampling rng, the data record) and comes from rank 0's file. Every old file's
// header must hold the checkpoint's world, grad accumulation and its rank, as a same-world resume's
// must hold this run's (state_expect).
static void load_resharded(Model *m, TrainState *ts, const char *dir, int step, const int h0[256]) {
    int N = h0[12], M = ts->world;
    char why[1024], model_path[1024];
    if (h0[9] == m->opt.B && h0[10] == m->opt.T && // another B or T: the header check below names it
        reshard_batch_problem(m->opt.B, m->opt.T, N, h0[11], M, ts->grad_accum, why, sizeof(why)))
        FATAL("-y 1: the checkpoint of step %d in '%s' cannot continue on %d GPU%s: %s", step, dir, M, M == 1 ? "" : "s", why);
    if (mg_is_main(m->mg))
        printf("-y 1: the checkpoint was written by %d GPU%s: its AdamW moments re-sliced for %d (grad accum %d, was %d)\n", N,
               N == 1 ? "" : "s", M, ts->grad_accum, h0[11]);
    TrainState was = *ts;
    was.world = N;
    was.grad_accum = h0[11];
    size_t elem = moments_size(m) / m->zero.shard;
    ReshardPlan plan = reshard_plan(&m->cfg, m->param_sizes, N, M, ts->rank);
    Section st[NUM_STATE_SECTIONS];
    state_sections(m, ts, st); // where this run keeps each section; an old file's moments (the first two) are its shard's
    st[0].bytes = st[1].bytes = plan.old_shard * elem;
    FILE **files = (FILE **)mallocCheck(N * sizeof(FILE *));
    char *paths = (char *)mallocCheck((size_t)N * 1024);
    const char **names = (const char **)mallocCheck(N * sizeof(char *));
    HeaderExpect ex[NUM_STATE_FIELDS];
    int h[256];
    for (int i = 0; i < N; i++) {
        names[i] = paths + (size_t)i * 1024;
        checkpoint_paths(dir, step, i, model_path, paths + (size_t)i * 1024);
        was.rank = i;
        files[i] = open_sections(names[i], STATE_MAGIC, ex, state_expect(m, &was, ex), st, NUM_STATE_SECTIONS, h);
    }
    ReshardFiles rf = {files, names};
    char *buf = (char *)mallocCheck(CKPT_CHUNK);
    size_t chunk = CKPT_CHUNK / elem;
    uint64_t at = 256 * sizeof(int); // where section s starts in every old file
    for (int s = 0; s < NUM_STATE_SECTIONS; at += st[s].bytes, s++) {
        for (size_t first = 0; s < 2 && first < plan.new_shard; first += chunk) { // m and v
            size_t n = plan.new_shard - first < chunk ? plan.new_shard - first : chunk;
            char *dst = st[s].on_device ? buf : (char *)st[s].ptr + first * elem;
            reshard_fill(&plan, elem, at, first, n, dst, reshard_read_files, &rf);
            if (st[s].on_device) cudaCheck(cudaMemcpy((char *)st[s].ptr + first * elem, buf, n * elem, cudaMemcpyHostToDevice));
        }
        for (size_t off = 0; s >= 2 && off < st[s].bytes; off += CKPT_CHUNK) { // the rest: rank 0's
            size_t n = st[s].bytes - off < CKPT_CHUNK ? st[s].bytes - off : CKPT_CHUNK;
            char *dst = st[s].on_device ? buf : (char *)st[s].ptr + off;
            reshard_read_files(&rf, 0, at + off, dst, n);
            if (st[s].on_device) cudaCheck(cudaMemcpy((char *)st[s].ptr + off, buf, n, cudaMemcpyHostToDevice));
        }
    }
    for (int i = 0; i < N; i++) fcloseCheck(files[i]);
    free(buf); free(files); free(paths); free(names);
    reshard_plan_free(&plan);
    state_read_back(m, ts, h0);
}

// The number of GPUs that wrote the state file at path (its header's word 12; h: the header), or 0
// where it is no state file (read_sections then says what is wrong with it). checkpoint_pick has
// verified the file's checksum, header included.
static int state_file_world(const char *path, int h[256]) {
    read_header(path, h);
    return h[0] == STATE_MAGIC ? h[12] : 0;
}

// -y 1: a checkpoint of this run's number of GPUs reads this rank's state file; one of another number
// is re-sliced (load_resharded). Returns the rank whose state file gave the data record: this one's,
// or rank 0's.
static int load_checkpoint(Model *m, TrainState *ts, const char *dir, int step) {
    char model_path[1024], state_path[1024], first_path[1024];
    checkpoint_paths(dir, step, ts->rank, model_path, state_path);
    load_model_file(m, model_path);
    m->step = step;
    int h[256];
    checkpoint_paths(dir, step, 0, model_path, first_path);
    int world = state_file_world(first_path, h), from = ts->rank;
    if (world > 0 && world != ts->world) {
        data_state_sized_from(ts, first_path);
        load_resharded(m, ts, dir, step, h);
        linears_resumed(&m->linears, first_path);
        from = 0;
    } else {
        HeaderExpect ex[NUM_STATE_FIELDS];
        int nex = state_expect(m, ts, ex);
        Section st[NUM_STATE_SECTIONS];
        data_state_sized_from(ts, state_path);
        state_sections(m, ts, st);
        version2_notice(state_path, read_sections(state_path, STATE_MAGIC, ex, nex, st, NUM_STATE_SECTIONS, h), mg_is_main(m->mg));
        state_read_back(m, ts, h);
        linears_resumed(&m->linears, state_path);
    }
    if (m->fp8.on) fp8_state_loaded(&m->fp8_state);
    return from;
}

// ----------------------------------------------------------------------------------------------
// fp8 log: every linear's newest amax and scale of X, W and dY, and the fractions of the last step's
// cast values that underflowed and saturated, one line per linear.

static void write_fp8_log(Model *m, int grad_accum, FILE *f) {
    Fp8StateLayout lay = m->fp8_state.layout;
    size_t nc = (size_t)FP8_COUNTS * lay.num_tensors;
    float *h = (float *)mallocCheck(lay.total * sizeof(float));
    unsigned long long *counts = (unsigned long long *)mallocCheck(nc * sizeof(unsigned long long));
    cudaCheck(cudaMemcpy(h, m->fp8_state.buffer, lay.total * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(counts, m->fp8_state.counts + nc, nc * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    for (int l = 0; l < m->cfg.L; l++) {
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? m->fp8.lm_head : 0); lin++) {
            fprintf(f, "s:%d layer:%d linear:%s", m->step, l, LINEAR_NAMES[lin]);
            for (int k = 0; k < FP8_KINDS; k++) {
                int t = fp8_tensor(&m->cfg, l, lin, k);
                const char *name = FP8_KIND_NAMES[k];
                double cast = linear_values_cast(&m->linears, l, lin, k, grad_accum);
                double under = cast > 0.0 ? counts[FP8_COUNTS * t + FP8_UNDERFLOWS] / cast : 0.0; // a bf16 linear casts nothing
                double sat = cast > 0.0 ? counts[FP8_COUNTS * t + FP8_SATURATIONS] / cast : 0.0;
                fprintf(f, " %s_amax:%.6e %s_scale:%.6e %s_under:%.6e %s_sat:%.6e", name, h[lay.amax_history + (size_t)t * lay.history_len],
                        name, h[lay.scale + t], name, under, name, sat);
            }
            int grain = linear_grain(&m->linears, l, lin);
            fprintf(f, grain == FP8_GRAIN_TENSOR ? "\n" : " grain:%s\n", FP8_GRAIN_NAMES[grain]);
        }
    }
    fflush(f);
    free(h);
    free(counts);
}

// ----------------------------------------------------------------------------------------------
// HellaSwag (llmc/hellaswag.h), bits per byte (llmc/bpb.h) and metrics.jsonl: an accuracy and a
// loss that does not depend on the vocabulary beside the val loss, and every number in a file a
// user's tools read.

typedef struct { float acc, acc_norm; int items; } HellaSwagScore;

// acc and acc_norm over hs's items, shared out to the ranks in contiguous ranges (every rank must
// call it: the sums across ranks are collectives). The rows go through the ordinary forward, B at a
// time, so an item's 4 rows may straddle two batches. Records no amax, as evaluate(). preds, if not
// NULL, gets every item's predictions (hellaswag_score's), on every rank.
static HellaSwagScore hellaswag_evaluate(Model *m, const HellaSwag *hs, float *host_losses, float *preds,
                                         cudaStream_t stream) {
    int B = m->opt.B, T = m->opt.T, rank = m->mg->rank, world = m->mg->world;
    size_t N = (size_t)B * T;
    int item0, item1;
    hellaswag_rank_items(hs->num_items, rank, world, &item0, &item1);
    int row0 = HELLASWAG_ENDINGS * item0, row1 = HELLASWAG_ENDINGS * item1;
    int *inputs = (int *)mallocCheck(N * sizeof(int)), *targets = (int *)mallocCheck(N * sizeof(int));
    int *first = (int *)mallocCheck(B * sizeof(int)), *count = (int *)mallocCheck(B * sizeof(int));
    double *logprob = (double *)mallocCheck((size_t)(row1 - row0 + 1) * sizeof(double));
    for (int r = row0; r < row1; r += B) {
        hellaswag_batch(hs, r, row1, B, T, inputs, targets, first, count);
        cudaCheck(cudaMemcpyAsync(m->acts.inputs, inputs, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(m->acts.targets, targets, N * sizeof(int), cudaMemcpyHostToDevice, stream));
        model_forward(m, eval_pass(m), 1, 0.0f, stream);
        cudaCheck(cudaMemcpyAsync(host_losses, m->acts.losses, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
        mg_wait(m->mg, stream, "a HellaSwag batch");
        for (int b = 0; b < B && r + b < row1; b++)
            logprob[r + b - row0] = hellaswag_logprob(host_losses + (size_t)b * T, first[b], count[b]);
    }
    size_t preds_n = (size_t)hs->num_items * HELLASWAG_PRED_FLOATS;
    if (preds) memset(preds, 0, preds_n * sizeof(float));
    int acc, acc_norm;
    hellaswag_score(hs, item0, item1, logprob, preds, &acc, &acc_norm);
    if (preds && world > 1) { // each rank filled its own items and zeros elsewhere: the sum is all of them
        float *d = (float *)cudaMallocCheck(preds_n * sizeof(float), "HellaSwag predictions");
        cudaCheck(cudaMemcpy(d, preds, preds_n * sizeof(float), cudaMemcpyHostToDevice));
        mg_allreduce_sum_f32(m->mg, d, preds_n, stream);
        mg_join(m->mg, stream);
        cudaCheck(cudaMemcpyAsync(preds, d, preds_n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        mg_wait(m->mg, stream, "the HellaSwag predictions");
        cudaCheck(cudaFree(d));
    }
    HellaSwagScore score = {mg_allreduce_sum_float(m->mg, (float)acc) / hs->num_items,
                            mg_allreduce_sum_float(m->mg, (float)acc_norm) / hs->num_items, hs->num_items};
    free(inputs); free(targets); free(first); free(count); free(logprob);
    return score;
}

// -hs: the file, read for this model's vocabulary and sequence length (every bad file refused here).
static int hellaswag_open(HellaSwag *hs, const Options *o, const LlamaConfig *cfg, int print) {
    if (o->hellaswag_path[0] == '\0') return 0;
    hellaswag_init(hs, o->hellaswag_path, o->hellaswag_items, cfg->V, o->model.T);
    if (hs->vocab_size > cfg->V)
        FATAL("HellaSwag file '%s' was made with a tokenizer of %d tokens, more than the model's vocabulary of %d: make it with the model's tokenizer",
              o->hellaswag_path, hs->vocab_size, cfg->V);
    if (print) printf("HellaSwag: %d items of '%s'\n", hs->num_items, o->hellaswag_path);
    return 1;
}

// HellaSwag at an evaluation, logged by the main rank, and with -hs_preds at the last one.
static void hellaswag_report(Model *m, const HellaSwag *hs, const Options *o, int step, int last, float *host_losses,
                             const RunLog *rl, cudaStream_t stream) {
    size_t preds_bytes = (size_t)hs->num_items * HELLASWAG_PRED_FLOATS * sizeof(float);
    float *preds = last && o->hellaswag_preds[0] ? (float *)mallocCheck(preds_bytes) : NULL;
    HellaSwagScore s = hellaswag_evaluate(m, hs, host_losses, preds, stream);
    if (!mg_is_main(m->mg)) { free(preds); return; }
    run_log_hellaswag(rl, step, s.acc, s.acc_norm, s.items);
    if (preds) {
        hellaswag_write_preds(hs, preds, o->hellaswag_preds);
        printf("HellaSwag predictions written: %s\n", o->hellaswag_preds);
        free(preds);
    }
}

// What bits per byte divides by: the text bytes of the targets evaluate() scores (val positions 0 ..
// positions-1, the same on every rank) and their count (the learned ones where the val data has loss
// masks), the same at every evaluation and at any world size. bytes 0: no bpb.
typedef struct {
    double bytes, tokens;
} ValText;
static ValText val_text(DataLoader *val, int positions, const Tokenizer *tok) {
    size_t N = (size_t)val->B * val->T;
    ValText v = {0.0, 0.0};
    for (int p = 0; p < positions; p++) {
        dataloader_read_position(val, p);
        v.bytes += target_text_bytes(tok, val->inputs, val->targets, N);
        for (size_t i = 0; i < N; i++) v.tokens += val->targets[i] >= 0; // every one without masks
    }
    return v;
}

// bpb of a mean val loss (nats per scored target); 0 without bytes.
static double bits_per_byte(float val_loss, ValText v) {
    return v.bytes > 0.0 ? val_loss * v.tokens / (M_LN2 * v.bytes) : 0.0;
}

// A step's fp8 health from `counts` (the step's fp8 health counts, every rank's summed, on the host):
// every value cast is counted once (fp8_values_cast), and the tensors named as fp8.log names them.
static Fp8Health fp8_health(const Model *m, const unsigned long long *counts, int grad_accum) {
    double cast = 0.0, under = 0.0, sat = 0.0, worst = -1.0;
    Fp8Health h;
    h.worst_tensor[0] = '\0';
    for (int l = 0; l < m->cfg.L; l++) {
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? m->fp8.lm_head : 0); lin++) {
            for (int k = 0; k < FP8_KINDS; k++) {
                int t = fp8_tensor(&m->cfg, l, lin, k);
                double n = linear_values_cast(&m->linears, l, lin, k, grad_accum);
                double u = (double)counts[FP8_COUNTS * t + FP8_UNDERFLOWS];
                if (n == 0.0) continue; // a linear fallen back to bf16 casts nothing
                cast += n;
                under += u;
                sat += (double)counts[FP8_COUNTS * t + FP8_SATURATIONS];
                if (u / n > worst) {
                    worst = u / n;
                    snprintf(h.worst_tensor, sizeof(h.worst_tensor), "layer %d %s %s",
                             lin == LIN_LM_HEAD ? m->cfg.L : l, LINEAR_NAMES[lin], FP8_KIND_NAMES[k]);
                }
            }
        }
    }
    h.underflow = under / cast;
    h.saturation = sat / cast;
    h.worst_underflow = worst;
    return h;
}

// The last step's fp8 health, its counts copied from the GPU, into *h; NULL in bf16.
static const Fp8Health *fp8_step_health(Model *m, int grad_accum, Fp8Health *h) {
    if (!m->fp8.on) return NULL;
    size_t nc = (size_t)FP8_COUNTS * m->fp8_state.layout.num_tensors;
    unsigned long long *counts = (unsigned long long *)mallocCheck(nc * sizeof(unsigned long long));
    cudaCheck(cudaMemcpy(counts, m->fp8_state.counts + nc, nc * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    *h = fp8_health(m, counts, grad_accum);
    free(counts);
    return h;
}

// The linears the fallback switched after `step`, each an event of the run log.
static void fp8_report_switches(const Model *m, int step, const RunLog *rl) {
    for (int k = 0; k < m->linears.num_switched; k++) {
        const Fp8Switch *w = &m->linears.switched[k];
        run_log_fallback(rl, step, w->lin == LIN_LM_HEAD ? m->cfg.L : w->l, LINEAR_NAMES[w->lin],
                         FP8_GRAIN_NAMES[m->opt.fp8_fallback], FP8_KIND_NAMES[w->kind], w->lost,
                         m->opt.fp8_fallback_millionths / 1e4, m->opt.fp8_fallback_patience);
    }
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// The preset a run without -init_from builds: -e's, else the default.
static const char *run_preset(const Options *o) { return o->preset[0] ? o->preset : DEFAULT_PRESET; }

// The model's shape: from -init_from's file, or from the preset (-e, run_preset) with the
// vocabulary of the decode table and the shape flags' overrides. A shape given twice (by the file
// and a flag) is refused, not ignored; so is a decode table of another vocabulary than the model's.
static LlamaConfig run_model_config(const Options *o, const Tokenizer *tok) {
    struct { const char *flag; int set; } shape[] = {{"-e", o->preset[0] != '\0'}, {"-V", o->V != 0}, {"-L", o->L != 0},
        {"-C", o->C != 0}, {"-NH", o->NH != 0}, {"-NKV", o->NKV != 0}, {"-FF", o->FF != 0},
        {"-rope_theta", o->rope_theta > 0.0f}};
    LlamaConfig cfg;
    if (o->init_from[0]) {
        for (size_t i = 0; i < sizeof(shape) / sizeof(shape[0]); i++)
            if (shape[i].set) FATAL("%s conflicts with -init_from '%s': the model's shape comes from the file", shape[i].flag, o->init_from);
        cfg = read_model_config(o->init_from);
    } else {
        const char *preset = run_preset(o);
        if (!config_from_preset(preset, &cfg))
            FATAL("unknown model preset '%s' (tiny, 125m, 1b, llama2-7b, llama3-8b, llama3.1-8b, llama3.2-1b, smollm2-135m)", preset);
        if (tok) cfg.V = tok->vocab_size;
        if (o->V) cfg.V = o->V;
        if (o->L) cfg.L = o->L;
        if (o->C) cfg.C = o->C;
        if (o->NH) cfg.NH = o->NH;
        if (o->NKV) cfg.NKV = o->NKV;
        if (o->FF) cfg.FF = o->FF;
        if (o->rope_theta > 0.0f) cfg.rope_theta = o->rope_theta;
    }
    if (tok && tok->vocab_size != cfg.V)
        FATAL("decode table '%s' has %d tokens but the model's vocabulary is %d: use the table made with the model's tokenizer",
              o->tokenizer_path, tok->vocab_size, cfg.V);
    if (o->model.T > cfg.max_T) cfg.max_T = o->model.T;
    return cfg;
}

// The rules between options, and between the options and the model's shape or the decode table (tok:
// NULL without one; each option's own range its row checked when it was parsed), all refused here,
// before any GPU work; the model's options taken from them. Fills in -d's default and returns the
// gradient accumulation steps in *grad_accum.
static ModelOptions checked_options(Options *o, const LlamaConfig *cfg, const Tokenizer *tok, int *grad_accum) {
    ModelOptions mo = model_options_of(o);
    int fp8 = mo.precision == PREC_FP8;
    if (mo.fp8_lm_head && !fp8) FATAL("-fp8_lm_head 1 needs -precision fp8");
    // AdamW writes an fp8 linear's E4M3 weights into its bf16 parameters: a tied lm_head is the embedding
    if (mo.fp8_lm_head && fp8 && cfg->tied_embeddings) FATAL("-fp8_lm_head 1 cannot be used with tied embeddings");
    if ((long long)mo.B * mo.T > INT_MAX)
        FATAL("-b %d times -t %d is more than 2^31 - 1 tokens per micro-batch", mo.B, mo.T);
    if (fp8 && (cfg->C % 16 || cfg->FF % 16 || (mo.B * mo.T) % 16))
        FATAL("fp8 GEMMs need C, FF and B*T to be multiples of 16 (C=%d FF=%d B*T=%d)", cfg->C, cfg->FF, mo.B * mo.T);
    if (o->fp8_dump && (!fp8 || o->log_dir[0] == '\0')) FATAL("-fp8_dump 1 needs -precision fp8 and a log directory (-o)");
    const char *grain = choice_word(GRAIN_WORDS, mo.fp8_grain);
    const char *fallback = choice_word(FALLBACK_WORDS, mo.fp8_fallback);
    if (mo.fp8_grain != FP8_GRAIN_TENSOR && !fp8) FATAL("-fp8_grain %s needs -precision fp8", grain);
    if (mo.fp8_fallback && !fp8) FATAL("-fp8_fallback %s needs -precision fp8", fallback);
    if (mo.fp8_fallback && mo.fp8_grain != FP8_GRAIN_TENSOR)
        FATAL("-fp8_fallback %s moves per-tensor linears, and -fp8_grain %s leaves none: use one of them", fallback, grain);
    Options d = default_options(); // the fallback's settings, given without it, would do nothing
    if (!mo.fp8_fallback && o->fp8_fallback_threshold != d.fp8_fallback_threshold)
        FATAL("-fp8_fallback_threshold %g needs -fp8_fallback block, bf16 or row", o->fp8_fallback_threshold);
    if (!mo.fp8_fallback && o->model.fp8_fallback_patience != d.model.fp8_fallback_patience)
        FATAL("-fp8_fallback_patience %d needs -fp8_fallback block, bf16 or row", o->model.fp8_fallback_patience);
    if (o->resume && o->log_dir[0] == '\0') FATAL("-y 1 needs a log directory (-o) to resume from");
    if (o->hellaswag_preds[0] && o->hellaswag_path[0] == '\0') FATAL("-hs_preds '%s' needs a HellaSwag file (-hs)", o->hellaswag_preds);
    // the total batch must split over the ranks: refused here, before -ngpu starts any
    int planned_world = mg_planned_world(o->ngpu);
    long long tokens_per_micro = (long long)mo.B * mo.T * planned_world;
    if (o->total_batch == 0) o->total_batch = (int)tokens_per_micro;
    if (o->total_batch <= 0 || o->total_batch % tokens_per_micro != 0)
        FATAL("-d %d (total batch tokens) must be a multiple of B*T*ngpu = %d*%d*%d = %lld: it does not split over %d GPU%s%s", o->total_batch,
              mo.B, mo.T, planned_world, tokens_per_micro, planned_world, planned_world == 1 ? "" : "s",
              o->resume ? " (-y 1 keeps a checkpoint's total batch: resume it on a number of GPUs that divides its micro-batches per step)" : "");
    *grad_accum = (int)(o->total_batch / tokens_per_micro);
    // a guessed document-start id would silently mask nothing
    if (mo.doc_mask && tok == NULL)
        FATAL("-doc_mask 1 needs the decode table's document-start id: no decode table at -tok '%s'", o->tokenizer_path);
    if (mo.doc_mask && (tok->doc_start_id < 0 || tok->doc_start_id >= cfg->V))
        FATAL("-doc_mask 1: the document-start id %d of decode table '%s' is outside the vocabulary [0, %d)", tok->doc_start_id,
              o->tokenizer_path, cfg->V);
    if (mo.doc_mask) mo.doc_start_id = tok->doc_start_id;
    return mo;
}

// The model's name as the run's description gives it: the model file, or the preset.
static const char *run_model_name(const Options *o) { return o->init_from[0] ? o->init_from : run_preset(o); }

static const char *batches_word(long long n) { return n == 1 ? "batch" : "batches"; }

// The training and (have_val) val loaders of this rank; returns the val batch positions an
// evaluation covers, all ranks together (the same number at any world size).
static int open_data(const Options *o, const LlamaConfig *cfg, const MultiGpu *mg, DataLoader *train, DataLoader *val) {
    int synthetic = strcmp(o->train_pattern, "synthetic") == 0, have_val = o->val_pattern[0] != '\0'; // -j '': no validation
    // -x 0 draws no training batch: its -i (the default's shards too) is neither read nor checked
    if (synthetic || o->max_steps == 0)
        dataloader_init_synthetic(train, o->model.B, o->model.T, mg->rank, mg->world, cfg->V, (uint64_t)o->seed);
    else
        dataloader_init(train, o->train_pattern, o->model.B, o->model.T, mg->rank, mg->world, o->shuffle,
                        (uint64_t)o->seed, cfg->V);
    if (synthetic) {
        if (have_val) dataloader_init_synthetic(val, o->model.B, o->model.T, 0, 1, cfg->V, (uint64_t)o->seed + 1);
    } else {
        if (have_val) dataloader_init_eval(val, o->val_pattern, o->model.B, o->model.T, cfg->V, mg_is_main(mg));
        Tokenizer tok; // the decode table's fingerprint, for the shards that record their tokenizer
        int have_tok = tokenizer_init_flag(&tok, o->tokenizer_path, default_options().tokenizer_path);
        // its one warning from the main rank, unless -ngpu's launcher gave it checking the inputs
        dataloader_check_run(train, have_val ? val : NULL, have_tok ? o->tokenizer_path : NULL,
                             have_tok ? tokenizer_fingerprint(&tok, o->tokenizer_path) : 0, cfg->V,
                             mg_is_main(mg) && mg->launch != MG_LAUNCH_FORK);
        if (have_tok) tokenizer_free(&tok);
    }
    if (!have_val) return 0;
    int64_t held = dataloader_positions(val);
    if (o->val_batches > held) {
        // more would read the val data twice: the mean would not change, only take longer
        if (mg_is_main(mg)) printf("val data '%s' holds %lld %s of %d x %d tokens: evaluating on %s, not %d\n", o->val_pattern,
                                   (long long)held, batches_word(held), o->model.B, o->model.T,
                                   held == 1 ? "it" : "those", o->val_batches);
        return (int)held;
    }
    return o->val_batches;
}

// Everything a run reads or writes that can be checked without a GPU, checked before any GPU work, so
// a job that waited for its allocation does not die on a typo then: the data (every shard's header,
// the mixture spec: the loaders opened as rank 0 of the planned GPUs, left open in train and val for
// main to keep or reopen as its rank), the HellaSwag file (left open in hs; returns whether there is
// one), -init_from's checksum, -hs_preds' folder and -o (made if missing unless check_only).
typedef struct { int val_batches, have_hs; ValText vt; } CheckedInputs;
static CheckedInputs check_inputs(const Options *o, const LlamaConfig *cfg, const Tokenizer *tok, int planned_world,
                                  int check_only, DataLoader *train, DataLoader *val, HellaSwag *hs) {
    MultiGpu rank0;
    memset(&rank0, 0, sizeof(rank0));
    rank0.world = planned_world;
    CheckedInputs in;
    in.val_batches = open_data(o, cfg, &rank0, train, val);
    in.have_hs = hellaswag_open(hs, o, cfg, 1);
    in.vt = in.val_batches > 0 && tok ? val_text(val, in.val_batches, tok) : (ValText){0.0, 0.0};
    if (o->init_from[0]) check_model_file(o->init_from);
    if (o->hellaswag_preds[0]) { // written at the end of the run: its folder must take it
        char dir[512];
        snprintf(dir, sizeof(dir), "%s", o->hellaswag_preds);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        if (access(slash ? (dir[0] ? dir : "/") : ".", W_OK) != 0)
            FATAL("-hs_preds '%s': cannot write in its folder: %s", o->hellaswag_preds, strerror(errno));
    }
    if (o->log_dir[0] && o->max_steps != 0) run_log_dir_check(o->log_dir, !check_only);
    return in;
}

// -check 1: what the run will be, as far as it is known without a GPU.
static void print_plan(const Options *o, const LlamaConfig *cfg, const ModelOptions *mo, int world, int grad_accum, const DataLoader *train) {
    size_t sizes[NUM_PARAM_TENSORS], params = param_sizes(cfg, sizes);
    printf("plan: model %s: V %d L %d C %d NH %d NKV %d FF %d%s | %.1fM params | %s%s\n", run_model_name(o), cfg->V, cfg->L, cfg->C, cfg->NH,
           cfg->NKV, cfg->FF, cfg->tied_embeddings ? " tied" : "", params / 1e6,
           choice_word(PRECISION_WORDS, mo->precision),
           mo->precision == PREC_FP8 ? (mo->fp8_current ? " (current scaling)" : " (delayed scaling)") : "");
    long long steps = o->max_steps >= 0 ? o->max_steps : dataloader_num_tokens(train) / o->total_batch;
    printf("plan: %d GPU%s | B %d T %d | %d tokens per step (grad accum %d) | %lld steps = %.3g tokens%s\n", world, world > 1 ? "s" : "",
           mo->B, mo->T, o->total_batch, grad_accum, steps, (double)steps * o->total_batch,
           o->max_steps < 0 ? " (-x -1: one epoch)" : "");
    int nsets = o->max_steps == 0 ? 0 : train->num_sets ? train->num_sets : 1;
    if (o->max_steps == 0) printf("plan: train data: none read (-x 0 evaluates only)\n");
    double wsum = 0.0;
    for (int k = 0; k < train->num_sets; k++) wsum += train->weights[k];
    for (int k = 0; k < nsets; k++) {
        const DataLoader *d = train->num_sets ? &train->sets[k] : train;
        double share = train->num_sets ? train->weights[k] / wsum : 1.0; // of the batches drawn
        char pass[64] = "never drawn (weight 0)";
        if (share > 0) snprintf(pass, sizeof(pass), "one pass = %.0f steps", d->batches_per_epoch / share / grad_accum);
        char weight[48] = "";
        if (train->num_sets) snprintf(weight, sizeof(weight), " (weight %g: %.1f%% of the batches)", train->weights[k], 100.0 * share);
        printf("plan: train data '%s'%s: %d shard%s, %lld tokens: %s\n", train->num_sets ? train->set_patterns[k] : o->train_pattern,
               weight, d->num_shards, d->num_shards == 1 ? "" : "s", (long long)d->num_tokens, pass);
    }
    printf("plan: device memory per GPU: %.2f GiB allocated up front (the CUDA context and cuBLAS/cuDNN workspaces come on top)\n",
           model_memory_plan(cfg, mo, world) / 1073741824.0);
    char fit[2048];
    plan_80gb_line(model_memory_plan, fit, sizeof(fit), cfg, mo, world, o->total_batch);
    printf("%s\n", fit);
    if (mo->adam_offload) { // this host's: the run's may differ
        size_t need = moments_host_plan(cfg, mo, world), avail = host_memory_available();
        int here = mg_planned_local_world(o->ngpu);
        printf("plan: host memory per GPU: %.2f GiB pinned for AdamW's moments (-adam_offload 1); %.2f GiB available here\n",
               need / 1073741824.0, avail / 1073741824.0);
        if (host_memory_refusal(need, here, avail, fit, sizeof(fit))) printf("plan: on this host the run is refused: %s\n", fit);
    }
    if (o->log_dir[0] == '\0' || o->max_steps == 0) { printf("plan: no checkpoints (%s)\n", o->max_steps == 0 ? "-x 0" : "-o ''"); return; }
    checkpoint_dir_plan(o->log_dir, o->resume, o->overwrite, o->init_from[0] != '\0');
    ZeroLayout z = zero_layout(cfg, sizes, 0, world);
    double model_gb = (1024.0 + params * 4.0) / 1e9;
    double state_gb = (1024.0 + 2.0 * moment_bytes(z.shard, mo->moments_bf16) +
                       (mo->precision == PREC_FP8 ? fp8_state_layout(fp8_num_tensors(cfg, mo->fp8_lm_head), mo->fp8_history).total * 4.0 : 0.0)) / 1e9;
    zero_layout_free(&z);
    long long count = o->ckpt_every > 0 ? steps / o->ckpt_every + (steps % o->ckpt_every != 0) : 1;
    printf("plan: checkpoints in '%s': %lld (every %d steps and the last), each %.2f GB (model file %.2f GB + %d state file%s of %.2f GB)",
           o->log_dir, count, o->ckpt_every > 0 ? o->ckpt_every : (int)steps, model_gb + world * state_gb, model_gb, world, world > 1 ? "s" : "", state_gb);
    if (o->keep > 0) printf("; -keep %d: room for %d of them at once (the newest is written before the oldest goes)", o->keep, o->keep + 1);
    struct statvfs v;
    struct stat st;
    if (statvfs(stat(o->log_dir, &st) == 0 ? o->log_dir : ".", &v) == 0) printf("; %.2f GB free there now", (double)v.f_bavail * v.f_frsize / 1e9);
    printf("\n");
}

// What the main loop does after optimizer step `step` (0-based) of a run of o->max_steps: the fp8
// log (fp8_log: it is open), the val loss (have_val: there are val batches), a sample and a
// checkpoint (have_dir) at their intervals and after the last step, a checkpoint and the stop when
// the ranks agreed on a stop signal (stop: its number, or 0). A step whose loss or gradient was not
// finite (finite 0: its update was skipped, so the weights are the last good step's) does the same:
// the run's end and a periodic checkpoint do not wait for a good step. Five such steps in a row
// end the run (bad_steps counts them).
enum { AFTER_FP8_LOG = 1, AFTER_VAL = 2, AFTER_SAMPLE = 4, AFTER_CHECKPOINT = 8, AFTER_STOP = 16 };
static int after_step(const Options *o, int step, int finite, long long stop, int fp8_log, int have_val, int have_dir, int *bad_steps) {
    if (finite) *bad_steps = 0;
    else if (++*bad_steps >= 5) FATAL("5 consecutive steps with a non-finite loss or gradient: stopping (last good checkpoint kept)");
    int done = step + 1, last = done == o->max_steps, work = 0;
    if (fp8_log && (done % o->fp8_log == 0 || last)) work |= AFTER_FP8_LOG;
    if (have_val && ((o->val_every > 0 && done % o->val_every == 0) || last)) work |= AFTER_VAL;
    if (o->sample_every > 0 && o->gen_tokens > 0 && (done % o->sample_every == 0 || last)) work |= AFTER_SAMPLE;
    if (have_dir && ((o->ckpt_every > 0 && done % o->ckpt_every == 0) || last || stop)) work |= AFTER_CHECKPOINT;
    if (stop && !last) work |= AFTER_STOP;
    return work;
}

// After a checkpoint no stop asked for: a stop signal that came while it was written (stop, agreed by
// the ranks as after a step) ends the run there, with no second checkpoint: the one just written holds
// the step. AFTER_STOP if so (never after the last step: that ends the run anyway), else 0.
static int stop_after_checkpoint(int work, long long stop, int done, int max_steps) {
    return (work & AFTER_CHECKPOINT) && !(work & AFTER_STOP) && stop && done < max_steps ? AFTER_STOP : 0;
}

// The line a stop by signal `sig` after `done` of max_steps steps prints (print: the main rank), and
// the process's exit status: 0 when a checkpoint was written (have_dir; it resumes from the one of
// step ckpt_step), else 128 + the signal, as a shell reports a process the signal ended: nothing was
// saved, so the stop is no success.
static int stop_report(int sig, int done, int max_steps, const char *log_dir, int have_dir, int ckpt_step, int print) {
    char model[1100];
    checkpoint_path(model, sizeof(model), log_dir, CKPT_MODEL, ckpt_step, 0);
    if (print && have_dir)
        printf("stopped by %s after step %d of %d. To continue, run the same command with -y 1 (resumes from %s)\n",
               stop_signal_name(sig), done, max_steps, model);
    else if (print)
        printf("stopped by %s after step %d of %d: no checkpoint written (no log directory, -o '')\n", stop_signal_name(sig), done, max_steps);
    return have_dir ? 0 : 128 + sig;
}

// Before evaluating or sampling a model that no step of this process has trained (-x 0): the E4M3
// weights were never made (a training step makes them), and at step 0 no scale has been set yet (a
// resumed checkpoint brings its scales). Casts the weights and, at step 0 with delayed scaling, sets
// every X scale as the first training step would: live, from a forward over `tokens` (B*T ids: the
// first val batch, or the sample's prompt). Under -fp8_recipe current every cast scales live anyway.
static void fp8_ready_for_eval(Model *m, const int *tokens, cudaStream_t stream) {
    if (!m->fp8.on) return;
    fp8_cast_weights(m, stream);
    if (m->step > 0 || m->fp8.live_always) return;
    cudaCheck(cudaMemcpyAsync(m->acts.inputs, tokens, (size_t)m->opt.B * m->opt.T * sizeof(int), cudaMemcpyHostToDevice, stream));
    model_forward(m, train_pass(m, 0), 0, 0.0f, stream); // as the first step's first forward: live, recorded
    mg_wait(m->mg, stream, "the fp8 scales for evaluation");
}

// -x 0: the val loss of the model as it is (e.g. before fine-tuning it; with its bpb when the val bytes
// are known), HellaSwag (hs, if not NULL) and a sample if asked. The fp8 scales of step 0 come from the first val batch, else the first
// HellaSwag rows, else the sample's prompt (the document-start token, then zeros).
static void evaluate_only(Model *m, DataLoader *val, int have_val, int val_batches, ValText vt, const HellaSwag *hs,
                          const Options *o, Tokenizer *tok, int have_tok, int bos, uint64_t *rng, float *host_losses,
                          const RunLog *rl, cudaStream_t stream) {
    int N = o->model.B * o->model.T;
    if (have_val) {
        dataloader_read_position(val, 0); // on every rank: the MAX over the ranks is one GPU's amax
        fp8_ready_for_eval(m, val->inputs, stream);
    } else {
        int *tokens = (int *)callocCheck(N, sizeof(int));
        if (hs) {
            int *targets = (int *)mallocCheck(N * sizeof(int)), *first = (int *)mallocCheck(o->model.B * sizeof(int));
            int *count = (int *)mallocCheck(o->model.B * sizeof(int));
            hellaswag_batch(hs, 0, HELLASWAG_ENDINGS * hs->num_items, o->model.B, o->model.T, tokens, targets, first,
                            count);
            free(targets); free(first); free(count);
        } else {
            tokens[0] = bos;
        }
        fp8_ready_for_eval(m, tokens, stream);
        free(tokens);
    }
    if (val_batches > 0) {
        float vl = evaluate(m, val, val_batches, host_losses, stream);
        char over[96];
        snprintf(over, sizeof(over), " over %d %s of %d x %d tokens", val_batches, batches_word(val_batches), o->model.B,
                 o->model.T);
        run_log_val(rl, 0, vl, bits_per_byte(vl, vt), over);
    } else if (rl->main_rank) {
        printf("-x 0: no val data (-j) to evaluate\n");
    }
    if (hs) hellaswag_report(m, hs, o, 0, 1, host_losses, rl, stream);
    if (o->sample_every > 0 && o->gen_tokens > 0) sample_text(m, tok, have_tok, bos, o->gen_tokens, rng, rl, stream);
}

#ifndef TESTING
// -fp8_dump: this rank's whole fp8 state buffer (amax slots, histories, scales, scale_invs) as raw
// floats, so a test can check that every rank holds the same bits.
static void dump_fp8_state(Model *m, const char *dir, int rank) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/fp8_state_rank%d.bin", dir, rank);
    size_t n = m->fp8_state.layout.total;
    float *h = (float *)mallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(h, m->fp8_state.buffer, n * sizeof(float), cudaMemcpyDeviceToHost));
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(h, sizeof(float), n, f);
    fcloseCheck(f);
    free(h);
}

// The model's starting point: with -y 1 the newest checkpoint of run `run` that verifies, else
// -init_from's weights, else the random init. Returns the step resumed from, or -1.
static int start_model(Model *m, TrainState *ts, DataLoader *train, const Options *o, MultiGpu *mg, uint64_t run) {
    int resumed_from = -1;
    if (o->resume) { // -x 0 too: it evaluates the checkpoint (checked_options refused -y 1 without -o)
        CheckpointCtx c = {m, ts, run};
        CheckpointRanks r = checkpoint_ranks(&c);
        resumed_from = checkpoint_pick(&r, o->log_dir, run);
        // a run requeued before its first checkpoint starts again: a fine-tune from its weights, any other
        // from its random init (-x 0 has nothing to evaluate then)
        if (resumed_from < 0 && !o->init_from[0] && (run == 0 || o->max_steps == 0))
            FATAL("-y 1: no complete checkpoint of this run in '%s' (complete: its done_SSSSSSSS marker written last, after every file)", o->log_dir);
        if (resumed_from < 0 && mg_is_main(mg))
            printf("-y 1: run %016llx has no complete checkpoint in '%s' yet: starting it from %s\n", (unsigned long long)run, o->log_dir,
                   o->init_from[0] ? "-init_from" : "its random init");
        if (resumed_from >= 0 && mg_is_main(mg)) printf("-y 1: resuming from step %d of run %016llx\n", resumed_from, (unsigned long long)run);
    }
    if (resumed_from >= 0) {
        int record_rank = load_checkpoint(m, ts, o->log_dir, resumed_from);
        char model_path[1024], state_path[1024];
        checkpoint_paths(o->log_dir, resumed_from, record_rank, model_path, state_path);
        resume_data(train, ts, o, state_path);
    } else if (o->init_from[0]) {
        load_model_file(m, o->init_from);
    } else {
        float *w = (float *)mallocCheck(m->num_params * sizeof(float));
        model_init_weights(m, (uint64_t)o->seed, w);
        model_set_weights(m, w);
        free(w);
    }
    mg_barrier(mg, IO_BARRIER_TIMEOUT_S);
    return resumed_from;
}

// The run's description: on stdout (main rank) and as main.log's header; the fp8 grain and fallback.
static void print_run(const Model *m, const Options *o, const MultiGpu *mg, const cudaDeviceProp *prop, int grad_accum,
                      int resumed_from, int synthetic, const RunLog *rl) {
    if (!rl->main_rank) return;
    const LlamaConfig *cfg = &m->cfg;
    const ModelOptions *mo = &m->opt;
    // a document-masked call runs on cuDNN only given the bias model_init allocated
    const int cudnn = attention_uses_cudnn(mo->B, mo->T, cfg->NH, cfg->NKV, cfg->C / cfg->NH, mo->doc_mask) &&
                      (!mo->doc_mask || m->acts.doc_bias != NULL);
    const char *attention = mo->doc_mask ? (cudnn ? "document-masked cuDNN fused" : "document-masked plain")
                                         : cudnn ? "cuDNN fused" : "plain";
    char *options = options_line(OPTION_SPECS, NUM_OPTIONS, o); // main.log's: -d and -x as filled in
    RunHeader h = {prop->name, MG_LAUNCH_NAMES[mg->launch], mg->world, choice_word(PRECISION_WORDS, mo->precision),
                   m->fp8.on ? (m->fp8.live_always ? "current" : "delayed") : NULL, run_model_name(o), cfg,
                   m->num_params, m->bytes_allocated,
                   mo->B, mo->T, o->total_batch, grad_accum, o->max_steps, o->warmup, resumed_from >= 0, synthetic,
                   o->lr, o->final_lr_frac, o->weight_decay, o->grad_clip,
                   choice_word(MOMENTS_WORDS, mo->moments_bf16), choice_word(MASTER_WORDS, mo->master_bf16), attention,
                   mo->recompute, m->fp8.on ? mo->fp8_weight_cache : -1, mo->adam_offload, options};
    run_log_header(rl, &h);
    free(options);
    if (m->opt.fp8_grain == FP8_GRAIN_BLOCK)
        printf("fp8 grain: every fp8 linear block-scaled (X and dY in 1x128 blocks, W in 128x128)\n");
    if (m->opt.fp8_grain == FP8_GRAIN_ROW)
        printf("fp8 grain: every fp8 linear row-scaled (X, W and dY in E4M3, one power-of-two scale per row along each GEMM's"
               " reduction dimension)\n");
    if (m->opt.fp8_fallback)
        printf("fp8 fallback: a per-tensor linear whose X, W or dY loses more than %g%% of its values in %d steps"
               " in a row moves to %s\n", m->opt.fp8_fallback_millionths / 1e4, m->opt.fp8_fallback_patience,
               FP8_GRAIN_NAMES[m->opt.fp8_fallback]);
    for (int l = 0; m->opt.fp8_fallback && l < cfg->L; l++) // a resumed run's switched linears
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? m->fp8.lm_head : 0); lin++)
            if (linear_grain(&m->linears, l, lin) != FP8_GRAIN_TENSOR)
                printf("fp8 fallback: layer %d %s is %s (switched before the checkpoint)\n", lin == LIN_LM_HEAD ? cfg->L : l,
                       LINEAR_NAMES[lin], FP8_GRAIN_NAMES[linear_grain(&m->linears, l, lin)]);
    if (resumed_from >= 0) printf("resumed from step %d of '%s'\n", resumed_from, o->log_dir);
}

// A run's pieces besides its model, from the command line to the end: what main sets up, and what the
// work after each step (after_update), -x 0 (evaluate_only) and the end of the run (end_run) read.
typedef struct {
    Options o;
    Tokenizer tok;
    int have_tok, bos;          // bos: the first token of a sample
    LlamaConfig cfg;
    ModelOptions mo;
    int grad_accum;
    int start, planned_world;   // how this process starts (mg_start_of) and the GPUs the run plans
    int checked;                // this process checks every input before its GPU start (check_inputs)
    int eval_only, have_dir;    // -x 0; a log directory the run writes into (-x 0 writes nothing)
    int have_val, synthetic;    // val data (-j not ''), the built-in synthetic corpus (-i synthetic)
    uint64_t run_id;
    MultiGpu mg;
    cudaDeviceProp prop;
    DataLoader train, val;
    HellaSwag hs;
    CheckedInputs in;           // the val batches an evaluation covers, whether there is -hs, the val text
    TrainState ts;
    RunLog rl;
    float *host_losses;         // pinned, like the batches: the per-micro-step uploads run asynchronously
    int *host_inputs, *host_targets;
    double flops_per_token, peak; // peak: the bf16 TFLOP/s of all the GPUs together, for MFU
    size_t mem_used;            // device memory in use after the first step
    float *step_ms;             // the timed steps' times (not the first 3: they build GEMM and attention plans)
    int timed, bad_steps, exit_status;
} Run;

// The run the command line asks for, before any GPU work: the options, then the decode table (it
// decides a new model's vocabulary, and some option rules need the shape), the model's shape, the
// options checked against both, and how this process starts.
static void run_config(Run *r, int argc, char **argv) {
    r->o = parse_options(argc, argv);
    r->have_tok = tokenizer_init_flag(&r->tok, r->o.tokenizer_path, default_options().tokenizer_path);
    r->cfg = run_model_config(&r->o, r->have_tok ? &r->tok : NULL);
    const char *bad = config_check(&r->cfg);
    if (bad) FATAL("bad model config: %s", bad);
    r->mo = checked_options(&r->o, &r->cfg, r->have_tok ? &r->tok : NULL, &r->grad_accum);
    r->start = mg_start_of(r->o.ngpu, &r->planned_world);
    r->checked = r->start == MG_START_SINGLE || r->start == MG_START_LAUNCHER;
    r->eval_only = r->o.max_steps == 0;
    r->have_dir = r->o.log_dir[0] != '\0' && !r->eval_only;
    r->have_val = r->o.val_pattern[0] != '\0';
    r->synthetic = strcmp(r->o.train_pattern, "synthetic") == 0;
}

// This process's GPU, or with -ngpu N > 1 the N ranks it starts (it watches them and never returns).
// The stop signals are installed first, before anything starts a thread (CUDA, NCCL, OpenMP), so every
// thread inherits the block; the launcher passes them on instead (llmc/launcher.h). A GPU the run's fp8
// GEMMs cannot run on is refused here, naming the flag.
static void start_gpu(Run *r, char **argv) {
    if (r->start != MG_START_LAUNCHER) stop_signal_install();
    int ndev = 0;
    cudaError_t derr = cudaGetDeviceCount(&ndev);
    if (derr != cudaSuccess || ndev == 0)
        FATAL("no CUDA GPU found (%s): this trainer needs an NVIDIA GPU", cudaGetErrorString(derr));
    multi_gpu_init(&r->mg, argv, r->o.ngpu);
    cudaDeviceProp *prop = &r->prop;
    cudaCheck(cudaGetDeviceProperties(prop, r->mg.local_device));
    g_num_sms = prop->multiProcessorCount;
    if (r->mo.precision == PREC_FP8 && prop->major * 10 + prop->minor < 89)
        FATAL("fp8 GEMMs need compute capability 8.9+ (Ada/Hopper); %s is %d.%d. Use -precision bf16.", prop->name,
              prop->major, prop->minor);
    char flag[32]; // a GPU or cuBLASLt that cannot run a grain's GEMMs refused here, naming the flag that asks for them
    if (fp8_grain_flag(&r->mo, FP8_GRAIN_BLOCK, flag)) matmul_fp8_block_check(flag);
    if (fp8_grain_flag(&r->mo, FP8_GRAIN_ROW, flag)) matmul_fp8_row_check(flag);
}

// This rank's data: what check_inputs opened, where this process checked the inputs (as rank 0 of the
// planned GPUs), else opened now as its own rank; then -x -1's steps, one epoch of the training data.
static void open_run_data(Run *r) {
    if (!r->checked) {
        r->in.val_batches = open_data(&r->o, &r->cfg, &r->mg, &r->train, &r->val);
        r->in.have_hs = hellaswag_open(&r->hs, &r->o, &r->cfg, mg_is_main(&r->mg));
        if (r->have_tok && r->in.val_batches > 0) r->in.vt = val_text(&r->val, r->in.val_batches, &r->tok);
    }
    if (r->o.max_steps < 0) {
        r->o.max_steps = (int)(dataloader_num_tokens(&r->train) / r->o.total_batch);
        if (r->o.max_steps < 1) r->o.max_steps = 1;
    }
}

// The model on this rank's GPU (its weights: start_model), checked to be the same on every rank, the
// GEMMs' and attention's set-up, and the training state a checkpoint records. A run whose planned
// device memory and FIT_HEADROOM are more than its GPU has free is refused first, naming the flags that fit,
// as is one whose offloaded AdamW moments need more pinned host memory than the host has.
static void setup_model(Run *r, Model *m) {
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    char msg[2048];
    if (memory_refusal(model_memory_plan, run_model_name(&r->o), &r->cfg, &r->mo, r->mg.world, r->o.total_batch, free_b,
                       msg, sizeof(msg)) ||
        host_memory_refusal(moments_host_plan(&r->cfg, &r->mo, r->mg.world), r->mg.local_world, host_memory_available(),
                            msg, sizeof(msg)))
        FATAL("%s", msg);
    attention_init(1, r->o.deterministic); // before model_init: -doc_mask 1 allocates cuDNN's bias only if cuDNN runs
    model_init(m, &r->cfg, &r->mo, &r->mg);
    mg_check_agree(&r->mg, (long long)m->num_params, "the number of parameters");
    mg_check_agree(&r->mg, r->grad_accum, "the gradient accumulation steps");
    matmul_init();
    matmul_set_tuning(!r->o.deterministic);
    TrainState *ts = &r->ts;
    memset(ts, 0, sizeof(*ts));
    ts->grad_accum = r->grad_accum; ts->world = r->mg.world; ts->rank = r->mg.rank;
    ts->rng = (uint64_t)r->o.seed * 0x2545F4914F6CDD1Dull + 7;
    data_state_save(ts, &r->train);
    m->loss_masked = r->train.masked;
}

// -o made on every rank that writes into it, and the run's id on every rank. mpirun's main rank starts
// the run as the one GPU did before its GPU start; -ngpu's ranks take the id their launcher wrote (it
// holds the lock), as -x 0 -y 1 takes the directory's. Every rank gets it: the largest of the ranks'
// values, the others' the least.
static void agree_run_id(Run *r) {
    const Options *o = &r->o;
    int main_rank = mg_is_main(&r->mg);
    if (r->have_dir && mkdir(o->log_dir, 0755) != 0 && errno != EEXIST)
        FATAL("cannot create log directory '%s': %s", o->log_dir, strerror(errno));
    if (r->have_dir && main_rank && r->start == MG_START_MPI) {
        checkpoint_lock(o->log_dir);
        r->run_id = checkpoint_dir_start(o->log_dir, o->resume, o->overwrite, o->init_from[0] != '\0');
    } else if (main_rank && (r->start == MG_START_FORK_RANK ? r->have_dir : r->eval_only && o->resume)) {
        checkpoint_run_id_read(o->log_dir, &r->run_id);
    }
    long long agreed_id = main_rank ? (long long)r->run_id : LLONG_MIN;
    mg_all_agree(&r->mg, agreed_id, NULL, &agreed_id);
    r->run_id = (uint64_t)agreed_id;
}

// The work after the update of step `step` (0-based; s: its numbers): its log line and the fallback's
// switches, then what after_step asks for: fp8.log, the val loss, a sample, a checkpoint, the stop; and
// HellaSwag with the val loss. Returns 1 when the run stops here, its exit status in r->exit_status.
static int after_update(Run *r, Model *m, int step, StepResult res, const RunStep *s, cudaStream_t stream) {
    const Options *o = &r->o;
    MultiGpu *mg = &r->mg;
    Fp8Health health; // metrics.jsonl's: only then are the counts copied from the GPU
    run_log_step(&r->rl, s, r->rl.metrics ? fp8_step_health(m, r->grad_accum, &health) : NULL);
    fp8_report_switches(m, step + 1, &r->rl);
    // a stop signal may have reached any one rank (or all, at different steps): they agree on the
    // largest, so all stop after the same step. Loss and norm are reduced over the ranks too:
    // every rank takes the same branches from here on.
    long long stop = g_stop_signal;
    if (mg->world > 1) mg_all_agree(mg, stop, NULL, &stop);
    int work = after_step(o, step, isfinite(res.loss) && !res.skipped, stop, r->rl.fp8 != NULL,
                          r->have_val && r->in.val_batches > 0, r->have_dir, &r->bad_steps);
    if (work & AFTER_FP8_LOG) write_fp8_log(m, r->grad_accum, r->rl.fp8);
    if (work & AFTER_VAL) {
        float vl = evaluate(m, &r->val, r->in.val_batches, r->host_losses, stream);
        run_log_val(&r->rl, step + 1, vl, bits_per_byte(vl, r->in.vt), "");
    }
    if (r->in.have_hs && ((o->val_every > 0 && (step + 1) % o->val_every == 0) || step + 1 == o->max_steps))
        hellaswag_report(m, &r->hs, o, step + 1, step + 1 == o->max_steps, r->host_losses, &r->rl, stream);
    if (work & AFTER_SAMPLE) sample_text(m, &r->tok, r->have_tok, r->bos, o->gen_tokens, &r->ts.rng, &r->rl, stream);
    if (work & AFTER_CHECKPOINT) {
        data_state_save(&r->ts, &r->train);
        checkpoint_step(m, &r->ts, o->log_dir, o->keep, r->run_id);
        if (mg_is_main(mg)) printf("checkpoint written: %s/model_%08d.bin\n", o->log_dir, m->step);
        long long late = g_stop_signal; // a stop that came while the checkpoint was written
        if (mg->world > 1) mg_all_agree(mg, late, NULL, &late);
        if (stop_after_checkpoint(work, late, step + 1, o->max_steps)) { work |= AFTER_STOP; stop = late; }
    }
    if (!(work & AFTER_STOP)) return 0;
    r->exit_status = stop_report((int)stop, step + 1, o->max_steps, o->log_dir, r->have_dir, m->step, mg_is_main(mg));
    return 1;
}

// The end of the run, whether it stopped early or not: the median step, the data mixture's report,
// -fp8_dump, then everything freed.
static void end_run(Run *r, Model *m) {
    const Options *o = &r->o;
    if (r->timed > 0) {
        qsort(r->step_ms, r->timed, sizeof(float), compare_floats);
        float ms = r->step_ms[r->timed / 2];
        run_log_median(&r->rl, ms, r->timed, o->total_batch / (ms / 1000.0),
                       r->flops_per_token * o->total_batch / (ms / 1000.0), r->peak, r->mem_used, r->mg.world);
    }
    if (r->train.num_sets && mg_is_main(&r->mg)) {
        char report[4096];
        dataloader_mixture_report(&r->train, report, sizeof(report));
        run_log_mixture(&r->rl, report);
    }
    if (o->fp8_dump) dump_fp8_state(m, o->log_dir, r->mg.rank);
    free(r->step_ms);
    free(r->ts.data);
    run_log_close(&r->rl);
    cudaCheck(cudaFreeHost(r->host_losses));
    cudaCheck(cudaFreeHost(r->host_inputs));
    cudaCheck(cudaFreeHost(r->host_targets));
    model_free(m);
    matmul_destroy();
    attention_destroy();
    dataloader_free(&r->train);
    if (r->have_val) dataloader_free(&r->val);
    if (r->have_tok) tokenizer_free(&r->tok);
    if (r->in.have_hs) hellaswag_free(&r->hs);
    multi_gpu_free(&r->mg); // also the sign of a clean exit: a rank that leaves without it aborts the communicator
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); // progress lines reach a log file or pipe as they are printed
    Run r;
    memset(&r, 0, sizeof(r));
    run_config(&r, argc, argv);
    // Every input checked before any GPU work, by the one process that starts the run (one GPU, or
    // -ngpu's launcher): its loaders, opened as rank 0, are this process's if it trains. The ranks
    // it starts, and mpirun's (each of which would check alike), open their data after the GPU start.
    if (r.checked || r.o.check_only)
        r.in = check_inputs(&r.o, &r.cfg, r.have_tok ? &r.tok : NULL, r.planned_world, r.o.check_only, &r.train,
                            &r.val, &r.hs);
    if (r.o.check_only) {
        print_plan(&r.o, &r.cfg, &r.mo, r.planned_world, r.grad_accum, &r.train);
        printf("-check 1: every input is good: the run can start\n");
        return 0;
    }
    // The run's identity in its checkpoints, before the GPU start too: the process that writes into -o
    // for the run's life (one GPU, -ngpu's launcher; mpirun's rank 0 after its GPU start) locks it, takes
    // the run id (-y 1: the directory's; else a new one) and removes what killed writers left there.
    if (r.checked && r.have_dir) {
        checkpoint_lock(r.o.log_dir);
        r.run_id = checkpoint_dir_start(r.o.log_dir, r.o.resume, r.o.overwrite, r.o.init_from[0] != '\0');
    }
    start_gpu(&r, argv);
    int main_rank = mg_is_main(&r.mg); // only the main rank prints and logs
    open_run_data(&r);
    Model m;
    setup_model(&r, &m);
    agree_run_id(&r);
    int resumed_from = start_model(&m, &r.ts, &r.train, &r.o, &r.mg, r.run_id);
    r.rl = run_log_open(main_rank, r.have_dir ? r.o.log_dir : NULL, resumed_from >= 0, m.fp8.on && r.o.fp8_log > 0);
    print_run(&m, &r.o, &r.mg, &r.prop, r.grad_accum, resumed_from, r.synthetic, &r.rl);
    if (main_rank && r.train.masked)
        printf("loss masks: the loss is the mean over the step's learned targets (mask byte 1), on every rank\n");
    if (main_rank && r.have_val && r.val.masked)
        printf("loss masks: the val loss (and bpb) is over the val data's learned targets\n");
    r.flops_per_token = model_flops_per_token(&r.cfg, r.o.model.T);
    r.peak = gpu_bf16_peak_tflops(r.prop.name) * r.mg.world;

    const Options *o = &r.o;
    AdamWParams hp = {o->lr, o->beta1, o->beta2, 1e-8f, o->weight_decay, o->grad_clip};
    size_t N = (size_t)o->model.B * o->model.T;
    cudaCheck(cudaMallocHost(&r.host_losses, (size_t)r.grad_accum * N * sizeof(float)));
    cudaCheck(cudaMallocHost(&r.host_inputs, (size_t)r.grad_accum * N * sizeof(int)));
    cudaCheck(cudaMallocHost(&r.host_targets, (size_t)r.grad_accum * N * sizeof(int)));
    StepBuffers step_buffers = {r.host_inputs, r.host_targets, r.host_losses, r.grad_accum};
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    cudaEvent_t ev0, ev1;
    cudaCheck(cudaEventCreate(&ev0));
    cudaCheck(cudaEventCreate(&ev1));
    r.bos = r.have_tok ? r.tok.doc_start_id : 1;
    int start_step = m.step;
    size_t steps_here = o->max_steps > start_step ? o->max_steps - start_step : 1;
    r.step_ms = (float *)mallocCheck(steps_here * sizeof(float));
    if (r.eval_only)
        evaluate_only(&m, &r.val, r.have_val, r.in.val_batches, r.in.vt, r.in.have_hs ? &r.hs : NULL, o, &r.tok,
                      r.have_tok, r.bos, &r.ts.rng, r.host_losses, &r.rl, stream);

    for (int step = m.step; step < o->max_steps; step++) {
        hp.lr = lr_at_step(step, o->max_steps, o->lr, o->warmup, o->final_lr_frac);
        cudaCheck(cudaEventRecord(ev0, stream));
        next_batches(&r.train, r.grad_accum, r.host_inputs, r.host_targets);
        StepResult res = train_step(&m, &step_buffers, &hp, stream);
        cudaCheck(cudaEventRecord(ev1, stream));
        mg_wait(&r.mg, stream, "the training step"); // bounded: the stream may wait on a collective with a dead rank
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, ev0, ev1));
        if (step >= start_step + 3) r.step_ms[r.timed++] = ms; // the first steps build GEMM and attention plans
        if (step == start_step) {
            size_t free_b, total_b;
            cudaCheck(cudaMemGetInfo(&free_b, &total_b));
            r.mem_used = total_b - free_b;
        }
        if (step == start_step && !o->deterministic && main_rank) matmul_print_tuning(stdout);
        double tok_per_s = o->total_batch / (ms / 1000.0);
        RunStep s = {step + 1, o->max_steps, res.loss, res.norm, hp.lr, ms, tok_per_s, r.flops_per_token * tok_per_s,
                     r.peak, r.mem_used, res.skipped};
        if (after_update(&r, &m, step, res, &s, stream)) break;
    }
    end_run(&r, &m);
    return r.exit_status;
}
#endif
