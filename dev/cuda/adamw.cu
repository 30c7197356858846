/*
The optimizer step's kernels: adamw_update (llmc/adamw.cuh), with and without the fused E4M3 weight
cast, init_from_master, and global_norm_squared (llmc/global_norm.cuh) that computes the clip factor.

Validation against CPU references:
  adamw_update: 5 steps on fp32 master/m/v vs the dev/test/README.md formula in float on the CPU
    (tolerances cover --use_fast_math's approximate divide/sqrt and FMA contraction: a few ulp);
    with bf16 moments, m and v must be the CPU's fp32 value stochastically rounded with the same
    hashed bits (llmc/bf16_round.h); the few whose fp32 values differ by those few ulp across a
    rounding threshold may be one bf16 ulp (plus the fp32 check's absolute tolerance, for moments
    that nearly cancel) off, at most 1 in 1000; the CPU then continues from the GPU's moments so
    the steps stay comparable;
    param must be exactly bf16(master); with bf16 master weights (master NULL) the param is the master:
    each step it must be the CPU's fp32 update of it rounded stochastically with its own hashed bits
    (bf16_round_weight_bits), one bf16 ulp off for at most 1 in 1000 as the moments (round-to-nearest
    or the moments' bits put ~1 in 4 or 1 in 3 one ulp off), and the CPU goes on from the GPU's param;
    the fp8 copy must equal fp8_encode(param * scale[l*stride])
    byte for byte and amax[l*stride] = max |param| of slice l bit for bit, the amax/scale entries
    between the strides untouched; the fp8 health counts of slice l, summed over the steps, exactly
    llmc/fp8.h's oracle over its params, added in counts[FP8_COUNTS*l*stride] to what they held, the
    entries between untouched (and all of them with counts NULL); layer scales that saturate many,
    and underflow many; vectorized, scalar (slice not a multiple of 8) and misaligned paths.
  init_from_master: exact round-to-nearest-even.
  global_norm_squared: vs a CPU double sum (rel 1e-5), bit-identical over repeated runs, n = 0 and 1.
Timing: Llama-2-7B's wqkv tensor (32 layers x 12288 x 4096 = 1.61e9 elements) with and without the
cast, with fp32 and bf16 moments, fp32 and bf16 master weights, and the global norm over the same
count; bandwidth against the measured 4.17 TB/s copy. Then the trainer's fp8 form with its bf16 moments
in mapped pinned host memory (-adam_offload 1: 6.4 GB pinned), the moments' 8 bytes per element over
PCIe against the same form's on the device.

Build (from dev/cuda):  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I../.. adamw.cu -lcublasLt -lcublas -o adamw
                        (or: make -C dev/cuda adamw)
Run:                    ./adamw          (needs ~28 GB of GPU memory for the timing)
The last line is "adamw: ALL PASS" or "adamw: N FAILED"; exit status 0 / 1.
*/
#include "llmc/fp8.h"           // fp8_encode: the CPU cast
#include "llmc/adamw.cuh"       // adamw_update, init_from_master
#include "llmc/global_norm.cuh" // global_norm_squared
#include "kernel_test.h"        // bf16 bits, device buffers, fill, timing, report

struct Hyper { float lr, b1, b2, eps, wd, grad_scale; };

// The fp32 moments before any bf16 rounding: the master update uses them either way.
static void cpu_adamw(std::vector<float> &w, std::vector<float> &m, std::vector<float> &v, const std::vector<uint16_t> &g,
                      const Hyper &h, int t) {
    const float bc1 = 1.0f - powf(h.b1, (float)t), bc2 = 1.0f - powf(h.b2, (float)t);
    for (size_t i = 0; i < w.size(); i++) {
        const float gi = bf16_to_float(g[i]) * h.grad_scale;
        m[i] = h.b1 * m[i] + (1.0f - h.b1) * gi;
        v[i] = h.b2 * v[i] + (1.0f - h.b2) * gi * gi;
        const float mhat = m[i] / bc1, vhat = v[i] / bc2;
        w[i] -= h.lr * (mhat / (sqrtf(vhat) + h.eps) + h.wd * w[i]);
    }
}

