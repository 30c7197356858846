/*
The linears' GEMMs (llmc/matmul.cuh): fp8 fprop / dgrad / wgrad against bf16, on the eight
docs/baselines.md shapes, named (M, K, N) = (tokens, in_features, out_features).

Validation (small shapes, CPU double-precision references):
  fp8: operands quantized on the CPU with llmc/fp8.h (non-trivial per-tensor scales), the GPU GEMM's
       bf16 output compared with sum(decoded a * decoded b) * scale_inv_a * scale_inv_b; wgrad also
       with accumulate (beta = 1). Then the trainer's path: the same operands made on the GPU by
       fp8_cast / fp8_cast_transpose / fp8_transpose (bytes must equal the CPU's) feed the GEMMs.
  bf16: matmul_forward, matmul_backward (dx; dw with and without accumulate) against the CPU.
  Tolerance per element: |gpu - ref| <= 1e-2 |ref| + 1e-2 rms(ref) (bf16 output rounding is 2^-9;
  a wrong transpose, operand or scale gives O(1) errors).
Timing: CUDA events, 5 warm-ups, median of 25, rotating among 3 copies of every input so the 50 MB
L2 doesn't hold them. For each of fprop, dgrad, wgrad: bf16 GEMM, fp8 GEMM, and the fp8 "linear"
("lin") = the GEMM plus the passes train_llama_fp8 really runs for it (linear_forward/backward):
  the E4M3 X of qkv, w13 and w2 and the E5M2 dY of every linear come from the kernel that produces
  them (RMSNorm, SwiGLU, RoPE backward, RMSNorm backward: they write fp8 instead of bf16, with the
  amax, no extra pass); the input of wo (the attention output) is kept in bf16 and cast separately.
  fprop: wo: fp8_cast(X); others: nothing
  dgrad: fp8_transpose(W) (W^T from the cached E4M3 W; the trainer makes it at each backward)
  wgrad: fp8_transpose(dY) + wo: fp8_cast_transpose(X bf16), others: fp8_transpose(X fp8)
  W's own cast is made by AdamW (once per optimizer step) and not counted.
"sep" = every cast as its own pass from bf16, as a trainer without fused producers would run it:
  fprop: fp8_cast(X); dgrad: fp8_cast_transpose(dY) (dY and dY^T); wgrad: fp8_transpose(X fp8).
TFLOP/s = 2 M K N / time.

Build (from dev/cuda):  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I../.. fp8_gemm.cu -lcublasLt -lcublas -ldl -o fp8_gemm
                        (or: make -C dev/cuda fp8_gemm)
Run:                    ./fp8_gemm [shape] [-tune | -sustained]   shape 1..8 times only that docs/baselines.md
                        shape (default all);
                        -tune: every GEMM (bf16 and fp8) uses the fastest of cuBLASLt's candidates,
                        timed at its first call, as the trainer does with -deterministic 0;
                        -sustained: instead of the tables, every candidate of the shape's six GEMMs
                        timed in a burst (as the tuner) and hot, at the power cap (sustained_study);
                        -energy: also each shape's fprop, bf16 and fp8, run back to back for 2 s with
                        NVML's energy counter: mJ per GEMM, pJ per FLOP and bf16 / fp8 energy per FLOP,
                        the measure that counts at the power cap
The last line is "fp8_gemm: ALL PASS" or "fp8_gemm: N FAILED"; exit status 0 / 1.
*/
#include "llmc/fp8.h"           // fp8_encode, fp8_decode, fp8_compute_scale: the CPU side
#include "llmc/matmul.cuh"      // the GEMMs under test
#include "llmc/fp8_scaling.cuh" // casts and transposes of the linear path
#include "kernel_test.h"        // random_bf16, bf16 bits, device buffers, timing, report

// Each tensor from its own seed: a shape's data does not depend on the shapes validated before it.
static std::vector<uint16_t> seeded_bf16(size_t n, float stddev, uint64_t seed) {
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 7;
    return random_bf16(n, 0.0f, stddev, &rng);
}
static float amax_of(const std::vector<uint16_t> &h) {
    float m = 0.0f;
    for (uint16_t v : h) m = fmaxf(m, fabsf(bf16_to_float(v)));
    return m;
}
static std::vector<uint8_t> transpose8(const std::vector<uint8_t> &a, int rows, int cols) {
    std::vector<uint8_t> t(a.size());
    for (int r = 0; r < rows; r++) for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = a[(size_t)r * cols + c];
    return t;
}

// C (R, S) = sum_k A[r][k] * B[s][k] (both k-contiguous), in double, times alpha, plus C0 (may be NULL)
static std::vector<double> ref_gemm_nt(const std::vector<float> &A, const std::vector<float> &B, int R, int S, int K,
                                       double alpha, const std::vector<float> *C0) {
    std::vector<double> C((size_t)R * S);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            const float *a = &A[(size_t)r * K], *b = &B[(size_t)s * K];
            double acc = 0.0;
            for (int k = 0; k < K; k++) acc += (double)a[k] * (double)b[k];
            C[(size_t)r * S + s] = acc * alpha + (C0 ? (double)(*C0)[(size_t)r * S + s] : 0.0);
        }
    return C;
}

