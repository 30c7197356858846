/*
RMSNorm kernels of llmc/rmsnorm.cuh: validation against a CPU reference, then timing.
Build and run (from the repository root):
    make -C dev/cuda rmsnorm && ./dev/cuda/rmsnorm
  or without make:  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I. dev/cuda/rmsnorm.cu -o dev/cuda/rmsnorm
Optional arguments: N C (the timed shape; default 8192 4096, Llama-2-7B width at B*T = 8192).

What is validated, for several shapes (odd N, C not a multiple of the block, C = 8192 and 16384 for
the 1024-thread and K = 2 paths): rmsnorm_forward (bf16 out, rstd, E4M3 copy, amax; then the fp8-only
mode, which must give the same bytes), fused_residual_rmsnorm_forward (residual exact, out, rstd,
fp8, amax), rmsnorm_backward (dresidual += dx, dw += grad, E5M2 copy, amax), run twice from the same
state to prove it bit-identical, and an amax slot that already holds a larger value keeps it. Every
cast's fp8 health counts (underflows, saturations) exactly against llmc/fp8.h's oracle over the bf16
values written, added to what the counters held (the backward's two runs add up; counts NULL leaves
them untouched): the inputs are shrunk at the same random elements (shrink_some), so some outputs
underflow or are exactly zero, and the scales make a few percent saturate.
Outputs are NaN-poisoned first. Tolerances: dev/cuda/kernel_test.h. Exit status 1 on any failure.
There is one version of each kernel (the one in llmc/).
*/
#include "llmc/rmsnorm.cuh" // the kernels under test
#include "kernel_test.h"     // CPU bf16, comparisons, poison, timing

static const float EPS = 1e-5f;

// CPU reference rstd in double from the bf16 inputs.
static std::vector<double> ref_rstd(const std::vector<uint16_t> &x, int N, int C) {
    std::vector<double> r(N);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) { double v = bf16_to_float(x[(size_t)n * C + c]); ss += v * v; }
        r[n] = 1.0 / sqrt(ss / C + EPS);
    }
    return r;
}

// Checks out / rstd / fp8 / amax / counts of a forward whose normalized input was x_in (bf16);
// returns the counts (the oracle's over out).
static Fp8Counts check_forward(const char *tag, const std::vector<uint16_t> &x_in, const std::vector<uint16_t> &w,
                               const floatX *d_out, const float *d_rstd, const fp8e4 *d_fp8, const float *d_amax,
                               const unsigned long long *d_counts, float scale, int N, int C) {
    size_t NC = (size_t)N * C;
    std::vector<double> r = ref_rstd(x_in, N, C);
    std::vector<uint16_t> out = to_host<uint16_t>(d_out, NC);
    std::vector<float> rstd = to_host<float>(d_rstd, N);
    std::vector<uint8_t> f8 = to_host<uint8_t>(d_fp8, NC);
    char name[96];
    snprintf(name, sizeof(name), "%s out", tag);
    Cmp c = cmp_begin(name);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) {
            size_t k = (size_t)n * C + i;
            double ref = bf16_to_float(x_in[k]) * r[n] * bf16_to_float(w[i]);
            cmp_add(&c, k, bf16_to_float(out[k]), ref, (1.0 / 256 + 1e-5) * fabs(ref));
        }
    cmp_end(&c);
    snprintf(name, sizeof(name), "%s rstd", tag);
    c = cmp_begin(name);
    for (int n = 0; n < N; n++) cmp_add(&c, n, rstd[n], r[n], 1e-5 * r[n]);
    cmp_end(&c);
    snprintf(name, sizeof(name), "%s fp8 e4m3", tag);
    check_fp8(name, f8.data(), out.data(), NC, scale, FP8_E4M3);
    snprintf(name, sizeof(name), "%s amax", tag);
    check_amax(name, get_float(d_amax), out.data(), NC);
    snprintf(name, sizeof(name), "%s counts", tag);
    const Fp8Counts want = fp8_counts_of(out.data(), NC, scale, FP8_E4M3);
    check_counts(name, d_counts, want);
    return want;
}

