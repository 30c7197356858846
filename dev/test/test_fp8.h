/*
Tests of llmc/fp8.h: the codecs against independent definitions (a formula for decode, a
brute-force nearest-value search for encode), and the delayed-scaling arithmetic (scale formula,
history roll, whole-state update) on hand-computed cases.
*/
#ifndef DEV_TEST_TEST_FP8_H
#define DEV_TEST_TEST_FP8_H

#include <math.h>
#include <float.h>
#include <string.h>
#include "harness.h"
#include "llmc/fp8.h"
#include "llmc/utils.h" // random_u32

// Each format's parameters, written out here rather than taken from fp8.h.
typedef struct { Fp8Format f; const char *name; int mbits, bias, max_code; double max; } Fp8Spec;
static const Fp8Spec FP8_SPECS[2] = {{FP8_E4M3, "E4M3", 3, 7, 0x7E, 448.0}, {FP8_E5M2, "E5M2", 2, 15, 0x7B, 57344.0}};

// The value of a finite code by the textbook formula: (-1)^s * 2^(1-bias) * m/2^mbits for exponent
// field 0 (subnormals), else (-1)^s * 2^(e-bias) * (1 + m/2^mbits).
static double fp8_textbook_value(const Fp8Spec *s, int code) {
    int e = (code & 0x7F) >> s->mbits, m = code & ((1 << s->mbits) - 1);
    double mag = e == 0 ? pow(2.0, 1 - s->bias) * m / (1 << s->mbits) : pow(2.0, e - s->bias) * (1.0 + (double)m / (1 << s->mbits));
    return (code & 0x80) ? -mag : mag;
}

static void test_fp8_decode_all_codes(void) {
    for (int k = 0; k < 2; k++) {
        const Fp8Spec *s = &FP8_SPECS[k];
        for (int c = 0; c < 256; c++) {
            float got = fp8_decode((uint8_t)c, s->f);
            int e = (c & 0x7F) >> s->mbits, m = c & ((1 << s->mbits) - 1);
            if (s->f == FP8_E4M3 && (c & 0x7F) == 0x7F) {
                CHECK(isnan(got), "%s code 0x%02X must be NaN, got %g", s->name, c, got);
            } else if (s->f == FP8_E5M2 && e == 31) {
                if (m == 0) CHECK(isinf(got) && (got < 0) == (c >= 0x80), "%s code 0x%02X must be %sinf, got %g", s->name, c, c >= 0x80 ? "-" : "+", got);
                else CHECK(isnan(got), "%s code 0x%02X must be NaN, got %g", s->name, c, got);
            } else {
                double want = fp8_textbook_value(s, c);
                CHECK((double)got == want && !!signbit(got) == (c >= 0x80), "%s code 0x%02X decodes to %.9g, want %.9g", s->name, c, got, want);
            }
        }
        // finite positive codes are strictly increasing, and the negative half mirrors them
        for (int c = 1; c <= s->max_code; c++)
            CHECK(fp8_decode((uint8_t)c, s->f) > fp8_decode((uint8_t)(c - 1), s->f), "%s codes 0x%02X, 0x%02X not increasing", s->name, c - 1, c);
    }
    // anchors from the formats' definitions
    CHECK(fp8_decode(0x38, FP8_E4M3) == 1.0f && fp8_decode(0x7E, FP8_E4M3) == 448.0f && fp8_decode(0xFE, FP8_E4M3) == -448.0f, "E4M3 1.0 / max");
    CHECK(fp8_decode(0x01, FP8_E4M3) == ldexpf(1.0f, -9) && fp8_decode(0x08, FP8_E4M3) == ldexpf(1.0f, -6), "E4M3 smallest subnormal / normal");
    CHECK(fp8_decode(0x3C, FP8_E5M2) == 1.0f && fp8_decode(0x7B, FP8_E5M2) == 57344.0f, "E5M2 1.0 / max");
    CHECK(fp8_decode(0x01, FP8_E5M2) == ldexpf(1.0f, -16) && fp8_decode(0x04, FP8_E5M2) == ldexpf(1.0f, -14), "E5M2 smallest subnormal / normal");
    CHECK(fp8_format_max(FP8_E4M3) == FP8_E4M3_MAX && FP8_E4M3_MAX == 448.0f && fp8_format_max(FP8_E5M2) == FP8_E5M2_MAX && FP8_E5M2_MAX == 57344.0f, "format max");
    CHECK(signbit(fp8_decode(0x80, FP8_E4M3)) && signbit(fp8_decode(0x80, FP8_E5M2)), "0x80 is -0");
}

