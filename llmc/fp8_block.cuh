/*
fp8 block scaling (issue 34; the plan is dev/results/fp8_outliers/design.md, the definition the C
reference's section "fp8 block scaling" in dev/test/llama_ref.h): every block of an operand is cast
with its own scale, computed from its own amax in the pass that casts it (current scaling).
  fp8_block_cast          bf16 (rows, cols) -> fp8 codes in 1x128 blocks along cols (row-wise) with
                          their VEC128 scale_invs, and/or the transposed codes (cols, rows) in 1x128
                          blocks along rows (128x1 blocks of the input) with theirs; the tensor's amax
                          slot and fp8 health counts as fp8_cast records them. X (fprop row-wise,
                          wgrad transposed) and dY (dgrad row-wise, wgrad transposed)
  fp8_block_cast_weight   W (OUT, IN) from bf16 or the fp32 master -> E4M3 codes in 128x128 blocks
                          with their BLK128x128 grid, and W^T's codes with the transposed grid (dgrad)
  matmul_fp8_block_fprop / _dgrad / _wgrad   the block-scaled cuBLASLt GEMMs (llmc/matmul.cuh's plans,
                          kinds MM_FP8B_*): bf16 out, fp32 compute, no fast accumulation
                          (cuBLASLt 12.9+ on sm_90 only: anything else is refused by name)

Scale tensors, in the layouts cuBLASLt reads (cuBLAS docs, "scaling factor layouts"; TE's
Float8BlockScaling writes the same):
  VEC128_32F, an operand stored row-major (rows, K) with K the GEMM's reduction dimension, one scale
    per 1x128 block: block b = k / 128 of row r at sinv[b * rows + r], rows contiguous for each block
    ("M-major"; cuBLASLt needs rows % 4 == 0, which the GEMMs' multiples of 16 give).
    fp8_block_vec_count(rows, K) floats.
  BLK128x128_32F, W (OUT, IN) with IN the reduction dimension: row block p, column block b at
    grid[p * L4 + b], L4 = ceil(IN / 128) rounded up to a multiple of 4 ("K-major"; the padding entries
    are never read). W^T (IN, OUT), the dgrad operand, has the same blocks transposed: grid_t[b * L4t + p],
    L4t = ceil(OUT / 128) rounded up to 4. fp8_block_grid_count(OUT, IN) floats each.
The C reference keeps every operand's scale_invs row-major over (row block, reduction block) instead;
dev/cuda/fp8_block.cu maps one layout onto the other, and the values must match bit for bit.

Numerics, the reference's ref_fp8_block_cast bit for bit on the same bf16 values: a block's amax is
max |x| over the block's valid elements (a NaN wins; the zero padding of partial tiles changes
nothing), its scale fp8.h's fp8_compute_scale(amax, fmax, margin 0, previous 1) with exact operations
(fp8_scale_rule_device: fmax / amax; 1 for amax 0, inf or NaN; FLT_MAX past the float range), the
stored scale_inv its exact reciprocal, each code the exact product x * scale converted with
round-to-nearest-even and saturation (fp8_cast8). The health counts count every cast made (X and dY
cast both ways count twice, as the reference's do); fp32 rounding can put amax * scale one ulp above
fmax, which saturation counts (design.md: an artifact of block scales, no loss).
Deterministic: every output byte and scale is written by one thread; the amax slot and the counts take
one atomic each per thread block (block_commit_fp8).
*/
#ifndef LLMC_FP8_BLOCK_CUH
#define LLMC_FP8_BLOCK_CUH

#include <stdint.h>
#include "cuda_common.cuh"  // floatX, fp8e4, fp8e5, cudaLaunchCheck, FATAL
#include "packed.cuh"       // Fp8Tally, fp8_zero_codes4, fp8_fmax, float_to_bf16x8, block_commit_fp8
#include "fp8_scaling.cuh"  // fp8_cast8, fmul_exact, frcp_exact, fp8_scale_rule_device, amax2_to_bits, FP8_TILE,
                            // store_tile_transposed, fp8_check_fmt, fp8_check_grid, fp8_ptr_aligned
#include "matmul.cuh"       // matmul_run, MM_FP8B_*, matmul_fp8_check, matmul_fp8_check_scale

