/*
SwiGLU, the Llama MLP's activation: each row of the w13 output is [g | u] (g = the first FF columns,
from w1; u = the last FF, from w3), and out = silu(g) * u with silu(g) = g / (1 + exp(-g)).
  swiglu_forward   out (N, FF) and/or its E4M3 copy = X of w2, with amax, and optionally that copy
                   transposed too (X^T for w2's wgrad, no transpose pass), or only the transposed copy
  swiglu_backward  din (N, 2*FF) = [dg | du] and/or its E5M2 copy = dY of w13, with amax, and
                   optionally that copy transposed too (dY^T for w13's wgrad, no transpose pass):
                   du = dout * silu(g),  dg = dout * u * sig(g) * (1 + g * (1 - sig(g)))
Elementwise, 16-byte vectors, fp32 math; the fp8 copy is cast from the rounded bf16 value
(llmc/packed.cuh says why). The grid's x covers one row's vectors and its y strides over rows, so no
64-bit division per element (the transposing variants: one 128 x 128 tile per block); each block
commits its amax once.
*/
#ifndef LLMC_SWIGLU_CUH
#define LLMC_SWIGLU_CUH

#include "cuda_common.cuh" // floatX, fp8 types, Fp8Cast, block_reduce, cudaCheck, FATAL
#include "packed.cuh" // 16-byte bf16 vectors, fp8x8 cast, block amax commit
#include "fp8_scaling.cuh" // FP8_TILE, store_tile_transposed (the transposed fp8 X and dY), fp8_check_grid

#define SWIGLU_THREADS 128

// ----------------------------------------------------------------------------------------------
// kernels

// What the two transposing kernels (the _t ones) start from: the amax and tally the block commits at
// the end, the fp8 cast's scale, and this thread's place in the block's tile.
typedef struct {
    uint32_t amax_bits;
    Fp8Tally tally;
    float scale;
    int r0, c0;     // the block's 128 x 128 tile of (tokens, columns) starts at row r0, column c0
    int vc, lr0, c; // this thread's 8 columns: tile column vc * 8, matrix column c, of tile rows lr0 + 16 * i
} SwigluTile;

__device__ __forceinline__ SwigluTile swiglu_tile(float scale) {
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE;
    const int vc = threadIdx.x % 16, lr0 = threadIdx.x / 16; // 16 threads x 8 values = one 128-column row
    SwigluTile t = {0, {0, 0}, scale, r0, c0, vc, lr0, c0 + vc * 8};
    return t;
}

