/*
Tests of llmc/bf16_round.h, the rule AdamW's bf16 moments and bf16 master weights are stored with:
stochastic rounding is one of the two bf16 neighbours, leaves bf16 values alone, and is exact on
average over all 2^16 random words; the hashed bits are spread evenly; the master weights' bits are a
function of index and step only, and independent of the moments'; and the reason for the rule: a
moment decaying by beta2 = 0.999 per step, and a master weight moved by less than half a bf16 ulp per
step: stochastic rounding follows both, round-to-nearest never moves.
*/
#ifndef DEV_TEST_TEST_BF16_ROUND_H
#define DEV_TEST_TEST_BF16_ROUND_H

#include <math.h>
#include "harness.h"
#include "llmc/bf16_round.h"
#include "llmc/utils.h" // random_u32

// The two bf16 values around x (x itself twice if representable), by truncation and the next code up.
static void bf16_neighbours(float x, float *lo, float *hi) {
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    *lo = bf16_bits_to_float((uint16_t)(b >> 16));
    *hi = (b & 0xffffu) ? bf16_bits_to_float((uint16_t)((b >> 16) + 1)) : *lo;
}

static void test_bf16_round_exact_on_average(void) {
    uint64_t s = 42;
    for (int k = 0; k < 200; k++) {
        uint32_t bits = random_u32(&s);
        float x;
        memcpy(&x, &bits, sizeof(x));
        if (!isfinite(x) || fabsf(x) > 1e30f) continue;
        float lo, hi;
        bf16_neighbours(x, &lo, &hi);
        double sum = 0.0;
        int outside = 0;
        for (uint32_t r = 0; r < 65536; r++) {
            const float y = bf16_bits_to_float(bf16_round_stochastic(x, r));
            outside += y != lo && y != hi;
            sum += y;
        }
        CHECK(outside == 0, "x %a: %d roundings are neither %a nor %a", x, outside, lo, hi);
        // the mean over every random word is x itself: (2^16 - f) lo + f hi = 2^16 x for a fraction f
        CHECK(sum / 65536.0 == (double)x, "x %a: mean %.17g", x, sum / 65536.0);
    }
    const float exact[] = {0.0f, -0.0f, 1.0f, -3.5f, 0.015625f, bf16_bits_to_float(0x0001), bf16_bits_to_float(0x7f7f)};
    for (size_t k = 0; k < sizeof(exact) / sizeof(exact[0]); k++) {
        for (uint32_t r = 0; r < 65536; r += 4099) {
            uint16_t want;
            memcpy(&want, (const char *)&exact[k] + 2, 2); // the high half (little-endian)
            CHECK(bf16_round_stochastic(exact[k], r) == want, "bf16 value %a changed with r %u", exact[k], r);
        }
    }
    CHECK(isinf(bf16_bits_to_float(bf16_round_stochastic(INFINITY, 0xffff))), "inf must stay inf");
    CHECK(isnan(bf16_bits_to_float(bf16_round_stochastic(NAN, 0xffff))), "NaN must stay NaN");
}

static void test_bf16_round_bits_spread(void) {
    // the 16-bit words for m (low) and v (high) over 2^20 consecutive indices of one step and over
    // 2^20 steps of one index: each of 16 buckets holds 1/16 of them within 2%
    for (int mode = 0; mode < 2; mode++) {
        int bucket_lo[16] = {0}, bucket_hi[16] = {0};
        const int n = 1 << 20;
        for (int i = 0; i < n; i++) {
            const uint32_t r = mode == 0 ? bf16_round_bits(7000000000ull + i, 3) : bf16_round_bits(12345, i + 1);
            bucket_lo[(r & 0xffff) >> 12]++;
            bucket_hi[r >> 28]++;
        }
        for (int b = 0; b < 16; b++) {
            CHECK(fabs(bucket_lo[b] - n / 16.0) < 0.02 * n / 16, "%s: low-word bucket %d holds %d of %d",
                  mode == 0 ? "indices" : "steps", b, bucket_lo[b], n);
            CHECK(fabs(bucket_hi[b] - n / 16.0) < 0.02 * n / 16, "%s: high-word bucket %d holds %d of %d",
                  mode == 0 ? "indices" : "steps", b, bucket_hi[b], n);
        }
    }
}

// Round to the nearest bf16, ties to even: what the test's premises compare stochastic rounding with.
static float bf16_round_nearest(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    return bf16_bits_to_float((uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16));
}

