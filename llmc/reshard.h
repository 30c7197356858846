/*
A resume on another number of GPUs: the ZeRO-1 optimizer state re-sliced from the shards of N ranks
(each in its own state file) into the shard of one of M ranks. Host code only, independent of the
GPU model: it works from the config's tensor sizes, the layouts llmc/zero_layout.h makes for N and M,
and a reader of byte ranges of the old files, so its test (dev/test/test_reshard_host.cu) runs on
stand-in ranks without a GPU.

The layouts of N and M ranks differ in their padding and in where their buckets are cut, so a shard
of one maps onto the other only element by element: both layouts say, piece by piece, which flat
parameter index sits at which index of a shard (ShardPiece's flat and local). A new piece and an old
piece that share flat indices give one run to copy. The padding lies in no piece: it is never read
from an old shard, and it is zero in the new one, as model_init leaves it (AdamW never touches it).

Only per-element state is sliced: the AdamW moments m and v (bf16 or fp32, whatever the element
size). The fp32 master is not in the state files (the model file holds the whole of it and every
rank takes its shard from there), and the rest of the state (the fp8 state, the fallback's grains,
the sampling rng, the data position) is the same on every rank: the caller takes it from rank 0's file.

A new rank reads only the byte ranges of the old files that its new shard overlaps, a chunk of its
shard at a time, so at 7B (moments of ~27 GB / N per old rank) it never holds an old file whole.
*/
#ifndef LLMC_RESHARD_H
#define LLMC_RESHARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_layout.h" // zero_layout, ZeroLayout, ShardPiece
#include "utils.h"       // mallocCheck, fseekCheck, freadCheck

// A checkpoint of old_world GPUs with gradient accumulation old_accum continues on new_world GPUs only
// with the same total batch (B*T*GPUs*accumulation tokens per step: the learning rate, the data
// position and the loss scale all count in it), so with new_accum = old_world*old_accum/new_world.
// NULL if the new run has that, else what to do, naming both GPU counts (msg, n bytes).
static const char *reshard_batch_problem(int B, int T, int old_world, int old_accum, int new_world, int new_accum, char *msg, size_t n) {
    long long per_step = (long long)old_world * old_accum; // micro-batches in one step, all ranks together
    long long total = (long long)B * T * per_step, here = (long long)B * T * new_world * new_accum;
    if (here == total) return NULL;
    char text[1024]; // longer than any message: no number has more than 20 digits
    size_t len = (size_t)snprintf(text, sizeof(text),
                                  "the checkpoint was written by %d GPU%s with a total batch of %lld tokens (B*T*GPUs*grad accum ="
                                  " %d*%d*%d*%d); this run has %d GPU%s and a total batch of %lld: ",
                                  old_world, old_world == 1 ? "" : "s", total, B, T, old_world, old_accum, new_world,
                                  new_world == 1 ? "" : "s", here);
    if (per_step % new_world == 0) { // always so on one GPU
        snprintf(text + len, sizeof(text) - len, "pass -d %lld to resume it on %d GPU%s (grad accum %lld)", total, new_world,
                 new_world == 1 ? "" : "s", per_step / new_world);
    } else {
        len += snprintf(text + len, sizeof(text) - len,
                        "%d GPUs cannot keep it (%lld is not a multiple of B*T*%d = %lld); resume on a number of GPUs that divides"
                        " %lld, its micro-batches per step (of 1 to 8:", new_world, total, new_world, (long long)B * T * new_world, per_step);
        for (int w = 1; w <= 8; w++) if (per_step % w == 0) len += snprintf(text + len, sizeof(text) - len, " %d", w);
        snprintf(text + len, sizeof(text) - len, ")");
    }
    snprintf(msg, n, "%s", text);
    return msg;
}

// count elements of the new shard from `dst` on are old rank `from`'s from `src` on (shard indices).
typedef struct {
    int from;
    size_t src, dst, count;
} ReshardCopy;

typedef struct {
    ReshardCopy *copies; // in the new shard's order, none overlapping; the gaps between them are padding
    int num_copies;
    size_t old_shard;    // elements in each old rank's shard (each old file's moment sections)
    size_t new_shard;    // elements in the new rank's shard
} ReshardPlan;

static int compare_copies(const void *a, const void *b) {
    size_t x = ((const ReshardCopy *)a)->dst, y = ((const ReshardCopy *)b)->dst;
    return (x > y) - (x < y);
}