// bf16 moments: how the GPU's stored moment compares with the CPU's fp32 one rounded by the same rule:
// 0 the same bits; 1 within one bf16 ulp of the CPU's value plus abs_tol, the fp32 comparison's
// absolute tolerance (a moment that nearly cancels, m = b1 m + (1-b1) g ~ 0, has few exact bits);
// 2 further
static int moment_mismatch(uint16_t gpu, float cpu, uint32_t r16, double abs_tol) {
    if (gpu == bf16_round_stochastic(cpu, r16)) return 0;
    const double ulp = ldexp(1.0, ilogbf(cpu == 0.0f ? FLT_MIN : cpu) - 7);
    return fabs((double)bf16_to_float(gpu) - cpu) <= ulp + abs_tol ? 1 : 2;
}

// Case: n elements; layers > 0 turns on the fp8 cast (n = layers * layer_numel), counting its fp8
// health into per-layer counters (with_counts; else none, and the counters must keep COUNTS_START);
// offset misaligns every pointer by that many elements; bf16m: moments in bf16, the tensor's first
// element at model index index0; bf16w: bf16 master weights (no fp32 master: the param is updated).
static void validate_adamw(const char *name, size_t n, int layers, size_t layer_numel, int stride, size_t offset,
                           bool bf16m = false, uint64_t index0 = 0, bool with_counts = true, bool bf16w = false) {
    const Hyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f};
    const bool cast = layers > 0;
    uint64_t s = 1234 + n;
    std::vector<float> w(n), m(n, 0.0f), v(n, 0.0f);
    for (size_t i = 0; i < n; i++) w[i] = random_normal(&s) * 0.02f;
    if (bf16w) for (size_t i = 0; i < n; i++) w[i] = bf16_to_float(float_to_bf16(w[i])); // the bf16 master's start
    const size_t mb = bf16m ? 2 : 4; // bytes per moment
    float *d_w = device_alloc<float>(n + offset);
    char *d_m = device_alloc<char>((n + offset) * mb), *d_v = device_alloc<char>((n + offset) * mb);
    floatX *d_p = device_alloc<floatX>(n + offset), *d_g = device_alloc<floatX>(n + offset);
    uint8_t *d_q = device_alloc<uint8_t>(n + offset);
    float *W = bf16w ? NULL : d_w + offset;
    void *M = d_m + offset * mb, *Vv = d_v + offset * mb;
    floatX *P = d_p + offset, *G = d_g + offset;
    uint8_t *Q = d_q + offset;
    if (bf16w) {
        std::vector<uint16_t> p0(n);
        for (size_t i = 0; i < n; i++) p0[i] = float_to_bf16(w[i]);
        upload(P, p0.data(), n);
    } else upload(W, w.data(), n);
    cudaCheck(cudaMemset(M, 0, n * mb)); cudaCheck(cudaMemset(Vv, 0, n * mb));
    // per-layer scales and amax slots at a stride, with sentinels between them that must not change
    const int nslots = cast ? layers * stride : 1;
    std::vector<float> scales(nslots, -7.0f), amax0(nslots, 12345.0f);
    for (int l = 0; l < layers; l++) {
        const float choices[4] = {4000.0f, 25000.0f, 0.5f, 448.0f / 0.06f}; // typical, saturating, underflowing
        scales[(size_t)l * stride] = choices[l % 4];
        amax0[(size_t)l * stride] = l == 0 ? 0.01f : 0.0f; // an earlier value in the slot
    }
    float *d_scales = device_alloc<float>(nslots), *d_amax = device_alloc<float>(nslots);
    upload(d_scales, scales.data(), nslots);
    upload(d_amax, amax0.data(), nslots);
    // fp8 health counters of the same tensors (FP8_COUNTS each), and what each layer's slot should
    // have added up to over the steps
    unsigned long long *d_counts = counts_alloc((size_t)FP8_COUNTS * nslots);
    std::vector<Fp8Counts> counts_want(layers, Fp8Counts{0, 0});
    std::vector<unsigned long long> counts_got((size_t)FP8_COUNTS * nslots);
    Fp8Cast wc = {NULL, NULL, NULL, NULL};
    if (cast) { wc.out = Q; wc.amax = d_amax; wc.scale = d_scales; wc.counts = with_counts ? d_counts : NULL; }

    char detail[256] = "";
    bool ok = true;
    std::vector<float> gw(n), gm(n), gv(n);
    std::vector<uint16_t> gp(n), gm16(n), gv16(n);
    size_t ulp_off = 0, w_ulp_off = 0; // bf16 moments, bf16 master weights one ulp from the CPU's rounding
    std::vector<uint8_t> gq(n);
    for (int t = 1; t <= 5 && ok; t++) {
        std::vector<uint16_t> g(n);
        for (size_t i = 0; i < n; i++) g[i] = float_to_bf16(random_normal(&s) * 0.01f);
        upload(G, g.data(), n);
        const AdamWSlice sl = {W, P, G, M, Vv, bf16m, n, index0, wc, layers, layer_numel, stride};
        const AdamWStep st = {h.lr, h.b1, h.b2, h.eps, h.wd, h.grad_scale, t};
        adamw_update(&sl, &st, 0);
        cpu_adamw(w, m, v, g, h, t);
        cudaCheck(cudaDeviceSynchronize());
        if (!bf16w) download(gw.data(), W, n);
        download(gp.data(), P, n);
        double ms = 0, vs = 0;
        for (size_t i = 0; i < n; i++) { ms += (double)m[i] * m[i]; vs += (double)v[i] * v[i]; }
        const double m_rms = sqrt(ms / n), v_rms = sqrt(vs / n);
        if (bf16m) { // the rounding against the CPU's fp32 moments; then both go on from the GPU's
            download(gm16.data(), (floatX *)M, n); download(gv16.data(), (floatX *)Vv, n);
            const double m_tol = 1e-6 * m_rms, v_tol = 1e-6 * v_rms; // the fp32 check's absolute part
            for (size_t i = 0; i < n && ok; i++) {
                const uint32_t r = bf16_round_bits(index0 + i, t);
                const int em = moment_mismatch(gm16[i], m[i], r, m_tol), ev = moment_mismatch(gv16[i], v[i], r >> 16, v_tol);
                ulp_off += (em == 1) + (ev == 1);
                if (em == 2 || ev == 2) {
                    snprintf(detail, sizeof(detail), "step %d elem %zu: m 0x%04x v 0x%04x, want 0x%04x 0x%04x", t, i,
                             gm16[i], gv16[i], bf16_round_stochastic(m[i], r), bf16_round_stochastic(v[i], r >> 16));
                    ok = false;
                }
                gm[i] = m[i]; gv[i] = v[i]; // the fp32 comparison below is of the master only
            }
            if (ok && ulp_off > 2 * n * t / 1000) {
                snprintf(detail, sizeof(detail), "%zu moments one bf16 ulp off the CPU's rounding by step %d", ulp_off, t);
                ok = false;
            }
        } else {
            download(gm.data(), (float *)M, n); download(gv.data(), (float *)Vv, n);
        }
        if (bf16w) { // the param against the CPU's fp32 update rounded with the weight's bits; then from the GPU's
            for (size_t i = 0; i < n && ok; i++) {
                const uint32_t r = bf16_round_weight_bits(index0 + i, t);
                const int e = moment_mismatch(gp[i], w[i], r, 2e-5 * h.lr); // the fp32 master check's absolute part
                w_ulp_off += e == 1;
                if (e == 2) {
                    snprintf(detail, sizeof(detail), "step %d elem %zu: bf16 master 0x%04x, want 0x%04x (fp32 %.9g)",
                             t, i, gp[i], bf16_round_stochastic(w[i], r), w[i]);
                    ok = false;
                }
                gw[i] = w[i] = bf16_to_float(gp[i]);
            }
            if (ok && w_ulp_off > n * t / 1000) {
                snprintf(detail, sizeof(detail), "%zu bf16 master weights one ulp off the CPU's rounding by step %d",
                         w_ulp_off, t);
                ok = false;
            }
        }
        for (size_t i = 0; i < n && ok; i++) {
            const double tw = 2e-5 * h.lr + 1e-6 * fabs(w[i]), tm = 1e-6 * m_rms + 2e-6 * fabs(m[i]), tv = 1e-6 * v_rms + 2e-6 * fabs(v[i]);
            if (!(fabs(gw[i] - w[i]) <= tw) || !(fabs(gm[i] - m[i]) <= tm) || !(fabs(gv[i] - v[i]) <= tv)) {
                snprintf(detail, sizeof(detail), "step %d elem %zu: master %.9g/%.9g m %.6g/%.6g v %.6g/%.6g (gpu/cpu)", t, i,
                         gw[i], w[i], gm[i], m[i], gv[i], v[i]);
                ok = false;
            } else if (!bf16w && gp[i] != float_to_bf16(gw[i])) {
                snprintf(detail, sizeof(detail), "step %d elem %zu: param 0x%04x != bf16(master %.9g) 0x%04x", t, i, gp[i],
                         gw[i], float_to_bf16(gw[i]));
                ok = false;
            }
        }
        if (bf16m) {
            for (size_t i = 0; i < n; i++) { m[i] = bf16_to_float(gm16[i]); v[i] = bf16_to_float(gv16[i]); }
        }
        if (ok && cast) {
            download(gq.data(), Q, n);
            std::vector<float> amax_got(nslots);
            download(amax_got.data(), d_amax, nslots);
            for (int l = 0; l < layers && ok; l++) {
                const float sc = scales[(size_t)l * stride];
                uint32_t amax_bits = float_bits(amax0[(size_t)l * stride]);
                for (size_t i = (size_t)l * layer_numel; i < (size_t)(l + 1) * layer_numel; i++) {
                    amax_bits = std::max(amax_bits, (uint32_t)(gp[i] & 0x7fff) << 16);
                    const uint8_t want = fp8_encode(bf16_to_float(gp[i]) * sc, FP8_E4M3);
                    if (gq[i] != want) {
                        snprintf(detail, sizeof(detail), "step %d layer %d elem %zu: fp8 0x%02x, want 0x%02x (param 0x%04x, scale %g)",
                                 t, l, i, gq[i], want, gp[i], sc);
                        ok = false;
                        break;
                    }
                }
                if (ok && float_bits(amax_got[(size_t)l * stride]) != amax_bits) {
                    snprintf(detail, sizeof(detail), "step %d layer %d: amax 0x%08x, want 0x%08x", t, l,
                             float_bits(amax_got[(size_t)l * stride]), amax_bits);
                    ok = false;
                }
                amax0[(size_t)l * stride] = amax_got[(size_t)l * stride]; // the slot keeps accumulating
                if (with_counts) {
                    const Fp8Counts c = fp8_counts_of(&gp[(size_t)l * layer_numel], layer_numel, sc, FP8_E4M3);
                    counts_want[l].under += c.under;
                    counts_want[l].sat += c.sat;
                }
            }
            download(counts_got.data(), d_counts, counts_got.size());
            for (size_t k = 0; k < counts_got.size() && ok; k++) { // slot l*stride of layer l; the others untouched
                const size_t slot = k / FP8_COUNTS;
                const Fp8Counts c = slot % stride == 0 ? counts_want[slot / stride] : Fp8Counts{0, 0};
                const unsigned long long want = COUNTS_START + (k % FP8_COUNTS == FP8_UNDERFLOWS ? c.under : c.sat);
                if (counts_got[k] != want) {
                    snprintf(detail, sizeof(detail), "step %d: counts entry %zu (tensor %zu, %s) = %llu, want %llu", t, k, slot,
                             k % FP8_COUNTS == FP8_UNDERFLOWS ? "underflows" : "saturations", counts_got[k], want);
                    ok = false;
                }
            }
            for (int k = 0; k < nslots && ok; k++) {
                if (k % stride != 0 && amax_got[k] != 12345.0f) {
                    snprintf(detail, sizeof(detail), "amax entry %d (not a multiple of the stride) was written", k);
                    ok = false;
                }
            }
        }
    }
    char what[200];
    snprintf(what, sizeof(what), "adamw_update %s: n=%zu%s%s%s%s", name, n, cast ? "" : ", no cast",
             bf16m ? ", bf16 moments" : "", bf16w ? ", bf16 master" : "", cast && !with_counts ? ", counts NULL" : "");
    if (ok && cast && with_counts) {
        Fp8Counts total = {0, 0};
        for (const Fp8Counts &c : counts_want) { total.under += c.under; total.sat += c.sat; }
        snprintf(detail, sizeof(detail), "%llu underflows, %llu saturations over %d layers", total.under, total.sat, layers);
    }
    if (bf16m) printf("  %zu of %zu bf16 moment roundings one ulp off the CPU's (fp32 values a few ulp apart)\n", ulp_off, 10 * n);
    if (bf16w)
        printf("  %zu of %zu bf16 master roundings one ulp off the CPU's (fp32 values a few ulp apart)\n", w_ulp_off,
               5 * n);
    report(what, ok, detail);
    cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_p));
    cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_q)); cudaCheck(cudaFree(d_scales)); cudaCheck(cudaFree(d_amax));
    cudaCheck(cudaFree(d_counts));
}

