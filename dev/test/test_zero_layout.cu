/*
Host-only test of the trainer's ZeRO-1 layout (zero_layout, llmc/zero_layout.h), checked against
statements of the layout made here, never against the code under test:
- when backward has finished each slice, from the order the backward pass runs in (finished_after:
  the lm_head and final norm, then the layers from the last to the first, then the embedding), and
  that backward_stage, which the trainer's backward reduces by, says the same;
- for every rank of worlds 1-8 and several shapes: the buckets tile the padded vector in runs that
  split evenly; the padding is less than one alignment unit per rank, so the shards are balanced;
  every bucket's stage is the latest finish of any element in it (never reduced early, never held
  for a later layer); every piece lies in its rank's part of one bucket, at the shard offset that
  concatenating the rank's parts in bucket order gives; all ranks' pieces cover every element of
  every tensor exactly once; each stage has a bucket of its own (the overlap) where the slices are
  large enough;
- for a small model on 2 ranks, the buckets and one bucket's pieces, worked out by hand from the
  rule in zero_layout's comment.
Needs no GPU: CI runs it. Build and run: make dev/test/test_zero_layout && ./dev/test/test_zero_layout
*/
#include <stdio.h>
#include <algorithm>
#include <vector>
#include "llmc/zero_layout.h" // zero_layout, backward_stage, param_is_per_layer

// The backward stage after which slice l of tensor p is final, from the order backward runs in.
static int finished_after(const LlamaConfig *c, int p, int l) {
    if (p == P_LM_HEAD || p == P_LNFW) return 0; // the output layer's backward comes first
    if (p == P_WTE) return c->L + 1;             // last: a tied lm_head adds into it at stage 0 too
    return c->L - l;                             // layer L-1 is stage 1, layer 0 stage L
}

// Where each tensor starts in the flat vector (llama_config.h's order).
static void tensor_bases(const size_t *sizes, size_t *base) {
    size_t off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) { base[p] = off; off += sizes[p]; }
}

static const char *check(LlamaConfig c, int W) {
    size_t sizes[NUM_PARAM_TENSORS], base[NUM_PARAM_TENSORS], n = param_sizes(&c, sizes);
    tensor_bases(sizes, base);
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        for (int l = 0; l < (param_is_per_layer(p) ? c.L : 1); l++)
            if (backward_stage(&c, p, l) != finished_after(&c, p, l)) return "backward_stage disagrees with the backward order";
    }
    size_t unit = (size_t)W * MG_SHARD_ALIGN;
    std::vector<ShardPiece> all;
    std::vector<int> stages_with_bucket(c.L + 2, 0);
    for (int r = 0; r < W; r++) {
        ZeroLayout m = zero_layout(&c, sizes, r, W);
        if (W == 1) {
            if (m.padded != n || m.shard != n || m.num_buckets != 0) return "one GPU: not one shard of everything";
        } else if (m.padded < n || m.padded - n >= unit || m.padded % unit != 0 || m.shard * W != m.padded) {
            return "padding or shard size: not balanced within the alignment";
        }
        size_t pos = 0;
        for (int k = 0; k < m.num_buckets; k++) {
            GradBucket b = m.buckets[k];
            if (b.start != pos || b.count == 0 || b.count % unit != 0) return "buckets do not tile the padded vector in evenly splitting runs";
            pos += b.count;
            int latest = 0; // the padding is final from the start
            for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
                int layers = param_is_per_layer(p) ? c.L : 1;
                for (int l = 0; l < layers; l++) {
                    size_t lo = base[p] + l * (sizes[p] / layers), hi = lo + sizes[p] / layers;
                    if (lo < b.start + b.count && hi > b.start) latest = std::max(latest, finished_after(&c, p, l));
                }
            }
            if (b.stage < latest) return "a bucket is reduced before backward finished it";
            if (b.stage > latest) return "a bucket waits for a later stage than any element in it";
            stages_with_bucket[b.stage] = 1;
        }
        if (W > 1 && pos != m.padded) return "buckets stop short of the padded end";
        for (int i = 0; i < m.num_pieces; i++) {
            ShardPiece p = m.pieces[i];
            if (p.count == 0 || p.tensor < 0 || p.tensor >= NUM_PARAM_TENSORS || p.offset + p.count > sizes[p.tensor] ||
                p.flat != base[p.tensor] + p.offset)
                return "a piece is not where its tensor and offset say";
            if (W == 1) {
                if (p.local != p.flat || p.offset != 0 || p.count != sizes[p.tensor]) return "one GPU: not one piece per tensor";
            } else {
                // rank r's shard: part r of every bucket, one after another
                int inside = 0;
                size_t before = 0;
                for (int k = 0; k < m.num_buckets; k++) {
                    size_t part = m.buckets[k].count / W, ps = m.buckets[k].start + (size_t)r * part;
                    if (p.flat >= ps && p.flat + p.count <= ps + part && p.local == before + (p.flat - ps)) inside++;
                    before += part;
                }
                if (inside != 1) return "a piece is not in its rank's part of one bucket at the matching shard offset";
            }
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
    // a slice of two units or more holds a whole unit that the rounding gives to its own stage: with the
    // embedding, the lm_head and each layer's wqkv that large, every stage has a bucket
    size_t smallest = std::min(sizes[P_WQKV] / c.L, std::min(sizes[P_WTE], sizes[P_LM_HEAD]));
    if (W > 1 && smallest >= 2 * unit) {
        for (int s = 0; s <= c.L + 1; s++) if (!stages_with_bucket[s]) return "a backward stage has no bucket of its own: no overlap";
    }
    return NULL;
}

