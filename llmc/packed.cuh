/*
Helpers shared by the memory-bound kernels (encoder, rmsnorm, rope, swiglu, fused_classifier, and
fp8_scaling's casts and adamw's fused weight cast): 16-byte loads and stores of 8 bf16 values with
fp32 math in between, the saturating fp8 cast of 8 values with its underflow and saturation tally,
the block-wide commit of the amax and the tallies (one atomic each per block), host-side checks that
pointers and widths allow 16-byte access, and the SM count used to size persistent grids.

Why the fp8 copy is cast from the ROUNDED bf16 value: it is then exactly what a separate cast kernel
reading the bf16 tensor would write (the trainer's live-scaling path does that), so the codes and the
amax do not depend on whether the bf16 output is written or which path produced them. One exception,
from the build's --use_fast_math: float_to_fp8x8 and amax_bits_update use the build's float ops,
which flush bf16 subnormals to 0, where fp8_scaling.cuh's fp8_cast keeps them (float_to_fp8x8 says
when that changes a code); a NaN amax is recorded as NaN either way, with other payload bits.
*/
#ifndef LLMC_PACKED_CUH
#define LLMC_PACKED_CUH

#include <stdint.h>
#include "cuda_common.cuh" // floatX, fp8 types, Fp8Cast, WARP_SIZE, g_num_sms, cudaCheck, FATAL
#include "fp8.h"         // FP8_E4M3_MAX, FP8_E5M2_MAX

// ----------------------------------------------------------------------------------------------
// device side

__device__ __forceinline__ uint4 load16(const void *p) { return *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void store16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }
__device__ __forceinline__ void store8(void *p, uint2 v) { *reinterpret_cast<uint2 *>(p) = v; }

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits (element 0 is the low half).
__device__ __forceinline__ void bf16x8_to_float(float f[8], uint4 u) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// Rounds f to bf16 (round-to-nearest-even) IN PLACE and returns the packed bits, so the caller can
// cast and take the amax of exactly the values it stores.
__device__ __forceinline__ uint4 float_to_bf16x8(float f[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(f[2 * i + 1]), "f"(f[2 * i]));
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// fp8 health of the casts one thread makes (llmc/fp8.h's fp8_underflows and fp8_saturates):
// non-zero values whose code is +-0, and values whose scaled magnitude passed the format's max (and
// were clipped to it). 32 bits: a thread casts far fewer than 2^32 values per launch.
typedef struct { unsigned under, sat; } Fp8Tally;

// Underflows of 4 codes (one word) from 4 values of which `zeros` are +-0: a zero always casts to a
// +-0 code (the scale is finite) and a NaN to a NaN code, so the +-0 codes that did not come from
// zeros are exactly the non-zero values that underflowed.
__device__ __forceinline__ unsigned fp8_zero_codes4(uint32_t codes) { return __popc(__vcmpeq4(codes & 0x7f7f7f7fu, 0u)) / 8; }
__device__ __forceinline__ unsigned float_is_zero(float x) { return (__float_as_uint(x) << 1) == 0u; } // by the bits: no FTZ

// The format's max, for the saturation count (a scaled magnitude past it is clipped to it).
template <__nv_fp8_interpretation_t FMT> __device__ __forceinline__ float fp8_fmax() { return FMT == __NV_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }

// 8 values * scale -> 8 fp8 codes, element i in byte i (round-to-nearest-even, saturating to the
// format's max finite value: finite input never becomes inf/NaN), counted into tally. FMT is
// __NV_E4M3 or __NV_E5M2.
// Not the same function as fp8_scaling.cuh's fp8_cast8 (8 bf16 -> 8 codes, same conversion and byte
// order), and so kept apart: `f * scale` here is the build's multiply, which under --use_fast_math
// (both Makefiles) flushes a subnormal factor or product to a signed zero, where fp8_cast8 multiplies
// exactly (mul.rn). A bf16 subnormal input casts to a signed zero here; there, with a scale above
// ~2^109 for E5M2 or ~2^116 for E4M3 (a tensor whose amax is below ~2^-93 or ~2^-107), it gets a
// nonzero code. Either one written in terms of the other would change that path's bytes.
template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ uint2 float_to_fp8x8(const float f[8], float scale, Fp8Tally &tally) {
    uint32_t w[2];
    unsigned zeros = 0;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        float p[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            p[k] = f[4 * j + k] * scale;
            tally.sat += fabsf(p[k]) > fp8_fmax<FMT>();
            zeros += float_is_zero(f[4 * j + k]);
        }
        uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(p[0], p[1]), __NV_SATFINITE, FMT);
        uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(p[2], p[3]), __NV_SATFINITE, FMT);
        w[j] = lo | (hi << 16);
    }
    tally.under += fp8_zero_codes4(w[0]) + fp8_zero_codes4(w[1]) - zeros;
    return make_uint2(w[0], w[1]);
}