static void validate_init_from_master(size_t n) {
    uint64_t s = 99;
    std::vector<float> w(n);
    for (size_t i = 0; i < n; i++) w[i] = random_normal(&s) * expf(10.0f * (random_f32(&s) - 0.5f));
    float *d_w = device_alloc<float>(n);
    floatX *d_p = device_alloc<floatX>(n);
    upload(d_w, w.data(), n);
    init_from_master(d_p, d_w, n, 0);
    std::vector<uint16_t> got(n);
    download(got.data(), d_p, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != float_to_bf16(w[i]);
    char detail[96] = "", what[96];
    if (bad) snprintf(detail, sizeof(detail), "%zu of %zu differ", bad, n);
    snprintf(what, sizeof(what), "init_from_master n=%zu", n);
    report(what, bad == 0, detail);
    cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_p));
}

static void validate_global_norm(size_t n, size_t offset) {
    uint64_t s = 555 + n;
    std::vector<uint16_t> g(n);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) {
        g[i] = float_to_bf16(random_normal(&s) * 0.01f);
        const double x = bf16_to_float(g[i]);
        want += x * x;
    }
    floatX *d_g = device_alloc<floatX>(n + offset);
    float *d_out = device_alloc<float>(3);
    if (n) upload(d_g + offset, g.data(), n);
    for (int r = 0; r < 3; r++) global_norm_squared(d_out + r, d_g + offset, n, 0);
    float got[3];
    download(got, d_out, 3);
    const bool same = float_bits(got[0]) == float_bits(got[1]) && float_bits(got[1]) == float_bits(got[2]);
    const bool close = n == 0 ? got[0] == 0.0f : fabs(got[0] - want) <= 1e-5 * want;
    char detail[160] = "", what[96];
    if (!same || !close) snprintf(detail, sizeof(detail), "runs %a %a %a, CPU %.9g", got[0], got[1], got[2], want);
    snprintf(what, sizeof(what), "global_norm_squared n=%zu offset=%zu (3 runs bit-identical)", n, offset);
    report(what, same && close, detail);
    cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_out));
}

