/*
No fp8 (FP8_GRAIN_BF16, llmc/recipe.cuh's contract): bf16 GEMMs on the bf16 X, dY and W. The recipe of
a linear the fallback moved to bf16 (-fp8_fallback bf16), of every linear under -precision bf16, and
of the lm_head without -fp8_lm_head 1. Its sites cast nothing (tensor -1: inert) and record nothing.
Where fp8 mode keeps no bf16 X (qkv's and w13's norm outputs, w2's SwiGLU output with -r 0) the
linear keeps its own copy; where the bf16 parameters hold the E4M3 cache (w_by_adamw), its own W.
*/
#ifndef LLMC_RECIPE_BF16_CUH
#define LLMC_RECIPE_BF16_CUH

#include "recipe.cuh" // Linear, LinearShared, Recipe
#include "matmul.cuh" // matmul_forward, matmul_backward
#include "adamw.cuh"  // init_from_master

// A bf16 linear's own buffers: X (N, IN) where fp8 mode keeps no bf16 X (qkv, w13; w2 with -r 0: the
// lm_head's is kept), W (OUT, IN) where the bf16 parameters hold the E4M3 cache.
enum { BF16_X, BF16_W };
static floatX *bf16_own_x(const Linear *x) { return (floatX *)x->own.part[BF16_X]; }

static void bf16_buffer_bytes(const Linear *x, const LinearOptions *o, size_t bytes[LINEAR_PARTS]) {
    bytes[BF16_X] = x->keeps_x && x->lin != LIN_LM_HEAD ? (size_t)o->N * x->IN * sizeof(floatX) : 0;
    bytes[BF16_W] = o->w_by_adamw ? (size_t)x->IN * x->OUT * sizeof(floatX) : 0;
}

// The bf16 W the GEMMs read: the parameters, or the linear's own copy while they hold the E4M3 cache.
static const floatX *bf16_weight(const Linear *x) {
    return x->own.part[BF16_W] ? (const floatX *)x->own.part[BF16_W] : x->w;
}

// The bf16 X to `bf16`, or where fp8 mode keeps none, to the linear's own copy (w2 with -r 1: the
// staging buffer, for its fprop alone).
static Fp8Site bf16_x_site(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, fp8e4 *x_t, floatX *bf16) {
    floatX *own = bf16_own_x(x);
    return fp8_site(s->fs, p, -1, NULL, bf16 ? bf16 : own ? own : s->fs->live_bf16, (size_t)s->o.N * x->IN);
}

// Only the bf16 dY (to the staging buffer where nothing keeps one).
static Fp8Site bf16_dy_site(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *bf16) {
    return fp8_site(s->fs, p, -1, NULL, bf16 ? bf16 : s->fs->live_bf16, (size_t)s->o.N * x->OUT);
}

// Its own bf16 copy where the parameters hold the E4M3 cache, else nothing (the GEMMs read the parameters).
static void bf16_cast_weight(const Linear *x, const LinearShared *s, Fp8Pass p, const void *w, int w_fp32,
                             cudaStream_t stream) {
    floatX *own = (floatX *)x->own.part[BF16_W];
    size_t n = (size_t)x->IN * x->OUT;
    if (own == NULL) return;
    if (w_fp32) init_from_master(own, (const float *)w, n, stream);
    else cudaCheck(cudaMemcpyAsync(own, w, n * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
}

static void bf16_forward(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *y, const floatX *in,
                         const fp8e4 *x_fp8, cudaStream_t stream) {
    matmul_forward(y, in ? in : bf16_own_x(x), bf16_weight(x), s->o.N, x->IN, x->OUT, stream);
}

static void bf16_backward(const Linear *x, const LinearShared *s, Fp8Pass p, int accumulate, floatX *dx,
                          const floatX *dy, const floatX *in, const fp8e4 *x_fp8, const fp8e4 *x_t, int dy_t_ready,
                          cudaStream_t stream) {
    matmul_backward(dx, x->dw, dy, in ? in : bf16_own_x(x), bf16_weight(x), s->o.N, x->IN, x->OUT, accumulate, stream);
}

static const Recipe RECIPE_BF16 = {
    0, bf16_buffer_bytes, bf16_x_site, NULL, bf16_dy_site, NULL,
    bf16_forward, bf16_backward, bf16_cast_weight, recipe_recast_w, recipe_recompute_x_staged,
};

#endif
