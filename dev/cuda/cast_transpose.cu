/*
fp8 casts, cast+transpose, transpose, amax and the delayed-scaling update (llmc/fp8_scaling.cuh).
Validates every kernel bit for bit against the CPU rule of llmc/fp8.h (fp8_encode, fp8_update_state),
on shapes that exercise the vectorized paths, partial tiles, tails and the any-shape fallbacks, and
on special values (0, -0, subnormals, saturation, inf, NaN); the casts' fp8 health counts exactly
against fp8_underflows / fp8_saturates (inputs at the edges: half the smallest subnormal, the max,
their bf16 neighbours), added to what the counters held (untouched when counts is NULL; the tiles'
padding counts nothing); then times them on the docs/baselines.md
GEMM shapes (X = (M, K) and dY = (M, N) of each) with bandwidth against the H200's
measured 4.17 TB/s device-to-device copy.

Build (from dev/cuda):  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I../.. cast_transpose.cu -lcublasLt -lcublas -o cast_transpose
                        (or: make -C dev/cuda cast_transpose)
Run:                    ./cast_transpose [version]
  version 0 (default): validate, then time the kernels llmc uses (tiled transposes)
  version 1: validate, then time the any-shape fallback transposes instead (32x32 byte tiles), to
             see what the tiled kernels buy
Prints PASS/FAIL per check; the last line is "cast_transpose: ALL PASS" or "cast_transpose: N FAILED",
exit status 0 / 1. Timing is the median of 25 runs after 5 warm-ups, rotating between two copies.
*/
#include "llmc/fp8.h"           // fp8_encode, fp8_update_state, fp8_compute_scale: the CPU rule
#include "llmc/fp8_scaling.cuh" // the kernels under test
#include "kernel_test.h"        // bf16 bits, device buffers, fill, timing, report

// ---------------------------------------------------------------------------------------------
// host helpers

// bf16 test data: normal values of mixed magnitudes plus specials sprinkled in (when with_specials).
static std::vector<uint16_t> make_bf16(size_t n, uint64_t seed, float mag, bool with_specials) {
    std::vector<uint16_t> h(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        float x = random_normal(&s) * mag;
        if ((random_u32(&s) & 7) == 0) x *= 16.0f; // some large values (saturate with a large scale)
        if ((random_u32(&s) & 31) == 0) x *= 1e-4f; // some small values (fp8 subnormals / underflow)
        h[i] = float_to_bf16(x);
    }
    if (with_specials && n >= 64) {
        const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f,
                                     0x7f80, 0xff80, 0x3f80, 0xbf80, 0x4380, 0x43e0, 0x43e1, 0xc3e0,
                                     0x7fc0, 0xffc1};
        for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]); k++) h[(k * 7919) % n] = specials[k];
    }
    return h;
}

// Overwrites about 1 in 32 elements, at random positions (so the blocks of a launch count
// differently), with the edges of fp8 health for this format and scale, either sign: the bf16 values
// nearest half the smallest subnormal / scale (with a power-of-two scale, the tie itself, which rounds
// to the even code 0: an underflow) and max / scale (max itself does not saturate), with their bf16
// neighbours below and above; 0 (never counted), bf16 subnormals (underflows), inf (saturates) and
// NaN (neither).
static void add_fp8_edges(std::vector<uint16_t> &h, int fmt, float scale, uint64_t seed) {
    const Fp8Format f = (Fp8Format)fmt;
    const uint16_t tie = float_to_bf16(ldexpf(1.0f, fp8_min_exponent(f) - fp8_mantissa_bits(f) - 1) / scale);
    const uint16_t top = float_to_bf16(fp8_format_max(f) / scale);
    const uint16_t edges[] = {(uint16_t)(tie - 1), tie, (uint16_t)(tie + 1), (uint16_t)(top - 1), top,
                              (uint16_t)(top + 1), 0x0000, 0x0001, 0x007f, 0x7f80, 0x7fc0};
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 3;
    for (size_t i = 0; i < h.size(); i++) {
        const uint32_t r = random_u32(&s);
        if (r % 32 == 0) h[i] = edges[(r >> 5) % (sizeof(edges) / sizeof(edges[0]))] | (r >> 31 ? 0x8000 : 0);
    }
}

static uint32_t cpu_amax_bits(const uint16_t *h, size_t n) { // max |x| as float bits (NaN wins)
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) m = std::max(m, (uint32_t)(h[i] & 0x7fff) << 16);
    return m;
}

