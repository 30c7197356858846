/*
SwiGLU kernels of llmc/swiglu.cuh: validation against a CPU reference, then timing.
Build and run (from the repository root):
    make -C dev/cuda swiglu && ./dev/cuda/swiglu
  or without make:  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I. dev/cuda/swiglu.cu -o dev/cuda/swiglu
Optional arguments: N FF (the timed shape; default 8192 11008, Llama-2-7B's MLP at B*T = 8192).

What is validated, for several shapes (FF a multiple of 8 but not of the block's 1024 values; odd N):
swiglu_forward (bf16 out, E4M3 copy, amax; then the fp8-only mode, which must give the same bytes),
the forward that also writes the E4M3 copy transposed (X^T of w2, for its wgrad; the tiled kernel,
tiles cut by both matrix edges, whole-line stores for N % 16 == 0 and byte stores otherwise): the
same out, codes, amax and counts as the row kernel, X^T byte for byte the transpose of its row-major
codes and the host codec's codes of the transposed bf16 values, and the X^T-only mode of -r 1's
recompute (no bf16, no row-major copy, no amax, no counts) giving the same bytes; swiglu_backward (din = [dg | du], E5M2 copy over both halves, amax), the in-place backward
(din == in) equal to the out-of-place one, bit-identical repeated runs, and (N a multiple of 16;
tiles cut by both matrix edges) the variant that also writes the E5M2 copy transposed: the same
din, copy and amax, and a byte-exact transpose. Every kernel's fp8 health counts (underflows,
saturations) exactly against llmc/fp8.h's oracle over the bf16 values written, added to what the
counters held (the tiles' padding counts nothing): some inputs are shrunk or zeroed (shrink_some) so
that outputs underflow or are exactly zero, and the scales make some saturate.
Outputs are NaN-poisoned first. Tolerances: dev/cuda/kernel_test.h. Exit status 1 on any failure.
There is one version of each kernel (the one in llmc/).
Timing (the N FF shape): each kernel alone, then what writing w2's X^T in the forward saves: the
forward with X^T against the forward and then fp8_transpose (the pass linear_backward ran before),
and -r 1's recompute of X^T alone against the recompute of the row-major codes and then the transpose.
*/
#include "llmc/swiglu.cuh" // the kernels under test
#include "kernel_test.h"     // CPU bf16, comparisons, poison, timing

