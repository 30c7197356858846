/*
Block scaling (FP8_GRAIN_BLOCK, llmc/recipe.cuh's contract; the spec: dev/results/fp8_outliers/design.md):
X and dY in 1x128 blocks along the reduction dimension, W in 128x128 blocks, each block scaled from its
own amax (current scaling, no history), through cuBLASLt's block-scaled GEMMs (llmc/fp8_block.cuh).
X's producer writes bf16 and the site's finish casts it row-wise for fprop (the shared scratch) and
transposed for wgrad (where the backward finds X kept, with the linear's own scale_invs); dY likewise,
both into the shared scratch. W^T for dgrad is cast again from the weights W was cast from, so its
codes and grid are W's transposed. The per-tensor state still records each tensor's amax and counts.
*/
#ifndef LLMC_RECIPE_BLOCK_CUH
#define LLMC_RECIPE_BLOCK_CUH

#include "recipe.cuh"    // Linear, LinearShared, Recipe, BlockScratch
#include "fp8_block.cuh" // fp8_block_cast_weight, matmul_fp8_block_*, fp8_block_vec_count, fp8_block_grid_count

// A block linear's own buffers: W's BLK128x128 scale_invs, made with W; the VEC128 scale_invs of X^T
// where the backward finds it kept (qkv, w13, the lm_head; w2 with -r 0).
enum { BLOCK_W_GRID, BLOCK_X_T_SINV };
static float *block_w_grid(const Linear *x) { return (float *)x->own.part[BLOCK_W_GRID]; }
static float *block_x_t_sinv(const Linear *x) { return (float *)x->own.part[BLOCK_X_T_SINV]; }

static void block_buffer_bytes(const Linear *x, const LinearOptions *o, size_t bytes[LINEAR_PARTS]) {
    bytes[BLOCK_W_GRID] = fp8_block_grid_count(x->OUT, x->IN) * sizeof(float);
    bytes[BLOCK_X_T_SINV] = x->keeps_x ? fp8_block_vec_count(x->IN, o->N) * sizeof(float) : 0;
}

// The floats of BlockScratch's buffers (n, in its order) for N tokens and the widest of the linears
// (the lm_head's too with lm_head); returns their total, each rounded up to 64 floats (256 bytes).
static size_t block_scratch_floats(const LlamaConfig *c, int N, int lm_head, size_t n[5]) {
    size_t wide_in = c->C > c->FF ? c->C : c->FF, wide_out = 0, grid_t = 0, total = 0;
    for (int lin = 0; lin < LINS_PER_LAYER + lm_head; lin++) {
        size_t out = linear_out(c, lin), g = fp8_block_grid_count(linear_in(c, lin), (int)out);
        if (out > wide_out) wide_out = out;
        if (g > grid_t) grid_t = g;
    }
    n[0] = fp8_block_vec_count(N, (int)wide_in); n[1] = fp8_block_vec_count((int)wide_in, N);
    n[2] = fp8_block_vec_count(N, (int)wide_out); n[3] = fp8_block_vec_count((int)wide_out, N); n[4] = grid_t;
    for (int k = 0; k < 5; k++) total += CEIL_DIV(n[k], 64) * 64;
    return total;
}

// The scratch's buffers carved from `at` (block_scratch_floats' total), each 256-byte aligned.
static BlockScratch block_scratch_carve(float *at, const size_t n[5]) {
    BlockScratch b;
    float **ptr[5] = {&b.x_sinv, &b.x_t_sinv, &b.dy_sinv, &b.dy_t_sinv, &b.w_t_grid};
    for (int k = 0; k < 5; k++) { *ptr[k] = at; at += CEIL_DIV(n[k], 64) * 64; }
    return b;
}

// The row-wise codes to the shared x_fp8 with the scratch's scale_invs, for fprop; X^T to where the
// backward finds X kept (x_fp8; w2's x_t, NULL with -r 1) with the linear's scale_invs.
static Fp8Site block_x_site(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, fp8e4 *x_t, floatX *bf16) {
    fp8e4 *kept = x->lin == LIN_W2 ? x_t : x_fp8;
    return fp8_site_block(s->fs, p, x->t_x, s->x_fp8, s->block.x_sinv, kept, kept ? block_x_t_sinv(x) : NULL, bf16,
                          s->o.N, x->IN);
}

// Row-wise to the shared x_fp8, as block_x_site's.
static void block_x_existing(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, const floatX *in,
                             cudaStream_t stream) {
    fp8_block_cast_existing(s->fs, p, x->t_x, s->x_fp8, s->block.x_sinv, NULL, NULL, in, s->o.N, x->IN, stream);
}