// V 64, L 2, C 64, one head of 64, FF 64 on 2 ranks (alignment unit 2 * 512 = 1024). Flat vector:
// wte [0, 4096) stage 3; ln1w [4096, 4224); wqkv [4224, 28800); wo [28800, 36992); ln2w [36992,
// 37120); w13 [37120, 53504); w2 [53504, 61696) (each layer 0 then layer 1, stages 2 and 1); lnfw
// [61696, 61760) and lm_head [61760, 65856) stage 0; padded to 66560. Each
// slice edge rounds to the unit towards the neighbour that is final later, e.g. ln1w's layer 0|1 edge
// at 4160 up to 5120, the edge ln1w layer 1|wqkv layer 0 at 4224 down to 4096.
static const char *check_by_hand(void) {
    LlamaConfig c = {64, 2, 64, 1, 1, 64, 64, 10000.0f, 1e-5f};
    size_t sizes[NUM_PARAM_TENSORS];
    param_sizes(&c, sizes);
    const size_t starts[13] = {0, 4096, 5120, 17408, 28672, 33792, 36864, 37888, 46080, 53248, 58368, 62464, 66560};
    const int stages[12] = {3, 2, 2, 1, 2, 1, 2, 2, 1, 2, 1, 0};
    // rank 1's part of the bucket [58368, 62464) is [60416, 62464); its shard offset is 58368 / 2
    const ShardPiece rank1[3] = {{P_W2, 6912, 1280, 60416, 29184}, {P_LNFW, 0, 64, 61696, 30464}, {P_LM_HEAD, 0, 704, 61760, 30528}};
    ZeroLayout m = zero_layout(&c, sizes, 1, 2);
    const char *why = NULL;
    if (m.padded != 66560 || m.shard != 33280) why = "padded size";
    if (!why && m.num_buckets != 12) why = "bucket count";
    for (int k = 0; !why && k < 12; k++) {
        GradBucket b = m.buckets[k];
        if (b.start != starts[k] || b.count != starts[k + 1] - starts[k] || b.stage != stages[k] || b.shard != starts[k] / 2)
            why = "a bucket differs from the hand-worked one";
    }
    int found = 0;
    for (int i = 0; !why && i < m.num_pieces; i++) {
        ShardPiece p = m.pieces[i];
        if (p.flat < 60416 || p.flat >= 62464) continue;
        const ShardPiece *e = &rank1[found < 3 ? found : 2];
        if (found >= 3 || p.tensor != e->tensor || p.offset != e->offset || p.count != e->count || p.flat != e->flat || p.local != e->local)
            why = "rank 1's pieces of the bucket [58368, 62464) differ from the hand-worked ones";
        found++;
    }
    if (!why && found != 3) why = "rank 1's pieces of the bucket [58368, 62464): not 3";
    zero_layout_free(&m);
    return why;
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
    const char *why = check_by_hand();
    if (why) { printf("FAIL zero layout by hand (V 64 L 2 C 64, 2 ranks): %s\n", why); failed++; }
    else passed++;
    for (int s = 0; s < 8; s++) {
        for (int W = 1; W <= 8; W++) {
            why = check(shapes[s], W);
            if (why) { printf("FAIL zero layout, shape %d (L %d C %d) world %d: %s\n", s, shapes[s].L, shapes[s].C, W, why); failed++; }
            else passed++;
        }
    }
    printf("%s zero layout: %d of %d checks hold\n", failed ? "FAIL" : "ok  ", passed, passed + failed);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