// ---------------------------------------------------------------------------------------------
// timing

static void bench(void) {
    const int L = 32;
    const size_t layer_numel = (size_t)12288 * 4096, n = L * layer_numel;
    printf("\nTiming: Llama-2-7B wqkv, %d x 12288 x 4096 = %zu elements (median of 21)\n", L, n);
    float *w = device_alloc<float>(n), *m = device_alloc<float>(n), *v = device_alloc<float>(n);
    floatX *p = device_alloc<floatX>(n), *g = device_alloc<floatX>(n);
    uint8_t *q = device_alloc<uint8_t>(n);
    const int stride = FP8_KINDS * LINS_PER_LAYER; // the trainer's W tensors of one linear kind, layer by layer
    float *sc = device_alloc<float>((size_t)L * stride), *am = device_alloc<float>((size_t)L * stride);
    std::vector<float> ones((size_t)L * stride, 1000.0f);
    upload(sc, ones.data(), ones.size());
    cudaCheck(cudaMemset(am, 0, (size_t)L * stride * sizeof(float)));
    cudaCheck(cudaMemset(m, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(v, 0, n * sizeof(float)));
    fill_uniform(w, n, 0, 0.02f);
    fill_uniform(p, n, 0, 0.02f); // the bf16 master rows' weights
    fill_uniform(g, n, 0, 0.005f);
    Fp8Cast none = {NULL, NULL, NULL, NULL}, wc = {q, am, sc, NULL};
    const int reps = 21, warmup = 3;
    // (name, bytes per element, moments in bf16, bf16 param written, fp8 cast, bf16 master); rows 4 and
    // 5 are the trainer's one-GPU fp8 form with an fp32 master (the E4M3 copy, no bf16 param) with
    // either moment type, the last two its bf16 master (the param read and written in place)
    struct Row { const char *name; int bytes, bf16m, param, cast, bf16w; } rows[] = {
        {"adamw_update, fp32 moments", 28, 0, 1, 0, 0},
        {"adamw_update, bf16 moments", 20, 1, 1, 0, 0},
        {"+ E4M3 cast, 32 slices, fp32 moments", 29, 0, 1, 1, 0},
        {"+ E4M3 cast, no bf16 param, fp32 moments", 27, 0, 0, 1, 0},
        {"+ E4M3 cast, no bf16 param, bf16 moments", 19, 1, 0, 1, 0},
        {"adamw_update, bf16 moments, bf16 master", 14, 1, 1, 0, 1},
        {"+ E4M3 cast, bf16 moments, bf16 master", 15, 1, 1, 1, 1},
    };
    const int nrows = sizeof(rows) / sizeof(rows[0]);
    float t[sizeof(rows) / sizeof(rows[0])];
    for (int r = 0; r < nrows; r++) {
        const Row &row = rows[r];
        cudaCheck(cudaMemset(m, 0, n * sizeof(float)));
        cudaCheck(cudaMemset(v, 0, n * sizeof(float)));
        const AdamWSlice sl = {row.bf16w ? NULL : w, row.param ? p : NULL, g, m, v, row.bf16m, n, 0,
                               row.cast ? wc : none, row.cast ? L : 0, row.cast ? layer_numel : 0, stride};
        t[r] = time_median_ms_queued([&](int i) {
            const AdamWStep st = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, i + 1};
            adamw_update(&sl, &st, 0); }, reps, warmup);
    }
    float *out = device_alloc<float>(1);
    float t_norm = time_median_ms_queued([&](int) { global_norm_squared(out, g, n, 0); }, reps, warmup);
    cudaCheck(cudaDeviceSynchronize());
    printf("%-46s %5s %9s %9s %7s\n", "kernel", "B/el", "ms", "GB/s", "% 4.17");
    for (int r = 0; r < nrows; r++) {
        const double gbs = (double)rows[r].bytes * n / (t[r] * 1e6);
        printf("%-46s %5d %9.3f %9.0f %6.1f%%\n", rows[r].name, rows[r].bytes, t[r], gbs, 100 * gbs / H200_COPY_GBPS);
    }
    const double gb_norm = 2.0 * n / (t_norm * 1e6);
    printf("%-46s %5d %9.3f %9.0f %6.1f%%\n", "global_norm_squared", 2, t_norm, gb_norm, 100 * gb_norm / H200_COPY_GBPS);
    printf("the fused cast costs %.3f ms here; a separate fp8_cast pass over the bf16 param would move 3 B/elem "
           "(~%.3f ms at 4.17 TB/s); bf16 moments save %.3f ms (%.1f%%) in the trainer's form\n", t[2] - t[0],
           3.0 * n / (H200_COPY_GBPS * 1e6), t[3] - t[4], 100.0 * (t[3] - t[4]) / t[3]);
    printf("bf16 master weights (bf16 moments, no cast) save %.3f ms (%.1f%%) against the fp32 master\n", t[1] - t[5],
           100.0 * (t[1] - t[5]) / t[1]);
    // -adam_offload 1: the trainer's fp8 form (row 4) with m and v in mapped pinned host memory, as model_init
    // makes them; the kernel reads and writes them over PCIe (UVA: the host pointer is the kernel's)
    void *hm = NULL, *hv = NULL;
    cudaCheck(cudaHostAlloc(&hm, n * sizeof(floatX), cudaHostAllocMapped));
    cudaCheck(cudaHostAlloc(&hv, n * sizeof(floatX), cudaHostAllocMapped));
    memset(hm, 0, n * sizeof(floatX)); memset(hv, 0, n * sizeof(floatX));
    const AdamWSlice off = {w, NULL, g, hm, hv, 1, n, 0, wc, L, layer_numel, stride};
    float t_off = time_median_ms_queued([&](int i) {
        const AdamWStep st = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, i + 1};
        adamw_update(&off, &st, 0); }, reps, warmup);
    printf("%-46s %5d %9.3f %9.0f GB/s over PCIe (m and v, 8 B/el); %.1fx the same on the device\n",
           "+ E4M3 cast, bf16 moments in host memory", 19, t_off, 8.0 * n / (t_off * 1e6), t_off / t[4]);
    cudaCheck(cudaFreeHost(hm)); cudaCheck(cudaFreeHost(hv));
    cudaCheck(cudaFree(w)); cudaCheck(cudaFree(m)); cudaCheck(cudaFree(v)); cudaCheck(cudaFree(p)); cudaCheck(cudaFree(g));
    cudaCheck(cudaFree(q)); cudaCheck(cudaFree(sc)); cudaCheck(cudaFree(am)); cudaCheck(cudaFree(out));
}

