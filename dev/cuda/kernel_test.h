/*
The validation conventions of the dev/cuda kernel programs, on top of bench_common.h (bf16 bits,
device buffers, timers): random bf16 inputs, NaN poisoning of outputs, an element-wise comparison
that counts failures and reports the worst one, exact checks of fp8 copies, amaxes and fp8 health
counts (the fp8 casts' CPU model is llmc/fp8.h's fp8_encode, written from the format definitions, so
it checks the GPU's conversions rather than repeating them; the counts' is its fp8_underflows and
fp8_saturates), and the failure count that sets the exit status.

Tolerances used by the programs, and why: every kernel reads bf16, computes in fp32 and rounds its
result once to bf16. The CPU reference computes in double from the same bf16 inputs, so the only
differences are (a) the final rounding, at most half a bf16 ulp <= 2^-8 |value|, and (b) fp32
arithmetic, a few 1e-7 relative to the magnitude of the terms summed (also __expf / rsqrt under
--use_fast_math). Hence tol = 2^-8 |ref| + 1e-5 * (sum of |terms|). fp8 copies are checked
EXACTLY: the kernels cast the rounded bf16 output, so the CPU cast of the GPU's bf16 value must give
the same code; amaxes are checked exactly against the max |bf16 output|, and the fp8 health counts
exactly against fp8_underflows / fp8_saturates over those same bf16 values.
*/
#ifndef DEV_CUDA_KERNEL_TEST_H
#define DEV_CUDA_KERNEL_TEST_H

#include "bench_common.h" // bf16 bits, device buffers, fill, timers, report_bandwidth, dev_setup
#include "llmc/fp8.h"     // fp8_encode: the CPU cast (round-to-nearest-even, saturating), Fp8Format,
                          // fp8_underflows and fp8_saturates: what the casts count

static int g_failures = 0; // validation failures over the whole program

// ----------------------------------------------------------------------------------------------
// inputs, poisoned outputs

static uint64_t g_rng = 0x1234abcd5678ef01ull;

// n bf16 values ~ mean + stddev * N(0, 1), never exactly zero (so every output carries signal), drawn
// from *rng: the program's one stream, or a program's own seed where a tensor must not depend on
// what was drawn before it.
static std::vector<uint16_t> random_bf16(size_t n, float mean, float stddev, uint64_t *rng = &g_rng) {
    std::vector<uint16_t> v(n);
    for (size_t i = 0; i < n; i++) {
        float x = mean + stddev * random_normal(rng);
        if (x == 0.0f) x = stddev * 0.5f;
        v[i] = float_to_bf16(x);
        if ((v[i] & 0x7fff) == 0) v[i] = float_to_bf16(stddev * 0.5f);
    }
    return v;
}

// Scales about 1 in 16 pairs of elements (2i, 2i+1) by 2^-k, k uniform in [kmin, kmax], and sets
// about 1 in 128 pairs to +0 or -0. Where, which k and which sign depend only on seed and the length,
// so tensors shrunk with the same seed are small (or zero) at the same elements, and so is a kernel's
// output made from them (pairs: RoPE rotates pairs): its fp8 copy underflows there for the larger k,
// and its zeros must not count. bf16 keeps fp32's exponent range: 2^-40 and its products stay normal.
static void shrink_some(std::vector<uint16_t> &v, int kmin, int kmax, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < v.size(); i += 2) {
        const uint32_t r = random_u32(&s);
        const int k = kmin + (int)((r >> 7) % (kmax - kmin + 1));
        for (size_t j = i; j < std::min(i + 2, v.size()); j++) {
            if (r % 128 == 0) v[j] = (r >> 7 & 1) ? 0x8000 : 0x0000;
            else if (r % 16 == 1) v[j] = float_to_bf16(ldexpf(bf16_to_float(v[j]), -k));
        }
    }
}

// All-ones bytes: NaN as bf16 (0xFFFF), fp32 (0xFFFFFFFF), E4M3 and E5M2 (0xFF): an element the
// kernel forgot to write fails every comparison.
static void poison(void *d, size_t bytes) { cudaCheck(cudaMemset(d, 0xff, bytes)); }

// ----------------------------------------------------------------------------------------------
// comparison

typedef struct {
    const char *name;
    size_t n, fails, worst_i;
    double worst_ratio, worst_gpu, worst_ref, worst_tol;
} Cmp;

static Cmp cmp_begin(const char *name) {
    Cmp c;
    memset(&c, 0, sizeof(c));
    c.name = name;
    c.worst_ratio = -1.0;
    return c;
}
// Passes when |gpu - ref| <= tol (tol 0: exact). NaN fails and is reported as the worst.
static inline void cmp_add(Cmp *c, size_t i, double gpu, double ref, double tol) {
    double err = fabs(gpu - ref);
    bool ok = err <= tol;
    double ratio = ok ? (tol > 0 ? err / tol : 0.0) : (isnan(err) ? INFINITY : (tol > 0 ? err / tol : INFINITY));
    c->n++;
    if (!ok) c->fails++;
    if (ratio > c->worst_ratio || (!ok && c->fails == 1)) {
        c->worst_ratio = ratio, c->worst_i = i, c->worst_gpu = gpu, c->worst_ref = ref, c->worst_tol = tol;
    }
}
static void cmp_end(const Cmp *c) {
    if (c->fails) {
        g_failures++;
        printf("  FAIL %-34s %zu of %zu wrong; worst [%zu]: gpu %.9g ref %.9g tol %.3g\n", c->name, c->fails, c->n,
               c->worst_i, c->worst_gpu, c->worst_ref, c->worst_tol);
    } else {
        printf("  ok   %-34s %zu values, worst err/tol %.3f\n", c->name, c->n, c->worst_ratio < 0 ? 0.0 : c->worst_ratio);
    }
}
static void check_true(const char *name, bool ok, const char *detail) {
    if (!ok) g_failures++;
    printf("  %s %-34s %s\n", ok ? "ok  " : "FAIL", name, detail);
}