static uint8_t cpu_cast(uint16_t h, float scale, int fmt) {
    return fp8_encode(bf16_to_float(h) * scale, (Fp8Format)fmt);
}

static float *d_scalar(float v) {
    float *d = device_alloc<float>(1);
    set_float(d, v);
    return d;
}

// Compares fp8 codes; describes the first mismatch.
static bool compare_codes(const uint8_t *gpu, const uint8_t *cpu, size_t n, char *detail, size_t dlen,
                          const uint16_t *src = NULL) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) if (gpu[i] != cpu[i]) { if (bad++ == 0) first = i; }
    if (bad == 0) return true;
    snprintf(detail, dlen, "%zu of %zu codes differ, first at %zu: gpu 0x%02x cpu 0x%02x (input bf16 0x%04x)", bad, n,
             first, gpu[first], cpu[first], src ? src[first] : 0);
    return false;
}

// ---------------------------------------------------------------------------------------------
// validation

// Codes, amax and counts (fp8 health: the oracle's over h, added to COUNTS_START; with counts NULL
// the counters keep COUNTS_START).
static void validate_cast(int fmt, size_t n, size_t offset, float scale, bool with_amax, bool with_counts,
                          bool with_specials) {
    char what[160], detail[256] = "";
    snprintf(what, sizeof(what), "fp8_cast %s n=%zu offset=%zu scale=%g%s%s%s", fmt == FP8_E4M3 ? "E4M3" : "E5M2", n,
             offset, scale, with_amax ? "" : " amax=NULL", with_counts ? "" : " counts=NULL",
             with_specials ? " +specials" : "");
    std::vector<uint16_t> h = make_bf16(n, n + offset + fmt, 3.0f, with_specials);
    if (with_specials) add_fp8_edges(h, fmt, scale, n + offset);
    uint16_t *d_in = device_alloc<uint16_t>(n + offset);
    uint8_t *d_out = device_alloc<uint8_t>(n + offset);
    upload(d_in + offset, h.data(), n);
    float *d_scale = d_scalar(scale);
    const float prior = 0.25f; // the slot already holds an amax from an earlier micro-step
    float *d_amax = d_scalar(prior);
    unsigned long long *d_counts = counts_alloc(FP8_COUNTS);
    fp8_cast(d_out + offset, fmt, (const floatX *)(d_in + offset), n, with_amax ? d_amax : NULL, with_counts ? d_counts : NULL,
             d_scale, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint8_t> got(n), want(n);
    download(got.data(), d_out + offset, n);
    for (size_t i = 0; i < n; i++) want[i] = cpu_cast(h[i], scale, fmt);
    bool ok = compare_codes(got.data(), want.data(), n, detail, sizeof(detail), h.data());
    if (ok) {
        uint32_t want_amax = std::max(cpu_amax_bits(h.data(), n), float_bits(prior));
        if (!with_amax) want_amax = float_bits(prior);
        uint32_t got_amax = float_bits(get_float(d_amax));
        if (got_amax != want_amax) {
            ok = false;
            snprintf(detail, sizeof(detail), "amax bits 0x%08x, want 0x%08x", got_amax, want_amax);
        }
    }
    if (ok) ok = counts_match(d_counts, with_counts ? fp8_counts_of(h.data(), n, scale, (Fp8Format)fmt) : Fp8Counts{0, 0},
                              detail, sizeof(detail));
    report(what, ok, detail);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_amax));
    cudaCheck(cudaFree(d_counts));
}