// The code of the nearest finite value to x after saturating |x| to max, found by trying every code;
// ties go to the even code (the even mantissa). The sign is x's, so -0 and tiny negatives give 0x80.
// NaN gives the NaN code CUDA writes: 0x7F in both formats.
static uint8_t fp8_brute_encode(const Fp8Spec *s, const double *values, float x) {
    if (isnan(x)) return 0x7F;
    double a = fabs((double)x);
    if (a > s->max) a = s->max;
    int best = 0;
    double best_dist = INFINITY;
    for (int c = 0; c <= s->max_code; c++) {
        double d = fabs(values[c] - a);
        if (d < best_dist || (d == best_dist && (c & 1) == 0)) { best = c; best_dist = d; }
    }
    return (uint8_t)((signbit(x) ? 0x80 : 0) | best);
}

// Compares fp8_encode with the brute force on n values; returns the number of mismatches, the first
// few printed.
static int fp8_compare_encode(const Fp8Spec *s, const double *values, const float *xs, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t got = fp8_encode(xs[i], s->f), want = fp8_brute_encode(s, values, xs[i]);
        if (got != want && bad++ < 5) CHECK(0, "%s encode(%a = %.9g) = 0x%02X, want 0x%02X", s->name, xs[i], xs[i], got, want);
    }
    return bad;
}

static void test_fp8_encode_edge_values(void) {
    for (int k = 0; k < 2; k++) {
        const Fp8Spec *s = &FP8_SPECS[k];
        double values[128];
        for (int c = 0; c <= s->max_code; c++) values[c] = fp8_textbook_value(s, c);
        float xs[4096];
        size_t n = 0;
        // every finite value and every midpoint between neighbours (ties), and one float ulp either side
        for (int c = 0; c <= s->max_code; c++) {
            float pts[2] = {(float)values[c], c < s->max_code ? (float)((values[c] + values[c + 1]) / 2) : (float)values[c]};
            for (int j = 0; j < 2; j++) {
                float p = pts[j];
                float around[3] = {p, nextafterf(p, INFINITY), nextafterf(p, -INFINITY)};
                for (int i = 0; i < 3; i++) { xs[n++] = around[i]; xs[n++] = -around[i]; }
            }
        }
        // saturation boundary (max + half its spacing: where an unsaturated cast would round up),
        // beyond the range, below the smallest subnormal, signed zero, inf and NaN
        float sat = (float)(s->max + (s->max - values[s->max_code - 1]) / 2), tiny = (float)(values[1] / 2);
        float extra[] = {sat, nextafterf(sat, 0.0f), nextafterf(sat, INFINITY), 2.0f * (float)s->max, 1e30f, FLT_MAX,
                         INFINITY, tiny, nextafterf(tiny, 1.0f), nextafterf(tiny, 0.0f), FLT_MIN, 1e-45f, 0.0f, NAN};
        for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) { xs[n++] = extra[i]; xs[n++] = -extra[i]; }
        fp8_compare_encode(s, values, xs, n);
    }
    // a few written out, so the brute force itself is pinned down
    CHECK(fp8_encode(1.0625f, FP8_E4M3) == 0x38 && fp8_encode(1.1875f, FP8_E4M3) == 0x3A, "E4M3 ties to even mantissa");
    CHECK(fp8_encode(464.0f, FP8_E4M3) == 0x7E && fp8_encode(-INFINITY, FP8_E4M3) == 0xFE, "E4M3 saturates");
    CHECK(fp8_encode(ldexpf(1.0f, -10), FP8_E4M3) == 0x00 && fp8_encode(ldexpf(3.0f, -10), FP8_E4M3) == 0x02, "E4M3 subnormal ties");
    CHECK(fp8_encode(-ldexpf(1.0f, -12), FP8_E4M3) == 0x80 && fp8_encode(-0.0f, FP8_E5M2) == 0x80, "tiny negatives round to -0");
    CHECK(fp8_encode(1.125f, FP8_E5M2) == 0x3C && fp8_encode(1.375f, FP8_E5M2) == 0x3E, "E5M2 ties to even mantissa");
    CHECK(fp8_encode(61440.0f, FP8_E5M2) == 0x7B && fp8_encode(INFINITY, FP8_E5M2) == 0x7B, "E5M2 saturates, inf included");
    CHECK(fp8_encode(NAN, FP8_E4M3) == 0x7F && fp8_encode(-NAN, FP8_E5M2) == 0x7F, "NaN code");
}

