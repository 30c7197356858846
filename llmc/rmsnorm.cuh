/*
RMSNorm (Llama): y = x / sqrt(mean(x^2) + eps) * w over each row of C; bf16 in and out, fp32 inside.
  rmsnorm_forward                 y (and/or its E4M3 copy = X of the next fp8 linear), rstd
  fused_residual_rmsnorm_forward  residual = a + b (bf16), then y of that residual: one read of a and
                                  b instead of an add kernel followed by a norm kernel
  rmsnorm_backward                dresidual += dx, dw += sum over rows; the E5M2 copy of the final
                                  dresidual is the dY of the fp8 linear (wo or w2) that produced it

Layout of the work: a block owns whole rows; each thread owns the same K 16-byte column vectors of
every row it visits, so w sits in registers for the block's lifetime and, in the backward, each
thread accumulates its columns' dw in registers across its rows. Blocks stride over rows (a
persistent grid): the next row's loads are issued before the current row's reduction, and the fp8
amax costs one atomic per block instead of one per row.

Determinism: every sum has a fixed order (the block reduction's tree; dw's partials per block, then
a second kernel that adds them in block order), so results are bit-identical from run to run. The
backward's block count depends only on N and C (not on the GPU), so its dw rounding does not change
with the machine either.
*/
#ifndef LLMC_RMSNORM_CUH
#define LLMC_RMSNORM_CUH

#include "cuda_common.cuh" // floatX, fp8 types, Fp8Cast, block_reduce, cudaCheck, FATAL
#include "packed.cuh" // 16-byte bf16 vectors, fp8x8 cast, block amax commit

// ----------------------------------------------------------------------------------------------
// kernels

// Loads the K column vectors this thread owns from one row (zeros past the row's end).
template <int K>
__device__ __forceinline__ void load_row_vectors(uint4 v[K], const floatX *__restrict__ row_ptr, int nvec) {
#pragma unroll
    for (int k = 0; k < K; k++) {
        int vi = threadIdx.x + k * blockDim.x;
        v[k] = vi < nvec ? load16(row_ptr + (size_t)vi * 8) : make_uint4(0, 0, 0, 0);
    }
}

// FUSED: x = bf16(a + b) is also stored to residual. Otherwise x = a and b is unused.
// Across the row reduction only the packed bf16 vectors stay live (4 registers per 8 values), and
// the next row is prefetched only when K == 1; with K >= 2 each thread already has 2K loads in flight.
template <int K, bool FUSED>
__global__ void __launch_bounds__(1024) rmsnorm_forward_kernel(
    floatX *residual, floatX *out, float *rstd, const floatX *__restrict__ a, const floatX *__restrict__ b,
    const floatX *__restrict__ w, int N, int C, float eps, Fp8Cast cast) {
    constexpr bool PREFETCH = K == 1;
    const int nvec = C / 8;
    uint4 wv[K];
    load_row_vectors<K>(wv, w, nvec);
    const float scale = cast.out != NULL ? *cast.scale : 1.0f;
    uint32_t amax_bits = 0;
    Fp8Tally tally = {0, 0};

    uint4 na[K], nb[K]; // the next row's vectors, loaded one iteration ahead (PREFETCH)
    int row = blockIdx.x;
    if (PREFETCH && row < N) {
        load_row_vectors<K>(na, a + (size_t)row * C, nvec);
        if (FUSED) load_row_vectors<K>(nb, b + (size_t)row * C, nvec);
    }
    for (; row < N; row += gridDim.x) {
        const size_t base = (size_t)row * C;
        uint4 xv[K], bv[K];
        if (PREFETCH) {
#pragma unroll
            for (int k = 0; k < K; k++) { xv[k] = na[k]; bv[k] = nb[k]; }
            const int next = row + gridDim.x;
            if (next < N) {
                load_row_vectors<K>(na, a + (size_t)next * C, nvec);
                if (FUSED) load_row_vectors<K>(nb, b + (size_t)next * C, nvec);
            }
        } else {
            load_row_vectors<K>(xv, a + base, nvec);
            if (FUSED) load_row_vectors<K>(bv, b + base, nvec);
        }

        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int vi = threadIdx.x + k * blockDim.x;
            float x[8];
            bf16x8_to_float(x, xv[k]);
            if (FUSED) {
                float bb[8];
                bf16x8_to_float(bb, bv[k]);
#pragma unroll
                for (int i = 0; i < 8; i++) x[i] += bb[i];
                // normalize the bf16 residual that is stored, as an unfused add + norm would
                xv[k] = float_to_bf16x8(x);
                if (vi < nvec) store16(residual + base + (size_t)vi * 8, xv[k]);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) ss += x[i] * x[i]; // zero past the row's end
        }
        ss = block_reduce<false>(ss);
        const float r = 1.0f / sqrtf(ss / (float)C + eps);
        if (rstd != NULL && threadIdx.x == 0) rstd[row] = r;

#pragma unroll
        for (int k = 0; k < K; k++) {
            const int vi = threadIdx.x + k * blockDim.x;
            if (vi >= nvec) continue;
            float x[8], wf[8], y[8];
            bf16x8_to_float(x, xv[k]);
            bf16x8_to_float(wf, wv[k]);
#pragma unroll
            for (int i = 0; i < 8; i++) y[i] = x[i] * r * wf[i];
            uint4 packed = float_to_bf16x8(y);
            if (out != NULL) store16(out + base + (size_t)vi * 8, packed);
            if (cast.out != NULL) store8((fp8e4 *)cast.out + base + (size_t)vi * 8, float_to_fp8x8<__NV_E4M3>(y, scale, tally));
            amax_bits = amax_bits_update(amax_bits, y);
        }
    }
    if (cast.amax != NULL || cast.counts != NULL) block_commit_fp8(cast.amax, amax_bits, cast.counts, tally);
}

