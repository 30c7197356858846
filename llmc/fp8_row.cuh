/*
fp8 row-wise scaling (issue 42; torchao's "rowwise" recipe, the definition the C reference's section
"fp8 row-wise scaling" in dev/test/llama_ref.h): every operand of a GEMM is cast with one scale per
row along that GEMM's reduction dimension, from the row's own amax (current scaling), rounded down to
a power of two, all in E4M3 (dY too, as torchao does). Block scaling with a block as long as the
reduction dimension:
  fprop  Y = X W^T     X per token (over IN),          W per output row (over IN)
  dgrad  dX = dY W     dY per token (over OUT),        W^T per row = W per input column (over OUT)
  wgrad  dW = dY^T X   dY^T per row = dY per column,   X^T per row = X per column (over the tokens)
  fp8_row_cast            bf16 (rows, cols), or the fp32 master rounded to bf16, -> E4M3 codes
                          (rows, cols) with one scale_inv per row, and/or the transposed codes (cols,
                          rows) with one per row of the transpose (per column of the input); the
                          tensor's amax slot and fp8 health counts as fp8_cast records them
  matmul_fp8_row_fprop / _dgrad / _wgrad   the row-scaled cuBLASLt GEMMs (llmc/matmul.cuh's kinds
                          MM_FP8R_*, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F): bf16 out, fp32 compute
  matmul_fp8_row_probe / matmul_fp8_row_check   whether this GPU's cuBLASLt runs them (a launch, not
                          the heuristic's word), refused by name where it does not

Scale vectors: the scale_invs of an operand stored row-major (rows, K), K the reduction dimension,
are rows floats, sinv[r] for row r: the layout OUTER_VEC_32F reads (cuBLASLt's A and B vectors have
M and N elements, and in matmul.cuh's TN form M and N count the rows of the row-major A and B).

Numerics, the reference's ref_fp8_row_cast bit for bit on the same bf16 values: a row's amax is max
|x| over the row (a NaN wins), its scale fp8.h's fp8_compute_scale(amax, 448, margin 0, previous 1)
with exact operations rounded down to a power of two (clearing the mantissa: the scale is a normal
float, fmax / FLT_MAX included), so x * scale and the stored 1 / scale are exact; each code is
x * scale converted with round-to-nearest-even and saturation (fp8_cast8; a power-of-two scale
never takes a finite value past 448). Counts: every cast made (X or dY cast both ways counts twice).

Three launches, two reads of the input (a row's scale needs the whole row before its first code, a
column's the whole column): the amaxes as bits (atomic max into the zeroed scale_inv vectors; max is
order-free, so deterministic), then each amax turned in place into its scale_inv, then the cast.
*/
#ifndef LLMC_FP8_ROW_CUH
#define LLMC_FP8_ROW_CUH

#include <stdint.h>
#include "cuda_common.cuh"  // floatX, fp8e4, cudaLaunchCheck, cudaMallocCheck, FATAL
#include "packed.cuh"       // Fp8Tally, fp8_fmax, float_to_bf16x8, block_commit_fp8
#include "fp8_scaling.cuh"  // fp8_cast8, frcp_exact, fp8_scale_rule_device, FP8_TILE, store_tile_transposed,
                            // fp8_check_grid, fp8_ptr_aligned
#include "fp8_block.cuh"    // bf16x8_amax_bits, half_warp_max, tile_col_amax_bits, fp8_cast8_scales (its tile layout)
#include "matmul.cuh"       // matmul_run, matmul_plan_build, matmul_launch, MM_FP8R_*, matmul_fp8_check

// ---------------------------------------------------------------------------------------------
// device helpers

// A row's scale from its amax bits: fp8_compute_scale(amax, 448, 0, 1) with exact operations, rounded
// down to a power of two. The rule returns a normal float (or 1), so clearing its mantissa is 2^floor(log2).
__device__ __forceinline__ float fp8_row_scale(unsigned amax_bits) {
    return __uint_as_float(__float_as_uint(fp8_scale_rule_device(amax_bits, FP8_E4M3_MAX, 0, 1.0f)) & 0xff800000u);
}