// To dy_fp8 and transposed to dy_fp8_t, each with the scratch's scale_invs (dgrad's and wgrad's operands).
static Fp8Site block_dy_site(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *bf16) {
    const BlockScratch *b = &s->block;
    return fp8_site_block(s->fs, p, x->t_dy, s->dy_fp8, b->dy_sinv, s->dy_fp8_t, b->dy_t_sinv, bf16, s->o.N, x->OUT);
}

static void block_dy_existing(const Linear *x, const LinearShared *s, Fp8Pass p, const floatX *dy,
                              cudaStream_t stream) {
    const BlockScratch *b = &s->block;
    fp8_block_cast_existing(s->fs, p, x->t_dy, s->dy_fp8, b->dy_sinv, s->dy_fp8_t, b->dy_t_sinv, dy, s->o.N, x->OUT,
                            stream);
}

// E4M3 in 128x128 blocks with their grid.
static void block_cast_weight(const Linear *x, const LinearShared *s, Fp8Pass p, const void *w, int w_fp32,
                              cudaStream_t stream) {
    const Fp8State *fs = s->fs;
    fp8_block_cast_weight(x->w_fp8, block_w_grid(x), NULL, NULL, w, w_fp32, x->OUT, x->IN,
                          p.recording ? fp8_amax(fs, x->t_w) : NULL, fp8_pass_counts(fs, p, x->t_w), stream);
}

// X's row-wise codes are in the shared x_fp8 (block_x_site).
static void block_forward(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *y, const floatX *in,
                          const fp8e4 *x_fp8, cudaStream_t stream) {
    int N = s->o.N, IN = x->IN, OUT = x->OUT;
    if (!s->o.w_cache) block_cast_weight(x, s, p, x->w, 0, stream);
    matmul_fp8_block_fprop(y, s->x_fp8, x->w_fp8, s->block.x_sinv, block_w_grid(x), N, IN, OUT, stream);
    FP8_GEMM_PROBE(x->l, x->lin, 0, N, IN, OUT, in, s->x_fp8, x->w_fp8, NULL, NULL, y, NULL, s->block.x_sinv,
                   block_w_grid(x));
}

// dY and dY^T with their scale_invs where block_dy_site put them; X^T kept in x_fp8 (w2: x_t) where
// block_x_site kept it, else cast here from the bf16 X.
static void block_backward(const Linear *x, const LinearShared *s, Fp8Pass p, int accumulate, floatX *dx,
                           const floatX *dy, const floatX *in, const fp8e4 *x_fp8, const fp8e4 *x_t, int dy_t_ready,
                           cudaStream_t stream) {
    const Fp8State *fs = s->fs;
    const BlockScratch *bs = &s->block;
    int N = s->o.N, IN = x->IN, OUT = x->OUT;
    const fp8e4 *xt = x->lin == LIN_W2 ? x_t : x_fp8;
    const float *xt_sinv = block_x_t_sinv(x);
    if (xt == NULL) { // cast afresh from the bf16 X: recorded and counted (the forward's cast was row-wise)
        fp8_block_cast_existing(fs, p, x->t_x, NULL, NULL, s->x_fp8_t, bs->x_t_sinv, in, N, IN, stream);
        xt = s->x_fp8_t;
        xt_sinv = bs->x_t_sinv;
    }
    // W^T: cast again from the weights W was cast from, the same 128x128 blocks transposed, so W's
    // codes and grid transposed; a recast, recording and counting nothing (as per-tensor W^T's)
    const void *w = s->o.w_by_adamw ? (const void *)(s->master + x->w_at) : (const void *)x->w;
    fp8_block_cast_weight(NULL, NULL, s->w_fp8_t, bs->w_t_grid, w, s->o.w_by_adamw, OUT, IN, NULL, NULL, stream);
    matmul_fp8_block_dgrad(dx, s->dy_fp8, s->w_fp8_t, bs->dy_sinv, bs->w_t_grid, N, IN, OUT, stream);
    matmul_fp8_block_wgrad(x->dw, s->dy_fp8_t, xt, bs->dy_t_sinv, xt_sinv, N, IN, OUT, accumulate, stream);
    FP8_GEMM_PROBE(x->l, x->lin, 1, N, IN, OUT, dy, s->dy_fp8, s->w_fp8_t, s->dy_fp8_t, xt, dx, x->dw, bs->dy_sinv,
                   bs->w_t_grid, bs->dy_t_sinv, xt_sinv);
}

static const Recipe RECIPE_BLOCK = {
    2, block_buffer_bytes, block_x_site, block_x_existing, block_dy_site, block_dy_existing,
    block_forward, block_backward, block_cast_weight, recipe_recast_w, recipe_recompute_x_staged,
};

#endif