// dx = rstd * (g - x * rstd^2 * mean(g * x)) with g = w * dout; dresidual += dx.
// dw_partial[blockIdx.x][c] = this block's sum over its rows of dout * x * rstd.
// Register budget as in the forward: packed vectors across the reduction, prefetch only for K == 1.
template <int K>
__global__ void __launch_bounds__(1024) rmsnorm_backward_kernel(
    floatX *dresidual, float *dw_partial, const floatX *__restrict__ dout, const floatX *__restrict__ x,
    const floatX *__restrict__ w, const float *__restrict__ rstd, int N, int C, Fp8Cast cast) {
    constexpr bool PREFETCH = K == 1;
    const int nvec = C / 8;
    uint4 wv[K];
    load_row_vectors<K>(wv, w, nvec);
    const float scale = cast.out != NULL ? *cast.scale : 1.0f;
    uint32_t amax_bits = 0;
    Fp8Tally tally = {0, 0};
    float dw_acc[K][8];
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int i = 0; i < 8; i++) dw_acc[k][i] = 0.0f;

    uint4 ndy[K], nx[K], ndr[K];
    float nr = 0.0f;
    int row = blockIdx.x;
    if (PREFETCH && row < N) {
        load_row_vectors<K>(ndy, dout + (size_t)row * C, nvec);
        load_row_vectors<K>(nx, x + (size_t)row * C, nvec);
        load_row_vectors<K>(ndr, dresidual + (size_t)row * C, nvec);
        nr = rstd[row];
    }
    for (; row < N; row += gridDim.x) {
        const size_t base = (size_t)row * C;
        uint4 cdy[K], cx[K], cdr[K];
        float r;
        if (PREFETCH) {
#pragma unroll
            for (int k = 0; k < K; k++) { cdy[k] = ndy[k]; cx[k] = nx[k]; cdr[k] = ndr[k]; }
            r = nr;
            const int next = row + gridDim.x;
            if (next < N) {
                load_row_vectors<K>(ndy, dout + (size_t)next * C, nvec);
                load_row_vectors<K>(nx, x + (size_t)next * C, nvec);
                load_row_vectors<K>(ndr, dresidual + (size_t)next * C, nvec);
                nr = rstd[next];
            }
        } else {
            load_row_vectors<K>(cdy, dout + base, nvec);
            load_row_vectors<K>(cx, x + base, nvec);
            load_row_vectors<K>(cdr, dresidual + base, nvec);
            r = rstd[row];
        }

        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            float dy[8], xf[8], wf[8];
            bf16x8_to_float(dy, cdy[k]);
            bf16x8_to_float(xf, cx[k]);
            bf16x8_to_float(wf, wv[k]);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                dot += (wf[i] * dy[i]) * xf[i];
                dw_acc[k][i] += dy[i] * (xf[i] * r);
            }
        }
        dot = block_reduce<false>(dot);
        const float coef = r * r * dot / (float)C;