static void validate(int N, int FF) {
    printf("validate N = %d, FF = %d\n", N, FF);
    size_t NF = (size_t)N * FF;
    // g and u ~ N(0, 3) (g over silu's both tails and its minimum near -1.28), dout ~ N(0, 1)
    std::vector<uint16_t> in = random_bf16(2 * NF, 0.0f, 3.0f), dout = random_bf16(NF, 0.0f, 1.0f);
    // some g, u and dout tiny or zero: outputs that underflow, and zeros that must not count
    shrink_some(in, 4, 40, 2 * NF + 1);
    shrink_some(dout, 4, 40, NF + 2);
    floatX *d_in = (floatX *)to_device(in), *d_dout = (floatX *)to_device(dout);
    floatX *d_out = device_alloc<floatX>(NF), *d_din = device_alloc<floatX>(2 * NF);
    float *d_amax = device_alloc<float>(1), *d_scale = device_alloc<float>(1);
    uint8_t *d_f8 = device_alloc<uint8_t>(2 * NF), *d_f8b = device_alloc<uint8_t>(2 * NF);
    unsigned long long *d_counts = counts_alloc(FP8_COUNTS);

    // forward
    const float scale = 448.0f / 4.0f; // |out| > 4 saturates
    set_float(d_scale, scale);
    Fp8Cast cast = {d_f8, d_amax, d_scale, d_counts};
    poison(d_out, NF * 2); poison(d_f8, NF); set_float(d_amax, 0.0f);
    swiglu_forward(d_out, d_in, N, FF, cast, NULL, 0);
    std::vector<uint16_t> out = to_host<uint16_t>(d_out, NF);
    {
        Cmp c = cmp_begin("forward out");
        for (int n = 0; n < N; n++)
            for (int j = 0; j < FF; j++) {
                double g = bf16_to_float(in[(size_t)n * 2 * FF + j]), u = bf16_to_float(in[(size_t)n * 2 * FF + FF + j]);
                double ref = g / (1.0 + exp(-g)) * u;
                cmp_add(&c, (size_t)n * FF + j, bf16_to_float(out[(size_t)n * FF + j]), ref, (1.0 / 256 + 1e-5) * fabs(ref));
            }
        cmp_end(&c);
    }
    std::vector<uint8_t> f8 = to_host<uint8_t>(d_f8, NF);
    check_fp8("forward fp8 e4m3", f8.data(), out.data(), NF, scale, FP8_E4M3);
    float amax_fwd = get_float(d_amax);
    check_amax("forward amax", amax_fwd, out.data(), NF);
    const Fp8Counts counts_fwd = fp8_counts_of(out.data(), NF, scale, FP8_E4M3);
    check_counts("forward counts", d_counts, counts_fwd);
    poison(d_f8b, NF); set_float(d_amax, 0.0f); counts_reset(d_counts, FP8_COUNTS);
    Fp8Cast cast_b = {d_f8b, d_amax, d_scale, d_counts};
    swiglu_forward(NULL, d_in, N, FF, cast_b, NULL, 0);
    {
        std::vector<uint8_t> f8b = to_host<uint8_t>(d_f8b, NF);
        check_bitwise("forward fp8-only == with out", f8.data(), f8b.data(), NF);
        check_exact("forward fp8-only amax", get_float(d_amax), amax_fwd);
        check_counts("forward fp8-only counts", d_counts, counts_fwd);
    }
    // with the transposed E4M3 copy (the tiled kernel): out, the copy, amax and counts as the row
    // kernel's, and out_t[f][n] == fp8[n][f] == the host codec's code of out[n][f]
    {
        floatX *d_out_t = device_alloc<floatX>(NF);
        uint8_t *d_t = device_alloc<uint8_t>(NF);
        poison(d_out_t, NF * 2); poison(d_f8b, NF); poison(d_t, NF); set_float(d_amax, 0.0f); counts_reset(d_counts, FP8_COUNTS);
        swiglu_forward(d_out_t, d_in, N, FF, cast_b, d_t, 0);
        std::vector<uint16_t> out2 = to_host<uint16_t>(d_out_t, NF);
        std::vector<uint8_t> f8t = to_host<uint8_t>(d_f8b, NF), tr = to_host<uint8_t>(d_t, NF);
        check_bitwise("forward + transpose: out", out.data(), out2.data(), NF * 2);
        check_bitwise("forward + transpose: fp8", f8.data(), f8t.data(), NF);
        check_exact("forward + transpose: amax", get_float(d_amax), amax_fwd);
        check_counts("forward + transpose: counts", d_counts, counts_fwd);
        std::vector<uint8_t> f8_tr(NF);
        std::vector<uint16_t> out_tr(NF);
        for (int n = 0; n < N; n++)
            for (int f = 0; f < FF; f++) {
                f8_tr[(size_t)f * N + n] = f8[(size_t)n * FF + f];
                out_tr[(size_t)f * N + n] = out[(size_t)n * FF + f];
            }
        check_bitwise("forward + transpose: fp8^T == fp8 transposed", f8_tr.data(), tr.data(), NF);
        check_fp8("forward + transpose: fp8^T vs host", tr.data(), out_tr.data(), NF, scale, FP8_E4M3);
        // X^T alone, as -r 1's recompute casts it: the same bytes, and no amax or count
        poison(d_t, NF); set_float(d_amax, 0.0f); counts_reset(d_counts, FP8_COUNTS);
        Fp8Cast cast_t = {NULL, NULL, d_scale, NULL};
        swiglu_forward(NULL, d_in, N, FF, cast_t, d_t, 0);
        std::vector<uint8_t> tr2 = to_host<uint8_t>(d_t, NF);
        check_bitwise("forward fp8^T only == with the rest", tr.data(), tr2.data(), NF);
        check_exact("forward fp8^T only: amax untouched", get_float(d_amax), 0.0);
        check_counts("forward fp8^T only: no counts", d_counts, Fp8Counts{0, 0});
        cudaCheck(cudaFree(d_out_t)); cudaCheck(cudaFree(d_t));
    }

    // backward
    const float bscale = 57344.0f / 8.0f;
    set_float(d_scale, bscale);
    poison(d_din, 2 * NF * 2); poison(d_f8, 2 * NF); set_float(d_amax, 0.0f); counts_reset(d_counts, FP8_COUNTS);
    swiglu_backward(d_din, d_dout, d_in, N, FF, cast, NULL, 0);
    std::vector<uint16_t> din = to_host<uint16_t>(d_din, 2 * NF);
    std::vector<uint8_t> f8d = to_host<uint8_t>(d_f8, 2 * NF);
    float amax_bwd = get_float(d_amax);
    {
        Cmp cg = cmp_begin("backward dg"), cu = cmp_begin("backward du");
        for (int n = 0; n < N; n++)
            for (int j = 0; j < FF; j++) {
                size_t gi = (size_t)n * 2 * FF + j;
                double g = bf16_to_float(in[gi]), u = bf16_to_float(in[gi + FF]), dy = bf16_to_float(dout[(size_t)n * FF + j]);
                double sig = 1.0 / (1.0 + exp(-g));
                double dg = dy * u * sig * (1.0 + g * (1.0 - sig)), du = dy * g * sig;
                // 1 + g (1 - sig) cancels near g = -1.28: measure fp32 error against its terms
                double dg_mag = fabs(dy * u) * sig * (1.0 + fabs(g) * (1.0 - sig));
                cmp_add(&cg, gi, bf16_to_float(din[gi]), dg, fabs(dg) / 256 + 1e-5 * dg_mag);
                cmp_add(&cu, gi + FF, bf16_to_float(din[gi + FF]), du, (1.0 / 256 + 1e-5) * fabs(du));
            }
        cmp_end(&cg);
        cmp_end(&cu);
    }
    check_fp8("backward fp8 e5m2", f8d.data(), din.data(), 2 * NF, bscale, FP8_E5M2);
    check_amax("backward amax", amax_bwd, din.data(), 2 * NF);
    const Fp8Counts counts_bwd = fp8_counts_of(din.data(), 2 * NF, bscale, FP8_E5M2);
    check_counts("backward counts", d_counts, counts_bwd);

    // repeat: bit-identical
    poison(d_din, 2 * NF * 2); poison(d_f8, 2 * NF); set_float(d_amax, 0.0f);
    swiglu_backward(d_din, d_dout, d_in, N, FF, cast, NULL, 0);
    {
        std::vector<uint16_t> din2 = to_host<uint16_t>(d_din, 2 * NF);
        check_bitwise("backward deterministic", din.data(), din2.data(), 2 * NF * 2);
    }
    // with the transposed fp8 copy (tiled kernel; N % 16 == 0): din, the fp8 copy and amax as above,
    // and out_t[f][n] == fp8[n][f] for every one of the 2*FF rows of dY^T
    if (N % 16 == 0) {
        floatX *d_din_t = device_alloc<floatX>(2 * NF);
        uint8_t *d_t = device_alloc<uint8_t>(2 * NF);
        poison(d_din_t, 2 * NF * 2); poison(d_f8b, 2 * NF); poison(d_t, 2 * NF); set_float(d_amax, 0.0f);
        counts_reset(d_counts, FP8_COUNTS);
        swiglu_backward(d_din_t, d_dout, d_in, N, FF, cast_b, d_t, 0);
        std::vector<uint16_t> din_t = to_host<uint16_t>(d_din_t, 2 * NF);
        std::vector<uint8_t> f8t = to_host<uint8_t>(d_f8b, 2 * NF), tr = to_host<uint8_t>(d_t, 2 * NF);
        check_bitwise("backward + transpose: din", din.data(), din_t.data(), 2 * NF * 2);
        check_bitwise("backward + transpose: fp8", f8d.data(), f8t.data(), 2 * NF);
        Cmp ca = cmp_begin("backward + transpose: amax"), ct = cmp_begin("backward + transpose: fp8^T");
        cmp_add(&ca, 0, get_float(d_amax), amax_bwd, 0.0);
        for (size_t f = 0; f < 2 * (size_t)FF; f++)
            for (int n = 0; n < N; n++) cmp_add(&ct, f * N + n, tr[f * N + n], f8d[(size_t)n * 2 * FF + f], 0.0);
        cmp_end(&ca);
        cmp_end(&ct);
        check_counts("backward + transpose: counts", d_counts, counts_bwd);
        cudaCheck(cudaFree(d_din_t)); cudaCheck(cudaFree(d_t));
    }
    // in place: din == in
    poison(d_f8b, 2 * NF); set_float(d_amax, 0.0f); counts_reset(d_counts, FP8_COUNTS);
    swiglu_backward(d_in, d_dout, d_in, N, FF, cast_b, NULL, 0);
    {
        std::vector<uint16_t> din3 = to_host<uint16_t>(d_in, 2 * NF);
        std::vector<uint8_t> f8e = to_host<uint8_t>(d_f8b, 2 * NF);
        check_bitwise("backward in place == out of place", din.data(), din3.data(), 2 * NF * 2);
        check_bitwise("backward in place fp8", f8d.data(), f8e.data(), 2 * NF);
        check_exact("backward in place amax", get_float(d_amax), amax_bwd);
        check_counts("backward in place counts", d_counts, counts_bwd);
    }
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_din));
    cudaCheck(cudaFree(d_amax)); cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_f8)); cudaCheck(cudaFree(d_f8b));
    cudaCheck(cudaFree(d_counts));
}