// 8 rows x 8 columns of the 128 x 128 tile (r0, c0) for thread t of 256, as fp8_block_cast's kernels
// hold them: columns c0 + 8 (t % 16) .., rows r0 + t / 16 + 16 i; the fp32 master rounded to bf16,
// the padding past rows / cols zeros.
template <bool FP32_IN>
__device__ __forceinline__ void fp8_row_load_tile(uint4 raw[8], const void *in, int r0, int c0, int rows, int cols) {
    const int c = c0 + (threadIdx.x % 16) * 8;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = r0 + threadIdx.x / 16 + 16 * i;
        raw[i] = make_uint4(0, 0, 0, 0);
        if (r >= rows || c >= cols) continue;
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
}

// ---------------------------------------------------------------------------------------------
// kernels: one 128 x 128 tile per thread block of 256

// max |x| of each row (into row_bits) and of each column (into col_bits) as float bits, each may be
// NULL; the tile's max into the amax slot.
template <bool FP32_IN>
__global__ void __launch_bounds__(256)
    fp8_row_amax_kernel(unsigned *row_bits, unsigned *col_bits, const void *in, int rows, int cols, float *amax) {
    __shared__ unsigned col_part[8][FP8_TILE]; // per warp: each column's max over the warp's 16 rows
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE, vc = threadIdx.x % 16;
    uint4 raw[8];
    fp8_row_load_tile<FP32_IN>(raw, in, r0, c0, rows, cols);
    unsigned tile_bits = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned bits = half_warp_max(bf16x8_amax_bits(raw[i]));
        tile_bits = max(tile_bits, bits);
        const int r = r0 + threadIdx.x / 16 + 16 * i;
        if (row_bits != NULL && vc == 0 && r < rows && bits != 0) atomicMax(&row_bits[r], bits);
    }
    if (col_bits != NULL) {
        const unsigned bits = tile_col_amax_bits(raw, col_part);
        const int c = c0 + threadIdx.x;
        if (threadIdx.x < FP8_TILE && c < cols && bits != 0) atomicMax(&col_bits[c], bits);
    }
    if (amax != NULL) block_commit_fp8(amax, tile_bits, NULL, Fp8Tally{0, 0});
}

// In place: the n1 amax bits at a and the n2 at b (either may be NULL) become their scale_invs.
__global__ void fp8_row_scale_inv_kernel(unsigned *a, int n1, unsigned *b, int n2) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned *p = i < n1 ? a + i : (i < n1 + n2 ? b + (i - n1) : NULL);
    if (p != NULL) *p = __float_as_uint(frcp_exact(fp8_row_scale(*p)));
}

// The cast: out (rows, cols) with row r's scale, out_t (cols, rows) with column c's (staged in the
// byte tile, written as whole lines); either may be NULL. Counts every cast made.
template <bool FP32_IN>
__global__ void __launch_bounds__(256)
    fp8_row_cast_kernel(uint8_t *out, const float *sinv, uint8_t *out_t, const float *sinv_t, const void *in, int rows,
                        int cols, unsigned long long *counts) {
    __shared__ __align__(16) uint8_t tile[FP8_TILE][FP8_TILE];
    __shared__ float col_scale[FP8_TILE];
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE, vc = threadIdx.x % 16, lr0 = threadIdx.x / 16;
    const int c = c0 + vc * 8;
    uint4 raw[8];
    fp8_row_load_tile<FP32_IN>(raw, in, r0, c0, rows, cols);
    Fp8Tally tally = {0, 0};
    unsigned dummy_amax = 0;
    if (out != NULL) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = r0 + lr0 + 16 * i;
            if (r >= rows || c >= cols) continue;
            const uint2 o = fp8_cast8<__NV_E4M3>(raw[i], frcp_exact(sinv[r]), dummy_amax, tally); // 1 / 2^-e: exact
            *(uint2 *)(out + (size_t)r * cols + c) = o;
        }
    }
    if (out_t != NULL) {
        if (threadIdx.x < FP8_TILE)
            col_scale[threadIdx.x] = c0 + threadIdx.x < cols ? frcp_exact(sinv_t[c0 + threadIdx.x]) : 1.0f;
        __syncthreads();
        float cs[8];
#pragma unroll
        for (int j = 0; j < 8; j++) cs[j] = col_scale[vc * 8 + j];
        // the tile's padding is zeros: its codes are +0 and counted as nothing
#pragma unroll
        for (int i = 0; i < 8; i++)
            *(uint2 *)&tile[lr0 + 16 * i][vc * 8] = fp8_cast8_scales<__NV_E4M3>(raw[i], cs, tally);
        __syncthreads();
        store_tile_transposed(out_t, tile, r0, c0, rows, cols);
    }
    if (counts != NULL) block_commit_fp8(NULL, 0, counts, tally);
}

