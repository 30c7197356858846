/*
ZeRO-1 layout of the flat parameter vector over the ranks, with the gradient reduction overlapping
the backward pass: which buckets are reduce-scattered after which backward stage, and which pieces
of which tensors each rank's shard holds. Host code only: the trainer (model_init), its host test
(dev/test/test_zero_layout.cu) and dev/cuda/nccl_check.cu (which runs the trainer's collectives on
it) share this one layout.
*/
#ifndef LLMC_ZERO_LAYOUT_H
#define LLMC_ZERO_LAYOUT_H

#include <stdlib.h>
#include <string.h>
#include "llama_config.h" // LlamaConfig, NUM_PARAM_TENSORS, P_* tensor indices, param_is_per_layer
#include "utils.h"        // mallocCheck

#define MG_SHARD_ALIGN 512 // elements: a shard boundary is 1 KiB aligned in bf16, 2 KiB in fp32

typedef struct {
    int tensor;     // parameter tensor index (P_WTE ...)
    size_t offset;  // first element of the piece within that tensor
    size_t count;   // elements
    size_t flat;    // index of the first element in the flat vector (params, grads)
    size_t local;   // index in this rank's shard (ZeRO-1 master, m, v, reduced gradient)
} ShardPiece;

// A run of the flat parameter vector that is reduce-scattered as one (see zero_layout).
typedef struct {
    size_t start, count; // [start, start + count) of the padded vector; count a multiple of world * MG_SHARD_ALIGN
    size_t shard;        // where this rank's part (count / world elements) starts in its shard
    int stage;           // the backward stage after which every element of it is final
} GradBucket;

typedef struct {
    GradBucket *buckets;   // none on one GPU
    int num_buckets;
    ShardPiece *pieces;    // this rank's shard cut at tensor edges: AdamW runs per piece
    int num_pieces;
    size_t padded;         // the vector's length padded so every bucket splits evenly (= n on one GPU)
    size_t shard;          // this rank's share of it (= n on one GPU)
} ZeroLayout;

// n rounded up to a multiple of world * MG_SHARD_ALIGN: the parts of every bucket are equal and aligned.
static size_t zero_padded_size(int world, size_t n) {
    size_t unit = (size_t)world * MG_SHARD_ALIGN;
    return (n + unit - 1) / unit * unit;
}

// The backward stage after which tensor p's slice of layer l is final: 0 the lm_head and the final
// norm, k (1..L) the slices of layer L-k, L+1 the embedding (which a tied lm_head adds into at stage
// 0). zero_layout cuts the buckets by it; model_backward reduces each bucket when its stage ends.
static int backward_stage(const LlamaConfig *c, int p, int l) { return p == P_WTE ? c->L + 1 : param_is_per_layer(p) ? c->L - l : 0; }
static int compare_sizes(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

// ZeRO-1 with the gradient reduction overlapping the backward pass.
// Backward finishes the parameters in stages (backward_stage). The padded flat vector is cut at the slice
// edges into buckets; each is reduce-scattered as soon as backward has finished its stage, while the
// compute stream goes on with the layer below. Every bucket splits into world equal parts and rank r
// owns part r of each; its shard (fp32 master, AdamW m and v, the reduced gradient) is those parts
// one after another, so the gradient norm and AdamW read it contiguously, and after the update one
// all-gather per bucket rebuilds the whole bf16 model on every rank.
// Cuts are rounded to multiples of world * MG_SHARD_ALIGN elements, so the parts are equal and aligned
// (the padding at the end makes the total a multiple too). A cut inside a slice moves towards the
// neighbour that is final later, so a bucket waits for no layer but its own. Whatever the rounding
// does, a bucket's stage is the latest stage of any element in it: it is reduced only when all of it
// is final. (Splitting the vector into world contiguous shards would give no overlap: each shard spans
// many layers of several tensors and is final only when backward ends.)
// One GPU: one shard, the whole vector, and one AdamW piece per tensor, exactly as without ZeRO.
static ZeroLayout zero_layout(const LlamaConfig *c, const size_t *sizes, int rank, int W) {
    ZeroLayout z;
    memset(&z, 0, sizeof(z));
    int L = c->L;
    size_t n = 0, off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) n += sizes[p];
    if (W == 1) {
        z.padded = z.shard = n;
        z.pieces = (ShardPiece *)mallocCheck(NUM_PARAM_TENSORS * sizeof(ShardPiece));
        for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
            ShardPiece piece = {p, 0, sizes[p], off, off};
            if (piece.count > 0) z.pieces[z.num_pieces++] = piece; // a tied lm_head has no elements
            off += sizes[p];
        }
        return z;
    }
    size_t unit = (size_t)W * MG_SHARD_ALIGN, padded = zero_padded_size(W, n);
    // the slices in flat order and the stage after which each is final (the padding: stage 0)
    int S = 0, max_slices = NUM_PARAM_TENSORS * L + 1;
    size_t *lo = (size_t *)mallocCheck(max_slices * sizeof(size_t)), *hi = (size_t *)mallocCheck(max_slices * sizeof(size_t));
    int *stage = (int *)mallocCheck(max_slices * sizeof(int));
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        int layers = param_is_per_layer(p) ? L : 1;
        size_t per = sizes[p] / layers;
        for (int l = 0; l < layers; l++, S++) {
            lo[S] = off + l * per;
            hi[S] = lo[S] + per;
            stage[S] = backward_stage(c, p, l);
        }
        off += sizes[p];
    }
    if (padded > n) { lo[S] = n; hi[S] = padded; stage[S] = 0; S++; }
    size_t *cut = (size_t *)mallocCheck((S + 1) * sizeof(size_t));
    int nc = 0;
    cut[nc++] = 0;
    cut[nc++] = padded;
    for (int i = 1; i < S; i++) {
        size_t down = lo[i] / unit * unit, up = down == lo[i] ? down : down + unit;
        cut[nc++] = stage[i - 1] >= stage[i] ? up : down;
    }
    qsort(cut, nc, sizeof(size_t), compare_sizes);
    z.buckets = (GradBucket *)mallocCheck(nc * sizeof(GradBucket));
    z.pieces = (ShardPiece *)mallocCheck(nc * NUM_PARAM_TENSORS * sizeof(ShardPiece));
    size_t shard = 0;
    for (int k = 0; k + 1 < nc; k++) {
        if (cut[k] == cut[k + 1]) continue;
        GradBucket b = {cut[k], cut[k + 1] - cut[k], shard, 0};
        for (int i = 0; i < S; i++) if (lo[i] < b.start + b.count && hi[i] > b.start && stage[i] > b.stage) b.stage = stage[i];
        // this rank's part of the bucket, cut at tensor edges
        size_t part = b.count / W, ps = b.start + (size_t)rank * part, pe = ps + part, base = 0;
        for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
            size_t a = ps > base ? ps : base, e = pe < base + sizes[p] ? pe : base + sizes[p];
            if (a < e) {
                ShardPiece piece = {p, a - base, e - a, a, shard + (a - ps)};
                z.pieces[z.num_pieces++] = piece;
            }
            base += sizes[p];
        }
        z.buckets[z.num_buckets++] = b;
        shard += part;
    }
    z.padded = padded;
    z.shard = shard; // = padded / W
    free(lo); free(hi); free(stage); free(cut);
    return z;
}

static void zero_layout_free(ZeroLayout *z) {
    free(z->buckets);
    free(z->pieces);
    memset(z, 0, sizeof(*z));
}


#endif