// fp8 health counts on values built to sit at their edges: the smallest subnormal's half (a tie that
// rounds to the even code 0: underflow) and one float ulp either side, the max and one ulp past it,
// inf, zero (never an underflow), NaN (neither); each with scales 1 and 2^-3 and both signs.
static void test_fp8_health_edges(void) {
    for (int k = 0; k < 2; k++) {
        const Fp8Spec *s = &FP8_SPECS[k];
        Fp8Format f = s->f;
        float half_min = (float)(fp8_textbook_value(s, 1) / 2), max = (float)s->max;
        struct { float x; int under, sat; } cases[] = {
            {half_min, 1, 0}, {nextafterf(half_min, 0.0f), 1, 0}, {nextafterf(half_min, 1.0f), 0, 0}, {1e-45f, 1, 0},
            {0.0f, 0, 0}, {max, 0, 0}, {nextafterf(max, INFINITY), 0, 1}, {2.0f * max, 0, 1}, {INFINITY, 0, 1}, {NAN, 0, 0},
            {1.0f, 0, 0},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            for (int sign = 0; sign < 2; sign++) {
                for (int sc = 0; sc < 2; sc++) {
                    float scale = sc ? 0.125f : 1.0f, x = (sign ? -cases[i].x : cases[i].x) / scale; // x * scale is the case, exactly
                    CHECK(fp8_underflows(x, scale, f) == cases[i].under && fp8_saturates(x, scale, f) == cases[i].sat,
                          "%s: x * scale = %g: underflow %d saturation %d, want %d %d", s->name, (double)(x * scale),
                          fp8_underflows(x, scale, f), fp8_saturates(x, scale, f), cases[i].under, cases[i].sat);
                }
            }
        }
    }
}

// 10^6 random floats per format, exponents spread from below the smallest subnormal to beyond max.
static void test_fp8_encode_random(void) {
    const int n = 1000000;
    float *xs = (float *)mallocCheck(n * sizeof(float));
    uint64_t rng = 0x5eed;
    for (int k = 0; k < 2; k++) {
        const Fp8Spec *s = &FP8_SPECS[k];
        double values[128];
        for (int c = 0; c <= s->max_code; c++) values[c] = fp8_textbook_value(s, c);
        int lo = 1 - s->bias - s->mbits - 4, hi = (int)log2(s->max) + 3; // in powers of two
        for (int i = 0; i < n; i++) {
            uint32_t u = random_u32(&rng);
            float mant = 1.0f + (u & 0x7FFFFF) / 8388608.0f;
            float x = ldexpf(mant, lo + (int)(random_u32(&rng) % (uint32_t)(hi - lo + 1)));
            xs[i] = (u >> 31) ? -x : x;
        }
        int bad = fp8_compare_encode(s, values, xs, n);
        CHECK(bad == 0, "%s: %d of %d random values encode wrongly", s->name, bad, n);
    }
    free(xs);
}

static void test_fp8_quantize(void) {
    CHECK(fp8_quantize(3.0f, 0.5f, FP8_E4M3) == 1.5f, "3 * 0.5 is representable");
    CHECK(fp8_quantize(1.0f, 1.0625f, FP8_E4M3) == 1.0f, "1.0625 ties down to 1.0");
    CHECK(fp8_quantize(1000.0f, 1.0f, FP8_E4M3) == 448.0f && fp8_quantize(-1e6f, 1.0f, FP8_E5M2) == -57344.0f, "saturation");
    CHECK(fp8_quantize(0.1f, 1000.0f, FP8_E5M2) == 96.0f, "0.1 * 1000 = 100 -> 96 (E5M2 spacing 16 there, 100 nearer 96 than 112)");
}