// fp8 codes must equal the CPU cast of the GPU's bf16 values times scale (fp32 multiply, as the kernel).
static void check_fp8(const char *name, const uint8_t *codes, const uint16_t *bf16, size_t n, float scale, Fp8Format f) {
    Cmp c = cmp_begin(name);
    for (size_t i = 0; i < n; i++) cmp_add(&c, i, codes[i], fp8_encode(bf16_to_float(bf16[i]) * scale, f), 0.0);
    cmp_end(&c);
}
// one value that must equal want exactly (an amax against an earlier run's, or a slot left alone)
static void check_exact(const char *name, double got, double want) {
    Cmp c = cmp_begin(name);
    cmp_add(&c, 0, got, want, 0.0);
    cmp_end(&c);
}
// amax must equal max |bf16 value| exactly.
static void check_amax(const char *name, float amax, const uint16_t *bf16, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(bf16_to_float(bf16[i])));
    check_exact(name, amax, m);
}
static void check_bitwise(const char *name, const void *a, const void *b, size_t bytes) {
    char detail[64];
    bool same = memcmp(a, b, bytes) == 0;
    snprintf(detail, sizeof(detail), "%zu bytes %s", bytes, same ? "identical" : "DIFFER");
    check_true(name, same, detail);
}

// ----------------------------------------------------------------------------------------------
// fp8 health counts (the kernels' counts: [FP8_UNDERFLOWS], [FP8_SATURATIONS] per tensor, added to)

// What every device counter holds before a kernel adds to it: not zero, and 16 short of 2^32, so a
// kernel that overwrote the counters, or added in 32 bits, fails.
#define COUNTS_START 0xfffffff0ull

typedef struct { unsigned long long under, sat; } Fp8Counts;

// n device counters (FP8_COUNTS per tensor), all COUNTS_START.
static void counts_reset(unsigned long long *d, size_t n) {
    std::vector<unsigned long long> h(n, COUNTS_START);
    upload(d, h.data(), n);
}
static unsigned long long *counts_alloc(size_t n) {
    unsigned long long *d = device_alloc<unsigned long long>(n);
    counts_reset(d, n);
    return d;
}

// The oracle: what a cast of these bf16 values with this scale counts (llmc/fp8.h).
static Fp8Counts fp8_counts_of(const uint16_t *bf16, size_t n, float scale, Fp8Format f) {
    Fp8Counts c = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const float x = bf16_to_float(bf16[i]);
        c.under += fp8_underflows(x, scale, f);
        c.sat += fp8_saturates(x, scale, f);
    }
    return c;
}

// Whether the FP8_COUNTS device counters at d hold COUNTS_START + want, exactly; detail says what
// was counted, or what the counters hold past COUNTS_START.
static bool counts_match(const unsigned long long *d, Fp8Counts want, char *detail, size_t len) {
    unsigned long long got[FP8_COUNTS];
    cudaCheck(cudaDeviceSynchronize());
    download(got, d, FP8_COUNTS);
    const bool ok = got[FP8_UNDERFLOWS] == COUNTS_START + want.under && got[FP8_SATURATIONS] == COUNTS_START + want.sat;
    if (ok) snprintf(detail, len, "%llu underflows, %llu saturations", want.under, want.sat);
    else snprintf(detail, len, "counted %lld underflows, %lld saturations; want %llu, %llu",
                  (long long)(got[FP8_UNDERFLOWS] - COUNTS_START), (long long)(got[FP8_SATURATIONS] - COUNTS_START),
                  want.under, want.sat);
    return ok;
}
static void check_counts(const char *name, const unsigned long long *d, Fp8Counts want) {
    char detail[160];
    const bool ok = counts_match(d, want, detail, sizeof(detail));
    check_true(name, ok, detail);
}

// ----------------------------------------------------------------------------------------------
// the program's verdict

// The last line and the exit status (1 if any check failed), in the two forms the programs print
// (dev/test/run_gpu_checks.sh shows each program's last line; some file headers quote it): finish()
// after element-wise checks (rmsnorm, swiglu, rope_encoder, classifier), report_summary() after one
// report() line per check (adamw, fp8_gemm, cast_transpose: a check that judges a whole kernel run
// and says what went wrong first).
static int finish(const char *program) {
    if (g_failures) printf("%s: FAIL (%d checks failed)\n", program, g_failures);
    else printf("%s: PASS\n", program);
    return g_failures ? 1 : 0;
}

static void report(const char *what, bool ok, const char *detail) {
    printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what, detail[0] ? ": " : "", detail);
    if (!ok) g_failures++;
}
static int report_summary(const char *program) {
    if (g_failures == 0) printf("\n%s: ALL PASS\n", program);
    else printf("\n%s: %d FAILED\n", program, g_failures);
    return g_failures == 0 ? 0 : 1;
}

#endif
