/*
What fits a GPU's device memory, as plain host C: the refusal of a run whose plan and FIT_HEADROOM are more
than its GPU has free (memory_refusal), the flag sets that would fit, in the order of what they cost
(memory_fit_hint), and -check 1's answer for an 80 GB GPU (plan_80gb_line). The plan itself is the
trainer's model_memory_plan (it mirrors model_init's allocations), handed in as a MemoryPlanFn; the CPU
suite holds all of it in dev/test/test_plan_host.cu.
*/
#ifndef LLMC_MEMORY_FIT_H
#define LLMC_MEMORY_FIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "llama_config.h"  // LlamaConfig
#include "model_options.h" // ModelOptions, PREC_FP8

// The device memory a run allocates up front with these options on `world` GPUs.
typedef size_t (*MemoryPlanFn)(const LlamaConfig *c, const ModelOptions *o, int world);

// What a run that does not fit can give up, in the order of what it costs the user: recompute time (-r 1),
// the master weights' accuracy (-master_weights bf16), both, a cast of each fp8 weight at every use
// (-fp8_weight_cache 0, which saves memory with bf16 master weights: fp32 ones on one GPU hold the cache in
// the bf16 weights' storage), AdamW's moments in host memory (-adam_offload 1: the optimizer step reads and
// writes them over PCIe, a cost each optimizer step pays however many micro-steps it has), then a smaller -b
// at the same -d (more gradient accumulation: fewer tokens/s).
enum { FIT_RECOMPUTE = 1, FIT_MASTER_BF16 = 2, FIT_NO_W_CACHE = 4, FIT_OFFLOAD = 8 };
static const int FIT_SETS[] = {0, FIT_RECOMPUTE, FIT_MASTER_BF16, FIT_RECOMPUTE | FIT_MASTER_BF16,
                               FIT_MASTER_BF16 | FIT_NO_W_CACHE, FIT_RECOMPUTE | FIT_MASTER_BF16 | FIT_NO_W_CACHE,
                               FIT_RECOMPUTE | FIT_MASTER_BF16 | FIT_OFFLOAD,
                               FIT_RECOMPUTE | FIT_MASTER_BF16 | FIT_NO_W_CACHE | FIT_OFFLOAD};
#define FIT_HINT_SETS 3 // the hint names the first sets that fit, this many at most
// What a set must leave free besides its plan: cuBLAS's and cuDNN's workspaces and the CUDA graph come on
// top of the up-front allocations (7B fp8 B 2 T 4096: 104.81 GiB planned, 105.5 GiB in use on an H200)
#define FIT_HEADROOM ((size_t)1 << 30)

// What a run's plan may take of `free_b` free bytes: all but FIT_HEADROOM.
static size_t fit_budget(size_t free_b) { return free_b > FIT_HEADROOM ? free_b - FIT_HEADROOM : 0; }

// The options of the run given the flag set `flags` (FIT_*) and -b B.
static ModelOptions fit_options(const ModelOptions *o, int flags, int B) {
    ModelOptions f = *o;
    if (flags & FIT_RECOMPUTE) f.recompute = 1;
    if (flags & FIT_MASTER_BF16) f.master_bf16 = 1;
    if (flags & FIT_NO_W_CACHE) f.fp8_weight_cache = 0;
    if (flags & FIT_OFFLOAD) f.adam_offload = 1;
    f.B = B;
    return f;
}

// A flag set as the command line writes it, with its plan and what it costs besides the flags' names.
static void fit_describe(char *s, size_t n, int flags, int B, const ModelOptions *o, long long accum, size_t plan) {
    char b_flag[32] = "", accum_note[64] = "";
    if (B != o->B) {
        snprintf(b_flag, sizeof(b_flag), " -b %d", B);
        snprintf(accum_note, sizeof(accum_note), ", gradient accumulation %lld for the same -d", accum);
    }
    char words[128];
    snprintf(words, sizeof(words), "%s%s%s%s%s", flags & FIT_RECOMPUTE ? " -r 1" : "",
             flags & FIT_MASTER_BF16 ? " -master_weights bf16" : "",
             flags & FIT_NO_W_CACHE ? " -fp8_weight_cache 0" : "", flags & FIT_OFFLOAD ? " -adam_offload 1" : "", b_flag);
    snprintf(s, n, "%s (%.2f GiB%s%s%s)", words + 1, plan / 1073741824.0,
             flags & FIT_NO_W_CACHE ? ", each fp8 weight cast at every use" : "",
             flags & FIT_OFFLOAD ? ", AdamW's moments over PCIe" : "", accum_note);
}