static void test_fp8_compute_scale(void) {
    CHECK(fp8_compute_scale(448.0f, 448.0f, 0, 7.0f) == 1.0f, "amax = max gives 1");
    CHECK(fp8_compute_scale(2.0f, 448.0f, 0, 7.0f) == 224.0f, "448 / 2");
    CHECK(fp8_compute_scale(2.0f, 448.0f, 1, 7.0f) == 112.0f && fp8_compute_scale(2.0f, 448.0f, 3, 7.0f) == 28.0f, "margin divides by 2^margin");
    CHECK(fp8_compute_scale(3.0f, 448.0f, 0, 7.0f) == 448.0f / 3.0f, "rounded like fp32 division");
    CHECK(fp8_compute_scale(0.5f, 57344.0f, 0, 7.0f) == 114688.0f, "E5M2 max");
    CHECK(fp8_compute_scale(0.0f, 448.0f, 0, 7.0f) == 7.0f, "zero amax keeps the scale");
    CHECK(fp8_compute_scale(NAN, 448.0f, 0, 7.0f) == 7.0f, "NaN amax keeps the scale");
    CHECK(fp8_compute_scale(INFINITY, 448.0f, 0, 7.0f) == 7.0f, "inf amax keeps the scale");
    CHECK(fp8_compute_scale(-1.0f, 448.0f, 0, 7.0f) == 7.0f, "negative amax keeps the scale");
    CHECK(fp8_compute_scale(1e-45f, 448.0f, 0, 7.0f) == FLT_MAX, "overflowing scale -> FLT_MAX");
    CHECK(fp8_compute_scale(1e-36f, 448.0f, 0, 7.0f) == FLT_MAX, "448 / 1e-36 > FLT_MAX");
    CHECK(fp8_compute_scale(2e-36f, 448.0f, 0, 7.0f) == 448.0f / 2e-36f && 448.0f / 2e-36f < FLT_MAX, "finite large scale kept as is");
}

static void test_fp8_update_tensor(void) {
    float slot = 6.0f, hist[4] = {5.0f, 4.0f, 3.0f, 2.0f}, scale = 9.0f, scale_inv = 1.0f / 9.0f;
    fp8_update_tensor(&slot, hist, 4, &scale, &scale_inv, 448.0f, 0);
    CHECK(hist[0] == 6.0f && hist[1] == 5.0f && hist[2] == 4.0f && hist[3] == 3.0f, "roll: slot in front, oldest out");
    CHECK(slot == 0.0f, "slot zeroed");
    CHECK(scale == 448.0f / 6.0f && scale_inv == 1.0f / scale, "scale from the max, scale_inv = 1/scale");

    // the largest entry drops out of the window
    float slot2 = 1.0f, hist2[3] = {2.0f, 3.0f, 100.0f}, s2 = 1.0f, si2 = 1.0f;
    fp8_update_tensor(&slot2, hist2, 3, &s2, &si2, 448.0f, 0);
    CHECK(hist2[0] == 1.0f && hist2[1] == 2.0f && hist2[2] == 3.0f && s2 == 448.0f / 3.0f, "max over the window only");

    // NaN and inf are kept in the history but skipped by the max
    float slot3 = NAN, hist3[3] = {4.0f, INFINITY, 0.0f}, s3 = 1.0f, si3 = 1.0f;
    fp8_update_tensor(&slot3, hist3, 3, &s3, &si3, 57344.0f, 0);
    CHECK(isnan(hist3[0]) && hist3[1] == 4.0f && isinf(hist3[2]) && slot3 == 0.0f, "NaN recorded, slot zeroed");
    CHECK(s3 == 57344.0f / 4.0f && si3 == 1.0f / s3, "scale from the largest finite entry");

    // nothing finite and positive: the scale stays
    float slot4 = 0.0f, hist4[2] = {INFINITY, 0.0f}, s4 = 3.0f, si4 = 0.0f;
    fp8_update_tensor(&slot4, hist4, 2, &s4, &si4, 448.0f, 0);
    CHECK(s4 == 3.0f && si4 == 1.0f / 3.0f, "zero/inf history keeps the scale; scale_inv still 1/scale");

    // history of one, margin, and overflow to FLT_MAX
    float slot5 = 8.0f, hist5[1] = {1000.0f}, s5 = 1.0f, si5 = 1.0f;
    fp8_update_tensor(&slot5, hist5, 1, &s5, &si5, 448.0f, 2);
    CHECK(hist5[0] == 8.0f && s5 == 14.0f && si5 == 1.0f / 14.0f, "H = 1, margin 2: 448 / 8 / 4");
    float slot6 = 1e-44f, hist6[2] = {0.0f, 0.0f}, s6 = 1.0f, si6 = 1.0f;
    fp8_update_tensor(&slot6, hist6, 2, &s6, &si6, 448.0f, 0);
    CHECK(s6 == FLT_MAX && si6 == 1.0f / FLT_MAX && si6 > 0.0f, "overflowing scale -> FLT_MAX");
}

