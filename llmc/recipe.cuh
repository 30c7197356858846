/*
The contract of an fp8 linear's scaling recipe (docs/fp8_recipe.md): what every recipe is handed and
the table row of functions it provides. A linear y (N, OUT) = x (N, IN) w^T runs the recipe of its
grain (llmc/fp8_layout.h's FP8_GRAIN_*): llmc/recipe_tensor.cuh (per-tensor, delayed or current
scaling), llmc/recipe_block.cuh (1x128 X and dY, 128x128 W) or llmc/recipe_bf16.cuh (no fp8: a linear
fallen back, and every linear of -precision bf16). llmc/linear.cuh holds the linears and the one
table of recipes (RECIPES), and dispatches; nothing here knows the model.
  LinearOptions  the run's choices the linears read (the trainer fills it from its options)
  LinearShared   what every linear shares: the fp8 state, the activations' fp8 scratch, W^T, the
                 fp32 master, the block scale_invs of the linear being run
  Linear         one linear: shape, fp8 tensors, views of its weights and gradient, its E4M3 W, its
                 own buffers (LinearBuffers, made when it takes its recipe), its recipe
  Recipe         the functions: its buffers, the X and dY cast sites (a producer kernel about to
                 write the tensor: llmc/fp8_state.cuh's Fp8Site protocol) and the casts of an X or
                 dY that exists already, forward, backward, the weight cast, what follows AdamW's
                 per-tensor cast, w2's recompute with -r 1, and the X and dY casts per micro-step
A recipe only queues kernels on the stream it is handed: no allocation, synchronization or device
read (the step is replayed as a CUDA graph), no stream or event of its own.

How to add a recipe (e.g. row-wise scaling as llmc/recipe_row.cuh):
  1. a grain in llmc/fp8_layout.h: FP8_GRAIN_ROW and its FP8_GRAIN_NAMES entry (the checkpoint's byte);
  2. llmc/recipe_row.cuh: its functions and `static const Recipe RECIPE_ROW = {...}` (the other
     recipe files are the examples; NULL where the row allows it);
  3. its include and its row in llmc/linear.cuh's RECIPES, at index FP8_GRAIN_ROW;
  4. its option choice: -fp8_grain row (every fp8 linear from step 0) and/or -fp8_fallback row (the
     grain a per-tensor linear moves to), in train_llama_fp8.cu's option table and model_options_of.
*/
#ifndef LLMC_RECIPE_CUH
#define LLMC_RECIPE_CUH

#include "cuda_common.cuh"  // floatX, fp8e4, fp8e5, Fp8Cast
#include "fp8_fallback.h"   // Fp8FallbackRule
#include "fp8_state.cuh"    // Fp8State, Fp8Pass, Fp8Site

// The run's choices the linears read, fixed for the run.
typedef struct {
    int fp8;        // the block linears are fp8 (-precision fp8); 0: every linear is bf16
    int lm_head;    // the lm_head is an fp8 linear too (-fp8_lm_head 1)
    int N;          // tokens per micro-step (B*T)
    int recompute;  // -r: the backward recomputes SwiGLU, w2's X
    int w_cache;    // every layer's E4M3 W made once per step; 0: one layer's, cast right before each use
    int w_by_adamw; // the cache in the linears' bf16 parameters, written by AdamW (one GPU: the master is whole)
    int world;      // ranks: the values a step casts are every rank's
    int grain;      // -fp8_grain: every fp8 linear's grain from step 0 (FP8_GRAIN_TENSOR: the fallback's start)
    int fallback;   // -fp8_fallback: the grain a per-tensor linear over the threshold moves to; 0: off
    Fp8FallbackRule rule; // -fp8_fallback_threshold (millionths), -fp8_fallback_patience
} LinearOptions;

// The block scale_invs of the block linear being run (one at a time; llmc/recipe_block.cuh).
typedef struct {
    float *x_sinv;              // (fp8_block_vec_count(N, widest IN)) X row-wise, for fprop
    float *x_t_sinv;            // (fp8_block_vec_count(widest IN, N)) X^T where the backward recasts it (wo; w2, -r 1)
    float *dy_sinv, *dy_t_sinv; // (fp8_block_vec_count(N, widest OUT), (widest OUT, N)) dY row-wise and transposed
    float *w_t_grid;            // (widest fp8_block_grid_count(IN, OUT)) W^T's grid, made right before each dgrad
} BlockScratch;

