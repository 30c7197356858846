/*
Row-wise scaling (FP8_GRAIN_ROW, llmc/recipe.cuh's contract; torchao's "rowwise" recipe, the spec the C
reference's "fp8 row-wise scaling" in dev/test/llama_ref.h): every GEMM operand in E4M3 (dY too) with
one scale per row along that GEMM's reduction dimension, from the row's own amax rounded down to a
power of two (current scaling, no history), through cuBLASLt's OUTER_VEC_32F GEMMs (llmc/fp8_row.cuh):
  fprop  X per token, W per output row        dgrad  dY per token, W^T per row (W per input column)
  wgrad  dY^T and X^T per row (dY and X per column, over the tokens)
X's producer writes bf16 and the site's finish casts it per token for fprop (the shared scratch) and
per column for wgrad (where the backward finds X kept); dY both ways into the shared scratch. W is cast
per row with the other weights; W^T, whose scales are W's columns', is cast before each dgrad from the
weights W was cast from, and counted nowhere (W's counts are its row-wise cast's, as the reference's).
Every scale vector is the linear's own (a few KB): nothing is shared but the codes' scratch. The
per-tensor state still records each tensor's amax and counts. matmul_fp8_row_check refuses a GPU whose
cuBLASLt does not run these GEMMs before the first step (train_llama_fp8.cu's start-up checks).
*/
#ifndef LLMC_RECIPE_ROW_CUH
#define LLMC_RECIPE_ROW_CUH

#include "recipe.cuh"  // Linear, LinearShared, Recipe
#include "fp8_row.cuh" // fp8_row_cast, matmul_fp8_row_fprop / _dgrad / _wgrad

// A row linear's own buffers, each two scale_inv vectors: W's per row (OUT) then W^T's (IN); X's per
// token (N) then X^T's (IN); dY's per token (N) then dY^T's (OUT).
enum { ROW_W_SINV, ROW_X_SINV, ROW_DY_SINV };
static float *row_sinv(const Linear *x, int part) { return (float *)x->own.part[part]; }

static void row_buffer_bytes(const Linear *x, const LinearOptions *o, size_t bytes[LINEAR_PARTS]) {
    bytes[ROW_W_SINV] = (size_t)(x->OUT + x->IN) * sizeof(float);
    bytes[ROW_X_SINV] = (size_t)(o->N + x->IN) * sizeof(float);
    bytes[ROW_DY_SINV] = (size_t)(o->N + x->OUT) * sizeof(float);
}

// The cast of a site's finish (Fp8GrainCast) and of a bf16 tensor that exists already.
static void row_cast_existing(const Fp8State *f, Fp8Pass p, int t, void *out, float *sinv, void *out_t, float *sinv_t,
                              const floatX *in, int rows, int cols, cudaStream_t stream) {
    fp8_row_cast(out, sinv, out_t, sinv_t, in, 0, rows, cols, p.recording ? fp8_amax(f, t) : NULL,
                 fp8_pass_counts(f, p, t), stream);
}

// Per token to the shared x_fp8, for fprop; per column to where the backward finds X kept (x_fp8; w2's
// x_t, NULL with -r 1).
static Fp8Site row_x_site(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, fp8e4 *x_t, floatX *bf16) {
    fp8e4 *kept = x->lin == LIN_W2 ? x_t : x_fp8;
    float *xs = row_sinv(x, ROW_X_SINV);
    return fp8_site_grain(s->fs, p, x->t_x, row_cast_existing, s->x_fp8, xs, kept, kept ? xs + s->o.N : NULL, bf16,
                          s->o.N, x->IN);
}

static void row_x_existing(const Linear *x, const LinearShared *s, Fp8Pass p, fp8e4 *x_fp8, const floatX *in,
                           cudaStream_t stream) {
    row_cast_existing(s->fs, p, x->t_x, s->x_fp8, row_sinv(x, ROW_X_SINV), NULL, NULL, in, s->o.N, x->IN, stream);
}

// Per token to dy_fp8 and per column to dy_fp8_t (E4M3 codes in the shared dY scratch).
static Fp8Site row_dy_site(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *bf16) {
    float *ds = row_sinv(x, ROW_DY_SINV);
    return fp8_site_grain(s->fs, p, x->t_dy, row_cast_existing, s->dy_fp8, ds, s->dy_fp8_t, ds + s->o.N, bf16, s->o.N,
                          x->OUT);
}