// Whole state buffer: layout offsets, initial values, and per-kind format max (dY is E5M2).
static void test_fp8_update_state(void) {
    Fp8StateLayout lay = fp8_state_layout(6, 3); // two linears: X, W, dY each
    float state[6 + 18 + 6 + 6];
    CHECK(lay.total == sizeof(state) / sizeof(float), "layout total %zu", lay.total);
    fp8_state_init(state, lay);
    for (int t = 0; t < 6; t++) {
        CHECK(state[lay.amax_slot + t] == 0.0f && state[lay.scale + t] == 1.0f && state[lay.scale_inv + t] == 1.0f, "init tensor %d", t);
        for (int i = 0; i < 3; i++) CHECK(state[lay.amax_history + t * 3 + i] == 0.0f, "init history %d", t);
    }
    for (int t = 0; t < 6; t++) state[lay.amax_slot + t] = (float)(t + 1);
    state[lay.amax_slot + 4] = 0.0f; // linear 1's W saw only zeros: keeps scale 1
    fp8_update_state(state, lay, 0);
    float want[6] = {448.0f / 1, 448.0f / 2, 57344.0f / 3, 448.0f / 4, 1.0f, 57344.0f / 6};
    for (int t = 0; t < 6; t++) {
        CHECK(state[lay.scale + t] == want[t] && state[lay.scale_inv + t] == 1.0f / want[t], "tensor %d scale %g, want %g", t, state[lay.scale + t], want[t]);
        CHECK(state[lay.amax_slot + t] == 0.0f, "tensor %d slot zeroed", t);
        CHECK(state[lay.amax_history + t * 3] == (t == 4 ? 0.0f : (float)(t + 1)) && state[lay.amax_history + t * 3 + 1] == 0.0f, "tensor %d history", t);
    }
    fp8_update_state(state, lay, 1); // the history keeps last step's amax; margin halves the scale
    CHECK(state[lay.scale + 0] == 224.0f && state[lay.amax_history + 1] == 1.0f && state[lay.amax_history + 0] == 0.0f, "second update, margin 1");
}

static void run_fp8_tests(void) {
    run_test("fp8: all 256 codes of E4M3 and E5M2 decode to the textbook value", test_fp8_decode_all_codes);
    run_test("fp8: encode = brute-force nearest (ties even, saturation, subnormals, -0, NaN) on edge values", test_fp8_encode_edge_values);
    run_test("fp8: encode = brute-force nearest on 10^6 random floats per format", test_fp8_encode_random);
    run_test("fp8: quantize = decode(encode(x * scale))", test_fp8_quantize);
    run_test("fp8 health: underflow and saturation at the subnormal and max edges, zero, inf, NaN", test_fp8_health_edges);
    run_test("fp8: compute_scale (formula, margin, zero/NaN/inf amax, overflow)", test_fp8_compute_scale);
    run_test("fp8: update_tensor (history roll, slot reset, finite max, scale_inv)", test_fp8_update_tensor);
    run_test("fp8: state_init and update_state over a state buffer", test_fp8_update_state);
}

#endif
