/*
Tests of the fp8 fallback's host code (llmc/fp8_fallback.h), which the trainer runs after every step
of -fp8_fallback: the values a step's casts cast (fp8_values_cast) against the count written out from
docs/fp8_recipe.md, and the rule (fp8_fallback_rule) against dev/test/llama_ref.h's ref_fp8_auto_grain
on 1, 3 and 8 ranks, with the weight cache and without, and by hand.
*/
#ifndef DEV_TEST_TEST_FP8_FALLBACK_H
#define DEV_TEST_TEST_FP8_FALLBACK_H

#include <math.h>
#include "harness.h"
#include "llama_ref.h"          // ref_fp8_auto_grain: the rule the trainer's must follow
#include "llmc/fp8_fallback.h"  // fp8_values_cast, fp8_fallback_rule
#include "llmc/utils.h"         // random_u32

static const LlamaConfig FALLBACK_CFG = {64, 2, 128, 2, 1, 256, 32, 10000.0f, 1e-5f}; // V L C NH NKV FF max_T
enum { FALLBACK_B = 2, FALLBACK_T = 32 };
static const int FALLBACK_WORLDS[3] = {1, 3, 8};

// The values tensor `kind` of linear lin of FALLBACK_CFG casts in a step, by docs/fp8_recipe.md,
// the widths written out (qkv: NH + 2 NKV heads of C / NH): every rank casts X and dY `casts` times in
// each micro-step, W once a step from the weight cache, without it before each micro-step's forward,
// and a linear that casts nothing (casts 0, a bf16 one) nothing.
static double fallback_spec_values(int lin, int kind, int casts, int w_cache, int grad_accum, int world) {
    const double C = 128, FF = 256, HS = 64, NH = 2, NKV = 1, V = 64;
    const double ins[LINS_PER_LAYER + 1] = {C, C, C, FF, C};
    const double outs[LINS_PER_LAYER + 1] = {(NH + 2 * NKV) * HS, C, 2 * FF, C, V};
    double tokens = (double)grad_accum * FALLBACK_B * FALLBACK_T;
    if (casts == 0) return 0.0;
    if (kind == FP8_W) return ins[lin] * outs[lin] * (w_cache ? 1 : grad_accum) * world;
    return tokens * (kind == FP8_X ? ins[lin] : outs[lin]) * casts * world;
}

// fp8_values_cast against fallback_spec_values for every tensor of every linear (the lm_head's too),
// 0, 1 and 2 casts per micro-step, with the weight cache and without, grad accumulation 1 and 3, on
// 1, 3 and 8 ranks.
static void test_fallback_values_cast(void) {
    for (int casts = 0; casts <= 2; casts++) {
        for (int w_cache = 0; w_cache <= 1; w_cache++) {
            for (int ga = 1; ga <= 3; ga += 2) {
                for (int w = 0; w < 3; w++) {
                    Fp8StepCasts s = {FALLBACK_B * FALLBACK_T, ga, FALLBACK_WORLDS[w], w_cache};
                    for (int lin = 0; lin <= LINS_PER_LAYER; lin++) {
                        for (int k = 0; k < FP8_KINDS; k++) {
                            double got = fp8_values_cast(&FALLBACK_CFG, lin, k, casts, s);
                            double want = fallback_spec_values(lin, k, casts, w_cache, ga, FALLBACK_WORLDS[w]);
                            CHECK(got == want, "%d casts, weight cache %d, grad accumulation %d, world %d: %s %s cast "
                                  "%.0f values, want %.0f", casts, w_cache, ga, FALLBACK_WORLDS[w], LINEAR_NAMES[lin],
                                  FP8_KIND_NAMES[k], got, want);
                        }
                    }
                }
            }
        }
    }
}