static void validate(int N, int C) {
    printf("validate N = %d, C = %d\n", N, C);
    size_t NC = (size_t)N * C;
    // x, b and the backward's dout and dresidual shrunk at the same elements: outputs that underflow
    std::vector<uint16_t> x = random_bf16(NC, 0.0f, 1.0f), b = random_bf16(NC, 0.0f, 0.5f);
    std::vector<uint16_t> w = random_bf16(C, 1.0f, 0.3f);
    const uint64_t shrink_seed = N + 7ull * C;
    shrink_some(x, 4, 40, shrink_seed);
    shrink_some(b, 4, 40, shrink_seed);
    floatX *d_x = (floatX *)to_device(x), *d_b = (floatX *)to_device(b), *d_w = (floatX *)to_device(w);
    floatX *d_out = device_alloc<floatX>(NC), *d_res = device_alloc<floatX>(NC);
    float *d_rstd = device_alloc<float>(N), *d_amax = device_alloc<float>(1), *d_scale = device_alloc<float>(1);
    fp8e4 *d_fp8 = device_alloc<fp8e4>(NC), *d_fp8b = device_alloc<fp8e4>(NC);
    unsigned long long *d_counts = counts_alloc(FP8_COUNTS);
    // ~5% of outputs exceed 448 / scale: the saturation path is exercised; small ones go subnormal,
    // the shrunk ones underflow
    const float scale = 448.0f / 2.0f;
    set_float(d_scale, scale);
    Fp8Cast cast = {d_fp8, d_amax, d_scale, d_counts};

    // forward
    poison(d_out, NC * 2); poison(d_rstd, N * 4); poison(d_fp8, NC); set_float(d_amax, 0.0f);
    rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, EPS, cast, 0);
    const Fp8Counts counts_first = check_forward("forward", x, w, d_out, d_rstd, d_fp8, d_amax, d_counts, scale, N, C);
    float amax_first = get_float(d_amax);

    // fp8-only mode: the same codes, amax and counts without the bf16 output
    poison(d_fp8b, NC); set_float(d_amax, 0.0f); counts_reset(d_counts, FP8_COUNTS);
    Fp8Cast cast_b = {d_fp8b, d_amax, d_scale, d_counts};
    rmsnorm_forward(NULL, NULL, d_x, d_w, N, C, EPS, cast_b, 0);
    {
        std::vector<uint8_t> f1 = to_host<uint8_t>(d_fp8, NC), f2 = to_host<uint8_t>(d_fp8b, NC);
        check_bitwise("forward fp8-only == with out", f1.data(), f2.data(), NC);
        check_exact("forward fp8-only amax", get_float(d_amax), amax_first);
        check_counts("forward fp8-only counts", d_counts, counts_first);
    }
    // an amax slot holding a larger value (an earlier micro-step) keeps it; counts NULL: none written
    set_float(d_amax, 1e30f); counts_reset(d_counts, FP8_COUNTS);
    cast_b.counts = NULL;
    rmsnorm_forward(NULL, NULL, d_x, d_w, N, C, EPS, cast_b, 0);
    {
        check_exact("amax keeps a larger earlier value", get_float(d_amax), 1e30f);
        check_counts("counts NULL: counters untouched", d_counts, Fp8Counts{0, 0});
    }

    // fused residual + norm
    poison(d_out, NC * 2); poison(d_res, NC * 2); poison(d_rstd, N * 4); poison(d_fp8, NC); set_float(d_amax, 0.0f);
    counts_reset(d_counts, FP8_COUNTS);
    fused_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_x, d_b, d_w, N, C, EPS, cast, 0);
    std::vector<uint16_t> res_ref(NC);
    for (size_t k = 0; k < NC; k++) res_ref[k] = float_to_bf16(bf16_to_float(x[k]) + bf16_to_float(b[k]));
    {
        std::vector<uint16_t> res = to_host<uint16_t>(d_res, NC);
        Cmp c = cmp_begin("fused residual (exact)");
        for (size_t k = 0; k < NC; k++) cmp_add(&c, k, bf16_to_float(res[k]), bf16_to_float(res_ref[k]), 0.0);
        cmp_end(&c);
    }
    check_forward("fused", res_ref, w, d_out, d_rstd, d_fp8, d_amax, d_counts, scale, N, C);

    // backward: the norm input is x, rstd its (fp32) reciprocal rms
    std::vector<uint16_t> dout = random_bf16(NC, 0.0f, 1.0f), dres0 = random_bf16(NC, 0.0f, 1.0f);
    std::vector<uint16_t> dw0 = random_bf16(C, 0.0f, 1.0f);
    shrink_some(dout, 4, 40, shrink_seed);
    shrink_some(dres0, 4, 40, shrink_seed);
    std::vector<double> r = ref_rstd(x, N, C);
    std::vector<float> rstd_in(N);
    for (int n = 0; n < N; n++) rstd_in[n] = (float)r[n];
    floatX *d_dout = (floatX *)to_device(dout), *d_dres = device_alloc<floatX>(NC), *d_dw = device_alloc<floatX>(C);
    float *d_rstd_in = to_device(rstd_in);
    float *d_scratch = device_alloc<float>(rmsnorm_backward_scratch_floats(N, C));
    const float bscale = 57344.0f / 3.0f; // ~4% of dresidual values saturate E5M2, the shrunk ones underflow
    set_float(d_scale, bscale);
    fp8e5 *d_f5 = (fp8e5 *)d_fp8;
    Fp8Cast bcast = {d_f5, d_amax, d_scale, d_counts};
    counts_reset(d_counts, FP8_COUNTS); // both runs add to them
    std::vector<uint16_t> runs_dres[2], runs_dw[2];
    std::vector<uint8_t> runs_f8[2];
    float runs_amax[2];
    for (int run = 0; run < 2; run++) {
        upload(d_dres, dres0.data(), NC);
        upload(d_dw, dw0.data(), C);
        poison(d_scratch, rmsnorm_backward_scratch_floats(N, C) * 4); poison(d_f5, NC); set_float(d_amax, 0.0f);
        rmsnorm_backward(d_dres, d_dw, d_scratch, d_dout, d_x, d_w, d_rstd_in, N, C, bcast, 0);
        runs_dres[run] = to_host<uint16_t>(d_dres, NC);
        runs_dw[run] = to_host<uint16_t>(d_dw, C);
        runs_f8[run] = to_host<uint8_t>(d_f5, NC);
        runs_amax[run] = get_float(d_amax);
    }
    {
        Cmp c = cmp_begin("backward dresidual");
        std::vector<double> dw_ref(C), dw_mag(C);
        for (int i = 0; i < C; i++) dw_ref[i] = dw_mag[i] = 0;
        for (int n = 0; n < N; n++) {
            const size_t o = (size_t)n * C;
            const double rn = rstd_in[n];
            double dot = 0, dot_abs = 0;
            for (int i = 0; i < C; i++) {
                double g = bf16_to_float(w[i]) * (double)bf16_to_float(dout[o + i]), xv = bf16_to_float(x[o + i]);
                dot += g * xv;
                dot_abs += fabs(g * xv);
                double t = bf16_to_float(dout[o + i]) * xv * rn;
                dw_ref[i] += t;
                dw_mag[i] += fabs(t);
            }
            for (int i = 0; i < C; i++) {
                double g = bf16_to_float(w[i]) * (double)bf16_to_float(dout[o + i]), xv = bf16_to_float(x[o + i]);
                double d0 = bf16_to_float(dres0[o + i]);
                double ref = d0 + rn * (g - xv * rn * rn * dot / C);
                double mag = fabs(d0) + rn * fabs(g) + fabs(xv) * rn * rn * rn * dot_abs / C;
                cmp_add(&c, o + i, bf16_to_float(runs_dres[0][o + i]), ref, fabs(ref) / 256 + 1e-5 * mag);
            }
        }
        cmp_end(&c);
        Cmp cw = cmp_begin("backward dw (+= into bf16)");
        for (int i = 0; i < C; i++) {
            double d0 = bf16_to_float(dw0[i]), ref = d0 + dw_ref[i];
            cmp_add(&cw, i, bf16_to_float(runs_dw[0][i]), ref, fabs(ref) / 256 + 1e-5 * (fabs(d0) + dw_mag[i]));
        }
        cmp_end(&cw);
    }
    check_fp8("backward fp8 e5m2", runs_f8[0].data(), runs_dres[0].data(), NC, bscale, FP8_E5M2);
    check_amax("backward amax", runs_amax[0], runs_dres[0].data(), NC);
    const Fp8Counts bwd = fp8_counts_of(runs_dres[0].data(), NC, bscale, FP8_E5M2);
    check_counts("backward counts (two runs added)", d_counts, Fp8Counts{2 * bwd.under, 2 * bwd.sat});
    check_bitwise("backward deterministic: dresidual", runs_dres[0].data(), runs_dres[1].data(), NC * 2);
    check_bitwise("backward deterministic: dw", runs_dw[0].data(), runs_dw[1].data(), C * 2);
    check_bitwise("backward deterministic: fp8", runs_f8[0].data(), runs_f8[1].data(), NC);

    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_res)); cudaCheck(cudaFree(d_rstd)); cudaCheck(cudaFree(d_amax)); cudaCheck(cudaFree(d_scale));
    cudaCheck(cudaFree(d_fp8)); cudaCheck(cudaFree(d_fp8b)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_dres));
    cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_rstd_in)); cudaCheck(cudaFree(d_scratch)); cudaCheck(cudaFree(d_counts));
}