// silu(g) * u of 8 elements: one function for both forward kernels, so that they compute the same
// bits (the tiled kernel's codes must be exactly the row kernel's)
__device__ __forceinline__ void swiglu8(float y[8], const float g[8], const float u[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void __launch_bounds__(SWIGLU_THREADS) swiglu_forward_kernel(
    floatX *__restrict__ out, const floatX *__restrict__ in, int N, int FF, Fp8Cast cast) {
    const int nvec = FF / 8;
    const int vi = blockIdx.x * blockDim.x + threadIdx.x;
    const float scale = cast.out != NULL ? *cast.scale : 1.0f;
    uint32_t amax_bits = 0;
    Fp8Tally tally = {0, 0};
    if (vi < nvec) {
        for (int row = blockIdx.y; row < N; row += gridDim.y) {
            const floatX *g_ptr = in + (size_t)row * 2 * FF + (size_t)vi * 8;
            float g[8], u[8], y[8];
            bf16x8_to_float(g, load16(g_ptr));
            bf16x8_to_float(u, load16(g_ptr + FF));
            swiglu8(y, g, u);
            uint4 packed = float_to_bf16x8(y);
            const size_t o = (size_t)row * FF + (size_t)vi * 8;
            if (out != NULL) store16(out + o, packed);
            if (cast.out != NULL) store8((fp8e4 *)cast.out + o, float_to_fp8x8<__NV_E4M3>(y, scale, tally));
            amax_bits = amax_bits_update(amax_bits, y);
        }
    }
    if (cast.amax != NULL || cast.counts != NULL) block_commit_fp8(cast.amax, amax_bits, cast.counts, tally); // every thread, even idle ones
}

// The same for a 128 x 128 tile of (tokens, columns) per block, also writing the E4M3 copy
// transposed: out_t (FF, N) = X^T, the operand of w2's wgrad, through the shared-memory tile of
// llmc/fp8_scaling.cuh (store_tile_transposed), so the backward needs no fp8_transpose of X. The row-
// major copy (cast.out, fprop's operand) may be NULL: -r 1's recompute needs only X^T. Needs
// cast.scale. lines (N % 16 == 0 and out_t 16-byte aligned, as the trainer's shapes always are): the
// transposed rows go out as whole lines; otherwise byte by byte (slow, for odd test shapes).
__global__ void __launch_bounds__(256) swiglu_forward_t_kernel(floatX *__restrict__ out, const floatX *__restrict__ in,
                                                               int N, int FF, Fp8Cast cast, uint8_t *__restrict__ out_t,
                                                               int lines) {
    __shared__ __align__(16) uint8_t tile[FP8_TILE][FP8_TILE];
    SwigluTile t = swiglu_tile(*cast.scale);
#pragma unroll 2
    for (int i = 0; i < FP8_TILE / 16; i++) {
        const int lr = t.lr0 + 16 * i, row = t.r0 + lr;
        uint2 q = make_uint2(0, 0); // outside the matrix: zeros, never stored
        if (row < N && t.c < FF) {
            const floatX *g_ptr = in + (size_t)row * 2 * FF + t.c;
            float g[8], u[8], y[8];
            bf16x8_to_float(g, load16(g_ptr));
            bf16x8_to_float(u, load16(g_ptr + FF));
            swiglu8(y, g, u);
            uint4 packed = float_to_bf16x8(y);
            const size_t o = (size_t)row * FF + t.c;
            if (out != NULL) store16(out + o, packed);
            q = float_to_fp8x8<__NV_E4M3>(y, t.scale, t.tally);
            if (cast.out != NULL) store8((fp8e4 *)cast.out + o, q);
            t.amax_bits = amax_bits_update(t.amax_bits, y);
        }
        *(uint2 *)&tile[lr][t.vc * 8] = q;
    }
    __syncthreads();
    if (lines) {
        store_tile_transposed(out_t, tile, t.r0, t.c0, N, FF);
    } else {
        for (int k = threadIdx.x; k < FP8_TILE * FP8_TILE; k += blockDim.x) {
            const int tc = k / FP8_TILE, lr = k % FP8_TILE, row = t.r0 + lr, col = t.c0 + tc;
            if (row < N && col < FF) out_t[(size_t)col * N + row] = tile[lr][tc];
        }
    }
    if (cast.amax != NULL || cast.counts != NULL) block_commit_fp8(cast.amax, t.amax_bits, cast.counts, t.tally);
}

// dg, du of 8 elements from g, u and dout
__device__ __forceinline__ void swiglu_grad8(float dg[8], float du[8], const float g[8], const float u[8],
                                             const float dy[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float sig = 1.0f / (1.0f + expf(-g[i]));
        const float silu = g[i] * sig;
        du[i] = dy[i] * silu;
        dg[i] = dy[i] * u[i] * (sig * (1.0f + g[i] * (1.0f - sig)));
    }
}

// din may be the same array as in (each element is read before it is written, by the same thread),
// which lets the trainer overwrite the w13 output it no longer needs; so neither is __restrict__.
__global__ void __launch_bounds__(SWIGLU_THREADS) swiglu_backward_kernel(
    floatX *din, const floatX *__restrict__ dout, const floatX *in, int N, int FF, Fp8Cast cast) {
    const int nvec = FF / 8;
    const int vi = blockIdx.x * blockDim.x + threadIdx.x;
    const float scale = cast.out != NULL ? *cast.scale : 1.0f;
    uint32_t amax_bits = 0;
    Fp8Tally tally = {0, 0};
    if (vi < nvec) {
        for (int row = blockIdx.y; row < N; row += gridDim.y) {
            const size_t gi = (size_t)row * 2 * FF + (size_t)vi * 8;
            float g[8], u[8], dy[8], dg[8], du[8];
            bf16x8_to_float(g, load16(in + gi));
            bf16x8_to_float(u, load16(in + gi + FF));
            bf16x8_to_float(dy, load16(dout + (size_t)row * FF + (size_t)vi * 8));
            swiglu_grad8(dg, du, g, u, dy);
            uint4 pg = float_to_bf16x8(dg), pu = float_to_bf16x8(du);
            if (din != NULL) {
                store16(din + gi, pg);
                store16(din + gi + FF, pu);
            }
            if (cast.out != NULL) {
                store8((fp8e5 *)cast.out + gi, float_to_fp8x8<__NV_E5M2>(dg, scale, tally));
                store8((fp8e5 *)cast.out + gi + FF, float_to_fp8x8<__NV_E5M2>(du, scale, tally));
            }
            amax_bits = amax_bits_update(amax_bits_update(amax_bits, dg), du);
        }
    }
    if (cast.amax != NULL || cast.counts != NULL) block_commit_fp8(cast.amax, amax_bits, cast.counts, tally);
}

// The same, for a 128 x 128 tile of (tokens, g columns) per block, also writing the E5M2 copy
// transposed: out_t (2*FF, N) = dY^T, the operand of w13's wgrad (its dg rows first, then its du
// rows), through the shared-memory tiles of llmc/fp8_scaling.cuh (store_tile_transposed). The
// delayed-scaling path only: needs cast.out, N % 16 == 0 and a 16-byte-aligned out_t.
__global__ void __launch_bounds__(256) swiglu_backward_t_kernel(floatX *din, const floatX *__restrict__ dout,
                                                                const floatX *in, int N, int FF, Fp8Cast cast,
                                                                uint8_t *out_t) {
    __shared__ __align__(16) uint8_t tile_g[FP8_TILE][FP8_TILE], tile_u[FP8_TILE][FP8_TILE];
    SwigluTile t = swiglu_tile(*cast.scale);
#pragma unroll 2
    for (int i = 0; i < FP8_TILE / 16; i++) {
        const int lr = t.lr0 + 16 * i, row = t.r0 + lr;
        uint2 qg = make_uint2(0, 0), qu = make_uint2(0, 0); // outside the matrix: zeros, never stored
        if (row < N && t.c < FF) {
            const size_t gi = (size_t)row * 2 * FF + t.c;
            float g[8], u[8], dy[8], dg[8], du[8];
            bf16x8_to_float(g, load16(in + gi));
            bf16x8_to_float(u, load16(in + gi + FF));
            bf16x8_to_float(dy, load16(dout + (size_t)row * FF + t.c));
            swiglu_grad8(dg, du, g, u, dy);
            uint4 pg = float_to_bf16x8(dg), pu = float_to_bf16x8(du);
            if (din != NULL) {
                store16(din + gi, pg);
                store16(din + gi + FF, pu);
            }
            qg = float_to_fp8x8<__NV_E5M2>(dg, t.scale, t.tally);
            qu = float_to_fp8x8<__NV_E5M2>(du, t.scale, t.tally);
            store8((fp8e5 *)cast.out + gi, qg);
            store8((fp8e5 *)cast.out + gi + FF, qu);
            t.amax_bits = amax_bits_update(amax_bits_update(t.amax_bits, dg), du);
        }
        *(uint2 *)&tile_g[lr][t.vc * 8] = qg;
        *(uint2 *)&tile_u[lr][t.vc * 8] = qu;
    }
    __syncthreads();
    store_tile_transposed(out_t, tile_g, t.r0, t.c0, N, FF);
    store_tile_transposed(out_t + (size_t)FF * N, tile_u, t.r0, t.c0, N, FF);
    if (cast.amax != NULL || cast.counts != NULL) block_commit_fp8(cast.amax, t.amax_bits, cast.counts, t.tally);
}

// ----------------------------------------------------------------------------------------------
// launchers

static void swiglu_check(const char *who, int FF, const void *p0, const void *p1, const void *p2, const Fp8Cast *cast) {
    if (FF <= 0 || FF % 8 != 0) FATAL("%s: FF = %d must be a positive multiple of 8 (16-byte vectors)", who, FF);
    check_aligned(p0, 16, "a bf16 tensor", who);
    check_aligned(p1, 16, "a bf16 tensor", who);
    check_aligned(p2, 16, "a bf16 tensor", who);
    check_fp8_cast(cast, who);
}

// in (N, 2*FF) = [g | u] per row; out (N, FF) = silu(g) * u, may be NULL (fp8 copy and/or amax only).
// out_t: NULL, or (with cast.scale) where the E4M3 copy also goes transposed, (FF, N) = X^T of w2;
// cast.out may then be NULL (only X^T). The codes, amax and counts are the same either way.
static void swiglu_forward(floatX *out, const floatX *in, int N, int FF, Fp8Cast cast, void *out_t, cudaStream_t stream) {
    swiglu_check("swiglu_forward", FF, out, in, NULL, &cast);
    if (out_t != NULL) {
        if (cast.scale == NULL) FATAL("swiglu_forward: a transposed fp8 copy (out_t) needs Fp8Cast.scale");
        fp8_check_grid("swiglu_forward (transposed fp8 copy)", N, FF, FP8_TILE);
    }
    if (N <= 0) return;
    if (out_t != NULL) {
        const int lines = N % 16 == 0 && fp8_ptr_aligned(out_t, 16);
        dim3 grid(CEIL_DIV(FF, FP8_TILE), CEIL_DIV(N, FP8_TILE));
        swiglu_forward_t_kernel<<<grid, 256, 0, stream>>>(out, in, N, FF, cast, (uint8_t *)out_t, lines);
    } else {
        dim3 grid = row_grid(FF / 8, SWIGLU_THREADS, N);
        swiglu_forward_kernel<<<grid, SWIGLU_THREADS, 0, stream>>>(out, in, N, FF, cast);
    }
    cudaLaunchCheck();
}

// dout (N, FF), in (N, 2*FF) the forward's input; din (N, 2*FF) = [dg | du], may be NULL and may be
// the same array as in. cast (E5M2) covers all of din. out_t: NULL, or (with cast.out) where the
// E5M2 copy also goes transposed, (2*FF, N); needs N % 16 == 0.
static void swiglu_backward(floatX *din, const floatX *dout, const floatX *in, int N, int FF, Fp8Cast cast,
                            void *out_t, cudaStream_t stream) {
    swiglu_check("swiglu_backward", FF, din, dout, in, &cast);
    if (out_t != NULL) {
        if (cast.out == NULL) FATAL("swiglu_backward: a transposed fp8 copy (out_t) needs the fp8 copy (cast.out)");
        if (N % 16 != 0) FATAL("swiglu_backward: N = %d must be a multiple of 16 for the transposed fp8 copy", N);
        fp8_check_grid("swiglu_backward (transposed fp8 copy)", N, FF, FP8_TILE);
        check_aligned(out_t, 16, "out_t", "swiglu_backward");
    }
    if (N <= 0) return;
    if (out_t != NULL) {
        dim3 grid(CEIL_DIV(FF, FP8_TILE), CEIL_DIV(N, FP8_TILE));
        swiglu_backward_t_kernel<<<grid, 256, 0, stream>>>(din, dout, in, N, FF, cast, (uint8_t *)out_t);
    } else {
        dim3 grid = row_grid(FF / 8, SWIGLU_THREADS, N);
        swiglu_backward_kernel<<<grid, SWIGLU_THREADS, 0, stream>>>(din, dout, in, N, FF, cast);
    }
    cudaLaunchCheck();
}

#endif
