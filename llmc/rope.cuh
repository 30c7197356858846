/*
Rotary position embedding (RoPE), Meta / llm.c convention: within each head of q and k, the adjacent
pair (x[2i], x[2i+1]) rotates by the angle t * theta^(-2i/HS) at position t (0-based in its sequence):
  forward   (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)
  backward  (d0, d1) -> (d0 cos + d1 sin, -d0 sin + d1 cos)   (the transpose, i.e. inverse, rotation)
Both work in place on packed qkv rows (B, T, NH + 2*NKV, HS): the NH query heads and NKV key heads
rotate, the NKV value heads do not. The backward also writes the E5M2 copy of the WHOLE dqkv row
(dq, dk rotated and dv as is) with its amax: it is the dY of the qkv linear, and this pass is the
one read of dv that is left after attention's backward.

Document masking (-doc_mask 1): doc_pos (B, T), each token's position in its document
(llmc/attention.cuh's doc_positions), replaces t, so positions count from 0 at every document start;
NULL: t is the position in the row. The table covers every position either way (doc_pos[t] <= t < T).

The cos/sin table is computed once on the host in double precision (the angle t * theta^(-2i/HS)
reaches thousands of radians, where an fp32 angle would be off by ~1e-4) and stored as fp32.
*/
#ifndef LLMC_ROPE_CUH
#define LLMC_ROPE_CUH

#include <math.h>                // cos, sin for the table
#include "llama_config.h"         // LlamaConfig, rope_inv_freq
#include "cuda_common.cuh" // floatX, fp8 types, Fp8Cast, block_reduce, cudaCheck, FATAL
#include "packed.cuh" // 16-byte bf16 vectors, fp8x8 cast, block amax commit

#define ROPE_THREADS 128

// ----------------------------------------------------------------------------------------------
// kernel

// x covers the vectors of one row that this call touches, y strides over the B*T rows.
// freqs: (max_T, HS/2, 2) = cos, sin of pair i at position t.
template <bool BACKWARD>
__global__ void __launch_bounds__(ROPE_THREADS) rope_kernel(
    floatX *qkv, const float *__restrict__ freqs, const int *doc_pos, int BT, int T, int HS, int row_len, int nvec_rot,
    int nvec_cover, Fp8Cast cast) {
    const int vi = blockIdx.x * blockDim.x + threadIdx.x;
    const float scale = cast.out != NULL ? *cast.scale : 1.0f;
    uint32_t amax_bits = 0;
    Fp8Tally tally = {0, 0};
    if (vi < nvec_cover) {
        const int d = (vi * 8) % HS; // offset within the head; HS % 8 == 0, so one head per vector
        for (int row = blockIdx.y; row < BT; row += gridDim.y) {
            const size_t off = (size_t)row * row_len + (size_t)vi * 8;
            float v[8];
            bf16x8_to_float(v, load16(qkv + off));
            if (vi < nvec_rot) {
                const int t = doc_pos != NULL ? doc_pos[row] : row % T;
                const float4 *f = reinterpret_cast<const float4 *>(freqs + ((size_t)t * (HS / 2) + d / 2) * 2);
                const float4 f01 = f[0], f23 = f[1]; // (cos, sin) of 4 consecutive pairs
                const float cs[4][2] = {{f01.x, f01.y}, {f01.z, f01.w}, {f23.x, f23.y}, {f23.z, f23.w}};
#pragma unroll
                for (int p = 0; p < 4; p++) {
                    const float x0 = v[2 * p], x1 = v[2 * p + 1], c = cs[p][0], s = cs[p][1];
                    if (BACKWARD) { v[2 * p] = x0 * c + x1 * s; v[2 * p + 1] = x1 * c - x0 * s; }
                    else          { v[2 * p] = x0 * c - x1 * s; v[2 * p + 1] = x0 * s + x1 * c; }
                }
                store16(qkv + off, float_to_bf16x8(v)); // v now holds the rounded values
            }
            if (BACKWARD) {
                if (cast.out != NULL) store8((fp8e5 *)cast.out + off, float_to_fp8x8<__NV_E5M2>(v, scale, tally));
                amax_bits = amax_bits_update(amax_bits, v);
            }
        }
    }
    if (BACKWARD && (cast.amax != NULL || cast.counts != NULL)) block_commit_fp8(cast.amax, amax_bits, cast.counts, tally);
}