// ---------------------------------------------------------------------------------------------
// host

// One cast of `in` (rows, cols), bf16 or (in_fp32) the fp32 master, 16-byte aligned, rows and cols
// multiples of 16, to E4M3 with one power-of-two scale per row: out (rows, cols) codes with sinv (rows
// floats) their scale_invs; and/or out_t (cols, rows), the codes of in^T, with sinv_t (cols floats),
// one per column of in. Each pair may be NULL, not both. *amax = max(*amax, max |in|) (atomic on the
// bits, NaN wins; may be NULL); counts[0] += underflows, counts[1] += saturations of every cast made
// (may be NULL).
void fp8_row_cast(void *out, float *sinv, void *out_t, float *sinv_t, const void *in, int in_fp32, int rows, int cols,
                  float *amax, unsigned long long *counts, cudaStream_t stream) {
    const char *fn = "fp8_row_cast";
    if (out == NULL && out_t == NULL) FATAL("%s: neither out nor out_t is set: nothing to cast", fn);
    if ((out != NULL && sinv == NULL) || (out_t != NULL && sinv_t == NULL))
        FATAL("%s: codes without their scale_inv vector", fn);
    if (rows < 0 || cols < 0 || rows % 16 != 0 || cols % 16 != 0)
        FATAL("%s: shape (%d, %d): rows and cols must be non-negative multiples of 16", fn, rows, cols);
    if (!fp8_ptr_aligned(in, 16) || !fp8_ptr_aligned(out, 8) || !fp8_ptr_aligned(out_t, 16) ||
        !fp8_ptr_aligned(sinv, 16) || !fp8_ptr_aligned(sinv_t, 16))
        FATAL("%s: in, out_t and the scale_invs must be 16-byte aligned, out 8-byte (got %p %p %p %p %p)", fn, in, out,
              out_t, (void *)sinv, (void *)sinv_t);
    if (rows == 0 || cols == 0) return;
    fp8_check_grid(fn, rows, cols, FP8_TILE);
    unsigned *rb = out != NULL ? (unsigned *)sinv : NULL, *cb = out_t != NULL ? (unsigned *)sinv_t : NULL;
    if (rb != NULL) cudaCheck(cudaMemsetAsync(rb, 0, (size_t)rows * sizeof(float), stream));
    if (cb != NULL) cudaCheck(cudaMemsetAsync(cb, 0, (size_t)cols * sizeof(float), stream));
    const dim3 grid(CEIL_DIV(cols, FP8_TILE), CEIL_DIV(rows, FP8_TILE));
    if (in_fp32) fp8_row_amax_kernel<true><<<grid, 256, 0, stream>>>(rb, cb, in, rows, cols, amax);
    else fp8_row_amax_kernel<false><<<grid, 256, 0, stream>>>(rb, cb, in, rows, cols, amax);
    cudaLaunchCheck();
    const int n1 = rb != NULL ? rows : 0, n2 = cb != NULL ? cols : 0;
    fp8_row_scale_inv_kernel<<<CEIL_DIV(n1 + n2, 256), 256, 0, stream>>>(rb, n1, cb, n2);
    cudaLaunchCheck();
    uint8_t *o = (uint8_t *)out, *ot = (uint8_t *)out_t;
    if (in_fp32) fp8_row_cast_kernel<true><<<grid, 256, 0, stream>>>(o, sinv, ot, sinv_t, in, rows, cols, counts);
    else fp8_row_cast_kernel<false><<<grid, 256, 0, stream>>>(o, sinv, ot, sinv_t, in, rows, cols, counts);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------
// the row-scaled GEMMs: matmul.cuh's fp8 products (its header: TN form, which operand is A and B),
// the fp32 sum of element (i, j) multiplied by A's row i scale_inv and B's row j scale_inv

// Whether cuBLASLt runs row-scaled GEMM `kind` (MM_FP8R_*) for D (m, n) = A (m rows of k) . B (n rows
// of k)^T on this GPU: each candidate of the heuristic is launched on zeroed operands until one runs
// (an offered algorithm can still refuse at launch). 1 if one ran; else 0, with cuBLASLt's answer
// in why. Uses its own plan, not the cached ones, and waits for its launch; initializes matmul.cuh
// (matmul_init does nothing the second time), as the trainer's start-up check runs before its GEMMs do.
static int matmul_fp8_row_probe(int kind, int m, int n, int k, int accumulate, char *why, size_t len) {
    matmul_init();
    snprintf(why, len, "ran");
    const size_t version = cublasLtGetVersion();
    if (version < 120900 || CUBLAS_VERSION < 120900) {
        snprintf(why, len, "needs cuBLASLt 12.9+ (OUTER_VEC_32F scales); loaded %zu, built with %d", version,
                 CUBLAS_VERSION);
        return 0;
    }
    const size_t ab = (size_t)(m + n) * k, d = (size_t)m * n * sizeof(floatX), scales = (size_t)(m + n) * sizeof(float);
    char *mem = (char *)cudaMallocCheck(ab + d + scales + 64, "the row-scaled GEMM probe");
    cudaCheck(cudaMemset(mem, 0, ab + d + scales + 64));
    const uint8_t *A = (const uint8_t *)mem, *B = A + (size_t)m * k;
    floatX *D = (floatX *)(mem + ab);
    const float *sa = (const float *)(mem + CEIL_DIV(ab + d, 16) * 16), *sb = sa + m;
    MatmulPlan p;
    const int align[4] = {matmul_ptr_alignment(A), matmul_ptr_alignment(B), matmul_ptr_alignment(D), 0};
    matmul_plan_build(&p, kind, m, n, k, accumulate, align, sa, sb);
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < p.num_algos && st != CUBLAS_STATUS_SUCCESS; i++) st = matmul_launch(&p, i, A, B, D, 0);
    if (st == CUBLAS_STATUS_SUCCESS) cudaCheck(cudaDeviceSynchronize());
    else if (p.num_algos == 0) snprintf(why, len, "the heuristic offers no algorithm");
    else snprintf(why, len, "all %d algorithms refused at launch: %s", p.num_algos, cublasLtGetStatusName(st));
    matmul_plan_destroy(&p);
    cudaCheck(cudaFree(mem));
    return st == CUBLAS_STATUS_SUCCESS;
}

