/*
Per-tensor scaling (FP8_GRAIN_TENSOR, llmc/recipe.cuh's contract): X and W in E4M3 and dY in E5M2,
each tensor with one scale, delayed (from its amax history) or current (live: from its own amax,
-fp8_recipe current, and the first step's first micro-step); the pass says which (Fp8Pass.live).
X's codes are cast by the kernel that produces X and kept for the backward; W's are cast once a
step (the cache) or right before each forward; the backward transposes what it needs (fp8 GEMMs
are TN only). A transpose or recast reuses the forward's scale: the same codes, nothing recorded.
*/
#ifndef LLMC_RECIPE_TENSOR_CUH
#define LLMC_RECIPE_TENSOR_CUH

#include "recipe.cuh"      // Linear, LinearShared, Recipe
#include "matmul.cuh"      // matmul_fp8_fprop, matmul_fp8_dgrad, matmul_fp8_wgrad
#include "fp8_scaling.cuh" // fp8_transpose, fp8_cast_transpose

// The codes to x_fp8; w2's producer (SwiGLU) also writes X^T to x_t for its wgrad (x_t NULL: a plain site).
static Fp8Site tensor_x_site(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, fp8e4 *x_t,
                             floatX *bf16) {
    return fp8_site_t(s->fs, p, x->t_x, x_fp8, x_t, bf16, s->o.N, x->IN);
}

static void tensor_x_existing(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, const floatX *in,
                              cudaStream_t stream) {
    fp8_cast_existing(s->fs, p, x->t_x, x_fp8, in, (size_t)s->o.N * x->IN, stream);
}

static Fp8Site tensor_dy_site(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *bf16) {
    return fp8_site(s->fs, p, x->t_dy, s->dy_fp8, bf16, (size_t)s->o.N * x->OUT);
}

static void tensor_dy_existing(const Linear *x, const LinearShared *s, Fp8Pass p, const floatX *dy,
                               cudaStream_t stream) {
    fp8_cast_existing(s->fs, p, x->t_dy, s->dy_fp8, dy, (size_t)s->o.N * x->OUT, stream);
}

// From bf16 weights only: AdamW makes W from the master itself (after_adamw NULL).
static void tensor_cast_weight(const Linear *x, const LinearShared *s, Fp8Pass p, const void *w, int w_fp32,
                               cudaStream_t stream) {
    fp8_cast_existing(s->fs, p, x->t_w, x->w_fp8, (const floatX *)w, (size_t)x->IN * x->OUT, stream);
}

static void tensor_forward(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *y, const floatX *in,
                           const fp8e4 *x_fp8, cudaStream_t stream) {
    const Fp8State *fs = s->fs;
    int N = s->o.N, IN = x->IN, OUT = x->OUT;
    // without the cache, the cast the cache would have made: live in the first step, amax recorded
    if (!s->o.w_cache) tensor_cast_weight(x, s, p, x->w, 0, stream);
    matmul_fp8_fprop(y, x_fp8, x->w_fp8, fp8_gemm_scale_inv(fs, x->t_x), fp8_gemm_scale_inv(fs, x->t_w), N, IN, OUT,
                     stream);
    FP8_GEMM_PROBE(x->l, x->lin, 0, N, IN, OUT, in, x_fp8, x->w_fp8, NULL, NULL, y, NULL);
}

static void tensor_backward(const Linear *x, const LinearShared *s, Fp8Pass p, int accumulate, floatX *dx,
                            const floatX *dy, const floatX *in, const fp8e4 *x_fp8, const fp8e4 *x_t, int dy_t_ready,
                            cudaStream_t stream) {
    const Fp8State *fs = s->fs;
    int N = s->o.N, IN = x->IN, OUT = x->OUT;
    const float *dy_sinv = fp8_gemm_scale_inv(fs, x->t_dy);
    if (!dy_t_ready) fp8_transpose(s->dy_fp8_t, s->dy_fp8, N, OUT, stream);
    // X^T for wgrad: from the saved fp8 X, or (x_fp8 NULL) recast from the saved bf16 X with the
    // forward's scale, which gives the forward's codes (so it records and counts nothing again).
    if (x_t == NULL) {
        if (x_fp8) fp8_transpose(s->x_fp8_t, x_fp8, N, IN, stream);
        else fp8_cast_transpose(NULL, s->x_fp8_t, FP8_E4M3, in, N, IN, NULL, NULL, fp8_scale(fs, x->t_x), stream);
        x_t = s->x_fp8_t;
    }
    // dgrad needs W^T (fp8 GEMMs are TN only): from the cached fp8 W, or cast from bf16 W directly
    if (s->o.w_cache) fp8_transpose(s->w_fp8_t, x->w_fp8, OUT, IN, stream);
    else fp8_cast_transpose(NULL, s->w_fp8_t, FP8_E4M3, x->w, OUT, IN, NULL, NULL, fp8_scale(fs, x->t_w), stream);
    matmul_fp8_dgrad(dx, s->dy_fp8, s->w_fp8_t, dy_sinv, fp8_gemm_scale_inv(fs, x->t_w), N, IN, OUT, stream);
    matmul_fp8_wgrad(x->dw, s->dy_fp8_t, x_t, dy_sinv, fp8_gemm_scale_inv(fs, x->t_x), N, IN, OUT, accumulate, stream);
    FP8_GEMM_PROBE(x->l, x->lin, 1, N, IN, OUT, dy, s->dy_fp8, s->w_fp8_t, s->dy_fp8_t, x_t, dx, x->dw);
}

// X^T only, with the forward's scale: the same codes, no amax or count again.
static Fp8Cast tensor_recompute_x(const Linear *x, const LinearShared *s, fp8e4 **x_t, floatX **x_bf16) {
    Fp8Cast cast;
    memset(&cast, 0, sizeof(cast));
    cast.scale = fp8_scale(s->fs, x->t_x);
    *x_t = s->x_fp8_t;
    return cast;
}

static const Recipe RECIPE_TENSOR = {
    1, NULL, tensor_x_site, tensor_x_existing, tensor_dy_site, tensor_dy_existing, tensor_forward, tensor_backward,
    tensor_cast_weight, NULL, tensor_recompute_x,
};

#endif
