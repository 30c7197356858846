/*
Host-only test of the trainer's ZeRO-1 layout (zero_layout, llmc/zero_layout.h), for every rank of
worlds 1-8 and several shapes: the buckets tile the padded vector in runs that split evenly; every
piece sits in its rank's part of a bucket at the matching shard offset; all ranks' pieces cover every
element of every tensor exactly once; and a bucket's stage is no earlier than the backward stage of
any element in it (so no gradient is reduced before backward has finished it). Needs no GPU: CI runs it.
Build and run: make dev/test/test_zero_layout && ./dev/test/test_zero_layout
*/
#include <stdio.h>
#include <vector>
#include "llmc/zero_layout.h" // zero_layout, backward_stage, param_is_per_layer
#include <algorithm>
static const char *check(LlamaConfig c, int W) {
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(&c, sizes);
    std::vector<ShardPiece> all;
    for (int r = 0; r < W; r++) {
        ZeroLayout m = zero_layout(&c, sizes, r, W);
        if (m.shard * W != m.padded || m.padded < n) return "shard size";
        size_t pos = 0, shard = 0;
        for (int k = 0; k < m.num_buckets; k++) {
            GradBucket b = m.buckets[k];
            if (b.start != pos || b.count == 0 || b.count % ((size_t)W * MG_SHARD_ALIGN) != 0 || b.shard != shard)
                return "buckets do not tile the padded vector in evenly splitting runs";
            pos += b.count;
            shard += b.count / W;
            size_t off = 0;
            for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
                int layers = param_is_per_layer(p) ? c.L : 1;
                for (int l = 0; l < layers; l++) {
                    size_t lo = off + l * (sizes[p] / layers), hi = lo + sizes[p] / layers;
                    if (lo < b.start + b.count && hi > b.start && b.stage < backward_stage(&c, p, l)) return "a bucket is reduced before backward finished it";
                }
                off += sizes[p];
            }
        }
        if (W > 1 && pos != m.padded) return "buckets stop short of the padded end";
        for (int i = 0; i < m.num_pieces; i++) {
            ShardPiece p = m.pieces[i];
            size_t base = 0;
            for (int t = 0; t < p.tensor; t++) base += sizes[t];
            if (p.count == 0 || p.flat != base + p.offset || p.local + p.count > m.shard) return "piece out of range";
            int inside = W == 1 && p.local == p.flat;
            for (int k = 0; k < m.num_buckets; k++) {
                GradBucket b = m.buckets[k];
                size_t part = b.count / W, ps = b.start + (size_t)r * part;
                if (p.flat >= ps && p.flat + p.count <= ps + part && p.local == b.shard + (p.flat - ps)) inside = 1;
            }
            if (!inside) return "a piece is not where its rank's part of a bucket is";
            all.push_back(p);
        }
        zero_layout_free(&m);
    }
    std::sort(all.begin(), all.end(), [](const ShardPiece &x, const ShardPiece &y) {
        return x.tensor != y.tensor ? x.tensor < y.tensor : x.offset < y.offset;
    });
    std::vector<size_t> next(NUM_PARAM_TENSORS, 0);
    for (const ShardPiece &p : all) {
        if (p.offset != next[p.tensor]) return "an element is in no shard or in two";
        next[p.tensor] += p.count;
    }
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) if (next[t] != sizes[t]) return "a tensor's end is in no shard";
    return NULL;
}
int main(void) {
    // smollm2-135m: tied (an empty lm_head), NH 9, C 576
    const char *presets[] = {"tiny", "125m", "1b", "llama2-7b", "llama3-8b", "smollm2-135m"};
    LlamaConfig shapes[8];
    for (int i = 0; i < 6; i++) config_from_preset(presets[i], &shapes[i]);
    LlamaConfig one_layer = {1001, 1, 24, 2, 1, 40, 64, 10000.0f, 1e-5f}, small = {517, 3, 8, 2, 2, 24, 64, 10000.0f, 1e-5f};
    shapes[6] = one_layer;
    shapes[7] = small;
    int passed = 0, failed = 0;
    for (int s = 0; s < 8; s++) {
        for (int W = 1; W <= 8; W++) {
            const char *why = check(shapes[s], W);
            if (why) { printf("FAIL zero layout, shape %d (L %d C %d) world %d: %s\n", s, shapes[s].L, shapes[s].C, W, why); failed++; }
            else passed++;
        }
    }
    printf("%s zero layout: %d of %d shapes x worlds hold\n", failed ? "FAIL" : "ok  ", passed, passed + failed);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