static void check_output(const char *what, const floatX *d_out, const std::vector<double> &ref) {
    std::vector<uint16_t> got(ref.size());
    download(got.data(), d_out, ref.size());
    double ss = 0.0;
    for (double r : ref) ss += r * r;
    const double rms = sqrt(ss / ref.size());
    size_t bad = 0, worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double g = bf16_to_float(got[i]), err = fabs(g - ref[i]), tol = 1e-2 * fabs(ref[i]) + 1e-2 * rms;
        const double ratio = isfinite(g) ? err / tol : INFINITY;
        if (!(ratio <= 1.0)) bad++;
        if (!(ratio <= worst_ratio)) { worst_ratio = ratio; worst = i; }
    }
    char detail[256];
    snprintf(detail, sizeof(detail), "%zu of %zu outside tolerance; worst at %zu: gpu %.6g ref %.6g (err/tol %.3f), rms(ref) %.3g",
             bad, ref.size(), worst, bf16_to_float(got[worst]), ref[worst], worst_ratio, rms);
    report(what, bad == 0 && rms > 0.0, detail);
}

static void check_bytes(const char *what, const uint8_t *d, const std::vector<uint8_t> &want) {
    std::vector<uint8_t> got(want.size());
    download(got.data(), d, want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++) if (got[i] != want[i]) { if (bad++ == 0) first = i; }
    char detail[160] = "";
    if (bad) snprintf(detail, sizeof(detail), "%zu of %zu bytes differ, first at %zu: 0x%02x vs 0x%02x", bad, want.size(),
                      first, got[first], want[first]);
    report(what, bad == 0, detail);
}