// A block is 128 long (and 128 x 128 for W): one FP8_TILE, so each tile kernel owns whole blocks.
#define FP8_BLOCK_LEN FP8_TILE

// Floats of the VEC128 scales of a (rows, k) operand and of the BLK128x128 grid of a (rows, k) weight
// (a grid row: ceil(k / 128) blocks, padded to a multiple of 4).
static inline size_t fp8_block_vec_count(int rows, int k) { return (size_t)rows * CEIL_DIV(k, FP8_BLOCK_LEN); }
static inline __host__ __device__ int fp8_block_grid_ld(int k) { return CEIL_DIV(CEIL_DIV(k, FP8_BLOCK_LEN), 4) * 4; }
static inline size_t fp8_block_grid_count(int rows, int k) { return (size_t)CEIL_DIV(rows, FP8_BLOCK_LEN) * fp8_block_grid_ld(k); }

// ---------------------------------------------------------------------------------------------
// device helpers

// max |x| of 8 bf16 (one 16-byte load) as float bits: __vmaxu2 on two bf16 |x| at once
__device__ __forceinline__ unsigned bf16x8_amax_bits(uint4 raw) {
    const unsigned m = __vmaxu2(__vmaxu2(raw.x & 0x7fff7fffu, raw.y & 0x7fff7fffu), __vmaxu2(raw.z & 0x7fff7fffu, raw.w & 0x7fff7fffu));
    return amax2_to_bits(m);
}

// The largest value over the 16 lanes of a half-warp (xor offsets below 16 stay inside it).
__device__ __forceinline__ unsigned half_warp_max(unsigned v) {
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// The largest |x| of each of the 128 x 128 tile's columns as float bits, for thread t < 128 (column
// c0 + t; 0 for the others), raw holding the thread's 8 columns of 8 rows as the tile kernels load them:
// the thread's rows, then the warp's 16 (two columns per word), then the 8 warps through col_part.
// Every thread of the block must call it.
__device__ __forceinline__ unsigned tile_col_amax_bits(const uint4 raw[8], unsigned (*col_part)[FP8_TILE]) {
    const int vc = threadIdx.x % 16, warp = threadIdx.x / 32;
    uint4 cm = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        cm.x = __vmaxu2(cm.x, raw[i].x & 0x7fff7fffu); cm.y = __vmaxu2(cm.y, raw[i].y & 0x7fff7fffu);
        cm.z = __vmaxu2(cm.z, raw[i].z & 0x7fff7fffu); cm.w = __vmaxu2(cm.w, raw[i].w & 0x7fff7fffu);
    }
    cm.x = __vmaxu2(cm.x, __shfl_xor_sync(0xffffffffu, cm.x, 16));
    cm.y = __vmaxu2(cm.y, __shfl_xor_sync(0xffffffffu, cm.y, 16));
    cm.z = __vmaxu2(cm.z, __shfl_xor_sync(0xffffffffu, cm.z, 16));
    cm.w = __vmaxu2(cm.w, __shfl_xor_sync(0xffffffffu, cm.w, 16));
    if (threadIdx.x % 32 < 16) {
        const unsigned words[4] = {cm.x, cm.y, cm.z, cm.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            col_part[warp][vc * 8 + 2 * k] = words[k] << 16;
            col_part[warp][vc * 8 + 2 * k + 1] = words[k] & 0xffff0000u;
        }
    }
    __syncthreads();
    unsigned bits = 0;
    if (threadIdx.x < FP8_TILE) {
#pragma unroll
        for (int w = 0; w < 8; w++) bits = max(bits, col_part[w][threadIdx.x]);
    }
    return bits;
}

// A block's scale from its amax bits: fp8_compute_scale(amax, fmax, 0, 1) with exact operations.
template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ float fp8_block_scale(unsigned amax_bits) {
    return fp8_scale_rule_device(amax_bits, fp8_fmax<FMT>(), 0, 1.0f);
}