#pragma unroll
        for (int k = 0; k < K; k++) {
            const int vi = threadIdx.x + k * blockDim.x;
            if (vi >= nvec) continue;
            float dy[8], xf[8], wf[8], dr[8];
            bf16x8_to_float(dy, cdy[k]);
            bf16x8_to_float(xf, cx[k]);
            bf16x8_to_float(wf, wv[k]);
            bf16x8_to_float(dr, cdr[k]);
#pragma unroll
            for (int i = 0; i < 8; i++) dr[i] += r * (wf[i] * dy[i] - xf[i] * coef);
            uint4 packed = float_to_bf16x8(dr);
            store16(dresidual + base + (size_t)vi * 8, packed);
            if (cast.out != NULL) store8((fp8e5 *)cast.out + base + (size_t)vi * 8, float_to_fp8x8<__NV_E5M2>(dr, scale, tally));
            amax_bits = amax_bits_update(amax_bits, dr);
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int vi = threadIdx.x + k * blockDim.x;
        if (vi >= nvec) continue;
        float4 *p = reinterpret_cast<float4 *>(dw_partial + (size_t)blockIdx.x * C + (size_t)vi * 8);
        p[0] = make_float4(dw_acc[k][0], dw_acc[k][1], dw_acc[k][2], dw_acc[k][3]);
        p[1] = make_float4(dw_acc[k][4], dw_acc[k][5], dw_acc[k][6], dw_acc[k][7]);
    }
    if (cast.amax != NULL || cast.counts != NULL) block_commit_fp8(cast.amax, amax_bits, cast.counts, tally);
}

// dw[c] += sum over g of partial[g][c], in a fixed order: 32 threads per column each add every
// 32nd partial in turn, then one thread adds those 32 in order. Block (32, 32) covers 32 columns.
__global__ void __launch_bounds__(1024) rmsnorm_dw_reduce_kernel(floatX *dw, const float *__restrict__ partial, int G, int C) {
    __shared__ float sums[32][33]; // +1: column reads by threadIdx.y == 0 avoid bank conflicts
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < C)
        for (int g = threadIdx.y; g < G; g += 32) s += partial[(size_t)g * C + c];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int j = 0; j < 32; j++) t += sums[j][threadIdx.x];
        dw[c] = __float2bfloat16_rn(__bfloat162float(dw[c]) + t);
    }
}

// ----------------------------------------------------------------------------------------------
// launchers

// K 16-byte vectors per thread and the block size for a row of C: K = 1 up to C = 8192 (1024
// threads), K = 2 up to C = 16384. Wider rows would not fit the registers of a 1024-thread block.
typedef struct { int K, threads; } RmsnormShape;

static RmsnormShape rmsnorm_shape(int C, const char *who) {
    if (C <= 0 || C % 8 != 0) FATAL("%s: C = %d must be a positive multiple of 8 (16-byte vectors of bf16)", who, C);
    int nvec = C / 8;
    for (int K = 1; K <= 2; K *= 2) {
        int threads = CEIL_DIV(CEIL_DIV(nvec, K), WARP_SIZE) * WARP_SIZE;
        if (threads <= 1024) { RmsnormShape s = {K, threads}; return s; }
    }
    FATAL("%s: C = %d is too wide (at most 16384)", who, C);
    RmsnormShape none = {0, 0};
    return none;
}

// Backward blocks: a function of N and C only (so dw rounds the same on every GPU). About 128K
// threads: one wave on an H100/H200 at the kernel's occupancy, and 16+ rows per block at N = 8192,
// which keeps the partial-dw scratch (G x C floats) a few MB.
#define RMSNORM_BWD_THREADS 131072
static int rmsnorm_backward_blocks(int N, int C) {
    RmsnormShape s = rmsnorm_shape(C, "rmsnorm_backward");
    int G = RMSNORM_BWD_THREADS / s.threads;
    if (G > N) G = N;
    return G < 1 ? 1 : G;
}

// Floats of scratch rmsnorm_backward needs for this N and C (the per-block dw partials).
static size_t rmsnorm_backward_scratch_floats(int N, int C) {
    return (size_t)rmsnorm_backward_blocks(N, C) * C;
}

// Forward grid: as many blocks as fit on the GPU at once (the grid does not change the results),
// from the occupancy calculator, asked once per kernel version and block size.
template <int K, bool FUSED>
static int rmsnorm_forward_grid(int threads, int N) {
    static int cached_threads = 0, cached_per_sm = 0;
    if (cached_threads != threads) {
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached_per_sm, rmsnorm_forward_kernel<K, FUSED>, threads, 0));
        if (cached_per_sm < 1) cached_per_sm = 1;
        cached_threads = threads;
    }
    long long grid = (long long)device_num_sms() * cached_per_sm;
    return (int)(grid < N ? grid : N);
}