// Row-scaled fp8 needs cuBLASLt 12.9+ and a GPU whose cuBLASLt has OUTER_VEC_32F kernels (cuBLAS's
// documentation lists them for Hopper, sm_90, only). Probed once per process at the first call (the
// trainer drives one device per process), all three kinds, and refused naming the caller.
static void matmul_fp8_row_check(const char *fn) {
    static int checked = 0;
    if (checked) return;
    const int kinds[3] = {MM_FP8R_FPROP, MM_FP8R_DGRAD, MM_FP8R_WGRAD};
    for (int i = 0; i < 3; i++) {
        char why[160];
        if (!matmul_fp8_row_probe(kinds[i], 64, 64, 64, kinds[i] == MM_FP8R_WGRAD, why, sizeof(why))) {
            int dev = 0, major = 0, minor = 0;
            cudaCheck(cudaGetDevice(&dev));
            cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
            cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
            FATAL("%s: row-scaled fp8 GEMMs (cuBLASLt OUTER_VEC_32F scales) do not run on this GPU"
                  " (sm_%d%d, cuBLASLt %zu): %s %s; use -fp8_grain tensor or block",
                  fn, major, minor, cublasLtGetVersion(), MATMUL_KIND_NAMES[kinds[i]], why);
        }
    }
    checked = 1;
}