// 8 bf16 of one row, each with its own column's scale, -> 8 codes (byte i = element i), counted into
// tally as fp8_cast8 counts (zeros cast to +-0 codes and are not underflows).
template <__nv_fp8_interpretation_t FMT>
__device__ __forceinline__ uint2 fp8_cast8_scales(uint4 raw, const float scale[8], Fp8Tally &tally) {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
    unsigned pairs[4], zeros = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        zeros += __popc(__vcmpeq2(w[i] & 0x7fff7fffu, 0u)) / 16;
        const float lo = fmul_exact(__uint_as_float(w[i] << 16), scale[2 * i]);
        const float hi = fmul_exact(__uint_as_float(w[i] & 0xffff0000u), scale[2 * i + 1]);
        tally.sat += (fabsf(lo) > fp8_fmax<FMT>()) + (fabsf(hi) > fp8_fmax<FMT>());
        pairs[i] = (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, FMT);
    }
    const uint2 codes = make_uint2(pairs[0] | (pairs[1] << 16), pairs[2] | (pairs[3] << 16));
    tally.under += fp8_zero_codes4(codes.x) + fp8_zero_codes4(codes.y) - zeros;
    return codes;
}

// ---------------------------------------------------------------------------------------------
// fp8_block_cast: one 128 x 128 tile per thread block of 256. Thread t holds 8 columns (16 B) of 8
// rows: columns c0 + 8 (t % 16) .., rows r0 + t / 16 + 16 i. A row's 128 columns are the 16 lanes of a
// half-warp, so its amax is a half-warp reduction; a column's 128 rows are spread over the 8 warps,
// so its amax goes through shared memory. The transposed codes are staged in the byte tile and
// written as whole lines (fp8_scaling.cuh's store_tile_transposed).

template <__nv_fp8_interpretation_t FMT>
__global__ void __launch_bounds__(256) fp8_block_cast_kernel(uint8_t *out, float *sinv, uint8_t *out_t, float *sinv_t,
                                                             const floatX *in, int rows, int cols, float *amax,
                                                             unsigned long long *counts) {
    __shared__ __align__(16) uint8_t tile[FP8_TILE][FP8_TILE];
    __shared__ unsigned col_part[8][FP8_TILE]; // per warp: each column's max |x| bits over the warp's 16 rows
    __shared__ float col_scale[FP8_TILE];
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE;
    const int vc = threadIdx.x % 16, lr0 = threadIdx.x / 16;
    const int c = c0 + vc * 8;
    uint4 raw[8];
#pragma unroll
    for (int i = 0; i < 8; i++) { // the tile's padding reads as zeros: no amax, no code written, no count
        const int r = r0 + lr0 + 16 * i;
        raw[i] = (r < rows && c < cols) ? *(const uint4 *)(in + (size_t)r * cols + c) : make_uint4(0, 0, 0, 0);
    }
    unsigned tile_bits = 0;
    float row_scale[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned bits = half_warp_max(bf16x8_amax_bits(raw[i]));
        tile_bits = max(tile_bits, bits);
        row_scale[i] = fp8_block_scale<FMT>(bits);
        const int r = r0 + lr0 + 16 * i;
        if (sinv != NULL && vc == 0 && r < rows) sinv[(size_t)blockIdx.x * rows + r] = frcp_exact(row_scale[i]);
    }
    Fp8Tally tally = {0, 0};
    unsigned dummy_amax = 0;
    if (out != NULL) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = r0 + lr0 + 16 * i;
            const uint2 o = fp8_cast8<FMT>(raw[i], row_scale[i], dummy_amax, tally);
            if (r < rows && c < cols) *(uint2 *)(out + (size_t)r * cols + c) = o;
        }
    }
    if (out_t != NULL) {
        const unsigned bits = tile_col_amax_bits(raw, col_part);
        if (threadIdx.x < FP8_TILE) {
            const float s = fp8_block_scale<FMT>(bits);
            col_scale[threadIdx.x] = s;
            const int cc = c0 + threadIdx.x;
            if (sinv_t != NULL && cc < cols) sinv_t[(size_t)blockIdx.y * cols + cc] = frcp_exact(s);
        }
        __syncthreads();
        float cs[8];
#pragma unroll
        for (int j = 0; j < 8; j++) cs[j] = col_scale[vc * 8 + j];
#pragma unroll
        for (int i = 0; i < 8; i++) *(uint2 *)&tile[lr0 + 16 * i][vc * 8] = fp8_cast8_scales<FMT>(raw[i], cs, tally);
        __syncthreads();
        store_tile_transposed(out_t, tile, r0, c0, rows, cols);
    }
    if (amax != NULL || counts != NULL) block_commit_fp8(amax, tile_bits, counts, tally);
}