// What every linear shares.
typedef struct {
    LinearOptions o;
    Fp8State *fs;             // scales, amaxes, health counts, the live-scaling staging buffer (fs->live_bf16)
    fp8e4 *x_fp8, *x_fp8_t;   // (N, widest IN) one layer's X row-wise for its fprop, and X^T for its wgrad: the
                              // same memory (the forward uses only the first, the backward only the second)
    fp8e5 *dy_fp8, *dy_fp8_t; // (N, widest OUT) the dY being consumed and its transpose
    fp8e4 *w_fp8_t;           // (widest IN*OUT) one layer's W^T (IN, OUT) for its dgrad, made right before it:
                              // kept for all layers it would cost 1 byte/param (6.5 GB at 7B) to save ~1 ms
    const float *master;      // the fp32 master weights (read with w_by_adamw, where they are whole)
    BlockScratch block;       // where a linear may be block-scaled
} LinearShared;

// The device buffers a linear's recipe needs of its own (its buffer_bytes), in one allocation made
// when the linear takes the recipe; each part 256-byte aligned (cuBLASLt wants 16), NULL where empty.
// Each recipe names its parts (recipe_block.cuh: BLOCK_W_GRID, ...).
enum { LINEAR_PARTS = 4 };
typedef struct {
    void *part[LINEAR_PARTS];
    void *memory;
} LinearBuffers;

typedef struct Recipe Recipe;

typedef struct {
    int l, lin;            // layer (0 for the lm_head) and LIN_* or LIN_LM_HEAD
    int IN, OUT;           // y (N, OUT) = x (N, IN) w^T
    int t_x, t_w, t_dy;    // its fp8 tensors (fp8_tensor); -1 where it is no fp8 linear
    int keeps_x;           // the backward finds X kept in fp8 (qkv's, w13's and the lm_head's norm outputs; w2's
                           // X^T with -r 0), not recast from a bf16 X kept anyway (wo) or recomputed (w2, -r 1)
    const floatX *w;       // (OUT, IN) its bf16 weights in the parameters
    floatX *dw;            // (OUT, IN) its gradient
    size_t w_at;           // w's offset in the flat parameters, and so in the fp32 master with one GPU
    fp8e4 *w_fp8;          // (OUT, IN) its E4M3 W: its layer's in the cache, else the one layer's buffer
    LinearBuffers own;
    const Recipe *recipe;  // its grain's (RECIPES), or recipe_bf16's where it is no fp8 linear
} Linear;

// A recipe: one row of llmc/linear.cuh's RECIPES. x is the linear, s what it shares with the others,
// p the pass's fp8 mode (whether casts record, whether they scale live).
struct Recipe {
    int casts; // X and dY casts per micro-step (fp8_values_cast): per-tensor 1, block 2; 0: none, W neither
    // The bytes of each part of the linear's own buffers; NULL: none
    void (*buffer_bytes)(const Linear *x, const LinearOptions *o, size_t bytes[LINEAR_PARTS]);
    // The site of X (N, IN), whose producer is about to write it: to x_fp8 where the caller keeps it (and
    // w2's X^T to x_t, NULL with -r 1), the bf16 X to `bf16` (NULL where fp8 mode keeps none)
    Fp8Site (*x_site)(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, fp8e4 *x_t, floatX *bf16);
    // The fp8 X from a bf16 X that exists already (wo's: the attention output); NULL: none
    void (*x_existing)(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, const floatX *in,
                       cudaStream_t stream);
    // The site of dY (N, OUT), its bf16 copy to `bf16` (NULL where nothing keeps one)
    Fp8Site (*dy_site)(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *bf16);
    // The fp8 dY from a bf16 dY that exists already (the lm_head's: the dlogits); NULL: none
    void (*dy_existing)(const Linear *x, const LinearShared *s, Fp8Pass p, const floatX *dy, cudaStream_t stream);
    // y = x w^T: in, the bf16 X (NULL where none is kept), x_fp8 where x_site put X's codes
    void (*forward)(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *y, const floatX *in, const fp8e4 *x_fp8,
                    cudaStream_t stream);
    // dx = dy w; dw = dy^T x, added to dw after micro-step 0 (accumulate). dY where dy_site put it, with
    // dy_t_ready its transpose too; X as the forward had it: in (bf16), x_fp8 (its codes, kept) and
    // x_t (X^T, written by its producer: w2's), NULL where none
    void (*backward)(const Linear *x, const LinearShared *s, Fp8Pass p, int accumulate, floatX *dx, const floatX *dy,
                     const floatX *in, const fp8e4 *x_fp8, const fp8e4 *x_t, int dy_t_ready, cudaStream_t stream);
    // W for the next GEMMs from w (bf16 weights, or with w_fp32 the fp32 master's, whose bf16 rounding
    // gives the same codes), recorded and counted as a weight cast of pass p
    void (*cast_weight)(const Linear *x, const LinearShared *s, Fp8Pass p, const void *w, int w_fp32,
                        cudaStream_t stream);
    // After AdamW cast W per-tensor into the cache (w_by_adamw): this grain's W made again from the
    // master, AdamW's amax and counts of it forgotten where they are not this recipe's; NULL: AdamW's is its own
    void (*after_adamw)(const Linear *x, const LinearShared *s, Fp8Pass p, cudaStream_t stream);
    // w2's X recomputed in the backward (-r 1): the cast SwiGLU's forward makes, where X^T goes (*x_t)
    // and where the bf16 X goes (*x_bf16, the caller's or NULL on entry)
    Fp8Cast (*recompute_x)(const Linear *x, const LinearShared *s, fp8e4 **x_t, floatX **x_bf16);
};