// ----------------------------------------------------------------------------------------------
// launchers

// Floats in the table rope_freqs writes: max_T * (HS/2) pairs of (cos, sin).
static size_t rope_freqs_floats(int HS, int max_T) { return (size_t)max_T * HS; }

// Fills freqs_device (rope_freqs_floats(HS, max_T) floats) once, from the model's theta and RoPE
// scaling (rope_inv_freq); synchronous.
static void rope_freqs(float *freqs_device, const LlamaConfig *c, int max_T) {
    int HS = c->C / c->NH;
    if (HS <= 0 || HS % 8 != 0) FATAL("rope_freqs: head size %d must be a positive multiple of 8", HS);
    size_t n = rope_freqs_floats(HS, max_T);
    float *h = (float *)mallocCheck(n * sizeof(float));
    for (int t = 0; t < max_T; t++) {
        for (int i = 0; i < HS / 2; i++) {
            double angle = (double)t * rope_inv_freq(c, i, HS);
            h[((size_t)t * (HS / 2) + i) * 2] = (float)cos(angle);
            h[((size_t)t * (HS / 2) + i) * 2 + 1] = (float)sin(angle);
        }
    }
    cudaCheck(cudaMemcpy(freqs_device, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
}

static void rope_check(const char *who, const floatX *qkv, const float *freqs, int HS, const Fp8Cast *cast) {
    if (HS <= 0 || HS % 8 != 0) FATAL("%s: head size %d must be a positive multiple of 8 (16-byte vectors)", who, HS);
    check_aligned(qkv, 16, "qkv", who);
    check_aligned(freqs, 16, "freqs", who);
    check_fp8_cast(cast, who);
}

// qkv (B, T, NH + 2*NKV, HS), in place; freqs from rope_freqs with max_T >= T; doc_pos (B, T) or NULL.
static void rope_forward(floatX *qkv, const float *freqs, const int *doc_pos, int B, int T, int NH, int NKV, int HS,
                         cudaStream_t stream) {
    Fp8Cast none = {NULL, NULL, NULL, NULL};
    rope_check("rope_forward", qkv, freqs, HS, &none);
    int BT = B * T;
    if (BT <= 0) return;
    int nvec_rot = (NH + NKV) * HS / 8;
    dim3 grid = row_grid(nvec_rot, ROPE_THREADS, BT);
    rope_kernel<false><<<grid, ROPE_THREADS, 0, stream>>>(qkv, freqs, doc_pos, BT, T, HS, (NH + 2 * NKV) * HS, nvec_rot, nvec_rot, none);
    cudaLaunchCheck();
}

// dqkv (B, T, NH + 2*NKV, HS), in place: dq and dk rotate back (by the forward's doc_pos); cast (E5M2)
// covers the whole row.
static void rope_backward(floatX *dqkv, const float *freqs, const int *doc_pos, int B, int T, int NH, int NKV, int HS,
                          Fp8Cast cast, cudaStream_t stream) {
    rope_check("rope_backward", dqkv, freqs, HS, &cast);
    int BT = B * T;
    if (BT <= 0) return;
    int row_len = (NH + 2 * NKV) * HS;
    int nvec_rot = (NH + NKV) * HS / 8;
    // dv needs reading only when it is cast or measured
    int nvec_cover = (cast.out != NULL || cast.amax != NULL) ? row_len / 8 : nvec_rot;
    dim3 grid = row_grid(nvec_cover, ROPE_THREADS, BT);
    rope_kernel<true><<<grid, ROPE_THREADS, 0, stream>>>(dqkv, freqs, doc_pos, BT, T, HS, row_len, nvec_rot, nvec_cover, cast);
    cudaLaunchCheck();
}

#endif