static void validate_shape(int N, int IN, int OUT) {
    printf("-- N=%d IN=%d OUT=%d\n", N, IN, OUT);
    // bf16 data with the magnitudes of a linear: activations ~1, weights ~0.02, gradients ~1e-4
    std::vector<uint16_t> x = seeded_bf16((size_t)N * IN, 1.0f, 1 + N), w = seeded_bf16((size_t)OUT * IN, 0.02f, 2 + IN),
                          dy = seeded_bf16((size_t)N * OUT, 1e-4f, 3 + OUT), dw0 = seeded_bf16((size_t)OUT * IN, 0.01f, 4);
    // per-tensor scales as the recipe computes them (non-powers of two, so a lost scale shows)
    const float sx = fp8_compute_scale(amax_of(x), FP8_E4M3_MAX, 0, 1.0f), sw = fp8_compute_scale(amax_of(w), FP8_E4M3_MAX, 0, 1.0f),
                sdy = fp8_compute_scale(amax_of(dy), FP8_E5M2_MAX, 0, 1.0f);
    const float scales[6] = {sx, sw, sdy, 1.0f / sx, 1.0f / sw, 1.0f / sdy};
    // CPU quantization
    std::vector<uint8_t> xq(x.size()), wq(w.size()), dyq(dy.size());
    std::vector<float> xd(x.size()), wd(w.size()), dyd(dy.size());
    for (size_t i = 0; i < x.size(); i++) { xq[i] = fp8_encode(bf16_to_float(x[i]) * sx, FP8_E4M3); xd[i] = fp8_decode(xq[i], FP8_E4M3); }
    for (size_t i = 0; i < w.size(); i++) { wq[i] = fp8_encode(bf16_to_float(w[i]) * sw, FP8_E4M3); wd[i] = fp8_decode(wq[i], FP8_E4M3); }
    for (size_t i = 0; i < dy.size(); i++) { dyq[i] = fp8_encode(bf16_to_float(dy[i]) * sdy, FP8_E5M2); dyd[i] = fp8_decode(dyq[i], FP8_E5M2); }
    std::vector<uint8_t> wq_t = transpose8(wq, OUT, IN), xq_t = transpose8(xq, N, IN), dyq_t = transpose8(dyq, N, OUT);
    std::vector<float> xd_t(xd.size()), dyd_t(dyd.size()), wd_t(wd.size());
    for (int n = 0; n < N; n++) for (int i = 0; i < IN; i++) xd_t[(size_t)i * N + n] = xd[(size_t)n * IN + i];
    for (int n = 0; n < N; n++) for (int o = 0; o < OUT; o++) dyd_t[(size_t)o * N + n] = dyd[(size_t)n * OUT + o];
    for (int o = 0; o < OUT; o++) for (int i = 0; i < IN; i++) wd_t[(size_t)i * OUT + o] = wd[(size_t)o * IN + i];
    std::vector<float> dw0f(dw0.size());
    for (size_t i = 0; i < dw0.size(); i++) dw0f[i] = bf16_to_float(dw0[i]);
    // fp8 references (what the GEMM must compute from the decoded codes and the float scale_invs)
    const double ax_w = (double)scales[3] * scales[4], ady_w = (double)scales[5] * scales[4], ady_x = (double)scales[5] * scales[3];
    std::vector<double> y_ref = ref_gemm_nt(xd, wd, N, OUT, IN, ax_w, NULL);            // Y = X W^T
    std::vector<double> dx_ref = ref_gemm_nt(dyd, wd_t, N, IN, OUT, ady_w, NULL);       // dX = dY W
    std::vector<double> dw_ref = ref_gemm_nt(dyd_t, xd_t, OUT, IN, N, ady_x, NULL);     // dW = dY^T X
    std::vector<double> dw_acc_ref = ref_gemm_nt(dyd_t, xd_t, OUT, IN, N, ady_x, &dw0f);

    // device buffers
    uint8_t *d_xq = device_alloc<uint8_t>(xq.size()), *d_wq = device_alloc<uint8_t>(wq.size());
    uint8_t *d_dyq = device_alloc<uint8_t>(dyq.size()), *d_wq_t = device_alloc<uint8_t>(wq.size());
    uint8_t *d_xq_t = device_alloc<uint8_t>(xq.size()), *d_dyq_t = device_alloc<uint8_t>(dyq.size());
    floatX *d_x = device_alloc<floatX>(x.size()), *d_w = device_alloc<floatX>(w.size()), *d_dy = device_alloc<floatX>(dy.size());
    floatX *d_y = device_alloc<floatX>((size_t)N * OUT), *d_dx = device_alloc<floatX>(x.size()), *d_dw = device_alloc<floatX>(w.size());
    // scale_inv pointers 16-byte aligned, as cuBLASLt requires (llmc/fp8_scaling.cuh: FP8_GEMM_SCALE_STRIDE)
    const float scales16[16] = {scales[0], scales[1], scales[2], 0, scales[3], 0, 0, 0, scales[4], 0, 0, 0, scales[5], 0, 0, 0};
    float *d_scales = device_alloc<float>(16), *d_amax = device_alloc<float>(3);
    upload(d_scales, scales16, 16);
    cudaCheck(cudaMemset(d_amax, 0, 3 * sizeof(float)));
    upload(d_x, x.data(), x.size());
    upload(d_w, w.data(), w.size());
    upload(d_dy, dy.data(), dy.size());
    const float *sxi = d_scales + 4, *swi = d_scales + 8, *sdyi = d_scales + 12;

    // fprop, dgrad and wgrad on the fp8 operands now in d_xq ... d_dyq_t, each against its reference
    auto check_fp8_gemms = [&](const char *fprop_name, const char *dgrad_name, const char *wgrad_name) {
        matmul_fp8_fprop(d_y, (const fp8e4 *)d_xq, (const fp8e4 *)d_wq, sxi, swi, N, IN, OUT, 0);
        check_output(fprop_name, d_y, y_ref);
        matmul_fp8_dgrad(d_dx, (const fp8e5 *)d_dyq, (const fp8e4 *)d_wq_t, sdyi, swi, N, IN, OUT, 0);
        check_output(dgrad_name, d_dx, dx_ref);
        matmul_fp8_wgrad(d_dw, (const fp8e5 *)d_dyq_t, (const fp8e4 *)d_xq_t, sdyi, sxi, N, IN, OUT, 0, 0);
        check_output(wgrad_name, d_dw, dw_ref);
    };

    // 1. fp8 GEMMs on CPU-made operands
    upload(d_xq, xq.data(), xq.size()); upload(d_wq, wq.data(), wq.size()); upload(d_dyq, dyq.data(), dyq.size());
    upload(d_wq_t, wq_t.data(), wq_t.size()); upload(d_xq_t, xq_t.data(), xq_t.size()); upload(d_dyq_t, dyq_t.data(), dyq_t.size());
    check_fp8_gemms("fp8 fprop  Y = X W^T (fast accum)", "fp8 dgrad  dX = dY W", "fp8 wgrad  dW = dY^T X");
    upload(d_dw, dw0.data(), dw0.size());
    matmul_fp8_wgrad(d_dw, (const fp8e5 *)d_dyq_t, (const fp8e4 *)d_xq_t, sdyi, sxi, N, IN, OUT, 1, 0);
    check_output("fp8 wgrad  dW += dY^T X (accumulate)", d_dw, dw_acc_ref);

    // 2. the trainer's path: operands made by the GPU kernels from bf16, same GEMMs
    cudaCheck(cudaMemset(d_xq, 0, xq.size())); cudaCheck(cudaMemset(d_wq, 0, wq.size())); cudaCheck(cudaMemset(d_dyq, 0, dyq.size()));
    cudaCheck(cudaMemset(d_wq_t, 0, wq.size())); cudaCheck(cudaMemset(d_xq_t, 0, xq.size())); cudaCheck(cudaMemset(d_dyq_t, 0, dyq.size()));
    fp8_cast(d_xq, FP8_E4M3, d_x, x.size(), d_amax + 0, NULL, d_scales + 0, 0);
    fp8_cast(d_wq, FP8_E4M3, d_w, w.size(), d_amax + 1, NULL, d_scales + 1, 0);
    fp8_transpose(d_wq_t, d_wq, OUT, IN, 0);
    fp8_cast_transpose(d_dyq, d_dyq_t, FP8_E5M2, d_dy, N, OUT, d_amax + 2, NULL, d_scales + 2, 0);
    fp8_transpose(d_xq_t, d_xq, N, IN, 0);
    check_bytes("path: fp8_cast X == CPU", d_xq, xq);
    check_bytes("path: fp8_cast W == CPU", d_wq, wq);
    check_bytes("path: fp8_transpose W -> W^T == CPU", d_wq_t, wq_t);
    check_bytes("path: fp8_cast_transpose dY == CPU", d_dyq, dyq);
    check_bytes("path: fp8_cast_transpose dY^T == CPU", d_dyq_t, dyq_t);
    check_bytes("path: fp8_transpose X -> X^T == CPU", d_xq_t, xq_t);
    check_fp8_gemms("path: fp8 fprop", "path: fp8 dgrad", "path: fp8 wgrad");

    // 3. bf16
    std::vector<float> xf(x.size()), wf(w.size()), dyf(dy.size());
    for (size_t i = 0; i < x.size(); i++) xf[i] = bf16_to_float(x[i]);
    for (size_t i = 0; i < w.size(); i++) wf[i] = bf16_to_float(w[i]);
    for (size_t i = 0; i < dy.size(); i++) dyf[i] = bf16_to_float(dy[i]);
    std::vector<float> xf_t(xf.size()), dyf_t(dyf.size()), wf_t(wf.size());
    for (int n = 0; n < N; n++) for (int i = 0; i < IN; i++) xf_t[(size_t)i * N + n] = xf[(size_t)n * IN + i];
    for (int n = 0; n < N; n++) for (int o = 0; o < OUT; o++) dyf_t[(size_t)o * N + n] = dyf[(size_t)n * OUT + o];
    for (int o = 0; o < OUT; o++) for (int i = 0; i < IN; i++) wf_t[(size_t)i * OUT + o] = wf[(size_t)o * IN + i];
    matmul_forward(d_y, d_x, d_w, N, IN, OUT, 0);
    check_output("bf16 matmul_forward  Y = X W^T", d_y, ref_gemm_nt(xf, wf, N, OUT, IN, 1.0, NULL));
    matmul_backward(d_dx, d_dw, d_dy, d_x, d_w, N, IN, OUT, 0, 0);
    check_output("bf16 matmul_backward dX = dY W", d_dx, ref_gemm_nt(dyf, wf_t, N, IN, OUT, 1.0, NULL));
    check_output("bf16 matmul_backward dW = dY^T X", d_dw, ref_gemm_nt(dyf_t, xf_t, OUT, IN, N, 1.0, NULL));
    upload(d_dw, dw0.data(), dw0.size());
    matmul_backward(NULL, d_dw, d_dy, d_x, d_w, N, IN, OUT, 1, 0);
    check_output("bf16 matmul_backward dW += dY^T X (accumulate, dx NULL)", d_dw, ref_gemm_nt(dyf_t, xf_t, OUT, IN, N, 1.0, &dw0f));

    cudaCheck(cudaFree(d_xq)); cudaCheck(cudaFree(d_wq)); cudaCheck(cudaFree(d_dyq));
    cudaCheck(cudaFree(d_wq_t)); cudaCheck(cudaFree(d_xq_t)); cudaCheck(cudaFree(d_dyq_t));
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_dy));
    cudaCheck(cudaFree(d_y)); cudaCheck(cudaFree(d_dx)); cudaCheck(cudaFree(d_dw));
    cudaCheck(cudaFree(d_scales)); cudaCheck(cudaFree(d_amax));
}