static void rmsnorm_forward_launch(floatX *residual, floatX *out, float *rstd, const floatX *a, const floatX *b,
                                   const floatX *w, int N, int C, float eps, Fp8Cast cast, cudaStream_t stream,
                                   const char *who) {
    RmsnormShape s = rmsnorm_shape(C, who);
    check_aligned(residual, 16, "residual", who);
    check_aligned(out, 16, "out", who);
    check_aligned(a, 16, "input", who);
    check_aligned(b, 16, "input b", who);
    check_aligned(w, 16, "w", who);
    check_fp8_cast(&cast, who);
    if (N <= 0) return;
    const bool fused = b != NULL;
#define RMSNORM_FWD_CASE(KK)                                                                        \
    case KK:                                                                                        \
        if (fused)                                                                                  \
            rmsnorm_forward_kernel<KK, true><<<rmsnorm_forward_grid<KK, true>(s.threads, N), s.threads, 0, stream>>>( \
                residual, out, rstd, a, b, w, N, C, eps, cast);                                     \
        else                                                                                        \
            rmsnorm_forward_kernel<KK, false><<<rmsnorm_forward_grid<KK, false>(s.threads, N), s.threads, 0, stream>>>( \
                residual, out, rstd, a, b, w, N, C, eps, cast);                                     \
        break;
    switch (s.K) { RMSNORM_FWD_CASE(1) RMSNORM_FWD_CASE(2) }
#undef RMSNORM_FWD_CASE
    cudaLaunchCheck();
}

// out (N, C) may be NULL when only the fp8 copy (cast.out) and/or amax is wanted; rstd (N) may be NULL.
static void rmsnorm_forward(floatX *out, float *rstd, const floatX *x, const floatX *w, int N, int C, float eps,
                            Fp8Cast cast, cudaStream_t stream) {
    rmsnorm_forward_launch(NULL, out, rstd, x, NULL, w, N, C, eps, cast, stream, "rmsnorm_forward");
}

// residual = bf16(a + b) (N, C), then out = rmsnorm(residual) as rmsnorm_forward. residual and out
// must not alias a, b or w (those are read as __restrict__ through the read-only path).
static void fused_residual_rmsnorm_forward(floatX *residual, floatX *out, float *rstd, const floatX *a,
                                           const floatX *b, const floatX *w, int N, int C, float eps,
                                           Fp8Cast cast, cudaStream_t stream) {
    if (residual == NULL || b == NULL) FATAL("fused_residual_rmsnorm_forward: residual and b must be set");
    rmsnorm_forward_launch(residual, out, rstd, a, b, w, N, C, eps, cast, stream, "fused_residual_rmsnorm_forward");
}

// dresidual (N, C) += d(norm input); dw (C) += weight gradient (bf16, accumulates across calls);
// scratch holds rmsnorm_backward_scratch_floats(N, C) floats; cast (E5M2) gets the final dresidual.
static void rmsnorm_backward(floatX *dresidual, floatX *dw, float *scratch, const floatX *dout, const floatX *x,
                             const floatX *w, const float *rstd, int N, int C, Fp8Cast cast, cudaStream_t stream) {
    const char *who = "rmsnorm_backward";
    RmsnormShape s = rmsnorm_shape(C, who);
    check_aligned(dresidual, 16, "dresidual", who);
    check_aligned(dout, 16, "dout", who);
    check_aligned(x, 16, "x", who);
    check_aligned(w, 16, "w", who);
    check_aligned(scratch, 16, "scratch", who);
    check_fp8_cast(&cast, who);
    if (N <= 0) return;
    const int G = rmsnorm_backward_blocks(N, C);
#define RMSNORM_BWD_CASE(KK) \
    case KK: rmsnorm_backward_kernel<KK><<<G, s.threads, 0, stream>>>(dresidual, scratch, dout, x, w, rstd, N, C, cast); break;
    switch (s.K) { RMSNORM_BWD_CASE(1) RMSNORM_BWD_CASE(2) }
#undef RMSNORM_BWD_CASE
    cudaLaunchCheck();
    rmsnorm_dw_reduce_kernel<<<CEIL_DIV(C, 32), dim3(32, 32), 0, stream>>>(dw, scratch, G, C);
    cudaLaunchCheck();
}

#endif