// amax kept as the bit pattern of |value|: non-negative floats order like their bits, and unlike
// fmaxf a NaN (whose |bits| exceed inf's) wins, so it reaches the history (block_commit_amax).
// fabsf is the build's float op: under --use_fast_math it flushes a subnormal |value| to +0 and
// writes a NaN as 0x7fffffff. fp8_scaling.cuh keeps the amax of bf16 inputs as their masked bits
// instead (amax2_to_bits), subnormals and NaN payloads included.
__device__ __forceinline__ uint32_t amax_bits_update(uint32_t bits, const float f[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) bits = max(bits, __float_as_uint(fabsf(f[i])));
    return bits;
}

// Commits a block's fp8 bookkeeping, each part only where its pointer is set: the block-wide max of
// every thread's amax bits (the bits of a non-negative float: amax_bits_update, fp8_scaling.cuh's
// amax2_to_bits) into *amax, and the block's sums of the threads' tallies into counts[0]
// (underflows) and counts[1] (saturations): ONE atomic each per block. The amax is an integer max on
// the slot, which orders non-negative floats as floats and lets a NaN win (the order of
// multi_gpu.cuh's amax all-reduce too); the bits go to the atomic untouched by any float op, so
// --use_fast_math can't flush a subnormal amax or rewrite a NaN's payload. A block that saw only
// zeros does no amax atomic (+0 can't raise a slot; slots only ever hold non-negative floats), nor a
// count atomic of nothing. Every thread of the block must call it (it synchronizes); the block must
// be 1-D (as every caller's is) with blockDim.x a multiple of 32.
__device__ __forceinline__ void block_commit_fp8(float *amax, uint32_t bits, unsigned long long *counts, Fp8Tally tally) {
    __shared__ uint32_t warp_max[WARP_SIZE], warp_under[WARP_SIZE], warp_sat[WARP_SIZE];
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    bits = __reduce_max_sync(0xffffffffu, bits);
    unsigned under = __reduce_add_sync(0xffffffffu, tally.under), sat = __reduce_add_sync(0xffffffffu, tally.sat);
    __syncthreads(); // the arrays may still be read by an earlier call
    if (lane == 0) { warp_max[warp] = bits; warp_under[warp] = under; warp_sat[warp] = sat; }
    __syncthreads();
    if (warp == 0) {
        const bool have = lane < nwarps;
        uint32_t b = __reduce_max_sync(0xffffffffu, have ? warp_max[lane] : 0u);
        under = __reduce_add_sync(0xffffffffu, have ? warp_under[lane] : 0u);
        sat = __reduce_add_sync(0xffffffffu, have ? warp_sat[lane] : 0u);
        if (lane == 0) {
            if (amax != NULL && b != 0u) atomicMax((int *)amax, (int)b);
            if (counts != NULL && under != 0u) atomicAdd(counts, (unsigned long long)under);
            if (counts != NULL && sat != 0u) atomicAdd(counts + 1, (unsigned long long)sat);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// host side

static void check_aligned(const void *p, size_t bytes, const char *what, const char *who) {
    if (p != NULL && ((uintptr_t)p % bytes) != 0) {
        FATAL("%s: %s (%p) must be %zu-byte aligned for vectorized access; offset sub-tensors by"
              " multiples of 8 elements", who, what, p, bytes);
    }
}

static void check_fp8_cast(const Fp8Cast *cast, const char *who) {
    if (cast->out != NULL && cast->scale == NULL) FATAL("%s: Fp8Cast.out is set but Fp8Cast.scale is NULL", who);
    check_aligned(cast->out, 8, "Fp8Cast.out", who);
}

// Multiprocessor count, read once from the current device when the program has not set g_num_sms
// (row_grid, rmsnorm's grids, fp8_scaling.cuh's fp8_grid_cap).
static int device_num_sms(void) {
    if (g_num_sms <= 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&g_num_sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return g_num_sms;
}

// Grid for "2-D elementwise" kernels: x covers the vectors of one row, y strides over rows.
// Enough blocks to fill every SM (2048 threads each) a few times over; the grid never changes what
// is computed, only how the rows are spread.
static dim3 row_grid(int vectors_per_row, int threads, long long rows) {
    int gx = CEIL_DIV(vectors_per_row, threads);
    long long want = (long long)device_num_sms() * (2048 / threads) * 2;
    long long gy = CEIL_DIV(want, (long long)gx);
    if (gy > rows) gy = rows;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    return dim3(gx, (unsigned)gy);
}

#endif
