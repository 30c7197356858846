/*
Common CUDA definitions: error-check macros, the bf16 activation type, the fp8 types and the
Fp8Cast descriptor that producer kernels use to write an fp8 copy of their output with its amax,
and warp/block reductions (the amax's block reduction and atomic: llmc/packed.cuh's block_commit_amax).
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <float.h>
#include "utils.h"

typedef __nv_bfloat16 floatX;   // activations, weights used by the GEMMs, gradients
typedef __nv_fp8_e4m3 fp8e4;    // X and W of fp8 linears
typedef __nv_fp8_e5m2 fp8e5;    // dY of fp8 linears

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define WARP_SIZE 32

static void cuda_check(cudaError_t err, const char *file, int line) {
    if (err != cudaSuccess) {
        fatal_at(file, line, "CUDA error: %s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)
// After every launch: catches bad launch configurations at the launcher that made them.
#define cudaLaunchCheck() cuda_check(cudaGetLastError(), __FILE__, __LINE__)

// Device allocation that says what it was for and how much it wanted when it fails.
static void *cuda_malloc_check(size_t bytes, const char *what, const char *file, int line) {
    void *ptr = NULL;
    cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        fatal_at(file, line, "out of GPU memory allocating %s: %.3f GiB requested, %.3f GiB free of %.3f GiB (%s)."
                 " Try -r 1 (recompute), -master_weights bf16, -fp8_weight_cache 0 (fp8), a smaller -b (the same -d)"
                 " or fewer layers; -check 1 prints the run's planned device memory.",
                 what, bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0, cudaGetErrorString(err));
    }
    return ptr;
}
#define cudaMallocCheck(bytes, what) cuda_malloc_check((bytes), (what), __FILE__, __LINE__)

// Where a producer kernel writes the fp8 copy of its output (NULL: none), records the amax of the
// values it casts (NULL: none) and counts what its cast loses (NULL: none). The cast multiplies by
// *scale and saturates to the format's max.
typedef struct {
    void *out;          // fp8e4 or fp8e5 array, same shape as the producer's output
    float *amax;        // the tensor's amax slot in the fp8 state buffer (atomic max)
    const float *scale; // the tensor's current scale
    unsigned long long *counts; // the tensor's health counters: [0] += underflows, [1] += saturations
                                // (llmc/fp8.h's fp8_underflows, fp8_saturates) of the values cast
} Fp8Cast;

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffff, v, off);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, off));
    return v;
}

// Block-wide sum/max; every thread gets the result. blockDim.x must be a multiple of 32, <= 1024.
template <bool IS_MAX>
__device__ float block_reduce(float v) {
    __shared__ float shared[WARP_SIZE];
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    v = IS_MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
    __syncthreads(); // the shared array may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : (IS_MAX ? -FLT_MAX : 0.0f);
    return IS_MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
}

static int g_num_sms = 0; // set once by the trainer/test from cudaGetDeviceProperties
#endif