// What fits `budget` bytes: the first FIT_HINT_SETS flag sets (FIT_SETS' order at this -b, then at each
// smaller -b that splits -d's `total_batch` tokens) whose own plan (plan_of) fits, each with its
// GiB, or the least any of them plans. Only flags the run can take and has not set: -fp8_weight_cache
// in fp8 only.
static void memory_fit_hint(MemoryPlanFn plan_of, const LlamaConfig *c, const ModelOptions *o, int world,
                            long long total_batch, size_t budget, char *buf, size_t n) {
    int can = (o->recompute ? 0 : FIT_RECOMPUTE) | (o->master_bf16 ? 0 : FIT_MASTER_BF16) |
              (o->precision == PREC_FP8 && o->fp8_weight_cache ? FIT_NO_W_CACHE : 0) | (o->adam_offload ? 0 : FIT_OFFLOAD);
    int found = 0;
    size_t least = SIZE_MAX;
    char least_set[256] = "", set[256];
    snprintf(buf, n, "within %.2f GiB:", budget / 1073741824.0);
    for (int B = o->B; B >= 1 && found < FIT_HINT_SETS; B--) {
        long long tokens = (long long)B * o->T * world;
        if (total_batch % tokens != 0 || (o->precision == PREC_FP8 && (B * o->T) % 16 != 0)) continue;
        int tried = 0; // the masks planned at this B: without the flags the run has, two sets can be one
        for (size_t k = 0; k < sizeof(FIT_SETS) / sizeof(FIT_SETS[0]) && found < FIT_HINT_SETS; k++) {
            int flags = FIT_SETS[k] & can;
            if ((flags == 0 && B == o->B) || (tried >> flags & 1)) continue;
            tried |= 1 << flags;
            ModelOptions f = fit_options(o, flags, B);
            size_t plan = plan_of(c, &f, world);
            fit_describe(set, sizeof(set), flags, B, o, total_batch / tokens, plan);
            if (plan < least) { least = plan; snprintf(least_set, sizeof(least_set), "%s", set); }
            if (plan > budget) continue;
            snprintf(buf + strlen(buf), n - strlen(buf), "%s %s", found ? ";" : "", set);
            found++;
        }
    }
    const char *more = "use more GPUs (-ngpu; ZeRO-1 shares the optimizer state out), a shorter -t or a smaller model";
    // no set was tried: the run has every flag above, at -b 1 (or at the least -b that splits -d)
    if (!found && least == SIZE_MAX)
        snprintf(buf, n, "nothing fits %.2f GiB and no flag here is left to give up: %s", budget / 1073741824.0, more);
    else if (!found)
        snprintf(buf, n, "nothing fits %.2f GiB, the least is %s: %s", budget / 1073741824.0, least_set, more);
}

// The refusal of a run whose planned device memory and FIT_HEADROOM are more than the `free_b` bytes its
// GPU has free: 1 with the message, what fits, in msg; else 0. Made before model_init allocates anything,
// so a run that cannot fit stops at once, with the flags that would make it fit, not at the one allocation
// that fails (7B bf16 -r 1 -master_weights bf16 on an H100: 78.65 GiB planned, 78.66 free, out of memory
// in model_init when the refusal let a plan fill the free memory).
static int memory_refusal(MemoryPlanFn plan_of, const char *model, const LlamaConfig *c, const ModelOptions *o,
                          int world, long long total_batch, size_t free_b, char *msg, size_t n) {
    size_t plan = plan_of(c, o, world), budget = fit_budget(free_b);
    if (plan <= budget) return 0;
    int len = snprintf(msg, n, "%s B %d T %d would run out of memory: it needs %.2f GiB of device memory up front "
                       "and 1 GiB for cuBLAS's and cuDNN's workspaces, the GPU has %.2f GiB free: ",
                       model, o->B, o->T, plan / 1073741824.0, free_b / 1073741824.0);
    memory_fit_hint(plan_of, c, o, world, total_batch, budget, msg + len, n - len);
    return 1;
}

// The device memory an 80 GB H100 had free at a run's start (2026-12-05, driver 580.159: 78.66 of its
// 79.18 GiB; the CUDA context holds the rest), for -check 1's answer, with no GPU, to "does it fit one?".
#define GPU_80GB_FREE ((size_t)(78.66 * 1073741824.0))

// -check 1's line on 80 GB GPUs: "fits", or "too small" and the flag sets that would fit (the hint a
// refusal on such a GPU would give).
static void plan_80gb_line(MemoryPlanFn plan_of, char *buf, size_t n, const LlamaConfig *c, const ModelOptions *o,
                           int world, long long total_batch) {
    size_t budget = fit_budget(GPU_80GB_FREE);
    int fits = plan_of(c, o, world) <= budget;
    int len = snprintf(buf, n, "plan: on %s (%.2f GiB free at the start on an H100, 1 GiB of it kept for the "
                       "workspaces): %s", world > 1 ? "80 GB GPUs" : "one 80 GB GPU", GPU_80GB_FREE / 1073741824.0,
                       fits ? "fits" : "too small; ");
    if (!fits) memory_fit_hint(plan_of, c, o, world, total_batch, budget, buf + len, n - len);
}

// The host memory Linux could give a process now (/proc/meminfo's MemAvailable, bytes), 0 where unknown.
static size_t host_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f) && sscanf(line, "MemAvailable: %llu kB", &kb) != 1) {}
    fclose(f);
    return (size_t)kb * 1024;
}

// The refusal of -adam_offload 1 when the `need` bytes of pinned host memory it takes for this GPU's
// AdamW moments are more than the host's `avail` (0: unknown, then the allocation itself says): 1 with
// the message in msg, else 0. Every GPU of a host pins its own shard, so `ranks_here` of them share avail.
static int host_memory_refusal(size_t need, int ranks_here, size_t avail, char *msg, size_t n) {
    if (avail == 0 || need * (size_t)ranks_here <= avail) return 0;
    char all[96] = "";
    if (ranks_here > 1)
        snprintf(all, sizeof(all), " on each of %d GPUs here, %.2f GiB in all", ranks_here, need * (double)ranks_here / 1073741824.0);
    snprintf(msg, n, "-adam_offload 1 pins %.2f GiB of host memory for AdamW's moments%s; the host has %.2f GiB available: "
             "run without -adam_offload, or on more GPUs (ZeRO-1 shares the moments out)", need / 1073741824.0, all,
             avail / 1073741824.0);
    return 1;
}

#endif // LLMC_MEMORY_FIT_H