// One read of bf16 in (rows, cols), 16-byte aligned, rows and cols multiples of 16 (the fp8 GEMMs'
// rule), fmt FP8_E4M3 or FP8_E5M2; each output may be NULL but not both codes:
//   out (rows, cols) codes in 1x128 blocks along cols, sinv (fp8_block_vec_count(rows, cols)) their VEC128
//   scale_invs; out_t (cols, rows) = the codes of in^T in 1x128 blocks along rows, sinv_t
//   (fp8_block_vec_count(cols, rows)) theirs;
//   *amax = max(*amax, max |in|) (atomic on the bits, as fp8_cast; NaN wins); counts[0] += underflows,
//   counts[1] += saturations of every cast made (both, if both codes are written).
void fp8_block_cast(void *out, float *sinv, void *out_t, float *sinv_t, int fmt, const floatX *in, int rows, int cols,
                    float *amax, unsigned long long *counts, cudaStream_t stream) {
    const char *fn = "fp8_block_cast";
    fp8_check_fmt(fn, fmt);
    if (out == NULL && out_t == NULL) FATAL("%s: neither out nor out_t is set: nothing to cast", fn);
    if ((out != NULL && sinv == NULL) || (out_t != NULL && sinv_t == NULL)) FATAL("%s: codes without their scale_inv buffer", fn);
    if (rows < 0 || cols < 0 || rows % 16 != 0 || cols % 16 != 0)
        FATAL("%s: shape (%d, %d): rows and cols must be non-negative multiples of 16", fn, rows, cols);
    if (!fp8_ptr_aligned(in, 16) || !fp8_ptr_aligned(out, 8) || !fp8_ptr_aligned(out_t, 16) || !fp8_ptr_aligned(sinv, 16) ||
        !fp8_ptr_aligned(sinv_t, 16))
        FATAL("%s: in, out_t and the scale_invs must be 16-byte aligned, out 8-byte (got %p %p %p %p %p)", fn, (const void *)in,
              out, out_t, (void *)sinv, (void *)sinv_t);
    if (rows == 0 || cols == 0) return;
    fp8_check_grid(fn, rows, cols, FP8_TILE);
    dim3 grid(CEIL_DIV(cols, FP8_TILE), CEIL_DIV(rows, FP8_TILE));
    uint8_t *o = (uint8_t *)out, *ot = (uint8_t *)out_t;
    if (fmt == FP8_E4M3) fp8_block_cast_kernel<__NV_E4M3><<<grid, 256, 0, stream>>>(o, sinv, ot, sinv_t, in, rows, cols, amax, counts);
    else fp8_block_cast_kernel<__NV_E5M2><<<grid, 256, 0, stream>>>(o, sinv, ot, sinv_t, in, rows, cols, amax, counts);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------
// fp8_block_cast_weight: one 128 x 128 block per thread block of 256, laid out as fp8_block_cast's
// tile. The fp32 master is rounded to bf16 first (round to nearest even), so the codes are those of
// the bf16 weights, as the per-tensor path casts bf16(master) (llmc/adamw.cuh).

template <bool FP32_IN>
__global__ void __launch_bounds__(256) fp8_block_cast_weight_kernel(uint8_t *out, float *grid, uint8_t *out_t, float *grid_t,
                                                                    const void *in, int rows, int cols, float *amax,
                                                                    unsigned long long *counts) {
    __shared__ __align__(16) uint8_t tile[FP8_TILE][FP8_TILE];
    __shared__ unsigned warp_bits[8];
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE;
    const int vc = threadIdx.x % 16, lr0 = threadIdx.x / 16;
    const int c = c0 + vc * 8;
    uint4 raw[8];
    unsigned bits = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = r0 + lr0 + 16 * i;
        raw[i] = make_uint4(0, 0, 0, 0);
        if (r < rows && c < cols) {
            const size_t at = (size_t)r * cols + c;
            if (FP32_IN) {
                float f[8];
                *(float4 *)&f[0] = *(const float4 *)((const float *)in + at);
                *(float4 *)&f[4] = *(const float4 *)((const float *)in + at + 4);
                raw[i] = float_to_bf16x8(f);
            } else {
                raw[i] = *(const uint4 *)((const floatX *)in + at);
            }
        }
        bits = max(bits, bf16x8_amax_bits(raw[i]));
    }
    bits = __reduce_max_sync(0xffffffffu, bits);
    if (threadIdx.x % 32 == 0) warp_bits[threadIdx.x / 32] = bits;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < 8; w++) bits = max(bits, warp_bits[w]);
    const float scale = fp8_block_scale<__NV_E4M3>(bits);
    if (threadIdx.x == 0) {
        const float s_inv = frcp_exact(scale);
        if (grid != NULL) grid[(size_t)blockIdx.y * fp8_block_grid_ld(cols) + blockIdx.x] = s_inv;
        if (grid_t != NULL) grid_t[(size_t)blockIdx.x * fp8_block_grid_ld(rows) + blockIdx.y] = s_inv;
    }
    Fp8Tally tally = {0, 0};
    unsigned dummy_amax = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int lr = lr0 + 16 * i, r = r0 + lr;
        const uint2 o = fp8_cast8<__NV_E4M3>(raw[i], scale, dummy_amax, tally);
        if (out != NULL && r < rows && c < cols) *(uint2 *)(out + (size_t)r * cols + c) = o;
        *(uint2 *)&tile[lr][vc * 8] = o;
    }
    if (out_t != NULL) {
        __syncthreads();
        store_tile_transposed(out_t, tile, r0, c0, rows, cols);
    }
    if (amax != NULL || counts != NULL) block_commit_fp8(amax, bits, counts, tally);
}