static void test_bf16_round_decaying_moment(void) {
    // v = 0.999 v (a zero gradient) for 1000 steps from 1, over 4096 elements
    const int n = 4096, steps = 1000;
    double mean_sr = 0.0;
    float rn = 1.0f;
    for (int i = 0; i < n; i++) {
        float v = 1.0f;
        for (int t = 1; t <= steps; t++) v = bf16_bits_to_float(bf16_round_stochastic(0.999f * v, bf16_round_bits(i, t) >> 16));
        mean_sr += v;
    }
    mean_sr /= n;
    for (int t = 1; t <= steps; t++) rn = bf16_round_nearest(0.999f * rn); // 0.999 is within half an ulp of 1
    const double want = pow(0.999, steps);
    printf("    v after %d steps of 0.999: exact %.4f, stochastic mean %.4f, round-to-nearest %.4f\n", steps, want, mean_sr, rn);
    CHECK(fabs(mean_sr - want) < 0.01 * want, "stochastic rounding's mean %.5f vs %.5f", mean_sr, want);
    CHECK(rn == 1.0f, "round-to-nearest was expected to stall at 1, got %g (the test's premise)", rn);
}

static void test_bf16_round_weight_bits(void) {
    // over 2^20 indices of one step: the master weight's 16 bits equal m's (low) or v's (high) about
    // 2^4 times each, as two independent words would (64: 12 standard deviations above), and its
    // round-up decision for a value half way between two neighbours agrees with m's half the time
    const int n = 1 << 20;
    int same_m = 0, same_v = 0, agree_m = 0, buckets[16] = {0};
    for (int i = 0; i < n; i++) {
        const uint64_t index = 7000000000ull + i;
        const uint32_t w = bf16_round_weight_bits(index, 3) & 0xffff, r = bf16_round_bits(index, 3);
        same_m += w == (r & 0xffff);
        same_v += w == r >> 16;
        agree_m += (w < 0x8000) == ((r & 0xffff) < 0x8000);
        buckets[w >> 12]++;
    }
    CHECK(same_m < 64 && same_v < 64, "the weight's bits equal m's %d times and v's %d of %d (independent: ~16)", same_m, same_v, n);
    CHECK(fabs(agree_m - n / 2.0) < 0.005 * n, "the weight and m round a half-way value the same way %d times of %d", agree_m, n);
    for (int b = 0; b < 16; b++) CHECK(fabs(buckets[b] - n / 16.0) < 0.02 * n / 16, "bucket %d holds %d of %d", b, buckets[b], n);
    // a function of index and step alone: the same twice, another word at the next step or index
    CHECK(bf16_round_weight_bits(12345, 7) == bf16_round_weight_bits(12345, 7), "the bits of one index and step changed");
    CHECK(bf16_round_weight_bits(12345, 7) == bf16_round_bits(12345 + BF16_ROUND_WEIGHT_SALT, 7), "the bits are not the salted index's");
    CHECK(bf16_round_weight_bits(12345, 7) != bf16_round_weight_bits(12345, 8) &&
          bf16_round_weight_bits(12345, 7) != bf16_round_weight_bits(12346, 7), "the same bits at another step or index");
}

static void test_bf16_round_master_weight(void) {
    // w = 1 moved by -1e-3 per step (AdamW's lr x |m / sqrt(v)| ~ 1) for 200 steps, over 4096 weights
    // (indices): under 1, a bf16 ulp is 2^-8, so each step is a quarter of one
    const int n = 4096, steps = 200;
    double mean_sr = 0.0;
    float rn = 1.0f;
    for (int i = 0; i < n; i++) {
        float w = 1.0f;
        for (int t = 1; t <= steps; t++) w = bf16_bits_to_float(bf16_round_stochastic(w - 1e-3f, bf16_round_weight_bits(i, t)));
        mean_sr += w;
    }
    mean_sr /= n;
    for (int t = 1; t <= steps; t++) rn = bf16_round_nearest(rn - 1e-3f);
    const double want = 1.0 - steps * 1e-3;
    printf("    w after %d steps of -1e-3: exact %.4f, stochastic mean %.4f, round-to-nearest %.4f\n", steps, want, mean_sr, rn);
    CHECK(fabs(mean_sr - want) < 0.01 * want, "stochastic rounding's mean %.5f vs %.5f", mean_sr, want);
    CHECK(rn == 1.0f, "round-to-nearest was expected to stall at 1, got %g (the test's premise)", rn);
}

static void run_bf16_round_tests(void) {
    run_test("bf16 stochastic rounding: a neighbour, exact on average, bf16 values kept", test_bf16_round_exact_on_average);
    run_test("bf16 rounding bits: even over indices and steps", test_bf16_round_bits_spread);
    run_test("bf16 stochastic rounding follows a decaying moment (round-to-nearest stalls)", test_bf16_round_decaying_moment);
    run_test("bf16 master weights' rounding bits: from index and step, independent of the moments'", test_bf16_round_weight_bits);
    run_test("bf16 stochastic rounding follows a master weight moved under half an ulp a step (round-to-nearest stalls)",
             test_bf16_round_master_weight);
}

#endif