int main(void) {
    cudaDeviceProp prop = device_properties();
    printf("device: %s, %d SMs\n\nValidation\n", prop.name, prop.multiProcessorCount);
    validate_adamw("plain, vector path + tail", 1000003, 0, 0, 1, 0);
    validate_adamw("plain, misaligned (scalar path)", 5003, 0, 0, 1, 1);
    validate_adamw("fp8 cast, 3 layers x 65544, stride 12", 3 * 65544, 3, 65544, 12, 0);
    validate_adamw("fp8 cast, 4 layers x 1001 (scalar path), stride 3", 4 * 1001, 4, 1001, 3, 0);
    validate_adamw("fp8 cast, 1 layer, stride 1", 4096, 1, 4096, 1, 0, false, 0, false);
    validate_adamw("plain, vector path + tail", 1000003, 0, 0, 1, 0, true, 5000000000ull);
    validate_adamw("plain, misaligned (scalar path)", 5003, 0, 0, 1, 1, true, 17);
    validate_adamw("fp8 cast, 3 layers x 65544, stride 12", 3 * 65544, 3, 65544, 12, 0, true, 123456);
    // bf16 master weights: the vector path and its tail, the scalar path, the fused cast (reading the
    // bf16 value just written); with either moment type
    validate_adamw("plain, vector path + tail", 1000003, 0, 0, 1, 0, true, 5000000000ull, true, true);
    validate_adamw("plain, misaligned (scalar path)", 5003, 0, 0, 1, 1, false, 17, true, true);
    validate_adamw("fp8 cast, 3 layers x 65544, stride 12", 3 * 65544, 3, 65544, 12, 0, false, 123456, true, true);
    validate_adamw("fp8 cast, 4 layers x 1001 (scalar path), stride 3", 4 * 1001, 4, 1001, 3, 0, true, 99, true, true);
    validate_init_from_master(1000003);
    validate_global_norm(10000019, 0);
    validate_global_norm(77777, 1);
    validate_global_norm(1, 0);
    validate_global_norm(0, 0);
    bench();
    global_norm_free();
    return report_summary("adamw");
}