// ---------------------------------------------------------------------------------------------
// timing

__global__ void fill_normalish_kernel(floatX *p, size_t n, uint32_t seed, float stddev) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = index_hash(i, seed);
        h *= 0x297a2d39u; h ^= h >> 15; // one more round: both 16-bit halves are used
        // sum of two uniforms: a cheap bell shape with mean 0, stddev ~ stddev
        float u = ((float)(h & 0xffff) + (float)(h >> 16)) / 65536.0f - 1.0f;
        p[i] = __float2bfloat16(u * 2.45f * stddev);
    }
}

// x_bf16: the linear's input is kept in bf16 and cast by a pass of its own (wo, fed by attention)
struct Shape { const char *name; int M, K, N; double anchor_bf16, anchor_fp8; int x_bf16; };
static const Shape SHAPES[] = {
    {"70B/TP8 attn.wqkv", 16384, 8192, 1280, 787, 1379, 0}, {"70B/TP8 attn.w0", 16384, 1024, 8192, 702, 1090, 1},
    {"70B/TP8 ffn.w13", 16384, 8192, 7168, 709, 1279, 0},   {"70B/TP8 ffn.w2", 16384, 3584, 8192, 650, 1196, 0},
    {"7B qkv", 8192, 4096, 12288, 688, 1221, 0},            {"7B wo", 8192, 4096, 4096, 612, 1234, 1},
    {"7B w13", 8192, 4096, 22016, 631, 1250, 0},            {"7B w2", 8192, 11008, 4096, 696, 1276, 0},
};
enum { FPROP, DGRAD, WGRAD };
struct Times { float bf16, fp8, lin, sep; };

#define COPIES 3
// -energy: NVML's energy counter (bench_common.h), else NULL
static GpuEnergy g_energy_state;
static const GpuEnergy *g_energy = NULL;
#define ENERGY_SECONDS 2.0

