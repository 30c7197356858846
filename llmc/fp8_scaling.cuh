/*
fp8 tensor utilities and the once-per-step delayed-scaling update (docs/fp8_recipe.md,
dev/test/README.md "fp8 emulation"):
  fp8_cast            bf16 -> fp8 (E4M3 or E5M2) with the tensor's scale, saturating, recording amax
                      and counting underflows and saturations (fp8 health, llmc/fp8.h)
  fp8_cast_transpose  one read of a bf16 (rows, cols) matrix -> fp8 (rows, cols) and fp8 (cols, rows)
                      (dY and its transpose for dgrad and wgrad; TE's fused cast+transpose)
  fp8_transpose       byte transpose of an fp8 matrix (X^T from the saved fp8 X, W^T from the fp8 W)
  amax_abs_max        max |x| into an amax slot (live scaling's first pass)
  fp8_scale_from_amax live scaling of one tensor: scale and scale_inv from its amax
  fp8_update_scales   ONE kernel for every tensor of the state buffer: roll the amax histories, zero
                      the slots, recompute every scale and scale_inv

Numerics are bit-exact against llmc/fp8.h (fp8_encode, fp8_update_state: the CPU rule) whatever the
build's --use_fast_math says (dev/cuda/cast_transpose.cu checks every byte and bit):
- amax is tracked on the bit patterns of |x| (non-negative floats order like their integer bits), so a
  subnormal amax is not flushed to 0 and a NaN wins the max and reaches the history (where the
  update ignores it); llmc/packed.cuh's block_commit_amax commits those bits with an integer max;
- value * scale and the scale formula use inline PTX without .ftz. That is why the update kernel
  re-states fp8.h's fp8_update_tensor instead of calling it: compiled for the device under
  --use_fast_math, its `/` becomes an approximate divide (up to 2 ulp off), its comparisons flush
  subnormal amaxes to 0, and 1.0f / scale flushes a subnormal scale_inv (1/FLT_MAX is one) to 0;
- the fp8 conversion is cvt.rn.satfinite (round to nearest even, saturate to +-max; NaN stays NaN).
Deterministic: each output byte is written by one thread; amax uses integer atomic max.
*/
#ifndef LLMC_FP8_SCALING_CUH
#define LLMC_FP8_SCALING_CUH

#include <stdint.h>
#include "cuda_common.cuh" // floatX, cudaLaunchCheck, FATAL
#include "packed.cuh"      // block_commit_amax, device_num_sms
#include "fp8_layout.h"    // Fp8StateLayout, FP8_KINDS, FP8_DY
#include "fp8.h"           // FP8_E4M3 / FP8_E5M2 format ids, FP8_E4M3_MAX, FP8_E5M2_MAX

// ---------------------------------------------------------------------------------------------
// exact float ops (IEEE round-to-nearest-even, subnormals kept) regardless of -ftz / -prec-div