// The rule on rank 0 of 1, 3 and 8, with the weight cache and without, against ref_fp8_auto_grain
// (threshold 1%) of one model whose batch is every rank's (B x world): the same step cast on several
// GPUs. Each step half the linears (drawn) have one tensor over 1% of the reference's values by 1 to
// 1% more, every other tensor loses 1% of them rounded down (not over: the rule is strict) or fewer,
// split between underflows and saturations. The trainer's counts are the GPUs': X's and dY's the
// reference's (the ranks' tokens together), W's the reference's times the world (every rank casts all
// of W) and, without the cache, times the micro-steps (W cast in each). Both must switch the same
// linears after the same steps and count the same steps over, for 12 steps; some per-tensor linear
// that is not over must have a tensor exactly at the rounded-down threshold (where a count of the
// values too small by the world or the micro-steps puts it over), and with a patience over 1 some
// linear must wait over it and some count be reset.
static void test_fallback_rule_ranks(void) {
    struct { int world, w_cache, grad_accum, lm_head, patience; } runs[] = {
        {1, 1, 1, 0, 2}, {1, 1, 3, 1, 1}, {1, 1, 2, 0, 3}, {1, 0, 3, 1, 1},
        {3, 0, 2, 0, 2}, {8, 0, 3, 1, 2}, {3, 1, 2, 1, 1}, {8, 1, 1, 0, 3},
    };
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        int world = runs[r].world, w_cache = runs[r].w_cache, ga = runs[r].grad_accum, lm_head = runs[r].lm_head;
        Fp8FallbackRule rule = {10000, runs[r].patience};
        Fp8StepCasts s = {FALLBACK_B * FALLBACK_T, ga, world, w_cache};
        RefModel ref;
        ref_init(&ref, &FALLBACK_CFG, FALLBACK_B * world, FALLBACK_T, 1, 0, lm_head, 4, 0);
        int nlin = fp8_num_linears(&FALLBACK_CFG, lm_head), switched = 0, at_threshold = 0, resets = 0, waits = 0;
        size_t nc = (size_t)FP8_COUNTS * FP8_KINDS * nlin;
        unsigned long long *counts = (unsigned long long *)callocCheck(nc, sizeof(unsigned long long));
        unsigned char *grain = (unsigned char *)callocCheck(nlin, 1);
        int *over_steps = (int *)callocCheck(nlin, sizeof(int)), *before = (int *)callocCheck(nlin, sizeof(int));
        Fp8Switch *sw = (Fp8Switch *)callocCheck(nlin, sizeof(Fp8Switch));
        uint64_t rng = 41 + r;
        for (int step = 0; step < 12; step++) {
            for (int i = 0; i < nlin; i++) {
                int lin = i < LINS_PER_LAYER * FALLBACK_CFG.L ? i % LINS_PER_LAYER : LINS_PER_LAYER;
                int over = random_u32(&rng) % 2 ? (int)(random_u32(&rng) % FP8_KINDS) : -1;
                for (int k = 0; k < FP8_KINDS; k++) {
                    double ref_values = fallback_spec_values(lin, k, 1, 1, ga, 1) * (k == FP8_W ? 1 : world);
                    unsigned long long at = (unsigned long long)floor(0.01 * ref_values), lost;
                    if (k == over) lost = at + 1 + random_u32(&rng) % at;
                    else lost = random_u32(&rng) % 2 ? at : random_u32(&rng) % (at + 1);
                    at_threshold += over < 0 && lost == at && grain[i] == FP8_GRAIN_TENSOR;
                    unsigned long long under = lost ? random_u32(&rng) % (lost + 1) : 0;
                    unsigned long long times = k == FP8_W ? (unsigned long long)world * (w_cache ? 1 : ga) : 1;
                    size_t t = (size_t)FP8_KINDS * i + k;
                    ref.fp8_counts[FP8_COUNTS * t + FP8_UNDERFLOWS] = under;
                    ref.fp8_counts[FP8_COUNTS * t + FP8_SATURATIONS] = lost - under;
                    counts[FP8_COUNTS * t + FP8_UNDERFLOWS] = under * times;
                    counts[FP8_COUNTS * t + FP8_SATURATIONS] = (lost - under) * times;
                }
            }
            memcpy(before, over_steps, nlin * sizeof(int));
            int want = ref_fp8_auto_grain(&ref, ga, 0.01, rule.patience, FP8_GRAIN_BLOCK);
            int got = fp8_fallback_rule(&FALLBACK_CFG, lm_head, rule, s, counts, grain, over_steps, sw);
            for (int k = 0; k < got; k++) // as the trainer switches them
                grain[fp8_linear(&FALLBACK_CFG, sw[k].l, sw[k].lin)] = FP8_GRAIN_BLOCK;
            CHECK(got == want, "world %d, weight cache %d, grad accumulation %d, step %d: %d linears switched, the "
                  "reference %d", world, w_cache, ga, step, got, want);
            for (int i = 0; i < nlin; i++) {
                CHECK(grain[i] == ref.fp8_grain[i] && over_steps[i] == ref.fp8_over_steps[i],
                      "world %d, weight cache %d, step %d, linear %d: grain %d after %d steps over, the reference's %d "
                      "after %d", world, w_cache, step, i, grain[i], over_steps[i], ref.fp8_grain[i],
                      ref.fp8_over_steps[i]);
                resets += before[i] > 0 && over_steps[i] == 0 && grain[i] == FP8_GRAIN_TENSOR;
                waits += over_steps[i] > 0 && grain[i] == FP8_GRAIN_TENSOR;
            }
            switched += got;
        }
        CHECK(switched > 0 && at_threshold > 0 && (rule.patience == 1 || (resets > 0 && waits > 0)),
              "world %d, weight cache %d, patience %d: %d linears switched, %d tensors of per-tensor linears not over "
              "exactly at the threshold, %d linears over but waiting, %d counts reset in 12 steps: the draws miss "
              "a case",
              world, w_cache, rule.patience, switched, at_threshold, waits, resets);
        free(counts); free(grain); free(over_steps); free(before); free(sw);
        ref_free(&ref);
    }
}