static void bench_shape(const Shape &s, Times out[3]) {
    const int N = s.M, IN = s.K, OUT = s.N;
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ndy = (size_t)N * OUT;
    floatX *x[COPIES], *w[COPIES], *dy[COPIES];
    uint8_t *xq[COPIES], *wq[COPIES], *wq_t[COPIES], *dyq[COPIES], *dyq_t[COPIES], *xq_t[COPIES];
    // per copy, 32 floats: scale x, w, dy at 0..2 | scale_inv x, w, dy at 4, 8, 12 (16-byte aligned for
    // cuBLASLt) | amax x, w, dy at 16..18
    float *state = device_alloc<float>(32 * COPIES);
    cudaCheck(cudaMemset(state, 0, 32 * COPIES * sizeof(float)));
    for (int c = 0; c < COPIES; c++) {
        x[c] = device_alloc<floatX>(nx); w[c] = device_alloc<floatX>(nw); dy[c] = device_alloc<floatX>(ndy);
        xq[c] = device_alloc<uint8_t>(nx); xq_t[c] = device_alloc<uint8_t>(nx);
        wq[c] = device_alloc<uint8_t>(nw); wq_t[c] = device_alloc<uint8_t>(nw);
        dyq[c] = device_alloc<uint8_t>(ndy); dyq_t[c] = device_alloc<uint8_t>(ndy);
        fill_normalish_kernel<<<2048, 256>>>(x[c], nx, 11u + c, 1.0f);
        fill_normalish_kernel<<<2048, 256>>>(w[c], nw, 23u + c, 0.02f);
        fill_normalish_kernel<<<2048, 256>>>(dy[c], ndy, 37u + c, 1e-4f);
        cudaLaunchCheck();
        float *sc = state + 32 * c, *si = sc + 4, *am = sc + 16;
        const float one[3] = {1.0f, 1.0f, 1.0f};
        upload(sc, one, 3);
        // live scaling, as the trainer's first step does
        amax_abs_max(am + 0, x[c], nx, 0); amax_abs_max(am + 1, w[c], nw, 0); amax_abs_max(am + 2, dy[c], ndy, 0);
        fp8_scale_from_amax(sc + 0, si + 0, NULL, am + 0, FP8_E4M3_MAX, 0, 0);
        fp8_scale_from_amax(sc + 1, si + 4, NULL, am + 1, FP8_E4M3_MAX, 0, 0);
        fp8_scale_from_amax(sc + 2, si + 8, NULL, am + 2, FP8_E5M2_MAX, 0, 0);
        fp8_cast(xq[c], FP8_E4M3, x[c], nx, am + 0, NULL, sc + 0, 0);
        fp8_cast(wq[c], FP8_E4M3, w[c], nw, am + 1, NULL, sc + 1, 0);
        fp8_transpose(wq_t[c], wq[c], OUT, IN, 0);
        fp8_cast_transpose(dyq[c], dyq_t[c], FP8_E5M2, dy[c], N, OUT, am + 2, NULL, sc + 2, 0);
        fp8_transpose(xq_t[c], xq[c], N, IN, 0);
    }
    floatX *y = device_alloc<floatX>(ndy), *dx = device_alloc<floatX>(nx), *dw = device_alloc<floatX>(nw);
    cudaCheck(cudaDeviceSynchronize());
#define SC(c) (state + 32 * (c))
#define SI(c) (state + 32 * (c) + 4)
#define AM(c) (state + 32 * (c) + 16)
    out[FPROP].bf16 = time_median_ms_queued([&](int i) { int c = i % COPIES; matmul_forward(y, x[c], w[c], N, IN, OUT, 0); });
    out[FPROP].fp8 = time_median_ms_queued([&](int i) { int c = i % COPIES;
        matmul_fp8_fprop(y, (const fp8e4 *)xq[c], (const fp8e4 *)wq[c], SI(c) + 0, SI(c) + 4, N, IN, OUT, 0); });
    out[FPROP].sep = time_median_ms_queued([&](int i) { int c = i % COPIES;
        fp8_cast(xq[c], FP8_E4M3, x[c], nx, AM(c) + 0, NULL, SC(c) + 0, 0);
        matmul_fp8_fprop(y, (const fp8e4 *)xq[c], (const fp8e4 *)wq[c], SI(c) + 0, SI(c) + 4, N, IN, OUT, 0); });
    out[FPROP].lin = s.x_bf16 ? out[FPROP].sep : out[FPROP].fp8;
    out[DGRAD].bf16 = time_median_ms_queued([&](int i) { int c = i % COPIES;
        matmul_backward(dx, NULL, dy[c], x[c], w[c], N, IN, OUT, 0, 0); });
    out[DGRAD].fp8 = time_median_ms_queued([&](int i) { int c = i % COPIES;
        matmul_fp8_dgrad(dx, (const fp8e5 *)dyq[c], (const fp8e4 *)wq_t[c], SI(c) + 8, SI(c) + 4, N, IN, OUT, 0); });
    out[DGRAD].lin = time_median_ms_queued([&](int i) { int c = i % COPIES;
        fp8_transpose(wq_t[c], wq[c], OUT, IN, 0);
        matmul_fp8_dgrad(dx, (const fp8e5 *)dyq[c], (const fp8e4 *)wq_t[c], SI(c) + 8, SI(c) + 4, N, IN, OUT, 0); });
    out[DGRAD].sep = time_median_ms_queued([&](int i) { int c = i % COPIES;
        fp8_cast_transpose(dyq[c], dyq_t[c], FP8_E5M2, dy[c], N, OUT, AM(c) + 2, NULL, SC(c) + 2, 0);
        matmul_fp8_dgrad(dx, (const fp8e5 *)dyq[c], (const fp8e4 *)wq_t[c], SI(c) + 8, SI(c) + 4, N, IN, OUT, 0); });
    out[WGRAD].bf16 = time_median_ms_queued([&](int i) { int c = i % COPIES;
        matmul_backward(NULL, dw, dy[c], x[c], w[c], N, IN, OUT, 0, 0); });
    out[WGRAD].fp8 = time_median_ms_queued([&](int i) { int c = i % COPIES;
        matmul_fp8_wgrad(dw, (const fp8e5 *)dyq_t[c], (const fp8e4 *)xq_t[c], SI(c) + 8, SI(c) + 0, N, IN, OUT, 0, 0); });
    out[WGRAD].lin = time_median_ms_queued([&](int i) { int c = i % COPIES;
        fp8_transpose(dyq_t[c], dyq[c], N, OUT, 0);
        if (s.x_bf16) fp8_cast_transpose(NULL, xq_t[c], FP8_E4M3, x[c], N, IN, NULL, NULL, SC(c) + 0, 0);
        else fp8_transpose(xq_t[c], xq[c], N, IN, 0);
        matmul_fp8_wgrad(dw, (const fp8e5 *)dyq_t[c], (const fp8e4 *)xq_t[c], SI(c) + 8, SI(c) + 0, N, IN, OUT, 0, 0); });
    out[WGRAD].sep = time_median_ms_queued([&](int i) { int c = i % COPIES;
        fp8_transpose(xq_t[c], xq[c], N, IN, 0);
        matmul_fp8_wgrad(dw, (const fp8e5 *)dyq_t[c], (const fp8e4 *)xq_t[c], SI(c) + 8, SI(c) + 0, N, IN, OUT, 0, 0); });
    if (g_energy) { // fprop, bf16 against fp8, each back to back (bench_common.h energy_per_call)
        int i = 0;
        const EnergyPerCall eb = energy_per_call(g_energy, [&] { int c = i++ % COPIES; matmul_forward(y, x[c], w[c], N, IN, OUT, 0); },
                                                 ENERGY_SECONDS);
        const EnergyPerCall ef = energy_per_call(g_energy, [&] { int c = i++ % COPIES;
            matmul_fp8_fprop(y, (const fp8e4 *)xq[c], (const fp8e4 *)wq[c], SI(c) + 0, SI(c) + 4, N, IN, OUT, 0); }, ENERGY_SECONDS);
        const double flops = 2.0 * N * IN * OUT;
        printf("  %s energy, fprop %d s back to back: bf16 %.3f ms %.2f mJ %.0f W (%.3f pJ/FLOP) | fp8 %.3f ms %.2f mJ %.0f W"
               " (%.3f pJ/FLOP) | bf16 / fp8 energy per FLOP %.2f\n", s.name, (int)ENERGY_SECONDS, eb.ms, eb.mj, eb.watts,
               eb.mj * 1e9 / flops, ef.ms, ef.mj, ef.watts, ef.mj * 1e9 / flops, eb.mj / ef.mj);
    }
#undef SC
#undef SI
#undef AM
    cudaCheck(cudaDeviceSynchronize());
    for (int c = 0; c < COPIES; c++) {
        cudaCheck(cudaFree(x[c])); cudaCheck(cudaFree(w[c])); cudaCheck(cudaFree(dy[c]));
        cudaCheck(cudaFree(xq[c])); cudaCheck(cudaFree(xq_t[c])); cudaCheck(cudaFree(wq[c])); cudaCheck(cudaFree(wq_t[c]));
        cudaCheck(cudaFree(dyq[c])); cudaCheck(cudaFree(dyq_t[c]));
    }
    cudaCheck(cudaFree(y)); cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dw)); cudaCheck(cudaFree(state));
}