static void row_dy_existing(const Linear *x, const LinearShared *s, Fp8Pass p, const floatX *dy, cudaStream_t stream) {
    float *ds = row_sinv(x, ROW_DY_SINV);
    row_cast_existing(s->fs, p, x->t_dy, s->dy_fp8, ds, s->dy_fp8_t, ds + s->o.N, dy, s->o.N, x->OUT, stream);
}

// E4M3 per output row, with W's scale_invs.
static void row_cast_weight(const Linear *x, const LinearShared *s, Fp8Pass p, const void *w, int w_fp32,
                            cudaStream_t stream) {
    fp8_row_cast(x->w_fp8, row_sinv(x, ROW_W_SINV), NULL, NULL, w, w_fp32, x->OUT, x->IN,
                 p.recording ? fp8_amax(s->fs, x->t_w) : NULL, fp8_pass_counts(s->fs, p, x->t_w), stream);
}

// X's per-token codes are in the shared x_fp8 (row_x_site).
static void row_forward(const Linear *x, const LinearShared *s, Fp8Pass p, floatX *y, const floatX *in,
                        const fp8e4 *x_fp8, cudaStream_t stream) {
    int N = s->o.N, IN = x->IN, OUT = x->OUT;
    const float *xs = row_sinv(x, ROW_X_SINV), *ws = row_sinv(x, ROW_W_SINV);
    if (!s->o.w_cache) row_cast_weight(x, s, p, x->w, 0, stream);
    matmul_fp8_row_fprop(y, s->x_fp8, x->w_fp8, xs, ws, N, IN, OUT, stream);
    FP8_GEMM_PROBE(x->l, x->lin, 0, N, IN, OUT, in, s->x_fp8, x->w_fp8, NULL, NULL, y, NULL, xs, ws);
}

// dY both ways where row_dy_site put them; X^T kept in x_fp8 (w2: x_t) where row_x_site kept it,
// else cast here from the bf16 X; W^T cast here.
static void row_backward(const Linear *x, const LinearShared *s, Fp8Pass p, int accumulate, floatX *dx,
                         const floatX *dy, const floatX *in, const fp8e4 *x_fp8, const fp8e4 *x_t, int dy_t_ready,
                         cudaStream_t stream) {
    int N = s->o.N, IN = x->IN, OUT = x->OUT;
    const fp8e4 *xt = x->lin == LIN_W2 ? x_t : x_fp8;
    float *xts = row_sinv(x, ROW_X_SINV) + N, *wts = row_sinv(x, ROW_W_SINV) + OUT, *ds = row_sinv(x, ROW_DY_SINV);
    if (xt == NULL) { // cast afresh from the bf16 X: recorded and counted (the forward's cast was per token)
        row_cast_existing(s->fs, p, x->t_x, NULL, NULL, s->x_fp8_t, xts, in, N, IN, stream);
        xt = s->x_fp8_t;
    }
    const void *w = s->o.w_by_adamw ? (const void *)(s->master + x->w_at) : (const void *)x->w;
    fp8_row_cast(NULL, NULL, s->w_fp8_t, wts, w, s->o.w_by_adamw, OUT, IN, NULL, NULL, stream);
    const fp8e4 *dyq = (const fp8e4 *)s->dy_fp8, *dyq_t = (const fp8e4 *)s->dy_fp8_t;
    matmul_fp8_row_dgrad(dx, dyq, s->w_fp8_t, ds, wts, N, IN, OUT, stream);
    matmul_fp8_row_wgrad(x->dw, dyq_t, xt, ds + N, xts, N, IN, OUT, accumulate, stream);
    FP8_GEMM_PROBE(x->l, x->lin, 1, N, IN, OUT, dy, dyq, s->w_fp8_t, dyq_t, xt, dx, x->dw, ds, wts, ds + N, xts);
}

static const Recipe RECIPE_ROW = {
    2, row_buffer_bytes, row_x_site, row_x_existing, row_dy_site, row_dy_existing,
    row_forward, row_backward, row_cast_weight, recipe_recast_w, recipe_recompute_x_staged,
};

#endif
