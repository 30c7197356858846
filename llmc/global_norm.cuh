/*
Squared global gradient norm, deterministic: a fixed grid of GLOBAL_NORM_BLOCKS blocks, each thread
summing its grid-stride share in a fixed order, each block reducing to one partial in a scratch
buffer, then one block summing the partials in a fixed order (in double) and writing *out. No float
atomics, and the grid doesn't depend on the GPU, so the same gradients give the same bits on any run
(and any GPU model) whatever the launch timing.

Scratch: GLOBAL_NORM_BLOCKS floats (4 KiB) of device memory, allocated on the first call and kept
for the process (global_norm_free releases it). Calls share that scratch, so issue them on one
stream (or order the streams); each call overwrites *out (sum several tensors by adding the outputs,
or better, call it once on the contiguous gradient buffer).
*/
#ifndef LLMC_GLOBAL_NORM_CUH
#define LLMC_GLOBAL_NORM_CUH

#include <stdint.h>
#include "cuda_common.cuh" // floatX, block_reduce, cudaLaunchCheck, cudaMallocCheck

#define GLOBAL_NORM_BLOCKS 1024
#define GLOBAL_NORM_THREADS 512

static float *g_global_norm_partials = NULL;

__device__ __forceinline__ float bf16x2_sumsq(unsigned w) {
    const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
    return lo * lo + hi * hi;
}

template <bool VEC>
__global__ void __launch_bounds__(GLOBAL_NORM_THREADS) global_norm_partials_kernel(float *partials, const floatX *g, size_t n) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nthreads = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    size_t done = 0;
    if (VEC) {
        const size_t nvec = n / 8;
        for (size_t v = tid; v < nvec; v += nthreads) {
            const uint4 r = *(const uint4 *)(g + v * 8);
            acc += (bf16x2_sumsq(r.x) + bf16x2_sumsq(r.y)) + (bf16x2_sumsq(r.z) + bf16x2_sumsq(r.w));
        }
        done = nvec * 8;
    }
    for (size_t i = done + tid; i < n; i += nthreads) {
        const float x = __bfloat162float(g[i]);
        acc += x * x;
    }
    const float block_sum = block_reduce<false>(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = block_sum;
}

__global__ void __launch_bounds__(1024) global_norm_finish_kernel(float *out, const float *partials) {
    __shared__ double sums[32];
    double x = threadIdx.x < GLOBAL_NORM_BLOCKS ? (double)partials[threadIdx.x] : 0.0;
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    if (threadIdx.x % 32 == 0) sums[threadIdx.x / 32] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) total += sums[w];
        *out = (float)total;
    }
}

// *out = sum of g[i]^2 over n elements (fp32 per thread, fixed-order reductions).
void global_norm_squared(float *out, const floatX *g, size_t n, cudaStream_t stream) {
    if (g_global_norm_partials == NULL) {
        g_global_norm_partials = (float *)cudaMallocCheck(GLOBAL_NORM_BLOCKS * sizeof(float), "the global norm scratch");
    }
    const bool vec = ((uintptr_t)g % 16) == 0;
    if (vec) global_norm_partials_kernel<true><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, stream>>>(g_global_norm_partials, g, n);
    else global_norm_partials_kernel<false><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, stream>>>(g_global_norm_partials, g, n);
    cudaLaunchCheck();
    global_norm_finish_kernel<<<1, 1024, 0, stream>>>(out, g_global_norm_partials);
    cudaLaunchCheck();
}

void global_norm_free(void) {
    if (g_global_norm_partials != NULL) cudaCheck(cudaFree(g_global_norm_partials));
    g_global_norm_partials = NULL;
}

#endif