static void validate_cast_transpose(int fmt, int rows, int cols, size_t offset, bool with_out, float scale) {
    char what[160], detail[256] = "";
    snprintf(what, sizeof(what), "fp8_cast_transpose %s (%d, %d) offset=%zu%s", fmt == FP8_E4M3 ? "E4M3" : "E5M2", rows,
             cols, offset, with_out ? "" : " out=NULL");
    size_t n = (size_t)rows * cols;
    std::vector<uint16_t> h = make_bf16(n, n * 3 + fmt + offset, 2.0f, true);
    add_fp8_edges(h, fmt, scale, n + offset);
    uint16_t *d_in = device_alloc<uint16_t>(n + offset);
    uint8_t *d_out = device_alloc<uint8_t>(n + offset), *d_out_t = device_alloc<uint8_t>(n + offset);
    cudaCheck(cudaMemset(d_out, 0xAB, n + offset));
    upload(d_in + offset, h.data(), n);
    float *d_scale = d_scalar(scale), *d_amax = d_scalar(0.0f);
    unsigned long long *d_counts = counts_alloc(FP8_COUNTS);
    fp8_cast_transpose(with_out ? d_out + offset : NULL, d_out_t + offset, fmt, (const floatX *)(d_in + offset), rows,
                       cols, d_amax, d_counts, d_scale, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint8_t> got(n), got_t(n), want(n), want_t(n);
    download(got.data(), d_out + offset, n);
    download(got_t.data(), d_out_t + offset, n);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            uint8_t code = cpu_cast(h[(size_t)r * cols + c], scale, fmt);
            want[(size_t)r * cols + c] = code;
            want_t[(size_t)c * rows + r] = code;
        }
    bool ok = compare_codes(got_t.data(), want_t.data(), n, detail, sizeof(detail));
    if (ok && with_out) ok = compare_codes(got.data(), want.data(), n, detail, sizeof(detail), h.data());
    if (ok && !with_out) { // out must be untouched
        for (size_t i = 0; i < n && ok; i++) if (got[i] != 0xAB) { ok = false; snprintf(detail, sizeof(detail), "out=NULL but out written at %zu", i); }
    }
    if (ok) {
        uint32_t got_amax = float_bits(get_float(d_amax)), want_amax = cpu_amax_bits(h.data(), n);
        if (got_amax != want_amax) { ok = false; snprintf(detail, sizeof(detail), "amax bits 0x%08x, want 0x%08x", got_amax, want_amax); }
    }
    if (ok) ok = counts_match(d_counts, fp8_counts_of(h.data(), n, scale, (Fp8Format)fmt), detail, sizeof(detail));
    report(what, ok, detail);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_out_t));
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_amax)); cudaCheck(cudaFree(d_counts));
}

static void validate_transpose(int rows, int cols, size_t offset) {
    char what[160], detail[256] = "";
    snprintf(what, sizeof(what), "fp8_transpose (%d, %d) offset=%zu", rows, cols, offset);
    size_t n = (size_t)rows * cols;
    std::vector<uint8_t> h(n), got(n), want(n);
    uint64_t s = 12345 + n;
    for (size_t i = 0; i < n; i++) h[i] = (uint8_t)random_u32(&s);
    for (int r = 0; r < rows; r++) for (int c = 0; c < cols; c++) want[(size_t)c * rows + r] = h[(size_t)r * cols + c];
    uint8_t *d_in = device_alloc<uint8_t>(n + offset), *d_out = device_alloc<uint8_t>(n + offset);
    upload(d_in + offset, h.data(), n);
    fp8_transpose(d_out + offset, d_in + offset, rows, cols, 0);
    cudaCheck(cudaDeviceSynchronize());
    download(got.data(), d_out + offset, n);
    report(what, compare_codes(got.data(), want.data(), n, detail, sizeof(detail)), detail);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out));
}

static void validate_amax(size_t n, size_t offset, int mode /*0 normal, 1 with NaN, 2 subnormals only, 3 zeros*/) {
    static const char *modes[] = {"normal", "with NaN", "subnormals only", "all zero"};
    char what[160], detail[256] = "";
    snprintf(what, sizeof(what), "amax_abs_max n=%zu offset=%zu %s", n, offset, modes[mode]);
    std::vector<uint16_t> h = make_bf16(n, n + 77 * mode, 1.0f, false);
    uint64_t s = 999;
    if (mode == 1) h[n / 3] = 0x7fc1;
    if (mode == 2) for (size_t i = 0; i < n; i++) h[i] = (uint16_t)((random_u32(&s) & 0x807f)); // bf16 subnormals and +-0
    if (mode == 3) for (size_t i = 0; i < n; i++) h[i] = (i & 1) ? 0x8000 : 0x0000;
    uint16_t *d_in = device_alloc<uint16_t>(n + offset);
    upload(d_in + offset, h.data(), n);
    float *d_amax = d_scalar(0.0f);
    amax_abs_max(d_amax, (const floatX *)(d_in + offset), n, 0);
    cudaCheck(cudaDeviceSynchronize());
    uint32_t got = float_bits(get_float(d_amax)), want = cpu_amax_bits(h.data(), n);
    bool ok = got == want;
    if (!ok) snprintf(detail, sizeof(detail), "amax bits 0x%08x, want 0x%08x", got, want);
    report(what, ok, detail);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_amax));
}