__device__ __forceinline__ float fmul_exact(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float fdiv_exact(float a, float b) {
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float frcp_exact(float a) {
    float r;
    asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
__device__ __forceinline__ int float_bits_finite(unsigned bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

// The scale rule of dev/test/README.md for one tensor, amax_bits = the bits of the largest finite
// non-negative amax (0 if none): amax > 0 gives (fmax / amax) / 2^margin, FLT_MAX if that is not
// finite; otherwise the previous scale is kept. fp8.h's fp8_compute_scale, same operations in the
// same order, done with exact ops.
__device__ __forceinline__ float fp8_scale_rule_device(unsigned amax_bits, float fmax, int margin, float prev_scale) {
    if (amax_bits == 0 || (amax_bits & 0x80000000u) || !float_bits_finite(amax_bits)) return prev_scale;
    float s = fdiv_exact(fmax, __uint_as_float(amax_bits));
    if (margin != 0) s = fdiv_exact(s, __uint_as_float((unsigned)(127 + margin) << 23)); // exact 2^margin
    if (!float_bits_finite(__float_as_uint(s))) s = FLT_MAX;
    return s;
}

// ---------------------------------------------------------------------------------------------
// casting and amax helpers

// Two packed bf16 |x| bit patterns are kept in one register: __vmaxu2 maxes both halves at once.
__device__ __forceinline__ unsigned amax2_to_bits(unsigned amax2) {
    unsigned lo = amax2 & 0xffffu, hi = amax2 >> 16;
    return (lo > hi ? lo : hi) << 16; // bf16 bits -> float bits
}

template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ uint8_t fp8_cast1(uint16_t h, float scale, unsigned &amax2, Fp8Tally &tally) {
    amax2 = __vmaxu2(amax2, (unsigned)(h & 0x7fffu));
    const float p = fmul_exact(__uint_as_float((unsigned)h << 16), scale);
    const uint8_t code = (uint8_t)__nv_cvt_float_to_fp8(p, __NV_SATFINITE, FMT);
    tally.sat += fabsf(p) > fp8_fmax<FMT>();
    tally.under += (code & 0x7f) == 0 && (h & 0x7fffu) != 0;
    return code;
}

// 8 bf16 (one 16-byte load) -> 8 fp8 bytes (little-endian: element i is byte i), with their amax and
// their underflows and saturations (packed.cuh's float_to_fp8x8 says how the underflows are counted).
// Not llmc/packed.cuh's float_to_fp8x8 (8 floats, the build's multiply): the product here is exact,
// so a subnormal bf16 is scaled as fp8.h's fp8_encode scales it whatever --use_fast_math says;
// packed.cuh's comment says when the two give different codes.
template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ uint2 fp8_cast8(uint4 raw, float scale, unsigned &amax2, Fp8Tally &tally) {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
    unsigned pairs[4], zeros = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const unsigned mag = w[i] & 0x7fff7fffu;
        amax2 = __vmaxu2(amax2, mag);
        zeros += __popc(__vcmpeq2(mag, 0u)) / 16;
        float lo = fmul_exact(__uint_as_float(w[i] << 16), scale);
        float hi = fmul_exact(__uint_as_float(w[i] & 0xffff0000u), scale);
        tally.sat += (fabsf(lo) > fp8_fmax<FMT>()) + (fabsf(hi) > fp8_fmax<FMT>());
        pairs[i] = (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, FMT);
    }
    const uint2 codes = make_uint2(pairs[0] | (pairs[1] << 16), pairs[2] | (pairs[3] << 16));
    tally.under += fp8_zero_codes4(codes.x) + fp8_zero_codes4(codes.y) - zeros;
    return codes;
}

static int fp8_grid_cap(void) { // enough blocks of 256 to fill the GPU (8 per SM); grid-stride beyond
    return device_num_sms() * 8;
}
static inline int fp8_ptr_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }
static void fp8_check_fmt(const char *fn, int fmt) {
    if (fmt != FP8_E4M3 && fmt != FP8_E5M2) FATAL("%s: fmt %d is neither FP8_E4M3 nor FP8_E5M2", fn, fmt);
}

// ---------------------------------------------------------------------------------------------
// fp8_cast: 16 elements per thread and iteration (two 16-byte loads, one 16-byte store);
// without WRITE only the amax (amax_abs_max: the conversions are dead code then)

template <__nv_fp8_interpretation_t FMT, bool VEC, bool WRITE>
__global__ void __launch_bounds__(256) fp8_cast_kernel(uint8_t *out, const floatX *in, size_t n, float *amax,
                                                       unsigned long long *counts, const float *scale_ptr) {
    const float scale = scale_ptr != NULL ? *scale_ptr : 1.0f;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nthreads = (size_t)gridDim.x * blockDim.x;
    unsigned amax2 = 0;
    Fp8Tally tally = {0, 0};
    size_t done = 0;
    if (VEC) {
        const size_t nvec = n / 16;
        for (size_t v = tid; v < nvec; v += nthreads) {
            const uint4 *src = (const uint4 *)(in + v * 16);
            uint4 r0 = src[0], r1 = src[1];
            uint2 o0 = fp8_cast8<FMT>(r0, scale, amax2, tally), o1 = fp8_cast8<FMT>(r1, scale, amax2, tally);
            if (WRITE) *(uint4 *)(out + v * 16) = make_uint4(o0.x, o0.y, o1.x, o1.y);
        }
        done = nvec * 16;
    }
    const uint16_t *in16 = (const uint16_t *)in;
    for (size_t i = done + tid; i < n; i += nthreads) {
        const uint8_t o = fp8_cast1<FMT>(in16[i], scale, amax2, tally);
        if (WRITE) out[i] = o;
    }
    if (!WRITE) tally = Fp8Tally{0, 0}; // nothing was cast (and the conversions are dead code)
    if (amax != NULL || counts != NULL) block_commit_fp8(amax, amax2_to_bits(amax2), WRITE ? counts : NULL, tally);
}

// fp8_cast's launch; out NULL: the amax only
static void fp8_cast_launch(uint8_t *out, int fmt, const floatX *in, size_t n, float *amax, unsigned long long *counts,
                            const float *scale, cudaStream_t stream) {
    if (n == 0) return;
    const int block = 256;
    const bool vec = fp8_ptr_aligned(in, 16) && fp8_ptr_aligned(out, 16);
    size_t work = vec ? (n / 16 > 0 ? n / 16 : 1) : n;
    size_t grid = CEIL_DIV(work, (size_t)block);
    if (grid > (size_t)fp8_grid_cap()) grid = (size_t)fp8_grid_cap();
    const unsigned g = (unsigned)grid;
    if (out == NULL) {
        if (vec) fp8_cast_kernel<__NV_E4M3, true, false><<<g, block, 0, stream>>>(NULL, in, n, amax, NULL, NULL);
        else fp8_cast_kernel<__NV_E4M3, false, false><<<g, block, 0, stream>>>(NULL, in, n, amax, NULL, NULL);
    } else if (fmt == FP8_E4M3) {
        if (vec) fp8_cast_kernel<__NV_E4M3, true, true><<<g, block, 0, stream>>>(out, in, n, amax, counts, scale);
        else fp8_cast_kernel<__NV_E4M3, false, true><<<g, block, 0, stream>>>(out, in, n, amax, counts, scale);
    } else {
        if (vec) fp8_cast_kernel<__NV_E5M2, true, true><<<g, block, 0, stream>>>(out, in, n, amax, counts, scale);
        else fp8_cast_kernel<__NV_E5M2, false, true><<<g, block, 0, stream>>>(out, in, n, amax, counts, scale);
    }
    cudaLaunchCheck();
}

// out (n fp8 of format fmt) = saturate(in * *scale); *amax = max(*amax, max|in|) if amax != NULL;
// counts[0] += underflows, counts[1] += saturations (llmc/fp8.h) if counts != NULL. scale may be
// NULL (1.0).
void fp8_cast(void *out, int fmt, const floatX *in, size_t n, float *amax, unsigned long long *counts, const float *scale,
              cudaStream_t stream) {
    fp8_check_fmt("fp8_cast", fmt);
    if (out == NULL && n > 0) FATAL("fp8_cast: out is NULL");
    fp8_cast_launch((uint8_t *)out, fmt, in, n, amax, counts, scale, stream);
}

// ---------------------------------------------------------------------------------------------
// tiled transposes: a 128x128 byte tile through shared memory, 256 threads.
// Global reads and row-major writes are 16 B (8 B) per thread along rows. The transposed write goes
// through the tile twice: each thread transposes 4x4 byte blocks in registers (__byte_perm) into
// 16-byte runs of 16 consecutive rows of one column, puts them back into the tile as rows of the
// transposed tile, and then 8 threads write each transposed row's 128 bytes to out_t as whole lines.
// (Written straight from registers, each thread's 16 bytes went to another output row: half-sector
// writes, 35-40% of copy bandwidth.) Shared memory is conflict-free throughout: the tile-row reads
// are 128 contiguous bytes per warp, and the transposed rows' 16-byte chunks are XOR-swizzled by
// row, so the 8 threads of a quarter warp always touch 8 different chunk positions. Needs rows % 16
// == 0 and 16-byte aligned out_t; the launchers fall back otherwise.

#define FP8_TILE 128

// Writes the tile (local rows = input rows r0.., local cols = input cols c0..) transposed into
// out_t (cols, rows), reusing the tile as the staging buffer. Every thread of the block must call it.
__device__ __forceinline__ int fp8_tile_chunk(int chunk, int row) { return 16 * (chunk ^ (row / 4 % 8)); }

__device__ __forceinline__ void store_tile_transposed(uint8_t *out_t, uint8_t (*tile)[FP8_TILE], int r0, int c0,
                                                      int rows, int cols) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int lr = warp * 16, lc = lane * 4; // this thread: local rows lr..lr+15, local cols lc..lc+3
    unsigned colv[4][4]; // colv[j][g]: rows lr+4g..lr+4g+3 of local column lc+j
#pragma unroll
    for (int g = 0; g < 4; g++) {
        unsigned a0 = *(const unsigned *)&tile[lr + 4 * g + 0][lc];
        unsigned a1 = *(const unsigned *)&tile[lr + 4 * g + 1][lc];
        unsigned a2 = *(const unsigned *)&tile[lr + 4 * g + 2][lc];
        unsigned a3 = *(const unsigned *)&tile[lr + 4 * g + 3][lc];
        unsigned t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a2, a3, 0x5140); // bytes 0,1 of each row
        unsigned t2 = __byte_perm(a0, a1, 0x7362), t3 = __byte_perm(a2, a3, 0x7362); // bytes 2,3 of each row
        colv[0][g] = __byte_perm(t0, t1, 0x5410);
        colv[1][g] = __byte_perm(t0, t1, 0x7632);
        colv[2][g] = __byte_perm(t2, t3, 0x5410);
        colv[3][g] = __byte_perm(t2, t3, 0x7632);
    }
    __syncthreads(); // the whole tile is read: it now takes the transposed rows
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int tr = lc + j; // transposed row = local column; chunk `warp` holds local rows lr..lr+15
        *(uint4 *)&tile[tr][fp8_tile_chunk(warp, tr)] = make_uint4(colv[j][0], colv[j][1], colv[j][2], colv[j][3]);
    }
    __syncthreads();
    const int q = threadIdx.x % 8, r = r0 + 16 * q; // rows % 16 == 0: a 16-row chunk is all in or all out
