/*
The fp8 fallback (-fp8_fallback, docs/fp8_recipe.md) as plain host C, on plain arguments: which grains
a run may give a linear (fp8_grain_allowed), how many values a linear's casts cast in a step
(fp8_values_cast), and the rule that moves a per-tensor linear whose casts keep losing values to the
fallback's grain (fp8_fallback_rule). The trainer calls them through llmc/linear.cuh; the CPU suite
holds the rule to dev/test/llama_ref.h's ref_fp8_auto_grain (dev/test/test_fp8_fallback.h).
*/
#ifndef LLMC_FP8_FALLBACK_H
#define LLMC_FP8_FALLBACK_H

#include "llama_config.h" // LlamaConfig, linear_in, linear_out
#include "fp8_layout.h"   // FP8_GRAIN_*, FP8_KINDS, fp8_tensor, fp8_linear
#include "fp8.h"          // FP8_COUNTS, FP8_UNDERFLOWS, FP8_SATURATIONS

// A linear the fallback switched in the last update: its worst tensor and the fraction of its values
// that tensor lost in that step.
typedef struct { int l, lin, kind; double lost; } Fp8Switch;

// The rule's options: the threshold in millionths of the values cast, and the steps in a row over it.
typedef struct { int millionths, patience; } Fp8FallbackRule;

// What a step cast, besides each linear's own casts: N tokens per micro-step on each of `world` ranks,
// grad_accum micro-steps, W cast once a step (w_cache) or before each micro-step's forward.
typedef struct { int N, grad_accum, world, w_cache; } Fp8StepCasts;

// Whether a run of -fp8_grain run_grain and -fp8_fallback fallback (0: off) can have a linear of this
// grain: a run of another grain than per-tensor has every linear in it, the fallback's per-tensor or
// of its grain, any other run's per-tensor.
static inline int fp8_grain_allowed(int run_grain, int fallback, int grain) {
    if (run_grain != FP8_GRAIN_TENSOR) return grain == run_grain;
    return grain == FP8_GRAIN_TENSOR || (fallback != 0 && grain == fallback);
}

// The values tensor `kind` of linear `lin` had cast in one step, over every rank: X and dY `casts`
// times per micro-step (per-tensor 1; block 2: row-wise and transposed); W once per step from the
// cache, else before each micro-step's forward; none for a linear that casts nothing (casts 0: bf16).
static inline double fp8_values_cast(const LlamaConfig *c, int lin, int kind, int casts, Fp8StepCasts s) {
    double N = s.N, IN = linear_in(c, lin), OUT = linear_out(c, lin);
    double per_cast = kind == FP8_X ? N * IN : kind == FP8_W ? IN * OUT : N * OUT;
    int times = kind == FP8_W ? (s.w_cache ? 1 : s.grad_accum) : s.grad_accum * casts;
    if (casts == 0) return 0.0;
    return per_cast * times * s.world;
}

// The rule (dev/test/llama_ref.h: ref_fp8_auto_grain is the same): after a step whose health counts are
// `counts` (the last step's, every rank's summed; FP8_COUNTS per fp8 tensor), a per-tensor linear (its
// grain[] byte) whose X, W or dY lost (underflows + saturations) more than the threshold of the values
// it cast has one more step over it in over_steps[], any other linear's count is reset; one at the
// patience is listed in `switched` with its worst tensor. Returns how many. lm_head: the lm_head is an
// fp8 linear too (the last of grain[] and over_steps[]).
static int fp8_fallback_rule(const LlamaConfig *c, int lm_head, Fp8FallbackRule r, Fp8StepCasts s,
                             const unsigned long long *counts, const unsigned char *grain, int *over_steps,
                             Fp8Switch *switched) {
    double threshold = r.millionths / 1e6;
    int n = 0;
    for (int l = 0; l < c->L; l++) {
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? lm_head : 0); lin++) {
            int i = fp8_linear(c, l, lin), worst = -1;
            if (grain[i] != FP8_GRAIN_TENSOR) continue;
            double worst_lost = 0.0;
            for (int k = 0; k < FP8_KINDS; k++) {
                int t = fp8_tensor(c, l, lin, k);
                const unsigned long long *tc = counts + FP8_COUNTS * t; // its counts
                unsigned long long lost = tc[FP8_UNDERFLOWS] + tc[FP8_SATURATIONS];
                double values = fp8_values_cast(c, lin, k, 1, s); // a per-tensor linear casts X and dY once
                if ((double)lost > threshold * values && (worst < 0 || lost / values > worst_lost)) {
                    worst = k;
                    worst_lost = lost / values;
                }
            }
            over_steps[i] = worst >= 0 ? over_steps[i] + 1 : 0;
            if (over_steps[i] >= r.patience) switched[n++] = (Fp8Switch){l, lin, worst, worst_lost};
        }
    }
    return n;
}

#endif