// -sustained: the trainer runs at the GPU's power cap, where the clock follows the energy a GEMM
// uses; tuning picks the fastest candidate in a short burst at first use. This times every candidate
// of each of the shape's six GEMMs both ways: "burst" as matmul_tune does (1 warm-up, median of 5),
// and "hot": back to back for SUSTAIN_S seconds after the GPU has run the heuristic's choice for
// HEAT_S seconds, the mean of the second half. If the burst pick is slower hot than the hot best,
// choosing algorithms under sustained load would speed up training.
#define SUSTAIN_S 0.4
#define HEAT_S 1.0

static float hot_ms(MatmulPlan *p, int algo, const void *A, const void *B, floatX *D, double seconds, float burst) {
    const int reps = 2 * (int)fmax(10.0, seconds * 1000.0 / burst / 2.0);
    cudaEvent_t mid, end;
    cudaCheck(cudaEventCreate(&mid)); cudaCheck(cudaEventCreate(&end));
    for (int r = 0; r < reps; r++) {
        if (r == reps / 2) cudaCheck(cudaEventRecord(mid, 0));
        cublasCheck(matmul_launch(p, algo, A, B, D, 0));
    }
    cudaCheck(cudaEventRecord(end, 0));
    cudaCheck(cudaEventSynchronize(end));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, mid, end));
    cudaCheck(cudaEventDestroy(mid)); cudaCheck(cudaEventDestroy(end));
    return ms / (reps - reps / 2);
}

