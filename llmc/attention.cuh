/*
Causal grouped-query attention (GQA), forward and backward, and the dispatch between cuDNN's fused
flash attention (llmc/cudnn_att.cuh, compiled in with -DENABLE_CUDNN) and the plain kernels here.

Math (dev/test/README.md): query head h reads key/value head h / (NH/NKV); scores are
s[t][u] = q_t . k_u / sqrt(HS) for u <= t; out_t = sum_u softmax(s[t])_u v_u;
stats[b][h][t] = log-sum-exp of s[t] (what cuDNN's Stats output is), kept for the backward.
Backward, with P = exp(s - stats) and D_t = dO_t . out_t (= sum_u P_tu dP_tu):
dP_tu = dO_t . v_u, dS_tu = P_tu (dP_tu - D_t), dq_t = scale sum_u dS_tu k_u,
dk_u = scale sum_{h in group, t >= u} dS_tu q_t, dv_u = sum_{h in group, t >= u} P_tu dO_t.

Layouts: qkv (B, T, NH + 2*NKV, HS) bf16 packed, post-RoPE (heads 0..NH-1 are q, then NKV k heads,
then NKV v heads); out (B, T, NH*HS) bf16; stats (B, NH, T) fp32; dqkv like qkv.

Document masking (-doc_mask 1, dev/results/doc_mask/design.md): doc_pos (B, T) int32 holds each
token's position in its document (doc_positions makes it on the GPU from the tokens, by
llmc/doc_mask.h's rule); query t then sees only the keys t - doc_pos[t] .. t, its document's. NULL:
causal over the whole row. A document's start, t - doc_pos[t], never decreases along a row, so a block
of queries needs no key before its first query's start, and a block of keys no query past the first
query tile whose start lies beyond its last key. The plain kernels take doc_pos; cuDNN takes the same
mask as doc_bias (B, 1, T, T) bf16, which doc_bias_forward writes from doc_pos: 0 for a query's keys
from its document's start on, ATT_DOC_BIAS_MASKED before it, added to the scaled scores ahead of the
causal mask (llmc/cudnn_att.cuh). attention_forward / attention_backward send a document-masked call to
cuDNN when it is given doc_bias and cuDNN takes the shape, else to the plain kernels.

The plain kernels: correct for any T (no tiling constraint on T), any HS <= 256, any NH % NKV == 0.
They are the reference the fused path is tested against (dev/cuda/attention.cu) and the fallback for
shapes or machines cuDNN does not cover. Flash-style: nothing T x T is stored. A block stages tiles of
32 keys (or queries) in shared memory; one warp walks one query (or key) row at a time, lane j scores
tile row j with a full dot product (no warp reduction per score), and each lane owns HS/32 of the row's
output dims. Everything accumulates in fp32, in a fixed order, without atomics: the backward is
bitwise deterministic (dK/dV of a kv head loop over its group's query heads inside one block).
*/
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "cuda_common.cuh"
#ifdef ENABLE_CUDNN
#include "cudnn_att.cuh" // cudnn_att_forward, cudnn_att_backward: cuDNN backend graphs, cached per shape
#endif

#define ATT_TILE 32                      // keys (forward, dQ) or queries (dK/dV) per shared tile: lane j <-> tile row j
#define ATT_ROWS 16                      // query rows (forward, dQ) or key rows (dK/dV) per block
#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * WARP_SIZE)
#define ATT_ROWS_PER_WARP (ATT_ROWS / ATT_WARPS)
#define ATT_MAX_HS 256
#define ATT_DIMS_PER_LANE (ATT_MAX_HS / WARP_SIZE) // lane owns head dims d = lane + 32*c

static_assert(ATT_ROWS % ATT_WARPS == 0, "each warp owns ATT_ROWS / ATT_WARPS rows");
static_assert(ATT_THREADS == 4 * ATT_TILE, "the dK/dV kernel computes D with 4 threads per query of a tile");
static_assert(ATT_ROWS <= ATT_TILE, "a dK/dV block's keys fit in the first query tile it visits");

// Row stride (in bf16) of tiles that lane j reads along row j: an odd number of 4-byte words per row,
// so the 32 lanes reading the same column hit 32 different shared-memory banks.
static __host__ __device__ int att_tile_stride(int HS) { return (HS + 3) / 4 * 4 + 2; }