// Random amax values of every awkward kind.
static float awkward_amax(uint64_t *s) {
    switch (random_u32(s) % 12) {
    case 0: return 0.0f;
    case 1: return NAN;
    case 2: return INFINITY;
    case 3: return float_from_bits(1 + random_u32(s) % 0x7fffff); // subnormal
    case 4: return 1e-38f * (1.0f + random_f32(s));               // tiny normal: scale overflows -> FLT_MAX
    case 5: return FLT_MAX;
    case 6: return -1.0f;                                          // never produced, but must not reach a scale
    case 7: return -0.0f;
    default: return expf(20.0f * (random_f32(s) - 0.5f)) * (1.0f + random_f32(s));
    }
}

static void validate_update_scales(int num_tensors, int H, int margin, int steps) {
    char what[160], detail[256] = "";
    snprintf(what, sizeof(what), "fp8_update_scales NT=%d H=%d margin=%d, %d steps vs fp8_update_state", num_tensors, H,
             margin, steps);
    Fp8StateLayout lay = fp8_state_layout(num_tensors, H);
    std::vector<float> cpu(lay.total), got(lay.total);
    fp8_state_init(cpu.data(), lay);
    uint64_t s = 4242 + H + margin;
    for (size_t i = lay.amax_history; i < lay.scale; i++) cpu[i] = awkward_amax(&s);
    for (int t = 0; t < num_tensors; t++) cpu[lay.scale + t] = 0.5f + random_f32(&s);
    float *d_state = device_alloc<float>(lay.total);
    upload(d_state, cpu.data(), lay.total);
    bool ok = true;
    for (int step = 0; step < steps && ok; step++) {
        for (int t = 0; t < num_tensors; t++) { // this step's slots, on both sides
            float a = (step % 5 == 4) ? 0.0f : awkward_amax(&s); // some all-zero steps (a layer with zero grad)
            cpu[lay.amax_slot + t] = a;
        }
        upload(d_state + lay.amax_slot, cpu.data() + lay.amax_slot, num_tensors);
        fp8_update_scales(d_state, NULL, lay, margin, 0);
        fp8_update_state(cpu.data(), lay, margin);
        cudaCheck(cudaDeviceSynchronize());
        download(got.data(), d_state, lay.total);
        for (size_t i = 0; i < lay.total; i++) {
            if (float_bits(got[i]) != float_bits(cpu[i])) {
                const char *part = i < lay.amax_history ? "amax_slot" : i < lay.scale ? "amax_history"
                                   : i < lay.scale_inv ? "scale" : "scale_inv";
                snprintf(detail, sizeof(detail), "step %d: state[%zu] (%s) = %a (0x%08x), CPU %a (0x%08x)", step, i, part,
                         got[i], float_bits(got[i]), cpu[i], float_bits(cpu[i]));
                ok = false;
                break;
            }
        }
    }
    report(what, ok, detail);
    cudaCheck(cudaFree(d_state));
}

static void validate_scale_from_amax(void) {
    const float amaxes[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, float_from_bits(1), float_from_bits(0x7fffff), 1e-38f,
                            1.2e-38f, 1e-30f, 0.001f, 1.0f, 3.0f, 448.0f, 57344.0f, 1e30f, 3e38f, FLT_MAX};
    const float fmaxes[] = {FP8_E4M3_MAX, FP8_E5M2_MAX};
    const int margins[] = {0, 1, 3};
    float *d_scale = device_alloc<float>(1), *d_scale_inv = device_alloc<float>(1), *d_amax = device_alloc<float>(1);
    int bad = 0, total = 0;
    char detail[256] = "";
    for (float a : amaxes) for (float fm : fmaxes) for (int mg : margins) {
        const float prev = 0.75f;
        upload(d_amax, &a, 1);
        upload(d_scale, &prev, 1);
        fp8_scale_from_amax(d_scale, d_scale_inv, NULL, d_amax, fm, mg, 0);
        cudaCheck(cudaDeviceSynchronize());
        float gs = get_float(d_scale), gi = get_float(d_scale_inv);
        float ws = fp8_compute_scale(a, fm, mg, prev), wi = 1.0f / ws;
        total++;
        if (float_bits(gs) != float_bits(ws) || float_bits(gi) != float_bits(wi)) {
            if (bad++ == 0) snprintf(detail, sizeof(detail), "amax %a fmax %g margin %d: scale %a inv %a, want %a inv %a", a, fm,
                                     mg, gs, gi, ws, wi);
        }
    }
    char what[96];
    snprintf(what, sizeof(what), "fp8_scale_from_amax (%d cases vs fp8_compute_scale)", total);
    report(what, bad == 0, detail);
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_scale_inv)); cudaCheck(cudaFree(d_amax));
}