// By hand, the threshold 1/64 (exact, so that a tensor can lose exactly that), grad accumulation 4,
// patience 1, one GPU with the cache: layer 1's wo loses 2/64 of its X and 3/64 of its dY (the worst,
// reported); layer 0's w13 2/64 of W's values cast once (IN x OUT), which would be 1/128 if W counted
// once per micro-step; layer 0's qkv exactly 1/64 of its X: not over.
static void test_fallback_rule_by_hand(void) {
    const LlamaConfig *c = &FALLBACK_CFG;
    const int ga = 4;
    Fp8FallbackRule rule = {15625, 1};
    Fp8StepCasts s = {FALLBACK_B * FALLBACK_T, ga, 1, 1};
    int nlin = fp8_num_linears(c, 0);
    size_t nc = (size_t)FP8_COUNTS * FP8_KINDS * nlin, N = (size_t)ga * FALLBACK_B * FALLBACK_T;
    unsigned long long *counts = (unsigned long long *)callocCheck(nc, sizeof(unsigned long long));
    unsigned char *grain = (unsigned char *)callocCheck(nlin, 1);
    int *over_steps = (int *)callocCheck(nlin, sizeof(int));
    counts[FP8_COUNTS * fp8_tensor_index(1, LIN_WO, FP8_X) + FP8_UNDERFLOWS] = 2 * N * c->C / 64;
    counts[FP8_COUNTS * fp8_tensor_index(1, LIN_WO, FP8_DY) + FP8_SATURATIONS] = 3 * N * c->C / 64;
    counts[FP8_COUNTS * fp8_tensor_index(0, LIN_W13, FP8_W) + FP8_UNDERFLOWS] = 2 * 2 * c->FF * c->C / 64;
    counts[FP8_COUNTS * fp8_tensor_index(0, LIN_QKV, FP8_X) + FP8_UNDERFLOWS] = N * c->C / 64;
    Fp8Switch sw[8];
    memset(sw, 0, sizeof(sw)); // what the message prints of a switch that did not happen
    int n = fp8_fallback_rule(c, 0, rule, s, counts, grain, over_steps, sw);
    CHECK(n == 2 && sw[0].l == 0 && sw[0].lin == LIN_W13 && sw[0].kind == FP8_W && sw[1].l == 1 &&
          sw[1].lin == LIN_WO && sw[1].kind == FP8_DY && sw[1].lost == 3.0 / 64,
          "%d switched (want layer 0 w13 for its W, layer 1 wo for its dY at 3/64): first layer %d %s %s, second "
          "layer %d %s %s %.4f", n, sw[0].l, LINEAR_NAMES[sw[0].lin], FP8_KIND_NAMES[sw[0].kind], sw[1].l,
          LINEAR_NAMES[sw[1].lin], FP8_KIND_NAMES[sw[1].kind], sw[1].lost);
    free(counts); free(grain); free(over_steps);
}

static void run_fp8_fallback_tests(void) {
    run_test("fp8 fallback: the values a step casts, 0 to 2 casts, with and without the weight cache, 1, 3, 8 ranks",
             test_fallback_values_cast);
    run_test("fp8 fallback: the rule switches the reference's linears on 1, 3 and 8 ranks, with and without the cache",
             test_fallback_rule_ranks);
    run_test("fp8 fallback: the rule by hand (the worst tensor reported, W once a step, the threshold not over)",
             test_fallback_rule_by_hand);
}

#endif