// W (rows = OUT, cols = IN), bf16 or (w_fp32) the fp32 master, 16-byte aligned, both dimensions
// multiples of 16, -> E4M3 in 128x128 blocks: out (OUT, IN) codes with grid (fp8_block_grid_count(OUT,
// IN), BLK128x128 layout), out_t (IN, OUT) = the same codes transposed with grid_t
// (fp8_block_grid_count(IN, OUT)), the same blocks' scale_invs transposed. Either pair may be NULL,
// not both. *amax and counts as fp8_block_cast's (W is cast once: W^T's codes are the same values,
// counted once).
void fp8_block_cast_weight(void *out, float *grid, void *out_t, float *grid_t, const void *w, int w_fp32, int rows, int cols,
                           float *amax, unsigned long long *counts, cudaStream_t stream) {
    const char *fn = "fp8_block_cast_weight";
    if (out == NULL && out_t == NULL) FATAL("%s: neither out nor out_t is set: nothing to cast", fn);
    if ((out != NULL && grid == NULL) || (out_t != NULL && grid_t == NULL)) FATAL("%s: codes without their scale grid", fn);
    if (rows < 0 || cols < 0 || rows % 16 != 0 || cols % 16 != 0)
        FATAL("%s: shape (%d, %d): rows and cols must be non-negative multiples of 16", fn, rows, cols);
    if (!fp8_ptr_aligned(w, 16) || !fp8_ptr_aligned(out, 8) || !fp8_ptr_aligned(out_t, 16) || !fp8_ptr_aligned(grid, 16) ||
        !fp8_ptr_aligned(grid_t, 16))
        FATAL("%s: w, out_t and the grids must be 16-byte aligned, out 8-byte (got %p %p %p %p %p)", fn, w, out, out_t,
              (void *)grid, (void *)grid_t);
    if (rows == 0 || cols == 0) return;
    fp8_check_grid(fn, rows, cols, FP8_TILE);
    dim3 g(CEIL_DIV(cols, FP8_TILE), CEIL_DIV(rows, FP8_TILE));
    uint8_t *o = (uint8_t *)out, *ot = (uint8_t *)out_t;
    if (w_fp32) fp8_block_cast_weight_kernel<true><<<g, 256, 0, stream>>>(o, grid, ot, grid_t, w, rows, cols, amax, counts);
    else fp8_block_cast_weight_kernel<false><<<g, 256, 0, stream>>>(o, grid, ot, grid_t, w, rows, cols, amax, counts);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------
// the block-scaled GEMMs: matmul.cuh's fp8 products (its header: TN form, which operand is A and B),
// each 128-long partial sum multiplied by its two blocks' scale_invs

// Block-scaled fp8 exists in cuBLASLt 12.9+ and on Hopper (sm_90) only. Checked once per process at the
// first call (the trainer drives one device per process), and refused naming the GEMM that asked.
static void matmul_fp8_block_check(const char *fn) {
    static int checked = 0;
    if (checked) return;
    const size_t version = cublasLtGetVersion();
    if (version < 120900) FATAL("%s: block-scaled fp8 GEMMs need cuBLASLt 12.9 or later; this process loaded %zu", fn, version);
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major != 9 || minor != 0)
        FATAL("%s: block-scaled fp8 GEMMs (cuBLASLt VEC128 / BLK128x128 scales) run on Hopper (sm_90) only; this GPU is sm_%d%d",
              fn, major, minor);
    checked = 1;
}