// Where the shard of rank new_rank of new_world finds its elements in the shards of old_world ranks
// (sizes: the config's tensor sizes, param_sizes). Any two worlds of one config map onto each other.
static ReshardPlan reshard_plan(const LlamaConfig *c, const size_t *sizes, int old_world, int new_world, int new_rank) {
    ReshardPlan plan;
    memset(&plan, 0, sizeof(plan));
    ZeroLayout to = zero_layout(c, sizes, new_rank, new_world);
    plan.new_shard = to.shard;
    int cap = 0;
    for (int from = 0; from < old_world; from++) {
        ZeroLayout was = zero_layout(c, sizes, from, old_world);
        plan.old_shard = was.shard; // the same on every old rank
        for (int i = 0; i < to.num_pieces; i++) {
            const ShardPiece *a = &to.pieces[i];
            for (int j = 0; j < was.num_pieces; j++) {
                const ShardPiece *b = &was.pieces[j];
                size_t lo = a->flat > b->flat ? a->flat : b->flat;
                size_t hi = a->flat + a->count < b->flat + b->count ? a->flat + a->count : b->flat + b->count;
                if (lo >= hi) continue;
                if (plan.num_copies == cap) {
                    cap = cap ? 2 * cap : 64;
                    ReshardCopy *grown = (ReshardCopy *)mallocCheck(cap * sizeof(ReshardCopy));
                    if (plan.num_copies) memcpy(grown, plan.copies, plan.num_copies * sizeof(ReshardCopy));
                    free(plan.copies);
                    plan.copies = grown;
                }
                ReshardCopy k = {from, b->local + (lo - b->flat), a->local + (lo - a->flat), hi - lo};
                plan.copies[plan.num_copies++] = k;
            }
        }
        zero_layout_free(&was);
    }
    zero_layout_free(&to);
    qsort(plan.copies, plan.num_copies, sizeof(ReshardCopy), compare_copies);
    // pieces are cut at tensor edges, which are no edges of a shard: rejoin the runs that continue
    // one another in both shards, so a read is as long as the old shard allows
    int n = 0;
    for (int i = 0; i < plan.num_copies; i++) {
        ReshardCopy *last = n ? &plan.copies[n - 1] : NULL, k = plan.copies[i];
        if (last && last->from == k.from && last->src + last->count == k.src && last->dst + last->count == k.dst) last->count += k.count;
        else plan.copies[n++] = k;
    }
    plan.num_copies = n;
    return plan;
}

static void reshard_plan_free(ReshardPlan *p) {
    free(p->copies);
    memset(p, 0, sizeof(*p));
}

// Reads bytes [offset, offset + n) of old rank `from`'s state file into dst.
typedef void (*ReshardRead)(void *ctx, int from, uint64_t offset, void *dst, size_t n);

// Elements [first, first + count) of the new shard of one moment (elem bytes each) into dst: the old
// shards' elements where the plan has them, zeros in the padding. The moment's section starts at
// byte `section` of every old file (each old file has the same sections, of old_shard elements).
static void reshard_fill(const ReshardPlan *p, size_t elem, uint64_t section, size_t first, size_t count, void *dst,
                         ReshardRead read, void *ctx) {
    char *out = (char *)dst;
    memset(out, 0, count * elem);
    for (int i = 0; i < p->num_copies; i++) {
        const ReshardCopy *k = &p->copies[i];
        size_t lo = k->dst > first ? k->dst : first, hi = k->dst + k->count < first + count ? k->dst + k->count : first + count;
        if (lo < hi) read(ctx, k->from, section + (uint64_t)(k->src + (lo - k->dst)) * elem, out + (lo - first) * elem, (hi - lo) * elem);
    }
}

// The old state files as a ReshardRead's ctx: files[from] open for reading, paths[from] its name.
typedef struct {
    FILE **files;
    const char *const *paths;
} ReshardFiles;

static void reshard_read_files(void *ctx, int from, uint64_t offset, void *dst, size_t n) {
    const ReshardFiles *rf = (const ReshardFiles *)ctx;
    fseekCheck(rf->files[from], (int64_t)offset, SEEK_SET);
    freadCheck(dst, 1, n, rf->files[from], rf->paths[from]);
}

#endif