// The first key query t of row b sees: its document's start under document masking, else the row's first.
static __device__ __forceinline__ int att_first_key(const int *doc_pos, int b, int T, int t) {
    return doc_pos != NULL ? t - doc_pos[(size_t)b * T + t] : 0;
}

// ---------------------------------------------------------------------------------------------------
// forward: grid (ceil(T / ATT_ROWS), NH, B); online softmax over key tiles

__global__ void __launch_bounds__(ATT_THREADS)
attention_forward_plain_kernel(floatX *out, float *stats, const floatX *qkv, const int *doc_pos, int T, int NH, int NKV, int HS,
                               float scale) {
    extern __shared__ float4 att_smem_fwd[]; // float4: 16-byte aligned
    const int q0 = blockIdx.x * ATT_ROWS, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (NH / NKV), KS = att_tile_stride(HS);
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const size_t tok = (size_t)(NH + 2 * NKV) * HS; // elements per token of qkv
    const floatX *q_g = qkv + (size_t)b * T * tok + (size_t)h * HS;
    const floatX *k_g = qkv + (size_t)b * T * tok + (size_t)(NH + hk) * HS;
    const floatX *v_g = qkv + (size_t)b * T * tok + (size_t)(NH + NKV + hk) * HS;
    float *q_s = (float *)att_smem_fwd;               // (ATT_ROWS, HS) this block's queries
    floatX *k_s = (floatX *)(q_s + ATT_ROWS * HS);     // (ATT_TILE, KS) keys, read lane-per-key
    floatX *v_s = k_s + ATT_TILE * KS;                 // (ATT_TILE, HS) values, read lane-per-dim

    for (int i = threadIdx.x; i < ATT_ROWS * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS;
        q_s[i] = q0 + r < T ? __bfloat162float(q_g[(size_t)(q0 + r) * tok + d]) : 0.0f;
    }
    float m[ATT_ROWS_PER_WARP], l[ATT_ROWS_PER_WARP], o[ATT_ROWS_PER_WARP][ATT_DIMS_PER_LANE];
    int first[ATT_ROWS_PER_WARP]; // each row's first key
    #pragma unroll
    for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
        const int t = q0 + warp + i * ATT_WARPS;
        first[i] = t < T ? att_first_key(doc_pos, b, T, t) : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
        #pragma unroll
        for (int c = 0; c < ATT_DIMS_PER_LANE; c++) o[i][c] = 0.0f;
    }
    const int last_q = min(T, q0 + ATT_ROWS) - 1;
    for (int k0 = att_first_key(doc_pos, b, T, q0) / ATT_TILE * ATT_TILE; k0 <= last_q; k0 += ATT_TILE) {
        __syncthreads(); // the previous tile is consumed (and q_s is written)
        for (int i = threadIdx.x; i < ATT_TILE * HS; i += blockDim.x) {
            int j = i / HS, d = i % HS, u = k0 + j;
            k_s[j * KS + d] = u < T ? k_g[(size_t)u * tok + d] : __float2bfloat16(0.0f);
            v_s[j * HS + d] = u < T ? v_g[(size_t)u * tok + d] : __float2bfloat16(0.0f);
        }
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
            const int r = warp + i * ATT_WARPS, t = q0 + r;
            if (t >= T || k0 > t || k0 + ATT_TILE <= first[i]) continue; // warp-uniform
            float score = -INFINITY;
            if (k0 + lane <= t && k0 + lane >= first[i]) {
                const float *qr = q_s + r * HS;
                const floatX *kr = k_s + lane * KS;
                float acc = 0.0f;
                #pragma unroll 8
                for (int d = 0; d < HS; d++) acc += qr[d] * __bfloat162float(kr[d]);
                score = acc * scale;
            }
            // the first tile visited holds key first[i] <= t, every later one key k0 <= t, so m_new is
            // finite; exp(-inf) = 0 handles the first tile and masked keys
            const float m_new = fmaxf(m[i], warp_reduce_max(score));
            const float corr = expf(m[i] - m_new);
            const float p = expf(score - m_new);
            l[i] = l[i] * corr + warp_reduce_sum(p);
            m[i] = m_new;
            #pragma unroll
            for (int c = 0; c < ATT_DIMS_PER_LANE; c++) o[i][c] *= corr;
            const int nj = min(ATT_TILE, t - k0 + 1);
            for (int j = max(0, first[i] - k0); j < nj; j++) {
                const float pj = __shfl_sync(0xffffffff, p, j);
                const floatX *vr = v_s + j * HS;
                #pragma unroll
                for (int c = 0; c < ATT_DIMS_PER_LANE; c++) {
                    const int d = lane + c * WARP_SIZE;
                    if (d < HS) o[i][c] += pj * __bfloat162float(vr[d]);
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
        const int t = q0 + warp + i * ATT_WARPS;
        if (t >= T) continue;
        floatX *out_t = out + ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
        const float inv_l = 1.0f / l[i];
        #pragma unroll
        for (int c = 0; c < ATT_DIMS_PER_LANE; c++) {
            const int d = lane + c * WARP_SIZE;
            if (d < HS) out_t[d] = __float2bfloat16(o[i][c] * inv_l);
        }
        if (lane == 0) stats[((size_t)b * NH + h) * T + t] = m[i] + logf(l[i]);
    }
}

// ---------------------------------------------------------------------------------------------------
// backward, dQ: grid (ceil(T / ATT_ROWS), NH, B); the forward's loop with dS in place of P

__global__ void __launch_bounds__(ATT_THREADS)
attention_backward_dq_kernel(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out, const float *stats,
                             const int *doc_pos, int T, int NH, int NKV, int HS, float scale) {
    extern __shared__ float4 att_smem_dq[];
    const int q0 = blockIdx.x * ATT_ROWS, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (NH / NKV), KS = att_tile_stride(HS);
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const size_t tok = (size_t)(NH + 2 * NKV) * HS;
    const floatX *q_g = qkv + (size_t)b * T * tok + (size_t)h * HS;
    const floatX *k_g = qkv + (size_t)b * T * tok + (size_t)(NH + hk) * HS;
    const floatX *v_g = qkv + (size_t)b * T * tok + (size_t)(NH + NKV + hk) * HS;
    const floatX *do_g = dout + (size_t)b * T * NH * HS + (size_t)h * HS;
    const floatX *o_g = out + (size_t)b * T * NH * HS + (size_t)h * HS;
    float *q_s = (float *)att_smem_dq;                 // (ATT_ROWS, HS)
    float *do_s = q_s + ATT_ROWS * HS;                  // (ATT_ROWS, HS)
    floatX *k_s = (floatX *)(do_s + ATT_ROWS * HS);     // (ATT_TILE, KS) read lane-per-key and lane-per-dim
    floatX *v_s = k_s + ATT_TILE * KS;                  // (ATT_TILE, KS) read lane-per-key

    for (int i = threadIdx.x; i < ATT_ROWS * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS, t = q0 + r;
        q_s[i] = t < T ? __bfloat162float(q_g[(size_t)t * tok + d]) : 0.0f;
        do_s[i] = t < T ? __bfloat162float(do_g[(size_t)t * NH * HS + d]) : 0.0f;
    }
    __syncthreads();
    float lse[ATT_ROWS_PER_WARP], D[ATT_ROWS_PER_WARP], dq[ATT_ROWS_PER_WARP][ATT_DIMS_PER_LANE];
    int first[ATT_ROWS_PER_WARP]; // each row's first key
    #pragma unroll
    for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
        const int r = warp + i * ATT_WARPS, t = q0 + r;
        first[i] = t < T ? att_first_key(doc_pos, b, T, t) : 0;
        float partial = 0.0f;
        if (t < T) {
            for (int d = lane; d < HS; d += WARP_SIZE) partial += do_s[r * HS + d] * __bfloat162float(o_g[(size_t)t * NH * HS + d]);
        }
        D[i] = warp_reduce_sum(partial);
        lse[i] = t < T ? stats[((size_t)b * NH + h) * T + t] : 0.0f;
        #pragma unroll
        for (int c = 0; c < ATT_DIMS_PER_LANE; c++) dq[i][c] = 0.0f;
    }
    const int last_q = min(T, q0 + ATT_ROWS) - 1;
    for (int k0 = att_first_key(doc_pos, b, T, q0) / ATT_TILE * ATT_TILE; k0 <= last_q; k0 += ATT_TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_TILE * HS; i += blockDim.x) {
            int j = i / HS, d = i % HS, u = k0 + j;
            k_s[j * KS + d] = u < T ? k_g[(size_t)u * tok + d] : __float2bfloat16(0.0f);
            v_s[j * KS + d] = u < T ? v_g[(size_t)u * tok + d] : __float2bfloat16(0.0f);
        }
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
            const int r = warp + i * ATT_WARPS, t = q0 + r;
            if (t >= T || k0 > t || k0 + ATT_TILE <= first[i]) continue; // warp-uniform
            float ds = 0.0f;
            if (k0 + lane <= t && k0 + lane >= first[i]) {
                const float *qr = q_s + r * HS, *dor = do_s + r * HS;
                const floatX *kr = k_s + lane * KS, *vr = v_s + lane * KS;
                float qk = 0.0f, dp = 0.0f;
                #pragma unroll 8
                for (int d = 0; d < HS; d++) {
                    qk += qr[d] * __bfloat162float(kr[d]);
                    dp += dor[d] * __bfloat162float(vr[d]);
                }
                const float p = expf(qk * scale - lse[i]);
                ds = p * (dp - D[i]);
            }
            const int nj = min(ATT_TILE, t - k0 + 1);
            for (int j = max(0, first[i] - k0); j < nj; j++) {
                const float dsj = __shfl_sync(0xffffffff, ds, j);
                const floatX *kr = k_s + j * KS;
                #pragma unroll
                for (int c = 0; c < ATT_DIMS_PER_LANE; c++) {
                    const int d = lane + c * WARP_SIZE;
                    if (d < HS) dq[i][c] += dsj * __bfloat162float(kr[d]);
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
        const int t = q0 + warp + i * ATT_WARPS;
        if (t >= T) continue;
        floatX *dq_t = dqkv + ((size_t)b * T + t) * tok + (size_t)h * HS;
        #pragma unroll
        for (int c = 0; c < ATT_DIMS_PER_LANE; c++) {
            const int d = lane + c * WARP_SIZE;
            if (d < HS) dq_t[d] = __float2bfloat16(dq[i][c] * scale);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// backward, dK and dV: grid (ceil(T / ATT_ROWS), NKV, B). A block owns ATT_ROWS keys of one kv head and
// loops over the query heads of its group and the query tiles at or after its keys: the GQA sum happens
// in registers, in a fixed order, so no atomics and no second pass.

__global__ void __launch_bounds__(ATT_THREADS)
attention_backward_dkdv_kernel(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out, const float *stats,
                               const int *doc_pos, int T, int NH, int NKV, int HS, float scale) {
    extern __shared__ float4 att_smem_dkdv[];
    const int u0 = blockIdx.x * ATT_ROWS, hk = blockIdx.y, b = blockIdx.z;
    const int group = NH / NKV, KS = att_tile_stride(HS);
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const size_t tok = (size_t)(NH + 2 * NKV) * HS;
    const floatX *k_g = qkv + (size_t)b * T * tok + (size_t)(NH + hk) * HS;
    const floatX *v_g = qkv + (size_t)b * T * tok + (size_t)(NH + NKV + hk) * HS;
    float *k_s = (float *)att_smem_dkdv;                // (ATT_ROWS, HS) this block's keys
    float *v_s = k_s + ATT_ROWS * HS;                   // (ATT_ROWS, HS) and values
    floatX *q_s = (floatX *)(v_s + ATT_ROWS * HS);      // (ATT_TILE, KS) queries, read lane-per-query and lane-per-dim
    floatX *do_s = q_s + ATT_TILE * KS;                 // (ATT_TILE, KS) their dO
    float *lse_s = (float *)(do_s + ATT_TILE * KS);     // (ATT_TILE)
    float *D_s = lse_s + ATT_TILE;                      // (ATT_TILE) dO . out per query

    for (int i = threadIdx.x; i < ATT_ROWS * HS; i += blockDim.x) {
        int r = i / HS, d = i % HS, u = u0 + r;
        k_s[i] = u < T ? __bfloat162float(k_g[(size_t)u * tok + d]) : 0.0f;
        v_s[i] = u < T ? __bfloat162float(v_g[(size_t)u * tok + d]) : 0.0f;
    }
    float dk[ATT_ROWS_PER_WARP][ATT_DIMS_PER_LANE], dv[ATT_ROWS_PER_WARP][ATT_DIMS_PER_LANE];
    #pragma unroll
    for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
        #pragma unroll
        for (int c = 0; c < ATT_DIMS_PER_LANE; c++) { dk[i][c] = 0.0f; dv[i][c] = 0.0f; }
    }
    const int last_u = min(T, u0 + ATT_ROWS) - 1;
    for (int g = 0; g < group; g++) {
        const int h = hk * group + g;
        const floatX *q_g = qkv + (size_t)b * T * tok + (size_t)h * HS;
        const floatX *do_g = dout + (size_t)b * T * NH * HS + (size_t)h * HS;
        const floatX *o_g = out + (size_t)b * T * NH * HS + (size_t)h * HS;
        for (int t0 = u0 / ATT_TILE * ATT_TILE; t0 < T; t0 += ATT_TILE) {
            // this tile's and every later query's document starts at or after this one: past the
            // block's last key, none of them sees any of its keys (block-uniform)
            const int tile_first = att_first_key(doc_pos, b, T, t0);
            if (tile_first > last_u) break;
            __syncthreads(); // the previous tile is consumed (and k_s, v_s are written)
            for (int i = threadIdx.x; i < ATT_TILE * HS; i += blockDim.x) {
                int j = i / HS, d = i % HS, t = t0 + j;
                q_s[j * KS + d] = t < T ? q_g[(size_t)t * tok + d] : __float2bfloat16(0.0f);
                do_s[j * KS + d] = t < T ? do_g[(size_t)t * NH * HS + d] : __float2bfloat16(0.0f);
            }
            { // D for the tile's 32 queries: 4 consecutive threads per query, ATT_THREADS == 4 * ATT_TILE
                const int j = threadIdx.x / 4, part = threadIdx.x % 4, t = t0 + j;
                float partial = 0.0f;
                if (t < T) {
                    for (int d = part; d < HS; d += 4) {
                        partial += __bfloat162float(do_g[(size_t)t * NH * HS + d]) * __bfloat162float(o_g[(size_t)t * NH * HS + d]);
                    }
                }
                partial += __shfl_xor_sync(0xffffffff, partial, 1);
                partial += __shfl_xor_sync(0xffffffff, partial, 2);
                if (part == 0) {
                    D_s[j] = partial;
                    lse_s[j] = t < T ? stats[((size_t)b * NH + h) * T + t] : 0.0f;
                }
            }
            __syncthreads();
            const int t = t0 + lane, lane_first = t < T ? att_first_key(doc_pos, b, T, t) : 0; // lane's query, its first key
            #pragma unroll
            for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
                const int r = warp + i * ATT_WARPS, u = u0 + r;
                if (u > last_u || t0 + ATT_TILE - 1 < u || tile_first > u) continue; // warp-uniform
                float p = 0.0f, ds = 0.0f;
                if (t < T && t >= u && u >= lane_first) {
                    const float *kr = k_s + r * HS, *vr = v_s + r * HS;
                    const floatX *qr = q_s + lane * KS, *dor = do_s + lane * KS;
                    float qk = 0.0f, dp = 0.0f;
                    #pragma unroll 8
                    for (int d = 0; d < HS; d++) {
                        qk += kr[d] * __bfloat162float(qr[d]);
                        dp += vr[d] * __bfloat162float(dor[d]);
                    }
                    p = expf(qk * scale - lse_s[lane]);
                    ds = p * (dp - D_s[lane]);
                }
                const int j_begin = max(0, u - t0), j_end = min(ATT_TILE, T - t0);
                for (int j = j_begin; j < j_end; j++) {
                    const float pj = __shfl_sync(0xffffffff, p, j);
                    const float dsj = __shfl_sync(0xffffffff, ds, j);
                    const floatX *qr = q_s + j * KS, *dor = do_s + j * KS;
                    #pragma unroll
                    for (int c = 0; c < ATT_DIMS_PER_LANE; c++) {
                        const int d = lane + c * WARP_SIZE;
                        if (d < HS) {
                            dv[i][c] += pj * __bfloat162float(dor[d]);
                            dk[i][c] += dsj * __bfloat162float(qr[d]);
                        }
                    }
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_ROWS_PER_WARP; i++) {
        const int u = u0 + warp + i * ATT_WARPS;
        if (u >= T) continue;
        floatX *dk_u = dqkv + ((size_t)b * T + u) * tok + (size_t)(NH + hk) * HS;
        floatX *dv_u = dqkv + ((size_t)b * T + u) * tok + (size_t)(NH + NKV + hk) * HS;
        #pragma unroll
        for (int c = 0; c < ATT_DIMS_PER_LANE; c++) {
            const int d = lane + c * WARP_SIZE;
            if (d < HS) {
                dk_u[d] = __float2bfloat16(dk[i][c] * scale);
                dv_u[d] = __float2bfloat16(dv[i][c]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// document masking's positions: grid (B), one warp per row. A document starts at a row's first token
// and at every doc_start_id token; pos[t] = t - the last start at or before t (llmc/doc_mask.h's rule).
// Lane l walks tokens [l*chunk, (l+1)*chunk) twice: once for its chunk's last start, then, after a max
// scan over the lanes gives the last start before its chunk, to write the positions.

__global__ void doc_positions_kernel(int *pos, const int *inputs, int T, int doc_start_id) {
    const int lane = threadIdx.x, chunk = CEIL_DIV(T, WARP_SIZE);
    const int t_begin = min(T, lane * chunk), t_end = min(T, t_begin + chunk);
    const int *in = inputs + (size_t)blockIdx.x * T;
    int last = -1; // the last start in this lane's chunk, then in its chunk or any before it
    for (int t = t_begin; t < t_end; t++) if (t == 0 || in[t] == doc_start_id) last = t;
    for (int d = 1; d < WARP_SIZE; d *= 2) {
        const int before = __shfl_up_sync(0xffffffff, last, d);
        if (lane >= d) last = max(last, before);
    }
    int start = __shfl_up_sync(0xffffffff, last, 1); // lane 0's chunk begins with token 0, a start
    int *p = pos + (size_t)blockIdx.x * T;
    for (int t = t_begin; t < t_end; t++) {
        if (t == 0 || in[t] == doc_start_id) start = t;
        p[t] = t - start;
    }
}

// pos (B, T) <- inputs (B, T): each token's position in its document. On the GPU, from the tokens
// already there, so every forward (training, evaluation, HellaSwag, samples) and a replayed CUDA graph
// masks by its own batch.
void doc_positions(int *pos, const int *inputs, int B, int T, int doc_start_id, cudaStream_t stream) {
    doc_positions_kernel<<<B, WARP_SIZE, 0, stream>>>(pos, inputs, T, doc_start_id);
    cudaLaunchCheck();
}

// The document bias outside a query's document. Finite, not -inf: a query whose document starts past
// the first key tiles sees whole tiles masked before any key of its own, and a finite value keeps the
// online softmax's running max finite there (no -inf - -inf); exp of it minus any real score is 0 in
// fp32, and it is far from bf16's largest (3.4e38), so scaling it by log2(e) cannot overflow.
#define ATT_DOC_BIAS_MASKED -1e30f

// document masking's bias for cuDNN: grid (T, B), one block per query row t of batch row b writes its T
// keys: 0 from the query's document start on (the keys after t too: the causal mask drops those),
// ATT_DOC_BIAS_MASKED before it.
__global__ void doc_bias_kernel(floatX *bias, const int *doc_pos, int T) {
    const int t = blockIdx.x, b = blockIdx.y;
    const int start = t - doc_pos[(size_t)b * T + t];
    floatX *row = bias + ((size_t)b * T + t) * T;
    const floatX zero = __float2bfloat16(0.0f), masked = __float2bfloat16(ATT_DOC_BIAS_MASKED);
    for (int u = threadIdx.x; u < T; u += blockDim.x) row[u] = u >= start ? zero : masked;
}

// bias (B, 1, T, T) <- doc_pos (B, T): cuDNN's form of document masking (the top of this file), for the
// forward and the backward of the same batch. Run after doc_positions, before any attention, in every
// forward: the mask changes with the tokens, and a CUDA graph of the step replays this kernel with them.
void doc_bias_forward(floatX *bias, const int *doc_pos, int B, int T, cudaStream_t stream) {
    doc_bias_kernel<<<dim3(T, B), 256, 0, stream>>>(bias, doc_pos, T);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------------
// launchers of the plain path

static void att_check_shape(int B, int T, int NH, int NKV, int HS) {
    if (B <= 0 || T <= 0 || HS <= 0 || HS > ATT_MAX_HS || NKV <= 0 || NH % NKV != 0) {
        FATAL("attention: unsupported shape B=%d T=%d NH=%d NKV=%d HS=%d (need HS <= %d and NH a multiple of NKV)",
              B, T, NH, NKV, HS, ATT_MAX_HS);
    }
}

// Dynamic shared memory beyond 48 KiB (HS > ~128) must be opted into per kernel.
static void att_launch_prepare(const void *kernel, size_t smem_bytes) {
    if (smem_bytes > 48 * 1024) {
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
    }
}

void attention_forward_plain(floatX *out, float *stats, const floatX *qkv, const int *doc_pos, int B, int T, int NH, int NKV,
                             int HS, cudaStream_t stream) {
    att_check_shape(B, T, NH, NKV, HS);
    const size_t KS = att_tile_stride(HS);
    const size_t smem = ATT_ROWS * HS * sizeof(float) + ATT_TILE * KS * sizeof(floatX) + ATT_TILE * HS * sizeof(floatX);
    att_launch_prepare((const void *)attention_forward_plain_kernel, smem);
    dim3 grid(CEIL_DIV(T, ATT_ROWS), NH, B);
    attention_forward_plain_kernel<<<grid, ATT_THREADS, smem, stream>>>(out, stats, qkv, doc_pos, T, NH, NKV, HS, 1.0f / sqrtf((float)HS));
    cudaLaunchCheck();
}

void attention_backward_plain(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out, const float *stats,
                              const int *doc_pos, int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    att_check_shape(B, T, NH, NKV, HS);
    const size_t KS = att_tile_stride(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t smem_dq = 2 * ATT_ROWS * HS * sizeof(float) + 2 * ATT_TILE * KS * sizeof(floatX);
    att_launch_prepare((const void *)attention_backward_dq_kernel, smem_dq);
    dim3 grid_dq(CEIL_DIV(T, ATT_ROWS), NH, B);
    attention_backward_dq_kernel<<<grid_dq, ATT_THREADS, smem_dq, stream>>>(dqkv, dout, qkv, out, stats, doc_pos, T, NH, NKV, HS, scale);
    cudaLaunchCheck();
    const size_t smem_dkdv = 2 * ATT_ROWS * HS * sizeof(float) + 2 * ATT_TILE * KS * sizeof(floatX) + 2 * ATT_TILE * sizeof(float);
    att_launch_prepare((const void *)attention_backward_dkdv_kernel, smem_dkdv);
    dim3 grid_dkdv(CEIL_DIV(T, ATT_ROWS), NKV, B);
    attention_backward_dkdv_kernel<<<grid_dkdv, ATT_THREADS, smem_dkdv, stream>>>(dqkv, dout, qkv, out, stats, doc_pos, T, NH, NKV, HS, scale);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------------
// the API the trainer calls

static int g_att_use_cudnn = 0; // set by attention_init

// use_cudnn: take the fused cuDNN path where it applies (needs a build with ENABLE_CUDNN).
// deterministic: 1 = cuDNN's deterministic backward (bit-reproducible); 0 = its faster one, whose dQ
// may differ in the last bits from run to run (llmc/cudnn_att.cuh). The plain kernels are always
// deterministic.
void attention_init(int use_cudnn, int deterministic) {
#ifdef ENABLE_CUDNN
    g_att_use_cudnn = use_cudnn ? cudnn_att_init() : 0;
    cudnn_att_set_deterministic(deterministic);
    if (!use_cudnn) printf("attention: cuDNN not requested; using the plain attention kernels\n");
#else
    (void)deterministic;
    g_att_use_cudnn = 0;
    if (use_cudnn) printf("attention: built without ENABLE_CUDNN; using the plain attention kernels\n");
#endif
}

void attention_destroy(void) {
#ifdef ENABLE_CUDNN
    cudnn_att_destroy();
#endif
    g_att_use_cudnn = 0;
}

// Which path this shape takes ("cudnn", or "plain (why)"), for logs and tests; doc_mask: a
// document-masked call given its bias. On the cuDNN path this builds the plan if it is not cached yet
// (slow the first time, and it prints what it found).
const char *attention_path(int B, int T, int NH, int NKV, int HS, int backward, int doc_mask) {
#ifdef ENABLE_CUDNN
    if (!g_att_use_cudnn) return "plain (cuDNN off)";
    const char *why_not = cudnn_att_unsupported(T, NH, NKV, HS);
    if (why_not != NULL) return why_not;
    return cudnn_att_plan_ready(B, T, NH, NKV, HS, backward, doc_mask ? ATT_MASK_DOC_BIAS : ATT_MASK_CAUSAL)
               ? "cudnn" : "plain (no cuDNN plan for this shape)";
#else
    (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)backward; (void)doc_mask;
    return "plain (built without cuDNN)";
#endif
}

// 1 if document-masked attention of this shape may run on cuDNN, which then reads the bias
// doc_bias_forward writes (B * T * T bf16): cuDNN initialized and the shape one it takes. Whether its
// plans build is known only on first use; without them the plain kernels run, given the bias or not.
int attention_doc_bias_wanted(int T, int NH, int NKV, int HS) {
#ifdef ENABLE_CUDNN
    return g_att_use_cudnn && cudnn_att_unsupported(T, NH, NKV, HS) == NULL;
#else
    (void)T; (void)NH; (void)NKV; (void)HS;
    return 0;
#endif
}

// The device memory cuDNN's plans run in (NULL: none yet, or no cuDNN). It moves when a new plan
// needs more: a CUDA graph of attention calls must then be captured again.
const void *attention_workspace(void) {
#ifdef ENABLE_CUDNN
    return g_cudnn_workspace;
#else
    return NULL;
#endif
}

// 1 if both the forward and the backward of this shape (doc_mask: document-masked, with the bias) run
// on cuDNN (builds their plans, see above).
int attention_uses_cudnn(int B, int T, int NH, int NKV, int HS, int doc_mask) {
    return strcmp(attention_path(B, T, NH, NKV, HS, 0, doc_mask), "cudnn") == 0 &&
           strcmp(attention_path(B, T, NH, NKV, HS, 1, doc_mask), "cudnn") == 0;
}

// out (B, T, NH*HS), stats (B, NH, T) <- qkv (B, T, NH + 2*NKV, HS). doc_pos (B, T): document masking,
// NULL: causal over each row; doc_bias (B, 1, T, T): doc_bias_forward's of the same doc_pos, which lets
// a document-masked call run on cuDNN (NULL: the plain kernels); ignored without doc_pos.
void attention_forward(floatX *out, float *stats, const floatX *qkv, const int *doc_pos, const floatX *doc_bias, int B, int T,
                       int NH, int NKV, int HS, cudaStream_t stream) {
#ifdef ENABLE_CUDNN
    if ((doc_pos == NULL || doc_bias != NULL) && g_att_use_cudnn && cudnn_att_unsupported(T, NH, NKV, HS) == NULL &&
        cudnn_att_forward(out, stats, qkv, doc_pos != NULL ? doc_bias : NULL, B, T, NH, NKV, HS, stream)) {
        return;
    }
#else
    (void)doc_bias;
#endif
    attention_forward_plain(out, stats, qkv, doc_pos, B, T, NH, NKV, HS, stream);
}

// dqkv (B, T, NH + 2*NKV, HS) <- dout (B, T, NH*HS), with the forward's qkv, out, stats, doc_pos and
// doc_bias. Writes (does not accumulate) every element of dqkv. Deterministic unless attention_init
// chose cuDNN's fast backward.
void attention_backward(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out, const float *stats,
                        const int *doc_pos, const floatX *doc_bias, int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
#ifdef ENABLE_CUDNN
    if ((doc_pos == NULL || doc_bias != NULL) && g_att_use_cudnn && cudnn_att_unsupported(T, NH, NKV, HS) == NULL &&
        cudnn_att_backward(dqkv, dout, qkv, out, stats, doc_pos != NULL ? doc_bias : NULL, B, T, NH, NKV, HS, stream)) {
        return;
    }
#else
    (void)doc_bias;
#endif
    attention_backward_plain(dqkv, dout, qkv, out, stats, doc_pos, B, T, NH, NKV, HS, stream);
}

#endif
