/*
AdamW on fp32 master weights (dev/test/README.md): t = step + 1 (1-based here),
  g = grad * grad_scale (the global-norm clip factor, 1 when not clipping)
  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
  master -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * master )
then param = bf16(master) for the GEMMs (param may be NULL: fp8 mode needs no bf16 copy of a linear's
weights, only the fp8 one). Fused fp8 weight cast (FP8_RECIPE.md "Weights"): if
wcast.out != NULL the tensor is fp8_layers slices of layer_numel elements (all layers of one kind,
llm.c style); slice l writes out[l*layer_numel + i] = E4M3(param * wcast.scale[l*fp8_tensor_stride]) and
atomic-maxes |param| into wcast.amax[l*fp8_tensor_stride]. The cast reads the bf16 value just written,
so the fused cast equals a separate fp8_cast of the bf16 param (the live-scaling path) byte for byte.
One pass, memory bound: 28 bytes per element (29 with the fp8 byte; the cast rereads nothing).
Deterministic: element-wise, plain round-to-nearest bf16, integer atomic max for amax.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include <stdint.h>
#include "cuda_common.cuh"   // floatX, Fp8Cast, cudaLaunchCheck, FATAL
#include "fp8_scaling.cuh"   // fp8_cast1/fp8_cast8 helpers (exact scaling, saturating RNE), amax_block_flush, fp8_grid_cap

struct AdamWStepArgs {
    float lr, beta1, beta2, eps, weight_decay, grad_scale, bias_corr1, bias_corr2;
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

// blockIdx.y = slice (layer); VEC: 8 elements per thread and step, the rest one by one (needs every
// slice start a multiple of 8, every pointer 16-byte aligned, fp8 out 8-byte aligned);
// CAST: write the E4M3 copy and its amax.
template <bool VEC, bool CAST>
__global__ void __launch_bounds__(256) adamw_kernel(float *master, floatX *param, const floatX *grad, float *m, float *v,
                                                    size_t slice_numel, AdamWStepArgs p, uint8_t *wout, float *wamax,
                                                    const float *wscale, int stride) {
    const size_t base = (size_t)blockIdx.y * slice_numel;
    const float scale = CAST ? wscale[(size_t)blockIdx.y * stride] : 1.0f;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nthreads = (size_t)gridDim.x * blockDim.x;
    unsigned amax2 = 0;
    size_t done = 0;
    if (VEC) {
        const size_t nvec = slice_numel / 8;
        for (size_t vi = tid; vi < nvec; vi += nthreads) {
            const size_t i = base + vi * 8;
            float4 w0 = *(const float4 *)(master + i), w1 = *(const float4 *)(master + i + 4);
            float4 m0 = *(const float4 *)(m + i), m1 = *(const float4 *)(m + i + 4);
            float4 v0 = *(const float4 *)(v + i), v1 = *(const float4 *)(v + i + 4);
            const uint4 graw = *(const uint4 *)(grad + i);
            float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            float mm[8] = {m0.x, m0.y, m0.z, m0.w, m1.x, m1.y, m1.z, m1.w};
            float vv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            const unsigned gw[4] = {graw.x, graw.y, graw.z, graw.w};
            unsigned pw[4];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const unsigned gb = (k % 2 == 0) ? (gw[k / 2] << 16) : (gw[k / 2] & 0xffff0000u);
                w[k] = adamw_one(w[k], __uint_as_float(gb), mm[k], vv[k], p);
                const unsigned pb = bf16_bits_rn(w[k]);
                if (k % 2 == 0) pw[k / 2] = pb; else pw[k / 2] |= pb << 16;
            }
            *(float4 *)(master + i) = make_float4(w[0], w[1], w[2], w[3]);
            *(float4 *)(master + i + 4) = make_float4(w[4], w[5], w[6], w[7]);
            *(float4 *)(m + i) = make_float4(mm[0], mm[1], mm[2], mm[3]);
            *(float4 *)(m + i + 4) = make_float4(mm[4], mm[5], mm[6], mm[7]);
            *(float4 *)(v + i) = make_float4(vv[0], vv[1], vv[2], vv[3]);
            *(float4 *)(v + i + 4) = make_float4(vv[4], vv[5], vv[6], vv[7]);
            const uint4 praw = make_uint4(pw[0], pw[1], pw[2], pw[3]);
            if (param != NULL) *(uint4 *)(param + i) = praw;
            if (CAST) *(uint2 *)(wout + i) = fp8_cast8<__NV_E4M3>(praw, scale, amax2);
        }
        done = nvec * 8;
    }
    for (size_t j = done + tid; j < slice_numel; j += nthreads) {
        const size_t i = base + j;
        float mm = m[i], vv = v[i];
        const float w = adamw_one(master[i], __bfloat162float(grad[i]), mm, vv, p);
        master[i] = w;
        m[i] = mm;
        v[i] = vv;
        const uint16_t pb = bf16_bits_rn(w);
        if (param != NULL) ((uint16_t *)param)[i] = pb;
        if (CAST) wout[i] = fp8_cast1<__NV_E4M3>(pb, scale, amax2);
    }
    if (CAST) amax_block_flush(wamax + (size_t)blockIdx.y * stride, amax2_to_bits(amax2));
}

// One AdamW step of a tensor of n elements; t is the 1-based step. See the file comment for wcast.
void adamw_update(float *master, floatX *param, const floatX *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int t, Fp8Cast wcast, int fp8_layers,
                  size_t layer_numel, int fp8_tensor_stride, cudaStream_t stream) {
    if (n == 0) return;
    if (t < 1) FATAL("adamw_update: step t = %d must be 1-based (t >= 1)", t);
    AdamWStepArgs p;
    p.lr = lr; p.beta1 = beta1; p.beta2 = beta2; p.eps = eps; p.weight_decay = weight_decay; p.grad_scale = grad_scale;
    p.bias_corr1 = 1.0f - powf(beta1, (float)t);
    p.bias_corr2 = 1.0f - powf(beta2, (float)t);
    const bool cast = wcast.out != NULL;
    size_t slice = n;
    int slices = 1;
    if (cast) {
        if (wcast.scale == NULL || wcast.amax == NULL) FATAL("adamw_update: fp8 cast needs both wcast.scale and wcast.amax");
        if (fp8_layers < 1 || fp8_layers > 65535 || (size_t)fp8_layers * layer_numel != n) {
            FATAL("adamw_update: fp8 cast of %d layers x %zu elements doesn't cover the tensor's %zu elements", fp8_layers,
                  layer_numel, n);
        }
        slice = layer_numel;
        slices = fp8_layers;
    }
    const bool vec = (slices == 1 || slice % 8 == 0) && fp8_ptr_aligned(master, 16) && fp8_ptr_aligned(param, 16) && fp8_ptr_aligned(grad, 16) &&
                     fp8_ptr_aligned(m, 16) && fp8_ptr_aligned(v, 16) && (!cast || fp8_ptr_aligned(wcast.out, 8));
    const int block = 256;
    size_t work = vec ? (slice / 8 > 0 ? slice / 8 : 1) : slice;
    size_t gx = CEIL_DIV(work, (size_t)block);
    size_t cap = (size_t)fp8_grid_cap() / (size_t)slices; // the whole grid fills the GPU about once
    if (cap < 1) cap = 1;
    if (gx > cap) gx = cap;
    dim3 grid((unsigned)gx, (unsigned)slices);
    uint8_t *wout = (uint8_t *)wcast.out;
    if (vec) {
        if (cast) adamw_kernel<true, true><<<grid, block, 0, stream>>>(master, param, grad, m, v, slice, p, wout, wcast.amax, wcast.scale, fp8_tensor_stride);
        else adamw_kernel<true, false><<<grid, block, 0, stream>>>(master, param, grad, m, v, slice, p, NULL, NULL, NULL, 0);
    } else {
        if (cast) adamw_kernel<false, true><<<grid, block, 0, stream>>>(master, param, grad, m, v, slice, p, wout, wcast.amax, wcast.scale, fp8_tensor_stride);
        else adamw_kernel<false, false><<<grid, block, 0, stream>>>(master, param, grad, m, v, slice, p, NULL, NULL, NULL, 0);
    }
    cudaLaunchCheck();
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