static void benchmark(int N, int C) {
    printf("benchmark N = %d, C = %d (bytes: the kernel's necessary reads + writes; dw scratch not counted)\n", N, C);
    size_t NC = (size_t)N * C;
    std::vector<uint16_t> x = random_bf16(NC, 0.0f, 1.0f), w = random_bf16(C, 1.0f, 0.3f);
    floatX *d_x = (floatX *)to_device(x), *d_b = (floatX *)to_device(x), *d_w = (floatX *)to_device(w);
    floatX *d_out = device_alloc<floatX>(NC), *d_res = device_alloc<floatX>(NC), *d_dres = (floatX *)to_device(x);
    floatX *d_dw = (floatX *)to_device(w);
    float *d_rstd = device_alloc<float>(N), *d_amax = device_alloc<float>(1), *d_scale = device_alloc<float>(1);
    float *d_scratch = device_alloc<float>(rmsnorm_backward_scratch_floats(N, C));
    fp8e4 *d_fp8 = device_alloc<fp8e4>(NC);
    set_float(d_scale, 1.0f);
    set_float(d_amax, 0.0f);
    Fp8Cast cast = {d_fp8, d_amax, d_scale, NULL};
    rmsnorm_forward(NULL, d_rstd, d_x, d_w, N, C, EPS, cast, 0); // realistic rstd for the backward
    const double nc = (double)NC;
    float ms;
    ms = time_median_ms([&] { rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, EPS, cast, 0); });
    report_bandwidth("rmsnorm_forward (out + fp8 + amax)", ms, nc * (2 + 2 + 1) + N * 4.0);
    ms = time_median_ms([&] { rmsnorm_forward(NULL, d_rstd, d_x, d_w, N, C, EPS, cast, 0); });
    report_bandwidth("rmsnorm_forward (fp8 + amax only)", ms, nc * (2 + 1) + N * 4.0);
    ms = time_median_ms([&] { fused_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_x, d_b, d_w, N, C, EPS, cast, 0); });
    report_bandwidth("fused_residual_rmsnorm_forward (out + fp8)", ms, nc * (2 + 2 + 2 + 2 + 1) + N * 4.0);
    ms = time_median_ms([&] { fused_residual_rmsnorm_forward(d_res, NULL, d_rstd, d_x, d_b, d_w, N, C, EPS, cast, 0); });
    report_bandwidth("fused_residual_rmsnorm_forward (fp8 only)", ms, nc * (2 + 2 + 2 + 1) + N * 4.0);
    Fp8Cast bcast = {d_fp8, d_amax, d_scale, NULL};
    ms = time_median_ms([&] { rmsnorm_backward(d_dres, d_dw, d_scratch, d_out, d_x, d_w, d_rstd, N, C, bcast, 0); });
    report_bandwidth("rmsnorm_backward (+ fp8 + amax)", ms, nc * (2 + 2 + 2 + 2 + 1) + N * 4.0);
    printf("  (rmsnorm_backward uses %d blocks, %.1f MB of dw scratch)\n", rmsnorm_backward_blocks(N, C),
           rmsnorm_backward_scratch_floats(N, C) * 4 / 1e6);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_res)); cudaCheck(cudaFree(d_dres)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_rstd));
    cudaCheck(cudaFree(d_amax)); cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_scratch)); cudaCheck(cudaFree(d_fp8));
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 8192, C = argc > 2 ? atoi(argv[2]) : 4096;
    dev_setup();
    const int shapes[][2] = {{8192, 4096}, {37, 768}, {64, 256}, {9, 136}, {5, 8192}, {3, 16384}, {300, 2048}};
    for (const auto &s : shapes) validate(s[0], s[1]);
    benchmark(N, C);
    return finish("rmsnorm");
}