static void sustained_study(const Shape &s) {
    const int N = s.M, IN = s.K, OUT = s.N;
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ndy = (size_t)N * OUT;
    floatX *x = device_alloc<floatX>(nx), *w = device_alloc<floatX>(nw), *dy = device_alloc<floatX>(ndy);
    floatX *y = device_alloc<floatX>(ndy), *dx = device_alloc<floatX>(nx), *dw = device_alloc<floatX>(nw);
    uint8_t *xq = device_alloc<uint8_t>(nx), *xq_t = device_alloc<uint8_t>(nx), *wq = device_alloc<uint8_t>(nw);
    uint8_t *wq_t = device_alloc<uint8_t>(nw), *dyq = device_alloc<uint8_t>(ndy), *dyq_t = device_alloc<uint8_t>(ndy);
    float *si = device_alloc<float>(16); // scale_inv of x, w, dy at 0, 4, 8 (16-byte aligned)
    std::vector<float> ones(16, 1.0f);
    upload(si, ones.data(), 16);
    fill_normalish_kernel<<<2048, 256>>>(x, nx, 11u, 1.0f);
    fill_normalish_kernel<<<2048, 256>>>(w, nw, 23u, 1.0f);
    fill_normalish_kernel<<<2048, 256>>>(dy, ndy, 37u, 1.0f);
    cudaLaunchCheck();
    fp8_cast(xq, FP8_E4M3, x, nx, NULL, NULL, NULL, 0);
    fp8_cast(wq, FP8_E4M3, w, nw, NULL, NULL, NULL, 0);
    fp8_cast_transpose(dyq, dyq_t, FP8_E5M2, dy, N, OUT, NULL, NULL, NULL, 0);
    fp8_transpose(wq_t, wq, OUT, IN, 0);
    fp8_transpose(xq_t, xq, N, IN, 0);
    struct { int kind, m, n, k; const void *a, *b; floatX *d; const float *sa, *sb; } g[6] = {
        {MM_BF16_FWD, OUT, N, IN, w, x, y, NULL, NULL},      {MM_BF16_DX, IN, N, OUT, w, dy, dx, NULL, NULL},
        {MM_BF16_DW, IN, OUT, N, x, dy, dw, NULL, NULL},      {MM_FP8_FPROP, OUT, N, IN, wq, xq, y, si + 4, si + 0},
        {MM_FP8_DGRAD, IN, N, OUT, wq_t, dyq, dx, si + 4, si + 8}, {MM_FP8_WGRAD, IN, OUT, N, xq_t, dyq_t, dw, si + 0, si + 8}};
    printf("\n%s (%d,%d,%d): candidates timed in a burst (as the tuner) and hot (%.1f s back to back after %.1f s of"
           " heating; mean of the second half)\n", s.name, s.M, s.K, s.N, SUSTAIN_S, HEAT_S);
    float sum_pick[2] = {0, 0}, sum_best[2] = {0, 0}, sum_first[2] = {0, 0};
    cudaEvent_t ev[6];
    for (int r = 0; r < 6; r++) cudaCheck(cudaEventCreate(&ev[r]));
    for (int i = 0; i < 6; i++) {
        MatmulPlan *p = matmul_get_plan(g[i].kind, g[i].m, g[i].n, g[i].k, 0, g[i].a, g[i].b, g[i].d, g[i].sa, g[i].sb);
        if (g[i].sa != NULL) { // a plan made earlier keeps its own scale pointers (as matmul_run sets them)
            cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g[i].sa, sizeof(g[i].sa)));
            cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g[i].sb, sizeof(g[i].sb)));
        }
        float burst[MATMUL_CANDIDATES], hot[MATMUL_CANDIDATES];
        int first = -1, pick = -1, best = -1;
        for (int c = 0; c < p->num_algos; c++) {
            burst[c] = matmul_time_candidate(p, c, g[i].a, g[i].b, g[i].d, ev, 0);
            if (burst[c] < 0.0f) continue;
            if (first < 0) first = c;
            if (pick < 0 || burst[c] < burst[pick]) pick = c;
        }
        if (first < 0) FATAL("sustained_study: no candidate of %s runs", MATMUL_KIND_NAMES[g[i].kind]);
        if (burst[pick] > MATMUL_TUNE_MARGIN * burst[first]) pick = first; // the tuner's rule
        hot_ms(p, first, g[i].a, g[i].b, g[i].d, HEAT_S, burst[first]);
        printf("  %-12s cand  burst ms  hot ms\n", MATMUL_KIND_NAMES[g[i].kind]);
        for (int c = 0; c < p->num_algos; c++) {
            if (burst[c] < 0.0f) continue;
            hot[c] = hot_ms(p, c, g[i].a, g[i].b, g[i].d, SUSTAIN_S, burst[c]);
            if (best < 0 || hot[c] < hot[best]) best = c;
        }
        for (int c = 0; c < p->num_algos; c++) {
            if (burst[c] < 0.0f) continue;
            printf("  %-12s %4d  %8.3f  %7.3f%s%s%s\n", "", c + 1, burst[c], hot[c], c == first ? "  heuristic's first" : "",
                   c == pick ? "  tuner's pick" : "", c == best ? "  hot best" : "");
        }
        const int fp8 = g[i].kind >= MM_FP8_FPROP;
        sum_first[fp8] += hot[first]; sum_pick[fp8] += hot[pick]; sum_best[fp8] += hot[best];
    }
    for (int r = 0; r < 6; r++) cudaCheck(cudaEventDestroy(ev[r]));
    for (int f = 0; f < 2; f++)
        printf("  %s fprop+dgrad+wgrad hot: heuristic's first %.3f ms, tuner's picks %.3f ms, hot best %.3f ms (%.1f%% below"
               " the tuner's)\n", f ? "fp8 " : "bf16", sum_first[f], sum_pick[f], sum_best[f],
               100.0 * (sum_pick[f] - sum_best[f]) / sum_pick[f]);
    cudaCheck(cudaFree(x)); cudaCheck(cudaFree(w)); cudaCheck(cudaFree(dy)); cudaCheck(cudaFree(y)); cudaCheck(cudaFree(dx));
    cudaCheck(cudaFree(dw)); cudaCheck(cudaFree(xq)); cudaCheck(cudaFree(xq_t)); cudaCheck(cudaFree(wq));
    cudaCheck(cudaFree(wq_t)); cudaCheck(cudaFree(dyq)); cudaCheck(cudaFree(dyq_t)); cudaCheck(cudaFree(si));
}