// recompute_x of the recipes that cast X afresh in the backward (block, row, bf16): fp8 mode keeps no
// bf16 X of w2, so it is recomputed into the staging buffer (bf16 mode: the caller's); no cast.
static Fp8Cast recipe_recompute_x_staged(const Linear *x, const LinearShared *s, fp8e4 **x_t, floatX **x_bf16) {
    Fp8Cast none;
    memset(&none, 0, sizeof(none));
    if (s->o.fp8) *x_bf16 = s->fs->live_bf16;
    return none;
}

// after_adamw of the recipes with a W of their own (block, row, bf16): AdamW's counts of its cast of W
// forgotten and W made again from the fp32 master by the recipe's cast_weight, which counts its own
// cast of the same max |W| (AdamW's amax stays); a recipe that casts nothing (bf16) records nothing,
// so AdamW's amax goes too.
static void recipe_recast_w(const Linear *x, const LinearShared *s, Fp8Pass p, cudaStream_t stream) {
    fp8_forget_cast(s->fs, x->t_w, x->recipe->casts == 0, stream);
    x->recipe->cast_weight(x, s, p, s->master + x->w_at, 1, stream);
}

#ifdef TESTING
// What test_llama_fp8.cu sees of each fp8 GEMM right after it is queued: its operands' codes, the
// bf16 tensor the cast read, and the outputs, to check against the host codec on the GPU's own
// inputs. Training builds have no probe.
typedef struct {
    int l, lin, backward, N, IN, OUT;
    const floatX *src;      // the bf16 tensor the fp8 operand was cast from (forward X, backward dY); NULL: none kept
    const void *a, *b;      // forward: X (N, IN), W (OUT, IN) in E4M3; backward: dY (N, OUT) in E5M2, W^T (IN, OUT)
    const void *a_t, *x_t;  // backward: dY^T (OUT, N) and X^T (IN, N)
    const floatX *out, *dw; // forward: Y (N, OUT); backward: dX (N, IN) and dW (OUT, IN)
    // a block linear's: the block scale_invs of a, b, a_t and x_t, in cuBLASLt's layouts (llmc/fp8_block.cuh); NULL
    // per-tensor
    const float *a_sinv, *b_sinv, *a_t_sinv, *x_t_sinv;
} Fp8GemmView;
static void (*g_fp8_gemm_probe)(const Fp8GemmView *v);
#define FP8_GEMM_PROBE(...)                                                                                            \
    do {                                                                                                               \
        if (g_fp8_gemm_probe) {                                                                                        \
            Fp8GemmView view = { __VA_ARGS__ };                                                                        \
            g_fp8_gemm_probe(&view);                                                                                   \
        }                                                                                                              \
    } while (0)
#else
#define FP8_GEMM_PROBE(...) do {} while (0)
#endif

#endif