static void benchmark(int N, int FF) {
    printf("benchmark N = %d, FF = %d (bytes: the kernel's necessary reads + writes)\n", N, FF);
    size_t NF = (size_t)N * FF;
    std::vector<uint16_t> in = random_bf16(2 * NF, 0.0f, 3.0f);
    floatX *d_in = (floatX *)to_device(in), *d_out = device_alloc<floatX>(NF), *d_din = device_alloc<floatX>(2 * NF);
    float *d_amax = device_alloc<float>(1), *d_scale = device_alloc<float>(1);
    uint8_t *d_f8 = device_alloc<uint8_t>(2 * NF);
    set_float(d_scale, 1.0f);
    set_float(d_amax, 0.0f);
    Fp8Cast cast = {d_f8, d_amax, d_scale, NULL};
    const double nf = (double)NF;
    float ms;
    ms = time_median_ms([&] { swiglu_forward(d_out, d_in, N, FF, cast, NULL, 0); });
    report_bandwidth("swiglu_forward (out + fp8 + amax)", ms, nf * (4 + 2 + 1));
    ms = time_median_ms([&] { swiglu_forward(NULL, d_in, N, FF, cast, NULL, 0); });
    report_bandwidth("swiglu_forward (fp8 + amax only)", ms, nf * (4 + 1));
    if (N % 16 == 0) { // w2's X^T: written by the forward, against the forward plus the transpose pass
        uint8_t *d_xt = device_alloc<uint8_t>(NF);
        const float ms_sep = time_median_ms([&] {
            swiglu_forward(NULL, d_in, N, FF, cast, NULL, 0);
            fp8_transpose(d_xt, d_f8, N, FF, 0);
        });
        report_bandwidth("swiglu_forward (fp8 + amax) + fp8_transpose", ms_sep, nf * (4 + 1 + 1 + 1));
        const float ms_t = time_median_ms([&] { swiglu_forward(NULL, d_in, N, FF, cast, d_xt, 0); });
        report_bandwidth("swiglu_forward (fp8 + fp8^T + amax)", ms_t, nf * (4 + 1 + 1));
        // -r 1's recompute (the forward's scale, no amax): before, the codes and then the transpose
        const Fp8Cast rows_only = {d_f8, NULL, d_scale, NULL}, t_only = {NULL, NULL, d_scale, NULL};
        const float ms_rsep = time_median_ms([&] {
            swiglu_forward(NULL, d_in, N, FF, rows_only, NULL, 0);
            fp8_transpose(d_xt, d_f8, N, FF, 0);
        });
        report_bandwidth("recompute: swiglu_forward (fp8) + fp8_transpose", ms_rsep, nf * (4 + 1 + 1 + 1));
        const float ms_r = time_median_ms([&] { swiglu_forward(NULL, d_in, N, FF, t_only, d_xt, 0); });
        report_bandwidth("recompute: swiglu_forward (fp8^T only)", ms_r, nf * (4 + 1));
        printf("  w2's X^T from the forward saves %.1f us per layer with -r 0 (%.1f -> %.1f), %.1f us with -r 1's"
               " recompute (%.1f -> %.1f)\n", (ms_sep - ms_t) * 1e3, ms_sep * 1e3, ms_t * 1e3, (ms_rsep - ms_r) * 1e3,
               ms_rsep * 1e3, ms_r * 1e3);
        cudaCheck(cudaFree(d_xt));
    }
    ms = time_median_ms([&] { swiglu_backward(d_din, d_out, d_in, N, FF, cast, NULL, 0); });
    report_bandwidth("swiglu_backward (din + fp8 + amax)", ms, nf * (2 + 4 + 4 + 2));
    ms = time_median_ms([&] { swiglu_backward(NULL, d_out, d_in, N, FF, cast, NULL, 0); });
    report_bandwidth("swiglu_backward (fp8 + amax only)", ms, nf * (2 + 4 + 2));
    if (N % 16 == 0) {
        uint8_t *d_t = device_alloc<uint8_t>(2 * NF);
        ms = time_median_ms([&] { swiglu_backward(NULL, d_out, d_in, N, FF, cast, d_t, 0); });
        report_bandwidth("swiglu_backward (fp8 + fp8^T + amax)", ms, nf * (2 + 4 + 2 + 2));
        cudaCheck(cudaFree(d_t));
    }
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_din)); cudaCheck(cudaFree(d_amax));
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_f8));
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 8192, FF = argc > 2 ? atoi(argv[2]) : 11008;
    dev_setup();
    // 7B (whole tiles); odd N (X^T stored byte by byte); N % 16 == 0 but not % 128, FF not % 128 (tiles
    // cut by both edges, whole-line stores); one partial tile; several tile rows with FF % 128 == 0
    const int shapes[][2] = {{8192, 11008}, {37, 768}, {5, 8}, {129, 1032}, {2, 14336}, {144, 1032}, {16, 8},
                             {1040, 1000}, {272, 11008}};
    for (const auto &s : shapes) validate(s[0], s[1]);
    benchmark(N, FF);
    return finish("swiglu");
}