// ---------------------------------------------------------------------------------------------
// timing

struct Shape { const char *name; int M, K, N; };
static const Shape SHAPES[] = {
    {"70B/TP8 attn.wqkv", 16384, 8192, 1280}, {"70B/TP8 attn.w0", 16384, 1024, 8192},
    {"70B/TP8 ffn.w13", 16384, 8192, 7168},   {"70B/TP8 ffn.w2", 16384, 3584, 8192},
    {"7B qkv", 8192, 4096, 12288},            {"7B wo", 8192, 4096, 4096},
    {"7B w13", 8192, 4096, 22016},            {"7B w2", 8192, 11008, 4096},
};

static void bench(int version) {
    printf("\nTiming (median of 25, two copies rotated); bandwidth vs the measured 4.17 TB/s copy.\n");
    printf("transposes: %s\n", version == 1 ? "any-shape fallback kernels (version 1)" : "tiled kernels (llmc)");
    printf("%-20s %-18s | %-22s | %-22s | %-22s | %-22s\n", "shape", "tensor", "fp8_cast X ms GB/s %",
           "cast_transpose dY", "fp8_transpose Xfp8", "amax_abs_max X");
    size_t max_x = 0, max_dy = 0;
    for (const Shape &s : SHAPES) {
        max_x = std::max(max_x, (size_t)s.M * s.K);
        max_dy = std::max(max_dy, (size_t)s.M * s.N);
    }
    size_t max_el = std::max(max_x, max_dy);
    floatX *in[2];
    uint8_t *o1[2], *o2[2];
    for (int c = 0; c < 2; c++) {
        in[c] = device_alloc<floatX>(max_el);
        o1[c] = device_alloc<uint8_t>(max_el);
        o2[c] = device_alloc<uint8_t>(max_el);
        fill_uniform(in[c], max_el, 17u + c, 2.0f);
    }
    float *d_scale = d_scalar(1.0f), *d_amax = d_scalar(0.0f);
    for (const Shape &s : SHAPES) {
        const int rows = s.M;
        const size_t nx = (size_t)s.M * s.K, ndy = (size_t)s.M * s.N;
        float t_cast = time_median_ms_queued([&](int i) { fp8_cast(o1[i % 2], FP8_E4M3, in[i % 2], nx, d_amax, NULL, d_scale, 0); });
        float t_ct;
        if (version == 1) {
            dim3 grid(CEIL_DIV(s.N, 32), CEIL_DIV(rows, 32));
            t_ct = time_median_ms_queued([&](int i) {
                fp8_transpose_any_kernel<__NV_E5M2, true><<<grid, 256>>>(o1[i % 2], o2[i % 2], in[i % 2], rows, s.N, d_amax, NULL, d_scale);
            });
        } else {
            t_ct = time_median_ms_queued([&](int i) {
                fp8_cast_transpose(o1[i % 2], o2[i % 2], FP8_E5M2, in[i % 2], rows, s.N, d_amax, NULL, d_scale, 0);
            });
        }
        float t_tr;
        if (version == 1) {
            dim3 grid(CEIL_DIV(s.K, 32), CEIL_DIV(rows, 32));
            t_tr = time_median_ms_queued([&](int i) {
                fp8_transpose_any_kernel<__NV_E4M3, false><<<grid, 256>>>(NULL, o2[i % 2], o1[i % 2], rows, s.K, NULL, NULL, NULL);
            });
        } else {
            t_tr = time_median_ms_queued([&](int i) { fp8_transpose(o2[i % 2], o1[i % 2], rows, s.K, 0); });
        }
        float t_amax = time_median_ms_queued([&](int i) { amax_abs_max(d_amax, in[i % 2], nx, 0); });
        cudaCheck(cudaGetLastError());
        double g_cast = 3.0 * nx / (t_cast * 1e6), g_ct = 4.0 * ndy / (t_ct * 1e6), g_tr = 2.0 * nx / (t_tr * 1e6),
               g_amax = 2.0 * nx / (t_amax * 1e6);
        char dims[40];
        snprintf(dims, sizeof(dims), "X(%d,%d) dY(%d,%d)", s.M, s.K, s.M, s.N);
        printf("%-20s %-18s | %6.3f %6.0f %5.1f%% | %6.3f %6.0f %5.1f%% | %6.3f %6.0f %5.1f%% | %6.3f %6.0f %5.1f%%\n",
               s.name, dims, t_cast, g_cast, 100 * g_cast / H200_COPY_GBPS, t_ct, g_ct, 100 * g_ct / H200_COPY_GBPS, t_tr, g_tr,
               100 * g_tr / H200_COPY_GBPS, t_amax, g_amax, 100 * g_amax / H200_COPY_GBPS);
    }
    printf("bytes counted: cast 3/elem (bf16 in, fp8 out), cast_transpose 4/elem (bf16 in, two fp8 out), "
           "transpose 2/elem, amax 2/elem.\n");
    // the once-per-step update for Llama-2-7B (4 linears x 32 layers x 3 tensors, history 16)
    Fp8StateLayout lay = fp8_state_layout(3 * 4 * 32, 16);
    std::vector<float> h(lay.total);
    fp8_state_init(h.data(), lay);
    float *d_state = device_alloc<float>(lay.total);
    upload(d_state, h.data(), lay.total);
    float t_upd = time_median_ms_queued([&](int) { fp8_update_scales(d_state, NULL, lay, 0, 0); });
    printf("fp8_update_scales, Llama-2-7B state (%d tensors, history %d): %.1f us per step\n", lay.num_tensors,
           lay.history_len, t_upd * 1000.0f);
    for (int c = 0; c < 2; c++) { cudaCheck(cudaFree(in[c])); cudaCheck(cudaFree(o1[c])); cudaCheck(cudaFree(o2[c])); }
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_amax)); cudaCheck(cudaFree(d_state));
}