// fprop: y (N,OUT) = X W^T, x (N,IN) E4M3 with x_sinv its VEC128 scales (fp8_block_cast row-wise), w
// (OUT,IN) E4M3 with w_grid its BLK128x128 grid (fp8_block_cast_weight). Overwrites y.
void matmul_fp8_block_fprop(floatX *y, const fp8e4 *x, const fp8e4 *w, const float *x_sinv, const float *w_grid, int N, int IN,
                            int OUT, cudaStream_t stream) {
    matmul_fp8_block_check("matmul_fp8_block_fprop");
    matmul_fp8_check("matmul_fp8_block_fprop", N, IN, OUT, x, w, y);
    matmul_fp8_check_scale("matmul_fp8_block_fprop", x_sinv, w_grid);
    matmul_run(MM_FP8B_FPROP, OUT, N, IN, w, x, y, 0, w_grid, x_sinv, stream);
}

// dgrad: dx (N,IN) = dY W, dy (N,OUT) E5M2 with dy_sinv its VEC128 scales (fp8_block_cast row-wise),
// w_t = W^T (IN,OUT) E4M3 with w_t_grid its grid (fp8_block_cast_weight's out_t, grid_t). Overwrites dx.
void matmul_fp8_block_dgrad(floatX *dx, const fp8e5 *dy, const fp8e4 *w_t, const float *dy_sinv, const float *w_t_grid, int N,
                            int IN, int OUT, cudaStream_t stream) {
    matmul_fp8_block_check("matmul_fp8_block_dgrad");
    matmul_fp8_check("matmul_fp8_block_dgrad", N, IN, OUT, w_t, dy, dx);
    matmul_fp8_check_scale("matmul_fp8_block_dgrad", dy_sinv, w_t_grid);
    matmul_run(MM_FP8B_DGRAD, IN, N, OUT, w_t, dy, dx, 0, w_t_grid, dy_sinv, stream);
}

// wgrad: dw (OUT,IN) (+)= dY^T X, dy_t = dY^T (OUT,N) E5M2 and x_t = X^T (IN,N) E4M3, each with its VEC128
// scales along the tokens (fp8_block_cast's out_t, sinv_t of dY and X). accumulate adds the old dw:
// cuBLASLt (13.1, H200) rounds the product to bf16 first, dw = bf16(bf16(dY^T X) + dw), an error of up
// to 2^-8 |dY^T X| more than one rounding (dev/cuda/fp8_block.cu's bound), the same as summing bf16
// micro-step gradients.
void matmul_fp8_block_wgrad(floatX *dw, const fp8e5 *dy_t, const fp8e4 *x_t, const float *dy_t_sinv, const float *x_t_sinv,
                            int N, int IN, int OUT, int accumulate, cudaStream_t stream) {
    matmul_fp8_block_check("matmul_fp8_block_wgrad");
    matmul_fp8_check("matmul_fp8_block_wgrad", N, IN, OUT, x_t, dy_t, dw);
    matmul_fp8_check_scale("matmul_fp8_block_wgrad", dy_t_sinv, x_t_sinv);
    matmul_run(MM_FP8B_WGRAD, IN, OUT, N, x_t, dy_t, dw, accumulate ? 1 : 0, x_t_sinv, dy_t_sinv, stream);
}

#endif