#pragma unroll
    for (int pass = 0; pass < FP8_TILE / 32; pass++) {
        const int tr = threadIdx.x / 8 + 32 * pass, c = c0 + tr;
        const uint4 v = *(const uint4 *)&tile[tr][fp8_tile_chunk(q, tr)];
        if (r < rows && c < cols) *(uint4 *)(out_t + (size_t)c * rows + r) = v;
    }
}

// needs cols % 8 == 0, rows % 16 == 0; in 16 B, out 8 B, out_t 16 B aligned
template <__nv_fp8_interpretation_t FMT>
__global__ void __launch_bounds__(256) fp8_cast_transpose_kernel(uint8_t *out, uint8_t *out_t, const floatX *in, int rows,
                                                                 int cols, float *amax, unsigned long long *counts,
                                                                 const float *scale_ptr) {
    __shared__ __align__(16) uint8_t tile[FP8_TILE][FP8_TILE];
    const float scale = scale_ptr != NULL ? *scale_ptr : 1.0f;
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE;
    const int vc = threadIdx.x % 16, lr0 = threadIdx.x / 16; // 16 threads x 8 bf16 = one 128-column row
    const int c = c0 + vc * 8;
    unsigned amax2 = 0;
    Fp8Tally tally = {0, 0};
    uint4 raw[8];
#pragma unroll
    for (int i = 0; i < 8; i++) { // all loads first: 8 independent 16-byte loads in flight
        const int r = r0 + lr0 + 16 * i;
        raw[i] = (r < rows && c < cols) ? *(const uint4 *)(in + (size_t)r * cols + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int lr = lr0 + 16 * i, r = r0 + lr;
        uint2 o = fp8_cast8<FMT>(raw[i], scale, amax2, tally); // zero padding casts to zero: no amax, no count
        if (out != NULL && r < rows && c < cols) *(uint2 *)(out + (size_t)r * cols + c) = o;
        *(uint2 *)&tile[lr][vc * 8] = o;
    }
    __syncthreads();
    store_tile_transposed(out_t, tile, r0, c0, rows, cols);
    if (amax != NULL || counts != NULL) block_commit_fp8(amax, amax2_to_bits(amax2), counts, tally);
}

// needs cols % 16 == 0, rows % 16 == 0; in and out_t 16 B aligned
__global__ void __launch_bounds__(256) fp8_transpose_kernel(uint8_t *out_t, const uint8_t *in, int rows, int cols) {
    __shared__ __align__(16) uint8_t tile[FP8_TILE][FP8_TILE];
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE;
    const int vc = threadIdx.x % 8, lr0 = threadIdx.x / 8; // 8 threads x 16 bytes = one 128-column row
    const int c = c0 + vc * 16;
    uint4 raw[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = r0 + lr0 + 32 * i;
        raw[i] = (r < rows && c < cols) ? *(const uint4 *)(in + (size_t)r * cols + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) *(uint4 *)&tile[lr0 + 32 * i][vc * 16] = raw[i];
    __syncthreads();
    store_tile_transposed(out_t, tile, r0, c0, rows, cols);
}

// Fallback for any shape and alignment: 32x32 tiles, one byte per thread and step.
template <__nv_fp8_interpretation_t FMT, bool CAST>
__global__ void __launch_bounds__(256) fp8_transpose_any_kernel(uint8_t *out, uint8_t *out_t, const void *in, int rows,
                                                                int cols, float *amax, unsigned long long *counts,
                                                                const float *scale_ptr) {
    __shared__ uint8_t tile[32][33];
    const float scale = (CAST && scale_ptr != NULL) ? *scale_ptr : 1.0f;
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    unsigned amax2 = 0;
    Fp8Tally tally = {0, 0};
    for (int i = ty; i < 32; i += 8) {
        const int r = r0 + i, c = c0 + tx;
        if (r < rows && c < cols) {
            const size_t idx = (size_t)r * cols + c;
            uint8_t code;
            if (CAST) {
                code = fp8_cast1<FMT>(((const uint16_t *)in)[idx], scale, amax2, tally);
                if (out != NULL) out[idx] = code;
            } else {
                code = ((const uint8_t *)in)[idx];
            }
            tile[i][tx] = code;
        }
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) {
        const int c = c0 + i, r = r0 + tx; // out_t row c, column r
        if (r < rows && c < cols) out_t[(size_t)c * rows + r] = tile[tx][i];
    }
    if (CAST && (amax != NULL || counts != NULL)) block_commit_fp8(amax, amax2_to_bits(amax2), counts, tally);
}

static void fp8_check_grid(const char *fn, int rows, int cols, int tile) {
    if (rows < 0 || cols < 0) FATAL("%s: negative shape (%d, %d)", fn, rows, cols);
    if (CEIL_DIV(rows, tile) > 65535) FATAL("%s: %d rows is more than this kernel's grid covers (%d)", fn, rows, 65535 * tile);
}

// One read of bf16 in (rows, cols): out (rows, cols) fp8 (skipped if NULL) and out_t (cols, rows) fp8,
// both saturate(in * *scale); *amax = max(*amax, max|in|) if amax != NULL; counts as fp8_cast's.
void fp8_cast_transpose(void *out, void *out_t, int fmt, const floatX *in, int rows, int cols, float *amax,
                        unsigned long long *counts, const float *scale, cudaStream_t stream) {
    fp8_check_fmt("fp8_cast_transpose", fmt);
    if (rows == 0 || cols == 0) return;
    const bool fast = rows % 16 == 0 && cols % 8 == 0 && fp8_ptr_aligned(in, 16) && fp8_ptr_aligned(out, 8) && fp8_ptr_aligned(out_t, 16);
    uint8_t *o = (uint8_t *)out, *ot = (uint8_t *)out_t;
    if (fast) {
        fp8_check_grid("fp8_cast_transpose", rows, cols, FP8_TILE);
        dim3 grid(CEIL_DIV(cols, FP8_TILE), CEIL_DIV(rows, FP8_TILE));
        if (fmt == FP8_E4M3) fp8_cast_transpose_kernel<__NV_E4M3><<<grid, 256, 0, stream>>>(o, ot, in, rows, cols, amax, counts, scale);
        else fp8_cast_transpose_kernel<__NV_E5M2><<<grid, 256, 0, stream>>>(o, ot, in, rows, cols, amax, counts, scale);
    } else {
        fp8_check_grid("fp8_cast_transpose", rows, cols, 32);
        dim3 grid(CEIL_DIV(cols, 32), CEIL_DIV(rows, 32));
        if (fmt == FP8_E4M3) fp8_transpose_any_kernel<__NV_E4M3, true><<<grid, 256, 0, stream>>>(o, ot, in, rows, cols, amax, counts, scale);
        else fp8_transpose_any_kernel<__NV_E5M2, true><<<grid, 256, 0, stream>>>(o, ot, in, rows, cols, amax, counts, scale);
    }
    cudaLaunchCheck();
}

// out_t (cols, rows) = in (rows, cols)^T, bytes (either fp8 format).
void fp8_transpose(void *out_t, const void *in, int rows, int cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    const bool fast = rows % 16 == 0 && cols % 16 == 0 && fp8_ptr_aligned(in, 16) && fp8_ptr_aligned(out_t, 16);
    if (fast) {
        fp8_check_grid("fp8_transpose", rows, cols, FP8_TILE);
        dim3 grid(CEIL_DIV(cols, FP8_TILE), CEIL_DIV(rows, FP8_TILE));
        fp8_transpose_kernel<<<grid, 256, 0, stream>>>((uint8_t *)out_t, (const uint8_t *)in, rows, cols);
    } else {
        fp8_check_grid("fp8_transpose", rows, cols, 32);
        dim3 grid(CEIL_DIV(cols, 32), CEIL_DIV(rows, 32));
        fp8_transpose_any_kernel<__NV_E4M3, false><<<grid, 256, 0, stream>>>(NULL, (uint8_t *)out_t, in, rows, cols, NULL, NULL, NULL);
    }
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------
// amax only

// *amax = max(*amax, max|in|)
void amax_abs_max(float *amax, const floatX *in, size_t n, cudaStream_t stream) {
    fp8_cast_launch(NULL, FP8_E4M3, in, n, amax, NULL, NULL, stream);
}

// ---------------------------------------------------------------------------------------------
// scale updates

// cuBLASLt 13.1 refuses fp8 GEMMs (NOT_SUPPORTED at launch) whose scale pointers are not 16-byte
// aligned (seen on H200: a pointer 4 bytes past an aligned one fails, the aligned one runs). The
// state buffer packs scale_inv densely, so the updates also publish each tensor's scale_inv at
// gemm_scale_inv[FP8_GEMM_SCALE_STRIDE * t], 16-byte aligned, for the GEMMs to read.
#define FP8_GEMM_SCALE_STRIDE 4

static void fp8_check_margin(const char *fn, int margin) {
    if (margin < 0 || margin > 100) FATAL("%s: margin %d is outside [0, 100]", fn, margin);
}

__global__ void fp8_scale_from_amax_kernel(float *scale, float *scale_inv, float *gemm_scale_inv, float *amax,
                                           float *slot, float fmax, int margin) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float a = *amax;
    const float s = fp8_scale_rule_device(__float_as_uint(a), fmax, margin, *scale);
    *scale = s;
    *scale_inv = frcp_exact(s);
    if (gemm_scale_inv) *gemm_scale_inv = *scale_inv;
    if (slot) { // the live amax joins the step's slot (bit-pattern max, as block_commit_amax) and is consumed
        if (__float_as_int(a) > __float_as_int(*slot)) *slot = a;
        *amax = 0.0f;
    }
}

// Live scaling of one tensor: *scale = rule(*amax) (kept if *amax is 0, NaN or inf), *scale_inv = 1 / *scale,
// copied to *gemm_scale_inv too unless it is NULL.
void fp8_scale_from_amax(float *scale, float *scale_inv, float *gemm_scale_inv, const float *amax, float fmax, int margin,
                         cudaStream_t stream) {
    fp8_check_margin("fp8_scale_from_amax", margin);
    fp8_scale_from_amax_kernel<<<1, 32, 0, stream>>>(scale, scale_inv, gemm_scale_inv, (float *)amax, NULL, fmax, margin);
    cudaLaunchCheck();
}

// The same from the amax of this cast alone (*live_amax, then zeroed), which then joins the step's
// amax slot: "current" scaling of a tensor that may be cast several times per optimizer step.
void fp8_scale_from_live_amax(float *scale, float *scale_inv, float *gemm_scale_inv, float *live_amax, float *slot,
                              float fmax, int margin, cudaStream_t stream) {
    fp8_check_margin("fp8_scale_from_live_amax", margin);
    fp8_scale_from_amax_kernel<<<1, 32, 0, stream>>>(scale, scale_inv, gemm_scale_inv, live_amax, slot, fmax, margin);
    cudaLaunchCheck();
}

__global__ void fp8_publish_scale_inv_kernel(float *gemm_scale_inv, const float *scale_inv, int n) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) gemm_scale_inv[FP8_GEMM_SCALE_STRIDE * t] = scale_inv[t];
}