int main(int argc, char **argv) {
    int version = argc > 1 ? atoi(argv[1]) : 0;
    if (version < 0 || version > 1) FATAL("usage: %s [version]   (0: llmc kernels, 1: fallback transposes)", argv[0]);
    cudaDeviceProp prop = device_properties();
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

    printf("\nValidation (bit-exact against llmc/fp8.h)\n");
    for (int fmt = 0; fmt < 2; fmt++) {
        float big = fmt == FP8_E4M3 ? 7.3f : 913.7f; // drives the data's tail past the format max (saturation)
        validate_cast(fmt, (1 << 20) + 13, 0, big, true, true, true);  // vector path + tail
        validate_cast(fmt, 65543, 0, 0.25f, true, true, true);         // power-of-two scale: exact edges (the tie)
        validate_cast(fmt, 100003, 1, 0.37f, true, true, true);        // misaligned: scalar path
        validate_cast(fmt, 4096, 0, 1.0f, false, true, false);         // amax NULL
        validate_cast(fmt, 4096, 0, big, true, false, true);           // counts NULL: counters untouched
        validate_cast(fmt, 7, 0, 1.5e30f, true, true, false);          // tiny n, everything saturates
        validate_cast(fmt, 4099, 0, 1.7e-7f, true, true, false);       // everything underflows to fp8 subnormals / 0
        validate_cast_transpose(fmt, 256, 384, 0, true, big);     // full 128x128 tiles
        validate_cast_transpose(fmt, 80, 200, 0, true, 0.9f);     // partial tiles (fast path)
        validate_cast_transpose(fmt, 2064, 136, 0, false, 3.1f);  // out=NULL, tall
        validate_cast_transpose(fmt, 37, 53, 0, true, 2.0f);      // odd shape: fallback
        validate_cast_transpose(fmt, 64, 64, 4, true, 2.0f);      // misaligned: fallback
    }
    validate_transpose(256, 384, 0);
    validate_transpose(96, 208, 0);
    validate_transpose(4096, 48, 0);
    validate_transpose(37, 53, 0);
    validate_transpose(64, 64, 3);
    validate_amax((1 << 20) + 5, 0, 0);
    validate_amax(77777, 1, 0);
    validate_amax(1 << 16, 0, 1);
    validate_amax(1 << 16, 0, 2);
    validate_amax(1 << 16, 0, 3);
    validate_scale_from_amax();
    validate_update_scales(3 * 4 * 2 + 3, 16, 0, 40);
    validate_update_scales(3 * 4 * 32, 16, 1, 20);
    validate_update_scales(27, 1, 0, 10);
    validate_update_scales(300, 1024, 3, 5);

    bench(version);
    return report_summary("cast_transpose");
}
