/*
AdamW on fp32 master weights (dev/test/README.md): t = step + 1 (1-based here),
  g = grad * grad_scale (the global-norm clip factor, 1 when not clipping)
  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
  master -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * master )
then param = bf16(master) for the GEMMs (param may be NULL: fp8 mode needs no bf16 copy of a linear's
weights, only the fp8 one). Or on bf16 master weights (master NULL, -master_weights bf16: 4 bytes per
parameter less memory): param is the master, read as fp32, updated in fp32 and stored
rounded stochastically (llmc/bf16_round.h; the bits: bf16_round_weight_bits of the element's index and
t, independent of the moments'), so updates under half a bf16 ulp still move it in expectation.
The moments m and v are bf16 (MT = floatX, the trainer's default, DeepSeek-V3's
choice; computed in fp32 and stored with stochastic rounding, llmc/bf16_round.h: the random bits hash
index0 + i, the element's index in the whole model, and t), or fp32 (-adam_moments fp32; 4 bytes more per element, 8 more moved).
adamw_update(slice, step, stream): the tensor and its fp8 cast in an AdamWSlice, the hyperparameters in an AdamWStep.
Fused fp8 weight cast (docs/fp8_recipe.md "Weights"): if
wcast.out != NULL the tensor is fp8_layers slices of layer_numel elements (all layers of one kind,
llm.c style); slice l writes out[l*layer_numel + i] = E4M3(param * wcast.scale[l*fp8_tensor_stride]) and
atomic-maxes |param| into wcast.amax[l*fp8_tensor_stride] (and, unless wcast.counts is NULL, adds its
underflows and saturations to wcast.counts[FP8_COUNTS*l*fp8_tensor_stride + k]). The cast reads the bf16 value just written,
so the fused cast equals a separate fp8_cast of the bf16 param (the live-scaling path) byte for byte.
One pass, memory bound: 28 bytes per element with fp32 moments, 20 with bf16 (each 1 more with the
fp8 byte, 2 less without the bf16 param; the cast rereads nothing); with bf16 master weights 6 less
than with an fp32 master that writes the bf16 param (the bf16 param read and written, not the master).
Deterministic: element-wise, plain round-to-nearest bf16 params from an fp32 master, hashed rounding
bits for the moments and a bf16 master, integer atomic max for amax.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include <stdint.h>
#include "cuda_common.cuh"   // floatX, Fp8Cast, cudaLaunchCheck, FATAL
#include "fp8_scaling.cuh"   // fp8_cast1/fp8_cast8 helpers (exact scaling, saturating RNE), amax2_to_bits, fp8_grid_cap, fp8_ptr_aligned
#include "packed.cuh"        // bf16x8_to_float: 8 bf16 moments to fp32; block_commit_fp8
#include "bf16_round.h"      // bf16_round_bits, bf16_round_stochastic: the bf16 moments' rounding

// One adamw_update's tensor: n elements, the first at index index0 of the whole model.
typedef struct {
    float *master;      // (n) fp32 master weights, updated in place; NULL: param is the master (bf16)
    floatX *param;      // (n) bf16(master) for the GEMMs; NULL: not written (only with an fp32 master)
    const floatX *grad; // (n)
    void *m, *v;        // (n) each: AdamW's moments, fp32 or (moments_bf16) bf16
    int moments_bf16;
    size_t n;
    uint64_t index0;    // seeds the bf16 moments' and master's rounding: a ZeRO shard rounds as the whole tensor would
    Fp8Cast wcast;      // the fused E4M3 weight cast (above); wcast.out NULL: none
    int fp8_layers;     // with the cast: n = fp8_layers * layer_numel, slice l's amax, scale and counts at
    size_t layer_numel; // l * fp8_tensor_stride
    int fp8_tensor_stride;
} AdamWSlice;

// One step's hyperparameters: the learning rate, betas, eps, the tensor's weight decay, the gradient
// scale (the global-norm clip factor, 1 when not clipping) and the 1-based step t.
typedef struct { float lr, beta1, beta2, eps, weight_decay, grad_scale; int t; } AdamWStep;

struct AdamWStepArgs {
    float lr, beta1, beta2, eps, weight_decay, grad_scale, bias_corr1, bias_corr2;
    int t;           // the 1-based step (bf16 moments' and master's rounding bits)
    uint64_t index0; // the model-wide index of the tensor's element 0 (the same)
};

__device__ __forceinline__ float adamw_one(float w, float g, float &m, float &v, const AdamWStepArgs &p) {
    g *= p.grad_scale;
    m = p.beta1 * m + (1.0f - p.beta1) * g;
    v = p.beta2 * v + (1.0f - p.beta2) * g * g;
    const float mhat = m / p.bias_corr1, vhat = v / p.bias_corr2;
    return w - p.lr * (mhat / (sqrtf(vhat) + p.eps) + p.weight_decay * w);
}

__device__ __forceinline__ uint16_t bf16_bits_rn(float x) {
    __nv_bfloat16 b = __float2bfloat16_rn(x);
    return *(uint16_t *)&b;
}

// 8 consecutive elements of every operand, in registers (the moments as fp32 whatever their storage)
struct AdamW8 {
    float4 w[2], m[2], v[2];
    uint4 g; // 8 bf16 gradients
};

// 8 moments from fp32 or bf16 storage, and back (bf16: stochastically rounded with 16 bits of r each)
__device__ __forceinline__ void moments_load8(float4 *out, const float *src) {
    out[0] = *(const float4 *)src; out[1] = *(const float4 *)(src + 4);
}
__device__ __forceinline__ void moments_load8(float4 *out, const floatX *src) {
    bf16x8_to_float((float *)out, load16(src));
}
__device__ __forceinline__ void moments_store8(float *dst, const float4 *in, const uint32_t *) {
    *(float4 *)dst = in[0]; *(float4 *)(dst + 4) = in[1];
}
__device__ __forceinline__ void moments_store8(floatX *dst, const float4 *in, const uint32_t *r) {
    const float *f = (const float *)in;
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = bf16_round_stochastic(f[2 * k], r[2 * k]) | (unsigned)bf16_round_stochastic(f[2 * k + 1], r[2 * k + 1]) << 16;
    *(uint4 *)dst = make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ float moment_load(const float *src) { return *src; }
__device__ __forceinline__ float moment_load(const floatX *src) { return __bfloat162float(*src); }
__device__ __forceinline__ void moment_store(float *dst, float x, uint32_t) { *dst = x; }
__device__ __forceinline__ void moment_store(floatX *dst, float x, uint32_t r) {
    *(uint16_t *)dst = bf16_round_stochastic(x, r);
}

// BF16W: the bf16 param is the master (widened to fp32 here); else the fp32 master
template <bool BF16W, typename MT>
__device__ __forceinline__ AdamW8 adamw_load8(const float *master, const floatX *param, const floatX *grad, const MT *m,
                                              const MT *v, size_t i) {
    AdamW8 x;
    if (BF16W) bf16x8_to_float((float *)x.w, load16(param + i));
    else { x.w[0] = *(const float4 *)(master + i); x.w[1] = *(const float4 *)(master + i + 4); }
    moments_load8(x.m, m + i);
    moments_load8(x.v, v + i);
    x.g = *(const uint4 *)(grad + i);
    return x;
}

// bf16 param bits of an updated weight w: from an fp32 master round to nearest; a bf16 master (BF16W)
// rounded stochastically with the weight's own bits
template <bool BF16W>
__device__ __forceinline__ uint16_t param_bits(float w, uint64_t index, int t) {
    return BF16W ? bf16_round_stochastic(w, bf16_round_weight_bits(index, t)) : bf16_bits_rn(w);
}

// index: element i's index in the whole model (the moments' and a bf16 master's rounding bits)
template <bool CAST, bool BF16W, typename MT>
__device__ __forceinline__ void adamw_step8(AdamW8 &x, size_t i, uint64_t index, const AdamWStepArgs &p, float *master,
                                            floatX *param, MT *m, MT *v, uint8_t *wout, float scale, unsigned &amax2,
                                            Fp8Tally &tally) {
    float *w = (float *)x.w, *mm = (float *)x.m, *vv = (float *)x.v;
    const unsigned gw[4] = {x.g.x, x.g.y, x.g.z, x.g.w};
    unsigned pw[4];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const unsigned gb = (k % 2 == 0) ? (gw[k / 2] << 16) : (gw[k / 2] & 0xffff0000u);
        w[k] = adamw_one(w[k], __uint_as_float(gb), mm[k], vv[k], p);
        const unsigned pb = param_bits<BF16W>(w[k], index + k, p.t);
        if (k % 2 == 0) pw[k / 2] = pb; else pw[k / 2] |= pb << 16;
    }
    if (!BF16W) { *(float4 *)(master + i) = x.w[0]; *(float4 *)(master + i + 4) = x.w[1]; }
    uint32_t rm[8], rv[8];
    if (sizeof(MT) == 2) {
#pragma unroll
        for (int k = 0; k < 8; k++) { const uint32_t r = bf16_round_bits(index + k, p.t); rm[k] = r; rv[k] = r >> 16; }
    }
    moments_store8(m + i, x.m, rm);
    moments_store8(v + i, x.v, rv);
    const uint4 praw = make_uint4(pw[0], pw[1], pw[2], pw[3]);
    if (param != NULL) *(uint4 *)(param + i) = praw;
    if (CAST) *(uint2 *)(wout + i) = fp8_cast8<__NV_E4M3>(praw, scale, amax2, tally);
}

// blockIdx.y = slice (layer); VEC: two 8-element vectors per thread and iteration, both loaded before
// either is computed (the launcher gives every thread one iteration: on an H200, 97.5% of copy
// bandwidth, against 80% for one vector per thread in a grid-stride loop), the rest one by one
// (needs every slice start a multiple of 8, every pointer 16-byte aligned, fp8 out 8-byte aligned);
// CAST: write the E4M3 copy and its amax; BF16W: param is the master (master NULL); MT: the moments'
// storage, float or floatX.
template <bool VEC, bool CAST, bool BF16W, typename MT>
__global__ void __launch_bounds__(256) adamw_kernel(float *master, floatX *param, const floatX *grad, MT *m, MT *v,
                                                    size_t slice_numel, AdamWStepArgs p, uint8_t *wout, float *wamax,
                                                    unsigned long long *wcounts, const float *wscale, int stride) {
    const size_t base = (size_t)blockIdx.y * slice_numel;
    const float scale = CAST ? wscale[(size_t)blockIdx.y * stride] : 1.0f;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nthreads = (size_t)gridDim.x * blockDim.x;
    unsigned amax2 = 0;
    Fp8Tally tally = {0, 0};
    size_t done = 0;
    if (VEC) {
        const size_t nvec = slice_numel / 8;
        for (size_t v0 = tid; v0 < nvec; v0 += 2 * nthreads) {
            const size_t i0 = base + v0 * 8, i1 = i0 + nthreads * 8;
            const bool two = v0 + nthreads < nvec;
            AdamW8 a = adamw_load8<BF16W>(master, param, grad, m, v, i0), b;
            if (two) b = adamw_load8<BF16W>(master, param, grad, m, v, i1);
            adamw_step8<CAST, BF16W>(a, i0, p.index0 + i0, p, master, param, m, v, wout, scale, amax2, tally);
            if (two) adamw_step8<CAST, BF16W>(b, i1, p.index0 + i1, p, master, param, m, v, wout, scale, amax2, tally);
        }
        done = nvec * 8;
    }
    for (size_t j = done + tid; j < slice_numel; j += nthreads) {
        const size_t i = base + j;
        float mm = moment_load(m + i), vv = moment_load(v + i);
        const float w = adamw_one(BF16W ? __bfloat162float(param[i]) : master[i], __bfloat162float(grad[i]), mm, vv, p);
        if (!BF16W) master[i] = w;
        const uint32_t r = sizeof(MT) == 2 ? bf16_round_bits(p.index0 + i, p.t) : 0;
        moment_store(m + i, mm, r);
        moment_store(v + i, vv, r >> 16);
        const uint16_t pb = param_bits<BF16W>(w, p.index0 + i, p.t);
        if (param != NULL) ((uint16_t *)param)[i] = pb;
        if (CAST) wout[i] = fp8_cast1<__NV_E4M3>(pb, scale, amax2, tally);
    }
    if (CAST) block_commit_fp8(wamax + (size_t)blockIdx.y * stride, amax2_to_bits(amax2),
                               wcounts ? wcounts + (size_t)FP8_COUNTS * blockIdx.y * stride : NULL, tally);
}

template <bool BF16W, typename MT>
static void adamw_launch(dim3 grid, bool vec, bool cast, float *master, floatX *param, const floatX *grad, MT *m, MT *v,
                         size_t slice, const AdamWStepArgs &p, Fp8Cast wcast, int stride, cudaStream_t stream) {
    uint8_t *wout = (uint8_t *)wcast.out;
    float *amax = wcast.amax;
    const float *scale = wcast.scale;
    unsigned long long *counts = wcast.counts;
    if (vec) {
        if (cast)
            adamw_kernel<true, true, BF16W><<<grid, 256, 0, stream>>>(master, param, grad, m, v, slice, p, wout, amax,
                                                                      counts, scale, stride);
        else
            adamw_kernel<true, false, BF16W><<<grid, 256, 0, stream>>>(master, param, grad, m, v, slice, p, NULL, NULL,
                                                                       NULL, NULL, 0);
    } else {
        if (cast)
            adamw_kernel<false, true, BF16W><<<grid, 256, 0, stream>>>(master, param, grad, m, v, slice, p, wout, amax,
                                                                       counts, scale, stride);
        else
            adamw_kernel<false, false, BF16W><<<grid, 256, 0, stream>>>(master, param, grad, m, v, slice, p, NULL, NULL,
                                                                        NULL, NULL, 0);
    }
    cudaLaunchCheck();
}

// The kernel for the moments' storage of s (BF16W: the master is s->param's bf16)
template <bool BF16W>
static void adamw_launch_moments(dim3 grid, bool vec, bool cast, const AdamWSlice *s, size_t slice,
                                 const AdamWStepArgs &p, cudaStream_t stream) {
    if (s->moments_bf16)
        adamw_launch<BF16W>(grid, vec, cast, s->master, s->param, s->grad, (floatX *)s->m, (floatX *)s->v, slice, p,
                            s->wcast, s->fp8_tensor_stride, stream);
    else adamw_launch<BF16W>(grid, vec, cast, s->master, s->param, s->grad, (float *)s->m, (float *)s->v, slice, p,
                             s->wcast, s->fp8_tensor_stride, stream);
}

// One AdamW step of the tensor s (see the file comment for its fp8 cast).
void adamw_update(const AdamWSlice *s, const AdamWStep *h, cudaStream_t stream) {
    if (s->n == 0) return;
    if (h->t < 1) FATAL("adamw_update: step t = %d must be 1-based (t >= 1)", h->t);
    if (s->master == NULL && s->param == NULL) FATAL("adamw_update: no master weights (no fp32 master, no bf16 param)");
    AdamWStepArgs p;
    p.lr = h->lr; p.beta1 = h->beta1; p.beta2 = h->beta2; p.eps = h->eps; p.weight_decay = h->weight_decay; p.grad_scale = h->grad_scale;
    p.bias_corr1 = 1.0f - powf(h->beta1, (float)h->t);
    p.bias_corr2 = 1.0f - powf(h->beta2, (float)h->t);
    p.t = h->t;
    p.index0 = s->index0;
    const bool cast = s->wcast.out != NULL;
    size_t slice = s->n;
    int slices = 1;
    if (cast) {
        if (s->wcast.scale == NULL || s->wcast.amax == NULL) FATAL("adamw_update: fp8 cast needs both wcast.scale and wcast.amax");
        if (s->fp8_layers < 1 || s->fp8_layers > 65535 || (size_t)s->fp8_layers * s->layer_numel != s->n) {
            FATAL("adamw_update: fp8 cast of %d layers x %zu elements doesn't cover the tensor's %zu elements", s->fp8_layers,
                  s->layer_numel, s->n);
        }
        slice = s->layer_numel;
        slices = s->fp8_layers;
    }
    const bool vec = (slices == 1 || slice % 8 == 0) && fp8_ptr_aligned(s->master, 16) && fp8_ptr_aligned(s->param, 16) &&
                     fp8_ptr_aligned(s->grad, 16) && fp8_ptr_aligned(s->m, 16) && fp8_ptr_aligned(s->v, 16) &&
                     (!cast || fp8_ptr_aligned(s->wcast.out, 8));
    // one iteration per thread: two vectors each on the vector path (a slice shorter than 8 elements
    // runs on its tail loop), one element on the scalar path
    size_t per_block = vec ? (size_t)256 * 16 : (size_t)256;
    size_t gx = CEIL_DIV(slice, per_block);
    if (gx > 0x7fffffff) gx = 0x7fffffff; // grid-stride beyond (2^31 blocks hold 2^43 elements on the vector path)
    dim3 grid((unsigned)gx, (unsigned)slices);
    if (s->master != NULL) adamw_launch_moments<false>(grid, vec, cast, s, slice, p, stream);
    else adamw_launch_moments<true>(grid, vec, cast, s, slice, p, stream);
}

__global__ void init_from_master_kernel(floatX *param, const float *master, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        param[i] = __float2bfloat16_rn(master[i]);
    }
}

// param = bf16(master), round to nearest even (the same rounding adamw_update uses).
void init_from_master(floatX *param, const float *master, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    size_t grid = CEIL_DIV(n, (size_t)256);
    if (grid > (size_t)fp8_grid_cap()) grid = (size_t)fp8_grid_cap();
    init_from_master_kernel<<<(unsigned)grid, 256, 0, stream>>>(param, master, n);
    cudaLaunchCheck();
}

#endif