static void print_table(const char *title, const std::vector<int> &which, const std::vector<Times> &t, int mode) {
    printf("\n%s\n", title);
    printf("%-18s %-20s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "shape", "(M, K, N)", "bf16 ms", "fp8 ms", "lin ms",
           "fp8/bf16", "lin/bf16", "bf16 TF", "fp8 TF", "lin TF", "sep ms");
    for (size_t j = 0; j < which.size(); j++) {
        const Shape &s = SHAPES[which[j]];
        const Times &x = t[3 * j + mode];
        const double flop = 2.0 * s.M * s.K * s.N;
        char dims[32];
        snprintf(dims, sizeof(dims), "(%d,%d,%d)", s.M, s.K, s.N);
        printf("%-18s %-20s %8.3f %8.3f %8.3f %7.2fx %7.2fx %8.0f %8.0f %8.0f %8.3f\n", s.name, dims, x.bf16, x.fp8, x.lin,
               x.bf16 / x.fp8, x.bf16 / x.lin, flop / (x.bf16 * 1e9), flop / (x.fp8 * 1e9), flop / (x.lin * 1e9), x.sep);
    }
}

int main(int argc, char **argv) {
    int only = 0, tune = 0, sustained = 0, energy = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-tune") == 0) tune = 1;
        else if (strcmp(argv[i], "-sustained") == 0) sustained = 1;
        else if (strcmp(argv[i], "-energy") == 0) energy = 1;
        else if ((only = atoi(argv[i])) < 1 || only > 8) FATAL("usage: %s [shape 1..8] [-tune | -sustained] [-energy]", argv[0]);
    }
    if (tune && sustained) FATAL("-tune and -sustained exclude each other (-sustained times every candidate itself)");
    cudaDeviceProp prop = device_properties();
    printf("device: %s (sm_%d%d), cuBLASLt %zu\n", prop.name, prop.major, prop.minor, cublasLtGetVersion());
    if (prop.major * 10 + prop.minor < 89) FATAL("fp8 GEMMs need compute capability 8.9+ (this is %d.%d)", prop.major, prop.minor);
    matmul_init();
    matmul_set_tuning(tune);
    if (energy && gpu_energy_open(&g_energy_state)) g_energy = &g_energy_state;
    printf("GEMM algorithms: %s\n", tune ? "the fastest of cuBLASLt's candidates, timed at first use (-tune; the trainer's"
                                           " -deterministic 0)" : "cuBLASLt's heuristic's first (the trainer's -deterministic 1)");

    printf("\nValidation\n");
    validate_shape(256, 512, 384);
    validate_shape(48, 80, 112);
    validate_shape(128, 2048, 96);

    std::vector<int> which;
    for (int i = 0; i < 8; i++) if (only == 0 || only == i + 1) which.push_back(i);
    if (sustained) {
        for (int i : which) sustained_study(SHAPES[i]);
        matmul_destroy();
        return report_summary("fp8_gemm");
    }
    std::vector<Times> t;
    for (int i : which) {
        Times tt[3];
        bench_shape(SHAPES[i], tt);
        for (int m = 0; m < 3; m++) t.push_back(tt[m]);
    }
    printf("\nTiming: median of 25 after 5 warm-ups, 3 rotating input copies. TF = TFLOP/s (2MKN / time).\n"
           "lin = the fp8 GEMM plus the passes the trainer runs for it; sep = every cast as its own pass (header).");
    print_table("fprop  Y = X W^T        fp8: E4M3 x E4M3, fast accum;  lin = [wo: fp8_cast(X)] + GEMM", which, t, FPROP);
    print_table("dgrad  dX = dY W        fp8: E4M3 W^T x E5M2 dY;       lin = fp8_transpose(W) + GEMM", which, t, DGRAD);
    print_table("wgrad  dW = dY^T X      fp8: E4M3 X^T x E5M2 dY^T;     lin = fp8_transpose(dY) + X^T + GEMM", which, t, WGRAD);
    printf("\nwhole linear (fprop + dgrad + wgrad), and the docs/baselines.md torch numbers for fprop's shape\n");
    printf("%-18s %9s %9s %9s %9s %9s %9s | %-24s\n", "shape", "bf16 ms", "fp8 ms", "lin ms", "lin/bf16", "sep ms",
           "sep/bf16", "anchor bf16/fp8 TF (x)");
    for (size_t j = 0; j < which.size(); j++) {
        const Shape &s = SHAPES[which[j]];
        float b = 0, f = 0, l = 0, q = 0;
        for (int m = 0; m < 3; m++) { b += t[3 * j + m].bf16; f += t[3 * j + m].fp8; l += t[3 * j + m].lin; q += t[3 * j + m].sep; }
        printf("%-18s %9.3f %9.3f %9.3f %8.2fx %9.3f %8.2fx | %4.0f / %4.0f (%.2fx)\n", s.name, b, f, l, b / l, q, b / q,
               s.anchor_bf16, s.anchor_fp8, s.anchor_fp8 / s.anchor_bf16);
    }
    if (tune) matmul_print_tuning(stdout);
    matmul_destroy();
    return report_summary("fp8_gemm");
}