// The aligned GEMM copies of n scale_invs, for a state loaded from a checkpoint.
void fp8_publish_scale_inv(float *gemm_scale_inv, const float *scale_inv, int n, cudaStream_t stream) {
    if (n <= 0) return;
    fp8_publish_scale_inv_kernel<<<CEIL_DIV(n, 128), 128, 0, stream>>>(gemm_scale_inv, scale_inv, n);
    cudaLaunchCheck();
}

// One thread per tensor: history[0] := slot (older entries move down one, the oldest drops), slot := 0,
// scale from the largest FINITE history entry, scale_inv = 1 / scale.
__global__ void fp8_update_scales_kernel(float *state, float *gemm_scale_inv, Fp8StateLayout lay, int margin) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= lay.num_tensors) return;
    const int H = lay.history_len;
    float *hist = state + lay.amax_history + (size_t)t * H;
    float *slot = state + lay.amax_slot + t;
    // the largest finite non-negative entry, as bits (negative floats are negative ints: never chosen)
    int best = 0;
    for (int j = H - 1; j > 0; j--) {
        const float e = hist[j - 1];
        hist[j] = e;
        const int b = __float_as_int(e);
        if (float_bits_finite((unsigned)b) && b > best) best = b;
    }
    const float newest = *slot;
    hist[0] = newest;
    const int b = __float_as_int(newest);
    if (float_bits_finite((unsigned)b) && b > best) best = b;
    *slot = 0.0f;
    const float fmax = (t % FP8_KINDS == FP8_DY) ? FP8_E5M2_MAX : FP8_E4M3_MAX;
    const float s = fp8_scale_rule_device((unsigned)best, fmax, margin, state[lay.scale + t]);
    state[lay.scale + t] = s;
    state[lay.scale_inv + t] = frcp_exact(s);
    if (gemm_scale_inv) gemm_scale_inv[FP8_GEMM_SCALE_STRIDE * t] = state[lay.scale_inv + t];
}

// Once per optimizer step (after the amax all-reduce): every tensor's history, slot, scale and scale_inv.
// gemm_scale_inv (NULL: none) receives the aligned copies of every scale_inv (FP8_GEMM_SCALE_STRIDE).
void fp8_update_scales(float *state, float *gemm_scale_inv, Fp8StateLayout lay, int margin, cudaStream_t stream) {
    fp8_check_margin("fp8_update_scales", margin);
    if (lay.num_tensors <= 0) return;
    if (lay.history_len < 1) FATAL("fp8_update_scales: amax history length %d must be at least 1", lay.history_len);
    const int block = 128;
    fp8_update_scales_kernel<<<CEIL_DIV(lay.num_tensors, block), block, 0, stream>>>(state, gemm_scale_inv, lay, margin);
    cudaLaunchCheck();
}

#endif