// fprop: y (N,OUT) = X W^T, x (N,IN) E4M3 with x_sinv (N) its per-token scale_invs, w (OUT,IN) E4M3 with
// w_sinv (OUT) its per-row ones (fp8_row_cast row-wise, both). Fast accumulation. Overwrites y.
void matmul_fp8_row_fprop(floatX *y, const fp8e4 *x, const fp8e4 *w, const float *x_sinv, const float *w_sinv, int N,
                          int IN, int OUT, cudaStream_t stream) {
    matmul_fp8_row_check("matmul_fp8_row_fprop");
    matmul_fp8_check("matmul_fp8_row_fprop", N, IN, OUT, x, w, y);
    matmul_fp8_check_scale("matmul_fp8_row_fprop", x_sinv, w_sinv);
    matmul_run(MM_FP8R_FPROP, OUT, N, IN, w, x, y, 0, w_sinv, x_sinv, stream);
}

// dgrad: dx (N,IN) = dY W, dy (N,OUT) E4M3 with dy_sinv (N) per token (fp8_row_cast row-wise), w_t = W^T
// (IN,OUT) E4M3 with w_t_sinv (IN) per input column of W (fp8_row_cast's out_t of W). Overwrites dx.
void matmul_fp8_row_dgrad(floatX *dx, const fp8e4 *dy, const fp8e4 *w_t, const float *dy_sinv, const float *w_t_sinv,
                          int N, int IN, int OUT, cudaStream_t stream) {
    matmul_fp8_row_check("matmul_fp8_row_dgrad");
    matmul_fp8_check("matmul_fp8_row_dgrad", N, IN, OUT, w_t, dy, dx);
    matmul_fp8_check_scale("matmul_fp8_row_dgrad", dy_sinv, w_t_sinv);
    matmul_run(MM_FP8R_DGRAD, IN, N, OUT, w_t, dy, dx, 0, w_t_sinv, dy_sinv, stream);
}

// wgrad: dw (OUT,IN) (+)= dY^T X, dy_t = dY^T (OUT,N) and x_t = X^T (IN,N) E4M3, with dy_t_sinv (OUT) and
// x_t_sinv (IN) their per-column scale_invs over the tokens (fp8_row_cast's out_t of dY and X).
// accumulate adds the old dw (beta = 1).
void matmul_fp8_row_wgrad(floatX *dw, const fp8e4 *dy_t, const fp8e4 *x_t, const float *dy_t_sinv,
                          const float *x_t_sinv, int N, int IN, int OUT, int accumulate, cudaStream_t stream) {
    matmul_fp8_row_check("matmul_fp8_row_wgrad");
    matmul_fp8_check("matmul_fp8_row_wgrad", N, IN, OUT, x_t, dy_t, dw);
    matmul_fp8_check_scale("matmul_fp8_row_wgrad", dy_t_sinv, x_t_sinv);
    matmul_run(MM_FP8R_WGRAD, IN, OUT, N, x_t, dy_t, dw, accumulate ? 1 : 0, x_t_sinv, dy_t_sinv, stream);
}

#endif
