/*
fp8 row-wise scaling (llmc/fp8_row.cuh; issue 42, torchao's "rowwise" recipe): whether this GPU's
cuBLASLt runs row-scaled fp8 GEMMs (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F), the row/column casts
and the GEMMs against the C reference (dev/test/llama_ref.h, "fp8 row-wise scaling": ref_fp8_row_cast,
ref_fp8_row_gemm), then the 7B linears' GEMMs timed row-wise against per-tensor and block scaling.

1. Probe: each row-scaled GEMM as the trainer calls it (matmul.cuh's TN form: fprop A = W, B = X with
   fast accumulation; dgrad A = W^T, B = dY; wgrad A = X^T, B = dY^T, with and without accumulating
   into dW; all E4M3), at 7B w13's and w2's shapes (N = 8192 tokens), launched (matmul_fp8_row_probe:
   the heuristic's word alone is not proof). Also fprop's product without fast accumulation (the
   dgrad kind at fprop's shape). A refused GEMM is reported with cuBLASLt's answer, and the fallback
   measured instead: the per-tensor fp8 GEMM with unit scales into bf16, then a pass that multiplies
   element (i, j) by both rows' scale_invs (rescale_outer); it is validated on fprop (two roundings:
   the unscaled sum's to bf16, then the scaled value's).
2. Validation (outputs NaN-poisoned, the amax slot starting at 0.25, the counters at COUNTS_START):
   fp8_row_cast row-wise, transposed and both, from bf16 (X, dY) and from the fp32 master (W, rounded
   to bf16 first as the reference's round_bf16), on tensors whose rows and columns each have a
   magnitude of their own (2^-3 .. 2^3, so a scale read from the wrong row or column shows), an
   outlier column (x 64), outlier values (3000 x), tiny values (underflow) and zeros, with partial
   128-tiles (272, 400, 528 rows; 576, 960, 1536 columns) and 7B's w2 width (11008); a tensor of
   specials (a zero row: scale 1; a NaN: its row's scale 1, the slot NaN; an inf: saturates; a row of
   bf16 subnormals: scale 2^127). Every code and every scale_inv bit for bit the reference's (the
   transposed ones from the reference's cast of the transpose), the slot max(0.25, max |x|), the counts
   exactly the reference's for the casts made. Then the GEMMs on the operands the casts made: every
   element (40000 sampled where the CPU sum would take long) within 2^-8 |ref| + c S of ref = the
   double sum of the decoded codes times both rows' scale_invs, S the same sum of |terms|. 2^-8 |ref|
   is the bf16 output's rounding. c = 2^-10 without fast accumulation: cuBLASLt promotes each 128-long
   partial sum to fp32, and Hopper keeps about 14 bits per addition inside it (DeepSeek-V3's report):
   4 additions of 32 products at up to 2^-13 each, doubled for margin, as dev/cuda/fp8_block.cu
   derives; power-of-two scales add no rounding. With fast accumulation (fprop) nothing is promoted:
   K/32 additions at 2^-14 each, c = K 2^-19 (doubled). And the RMS error over the output at most
   4e-3 of the reference's RMS (test_llama_fp8.cu's GEMM_RMS_TOL: twice the measured bf16 output
   rounding), which a scale from the wrong row, an uninverted scale or a wrong layout passes by far.
   Accumulating into dW (beta = 1): ref = P + C, within 2^-8 (|ref| + |P|) + 2^-10 S (cuBLASLt rounds
   P to bf16 before adding C: fp8_block.cu's measurement).
3. Timing (skipped with -validate): Llama-2-7B's linears (C 4096, FF 11008, QKV 12288) at N = 8192
   tokens, each GEMM per-tensor as the trainer runs it (fprop fast-accumulated, E4M3 x E5M2 gradients),
   block-scaled, row-scaled (if it runs) and the fallback; median of 25 after 5 warm-ups, two input
   copies rotated. Then the casts of one linear: row-wise X both ways and dY both ways (bf16), W both
   ways from the fp32 master, against block's (one read each, where row-wise reads twice).

Build (from dev/cuda, or: make -C dev/cuda fp8_rowwise):
  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I../.. fp8_rowwise.cu -lcublasLt -lcublas -o fp8_rowwise
Run:                    ./fp8_rowwise [-validate]      needs an sm_90 GPU and cuBLASLt 12.9+
Prints the probe table, any failed check, the timing tables, and last "fp8_rowwise: N passed, N failed"
(exit status 1 if any failed).
*/
#include "llmc/fp8_row.cuh"     // the kernels, GEMMs and probe under test
#include "llmc/fp8_block.cuh"   // the block casts and GEMMs, timed beside them
#include "llmc/fp8_scaling.cuh" // the per-tensor casts, for the timing's comparison
#include "llmc/matmul.cuh"      // matmul_init, the per-tensor GEMMs
#include "dev/test/llama_ref.h" // ref_fp8_row_cast, ref_fp8_row_gemm: the reference
#include "kernel_test.h"        // bf16 bits, device buffers, poison, counts, timing

static int g_passed = 0;
// Prints only failures (the output stays a table); every check counts.
static void check(const char *what, bool ok, const char *detail) {
    if (ok) g_passed++;
    else report(what, ok, detail);
}

// ---------------------------------------------------------------------------------------------
// test tensors

// (rows, cols) ~ size * N(0, 1) * row_mag[r] * col_mag[c], magnitudes 2^-3 .. 2^3, one column x 64,
// three values 3000 x size, 1 in 64 values x 2^-14 and 1 in 256 zero.
static std::vector<float> row_test_tensor(int rows, int cols, float size, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 3;
    std::vector<float> rm(rows), cm(cols), v((size_t)rows * cols);
    for (float &m : rm) m = ldexpf(1.0f, (int)(random_u32(&s) % 7) - 3);
    for (float &m : cm) m = ldexpf(1.0f, (int)(random_u32(&s) % 7) - 3);
    cm[random_u32(&s) % cols] = 64.0f;
    for (size_t i = 0; i < v.size(); i++) {
        const uint32_t u = random_u32(&s);
        const float x = size * random_normal(&s) * rm[i / cols] * cm[i % cols];
        v[i] = u % 256 == 1 ? 0.0f : u % 64 == 0 ? ldexpf(x, -14) : x;
    }
    for (int k = 0; k < 3; k++) v[(size_t)(random_u32(&s) % rows) * cols + random_u32(&s) % cols] = 3000.0f * size;
    return v;
}

static std::vector<float> bf16_rounded(const std::vector<float> &v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = bf16_to_float(float_to_bf16(v[i]));
    return r;
}
static std::vector<uint16_t> bf16_bits(const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = float_to_bf16(v[i]);
    return h;
}
template <typename T>
static std::vector<T> transposed(const std::vector<T> &a, int rows, int cols) {
    std::vector<T> t(a.size());
    for (int r = 0; r < rows; r++) for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = a[(size_t)r * cols + c];
    return t;
}

// 144 x 272: row 0 zero, a NaN at (1, 5), an inf at (2, 130), row 3 bf16 subnormals, the rest ordinary.
static std::vector<float> specials_tensor(void) {
    const int cols = 272;
    std::vector<float> v = bf16_rounded(row_test_tensor(144, cols, 1.0f, 77));
    for (int c = 0; c < cols; c++) {
        v[c] = 0.0f;
        v[3 * cols + c] = bf16_to_float((uint16_t)((0x0001 + c % 0x7f) | (c % 2 ? 0x8000 : 0)));
    }
    v[1 * cols + 5] = NAN;
    v[2 * cols + 130] = INFINITY;
    return v;
}

// ---------------------------------------------------------------------------------------------
// the reference's operands and the checks

// One operand as the reference casts it: (rows, K) codes, decoded codes, one scale_inv per row, counts.
struct RefOp {
    int rows, K;
    std::vector<uint8_t> codes;
    std::vector<float> dec, sinv;
    uint64_t counts[FP8_COUNTS];
    float amax;
};
static RefOp ref_op(const std::vector<float> &v, int rows, int K, int round_bf16) {
    RefOp o;
    o.rows = rows, o.K = K;
    o.dec.resize(v.size());
    o.sinv.resize(rows);
    o.counts[0] = o.counts[1] = 0;
    o.amax = ref_fp8_row_cast(v.data(), rows, K, round_bf16, o.dec.data(), o.sinv.data(), o.counts);
    o.codes.resize(v.size());
    for (size_t i = 0; i < v.size(); i++) o.codes[i] = fp8_encode(o.dec[i], FP8_E4M3);
    return o;
}

static void check_codes(const char *what, const uint8_t *d, const std::vector<uint8_t> &want) {
    std::vector<uint8_t> got = to_host<uint8_t>(d, want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++) if (got[i] != want[i] && bad++ == 0) first = i;
    char detail[160];
    snprintf(detail, sizeof(detail), "%zu of %zu codes differ, first at %zu: 0x%02x, reference 0x%02x", bad,
             want.size(), first, bad ? got[first] : 0, bad ? want[first] : 0);
    check(what, bad == 0, detail);
}
static void check_sinv(const char *what, const float *d, const std::vector<float> &want) {
    std::vector<float> got = to_host<float>(d, want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++) if (float_bits(got[i]) != float_bits(want[i]) && bad++ == 0) first = i;
    char detail[160];
    snprintf(detail, sizeof(detail), "%zu of %zu differ, first row %zu: %.9g, reference %.9g", bad, want.size(), first,
             bad ? got[first] : 0.0f, bad ? want[first] : 0.0f);
    check(what, bad == 0, detail);
}

// The GPU's operands of one tensor, cast both ways.
struct DevOp {
    uint8_t *q, *qt;
    float *s, *st;
};

// Casts v (rows, cols), as bf16 or as the fp32 master, `ways` 1 row-wise, 2 transposed, 3 both, and
// checks it against the reference's row-wise cast of v and of v^T. Returns the device buffers.
static DevOp check_cast(const char *name, const std::vector<float> &v, int rows, int cols, int fp32, int ways) {
    const size_t n = v.size();
    void *d_in = fp32 ? (void *)to_device(v) : (void *)to_device(bf16_bits(v));
    const RefOp ref = ref_op(v, rows, cols, 1), ref_t = ref_op(transposed(v, rows, cols), cols, rows, 1);
    DevOp o = {device_alloc<uint8_t>(n), device_alloc<uint8_t>(n), device_alloc<float>(rows),
               device_alloc<float>(cols)};
    poison(o.q, n); poison(o.qt, n); poison(o.s, rows * sizeof(float)); poison(o.st, cols * sizeof(float));
    float *d_slot = device_alloc<float>(4);
    set_float(d_slot, 0.25f);
    unsigned long long *d_counts = counts_alloc(FP8_COUNTS);
    const bool rw = ways & 1, tw = ways & 2;
    fp8_row_cast(rw ? o.q : NULL, rw ? o.s : NULL, tw ? o.qt : NULL, tw ? o.st : NULL, d_in, fp32, rows, cols, d_slot,
                 d_counts, 0);
    cudaCheck(cudaDeviceSynchronize());
    char what[200];
    const char *how = ways == 3 ? "both" : ways == 1 ? "row-wise" : "transposed", *from = fp32 ? "fp32" : "bf16";
    if (rw) {
        snprintf(what, sizeof(what), "%s (%d,%d) %s %s: codes", name, rows, cols, from, how);
        check_codes(what, o.q, ref.codes);
        snprintf(what, sizeof(what), "%s (%d,%d) %s %s: per-row scale_invs", name, rows, cols, from, how);
        check_sinv(what, o.s, ref.sinv);
    }
    if (tw) {
        snprintf(what, sizeof(what), "%s (%d,%d) %s %s: transposed codes", name, rows, cols, from, how);
        check_codes(what, o.qt, ref_t.codes);
        snprintf(what, sizeof(what), "%s (%d,%d) %s %s: per-column scale_invs", name, rows, cols, from, how);
        check_sinv(what, o.st, ref_t.sinv);
    }
    const float slot = get_float(d_slot), want = isnan(ref.amax) ? ref.amax : fmaxf(0.25f, ref.amax);
    char detail[160];
    snprintf(detail, sizeof(detail), "slot %.9g, want %.9g", slot, want);
    snprintf(what, sizeof(what), "%s (%d,%d) %s %s: amax slot", name, rows, cols, from, how);
    check(what, isnan(want) ? isnan(slot) : float_bits(slot) == float_bits(want), detail);
    const Fp8Counts wc = {(rw ? ref.counts[0] : 0) + (tw ? ref_t.counts[0] : 0),
                          (rw ? ref.counts[1] : 0) + (tw ? ref_t.counts[1] : 0)};
    snprintf(what, sizeof(what), "%s (%d,%d) %s %s: counts", name, rows, cols, from, how);
    check(what, counts_match(d_counts, wc, detail, sizeof(detail)), detail);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_slot)); cudaCheck(cudaFree(d_counts));
    return o;
}
static void free_op(DevOp &o) {
    cudaCheck(cudaFree(o.q));
    cudaCheck(cudaFree(o.qt));
    cudaCheck(cudaFree(o.s));
    cudaCheck(cudaFree(o.st));
}

// out (R, C) row-major, out[r][c] = L_r . Rt_c * sL[r] * sR[c] (+ the old acc0), against the bounds of
// the header; c_acc the accumulation's share of S (2^-10, or K 2^-19 with fast accumulation).
static void check_gemm(const char *what, const floatX *d_out, const RefOp &L, const RefOp &Rt, double c_acc,
                       const std::vector<uint16_t> *acc0) {
    const int R = L.rows, C = Rt.rows, K = L.K;
    std::vector<uint16_t> got = to_host<uint16_t>(d_out, (size_t)R * C);
    const bool all = (double)R * C * K <= 2e8;
    const size_t n = all ? (size_t)R * C : 40000;
    uint64_t s = 0x5eedull + R * 31 + C;
    size_t bad = 0;
    double worst = 0.0, ss_err = 0.0, ss_ref = 0.0;
    for (size_t t = 0; t < n; t++) {
        const size_t idx = all ? t : (size_t)(random_u32(&s) % R) * C + random_u32(&s) % C;
        const int r = (int)(idx / C), c = (int)(idx % C);
        double p = 0.0, mag = 0.0;
        for (int k = 0; k < K; k++) {
            const double term = (double)L.dec[(size_t)r * K + k] * Rt.dec[(size_t)c * K + k];
            p += term;
            mag += fabs(term);
        }
        const double sc = (double)L.sinv[r] * Rt.sinv[c], old = acc0 ? bf16_to_float((*acc0)[idx]) : 0.0,
                     ref = p * sc + old;
        const double tol = ldexp(fabs(ref), -8) + (acc0 ? ldexp(fabs(p * sc), -8) : 0.0) + c_acc * mag * sc;
        const double g = bf16_to_float(got[idx]), ratio = isfinite(g) ? fabs(g - ref) / tol : INFINITY;
        if (!(ratio <= 1.0)) bad++;
        if (!(ratio <= worst)) worst = ratio;
        ss_err += (g - ref) * (g - ref);
        ss_ref += ref * ref;
    }
    const double rms = sqrt(ss_err / ss_ref);
    char detail[200];
    snprintf(detail, sizeof(detail),
             "%zu of %zu outside the bound (worst err/tol %.3f); RMS error %.2e of RMS (limit 4e-3)", bad, n, worst,
             rms);
    check(what, bad == 0 && rms <= 4e-3 && ss_ref > 0.0, detail);
}

// ---------------------------------------------------------------------------------------------
// the fallback: element (r, c) of out (R, C) times sR_row[r] * sC[c], in place (one rounding more)

__global__ void rescale_outer_kernel(floatX *out, int R, int C, const float *s_r, const float *s_c) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C) return;
    out[i] = (floatX)((float)out[i] * s_r[i / C] * s_c[i % C]);
}
static void rescale_outer(floatX *out, int R, int C, const float *s_r, const float *s_c) {
    rescale_outer_kernel<<<(unsigned)CEIL_DIV((size_t)R * C, 256), 256>>>(out, R, C, s_r, s_c);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------
// 1. the probe

static int g_row_ok = 1; // every row-scaled GEMM ran

static void probe(void) {
    // info_only: fprop's product without fast accumulation, which the trainer does not run
    struct { const char *name; int kind, m, n, k, acc, info_only; } p[] = {
        {"fprop  w13 (A=W 22016x4096, B=X 8192x4096), fast accum", MM_FP8R_FPROP, 22016, 8192, 4096, 0, 0},
        {"fprop  w13, no fast accum (dgrad kind)", MM_FP8R_DGRAD, 22016, 8192, 4096, 0, 1},
        {"dgrad  w2  (A=W^T 11008x4096, B=dY 8192x4096)", MM_FP8R_DGRAD, 11008, 8192, 4096, 0, 0},
        {"wgrad  w2  (A=X^T 11008x8192, B=dY^T 4096x8192)", MM_FP8R_WGRAD, 11008, 4096, 8192, 0, 0},
        {"wgrad  w2, accumulating into dW", MM_FP8R_WGRAD, 11008, 4096, 8192, 1, 0},
    };
    printf("%-58s | %s\n", "row-scaled GEMM (OUTER_VEC_32F, E4M3 x E4M3)", "cuBLASLt");
    for (auto &q : p) {
        char why[160];
        const int ok = matmul_fp8_row_probe(q.kind, q.m, q.n, q.k, q.acc, why, sizeof(why));
        if (!q.info_only) g_row_ok &= ok;
        printf("%-58s | %s\n", q.name, ok ? "runs" : why);
    }
    if (!g_row_ok)
        printf("row-scaled GEMMs refused: the trainer refuses -fp8_grain row here; the fallback is measured instead\n");
}

// ---------------------------------------------------------------------------------------------
// 2. validation

static void validate_linear(const char *name, int N, int IN, int OUT) {
    const std::vector<float> x = bf16_rounded(row_test_tensor(N, IN, 1.0f, 1 + IN)),
                             dy = bf16_rounded(row_test_tensor(N, OUT, 1e-4f, 2 + OUT));
    const std::vector<float> w = row_test_tensor(OUT, IN, 0.02f, 3 + N); // the fp32 master
    char what[200];
    snprintf(what, sizeof(what), "%s X", name);
    DevOp dx_op = check_cast(what, x, N, IN, 0, 3);
    snprintf(what, sizeof(what), "%s W", name);
    DevOp dw_op = check_cast(what, w, OUT, IN, 1, 3);
    snprintf(what, sizeof(what), "%s dY", name);
    DevOp ddy_op = check_cast(what, dy, N, OUT, 0, 3);
    const RefOp X = ref_op(x, N, IN, 1), Xt = ref_op(transposed(x, N, IN), IN, N, 1);
    const RefOp W = ref_op(w, OUT, IN, 1), Wt = ref_op(transposed(w, OUT, IN), IN, OUT, 1);
    const RefOp DY = ref_op(dy, N, OUT, 1), DYt = ref_op(transposed(dy, N, OUT), OUT, N, 1);
    floatX *y = device_alloc<floatX>((size_t)N * OUT), *dx = device_alloc<floatX>((size_t)N * IN),
           *dw = device_alloc<floatX>((size_t)OUT * IN);
    if (g_row_ok) {
        poison(y, (size_t)N * OUT * 2); poison(dx, (size_t)N * IN * 2); poison(dw, (size_t)OUT * IN * 2);
        matmul_fp8_row_fprop(y, (fp8e4 *)dx_op.q, (fp8e4 *)dw_op.q, dx_op.s, dw_op.s, N, IN, OUT, 0);
        matmul_fp8_row_dgrad(dx, (fp8e4 *)ddy_op.q, (fp8e4 *)dw_op.qt, ddy_op.s, dw_op.st, N, IN, OUT, 0);
        matmul_fp8_row_wgrad(dw, (fp8e4 *)ddy_op.qt, (fp8e4 *)dx_op.qt, ddy_op.st, dx_op.st, N, IN, OUT, 0, 0);
        cudaCheck(cudaDeviceSynchronize());
        snprintf(what, sizeof(what), "%s fprop Y = X W^T", name);
        check_gemm(what, y, X, W, ldexp((double)IN, -19), NULL);
        snprintf(what, sizeof(what), "%s dgrad dX = dY W", name);
        check_gemm(what, dx, DY, Wt, ldexp(1.0, -10), NULL);
        snprintf(what, sizeof(what), "%s wgrad dW = dY^T X", name);
        check_gemm(what, dw, DYt, Xt, ldexp(1.0, -10), NULL);
        const std::vector<uint16_t> old = to_host<uint16_t>(dw, (size_t)OUT * IN);
        matmul_fp8_row_wgrad(dw, (fp8e4 *)ddy_op.qt, (fp8e4 *)dx_op.qt, ddy_op.st, dx_op.st, N, IN, OUT, 1, 0);
        cudaCheck(cudaDeviceSynchronize());
        snprintf(what, sizeof(what), "%s wgrad accumulating", name);
        check_gemm(what, dw, DYt, Xt, ldexp(1.0, -10), &old);
    }
    // the fallback's fprop: unit scales (16-byte aligned), then the rescale pass
    float *one = device_alloc<float>(4);
    set_float(one, 1.0f);
    poison(y, (size_t)N * OUT * 2);
    matmul_fp8_fprop(y, (fp8e4 *)dx_op.q, (fp8e4 *)dw_op.q, one, one, N, IN, OUT, 0);
    rescale_outer(y, N, OUT, dx_op.s, dw_op.s);
    cudaCheck(cudaDeviceSynchronize());
    snprintf(what, sizeof(what), "%s fallback fprop (unit-scale GEMM + rescale pass)", name);
    check_gemm(what, y, X, W, ldexp((double)IN, -19) + ldexp(1.0, -8),
               NULL); // the unscaled sum's bf16 rounding: 2^-8 S more
    for (DevOp *o : {&dx_op, &dw_op, &ddy_op}) free_op(*o);
    cudaCheck(cudaFree(y)); cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dw)); cudaCheck(cudaFree(one));
}

static void validate(void) {
    const std::vector<float> sp = specials_tensor();
    for (int ways = 1; ways <= 3; ways++) {
        DevOp o = check_cast("specials", sp, 144, 272, 0, ways);
        free_op(o);
        const std::vector<float> t = bf16_rounded(row_test_tensor(272, 576, 1.0f, 9));
        o = check_cast("X", t, 272, 576, 0, ways);
        free_op(o);
    }
    validate_linear("SmolLM2 qkv", 272, 576, 960);
    validate_linear("SmolLM2 w2", 400, 1536, 576);
    validate_linear("7B w2", 528, 11008, 4096);
}

// ---------------------------------------------------------------------------------------------
// 3. timing

enum { T_TENSOR, T_BLOCK, T_ROW, T_FALLBACK, T_KINDS };

#define COPIES 2
// One linear's three GEMMs in each recipe (t[gemm][recipe], ms) and its casts (c: row X, dY, W; block X, dY, W).
static void bench_linear(int N, int IN, int OUT, float t[3][T_KINDS], float c[6]) {
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ndy = (size_t)N * OUT;
    floatX *x[COPIES], *dy[COPIES];
    float *w32[COPIES];
    uint8_t *xq[COPIES], *xqt[COPIES], *wq[COPIES], *wqt[COPIES], *dyq[COPIES], *dyqt[COPIES];
    float *xs[COPIES], *xst[COPIES], *ws[COPIES], *wst[COPIES], *dys[COPIES], *dyst[COPIES];
    float *bxs[COPIES], *bxst[COPIES], *bwg[COPIES], *bwgt[COPIES], *bdys[COPIES], *bdyst[COPIES];
    float *unit = device_alloc<float>(4), *amax = device_alloc<float>(4);
    set_float(unit, 1.0f);
    for (int k = 0; k < COPIES; k++) {
        x[k] = device_alloc<floatX>(nx); dy[k] = device_alloc<floatX>(ndy); w32[k] = device_alloc<float>(nw);
        xq[k] = device_alloc<uint8_t>(nx); xqt[k] = device_alloc<uint8_t>(nx); wq[k] = device_alloc<uint8_t>(nw);
        wqt[k] = device_alloc<uint8_t>(nw); dyq[k] = device_alloc<uint8_t>(ndy); dyqt[k] = device_alloc<uint8_t>(ndy);
        xs[k] = device_alloc<float>(N); xst[k] = device_alloc<float>(IN); ws[k] = device_alloc<float>(OUT);
        wst[k] = device_alloc<float>(IN); dys[k] = device_alloc<float>(N); dyst[k] = device_alloc<float>(OUT);
        bxs[k] = device_alloc<float>(fp8_block_vec_count(N, IN));
        bxst[k] = device_alloc<float>(fp8_block_vec_count(IN, N));
        bdys[k] = device_alloc<float>(fp8_block_vec_count(N, OUT));
        bdyst[k] = device_alloc<float>(fp8_block_vec_count(OUT, N));
        bwg[k] = device_alloc<float>(fp8_block_grid_count(OUT, IN));
        bwgt[k] = device_alloc<float>(fp8_block_grid_count(IN, OUT));
        fill_uniform(x[k], nx, 11u + k, 1.7f);
        fill_uniform(w32[k], nw, 29u + k, 0.035f);
        fill_uniform(dy[k], ndy, 37u + k, 1.7e-4f);
        fp8_row_cast(xq[k], xs[k], xqt[k], xst[k], x[k], 0, N, IN, amax, NULL, 0);
        fp8_row_cast(wq[k], ws[k], wqt[k], wst[k], w32[k], 1, OUT, IN, amax, NULL, 0);
        fp8_row_cast(dyq[k], dys[k], dyqt[k], dyst[k], dy[k], 0, N, OUT, amax, NULL, 0);
    }
    floatX *y = device_alloc<floatX>(ndy), *dx = device_alloc<floatX>(nx), *dw = device_alloc<floatX>(nw);
    cudaCheck(cudaDeviceSynchronize());
    // per-tensor with unit scales on the row-wise codes: the time does not depend on the values
    t[0][T_TENSOR] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        matmul_fp8_fprop(y, (fp8e4 *)xq[k], (fp8e4 *)wq[k], unit, unit, N, IN, OUT, 0); });
    t[1][T_TENSOR] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        matmul_fp8_dgrad(dx, (fp8e5 *)dyq[k], (fp8e4 *)wqt[k], unit, unit, N, IN, OUT, 0); });
    t[2][T_TENSOR] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        matmul_fp8_wgrad(dw, (fp8e5 *)dyqt[k], (fp8e4 *)xqt[k], unit, unit, N, IN, OUT, 0, 0); });
    if (g_row_ok) {
        t[0][T_ROW] = time_median_ms_queued([&](int i) { int k = i % COPIES;
            matmul_fp8_row_fprop(y, (fp8e4 *)xq[k], (fp8e4 *)wq[k], xs[k], ws[k], N, IN, OUT, 0); });
        t[1][T_ROW] = time_median_ms_queued([&](int i) { int k = i % COPIES;
            matmul_fp8_row_dgrad(dx, (fp8e4 *)dyq[k], (fp8e4 *)wqt[k], dys[k], wst[k], N, IN, OUT, 0); });
        t[2][T_ROW] = time_median_ms_queued([&](int i) { int k = i % COPIES;
            matmul_fp8_row_wgrad(dw, (fp8e4 *)dyqt[k], (fp8e4 *)xqt[k], dyst[k], xst[k], N, IN, OUT, 0, 0); });
    } else {
        t[0][T_ROW] = t[1][T_ROW] = t[2][T_ROW] = NAN;
    }
    // the fallback: E4M3 x E4M3 unit-scale GEMMs (the fprop kind, fast-accumulated: a lower bound for
    // dgrad and wgrad), then the rescale pass over the output
    t[0][T_FALLBACK] = time_median_ms_queued([&](int i) {
        int k = i % COPIES;
        matmul_fp8_fprop(y, (fp8e4 *)xq[k], (fp8e4 *)wq[k], unit, unit, N, IN, OUT, 0);
        rescale_outer(y, N, OUT, xs[k], ws[k]);
    });
    t[1][T_FALLBACK] = time_median_ms_queued([&](int i) {
        int k = i % COPIES;
        matmul_fp8_fprop(dx, (fp8e4 *)dyq[k], (fp8e4 *)wqt[k], unit, unit, N, OUT, IN, 0);
        rescale_outer(dx, N, IN, dys[k], wst[k]);
    });
    t[2][T_FALLBACK] = time_median_ms_queued([&](int i) {
        int k = i % COPIES;
        matmul_fp8_fprop(dw, (fp8e4 *)dyqt[k], (fp8e4 *)xqt[k], unit, unit, OUT, N, IN, 0);
        rescale_outer(dw, OUT, IN, dyst[k], xst[k]);
    });
    // casts (row-wise first: their codes are what the GEMMs above read), then block's and its GEMMs
    c[0] = time_median_ms_queued([&](int i) {
        int k = i % COPIES;
        fp8_row_cast(xq[k], xs[k], xqt[k], xst[k], x[k], 0, N, IN, amax, NULL, 0);
    });
    c[1] = time_median_ms_queued([&](int i) {
        int k = i % COPIES;
        fp8_row_cast(dyq[k], dys[k], dyqt[k], dyst[k], dy[k], 0, N, OUT, amax, NULL, 0);
    });
    c[2] = time_median_ms_queued([&](int i) {
        int k = i % COPIES;
        fp8_row_cast(wq[k], ws[k], wqt[k], wst[k], w32[k], 1, OUT, IN, amax, NULL, 0);
    });
    c[3] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        fp8_block_cast(xq[k], bxs[k], xqt[k], bxst[k], FP8_E4M3, x[k], N, IN, amax, NULL, 0); });
    c[4] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        fp8_block_cast(dyq[k], bdys[k], dyqt[k], bdyst[k], FP8_E5M2, dy[k], N, OUT, amax, NULL, 0); });
    c[5] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        fp8_block_cast_weight(wq[k], bwg[k], wqt[k], bwgt[k], w32[k], 1, OUT, IN, amax, NULL, 0); });
    t[0][T_BLOCK] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        matmul_fp8_block_fprop(y, (fp8e4 *)xq[k], (fp8e4 *)wq[k], bxs[k], bwg[k], N, IN, OUT, 0); });
    t[1][T_BLOCK] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        matmul_fp8_block_dgrad(dx, (fp8e5 *)dyq[k], (fp8e4 *)wqt[k], bdys[k], bwgt[k], N, IN, OUT, 0); });
    t[2][T_BLOCK] = time_median_ms_queued([&](int i) { int k = i % COPIES;
        matmul_fp8_block_wgrad(dw, (fp8e5 *)dyqt[k], (fp8e4 *)xqt[k], bdyst[k], bxst[k], N, IN, OUT, 0, 0); });
    cudaCheck(cudaDeviceSynchronize());
    for (int k = 0; k < COPIES; k++)
        for (void *p :
             {(void *)x[k],    (void *)dy[k],   (void *)w32[k],  (void *)xq[k],  (void *)xqt[k],  (void *)wq[k],
              (void *)wqt[k],  (void *)dyq[k],  (void *)dyqt[k], (void *)xs[k],  (void *)xst[k],  (void *)ws[k],
              (void *)wst[k],  (void *)dys[k],  (void *)dyst[k], (void *)bxs[k], (void *)bxst[k], (void *)bwg[k],
              (void *)bwgt[k], (void *)bdys[k], (void *)bdyst[k]})
            cudaCheck(cudaFree(p));
    for (void *p : {(void *)y, (void *)dx, (void *)dw, (void *)unit, (void *)amax}) cudaCheck(cudaFree(p));
}

static void bench(void) {
    const int N = 8192;
    struct {
        const char *name;
        int IN, OUT;
    } lins[4] = {{"qkv", 4096, 12288}, {"wo", 4096, 4096}, {"w13", 4096, 22016}, {"w2", 11008, 4096}};
    const char *gemm[3] = {"fprop", "dgrad", "wgrad"};
    printf(
        "\nLlama-2-7B linears, N = %d tokens: ms (TFLOP/s), median of 25; fallback = unit-scale GEMM + rescale pass\n",
        N);
    printf("%-4s %-5s | %14s %14s %14s %14s | %8s %8s\n", "lin", "gemm", "per-tensor", "block", "row", "fallback",
           "row/tens", "row/blk");
    float sum[T_KINDS] = {0}, csum[6] = {0};
    for (auto &l : lins) {
        float t[3][T_KINDS], c[6];
        bench_linear(N, l.IN, l.OUT, t, c);
        const double tf = 2.0 * N * l.IN * l.OUT * 1e-9;
        for (int g = 0; g < 3; g++) {
            printf("%-4s %-5s |", l.name, gemm[g]);
            for (int k = 0; k < T_KINDS; k++) printf(" %6.3f (%5.0f)", t[g][k], tf / t[g][k]);
            printf(" | %7.3fx %7.3fx\n", t[g][T_ROW] / t[g][T_TENSOR], t[g][T_ROW] / t[g][T_BLOCK]);
            for (int k = 0; k < T_KINDS; k++) sum[k] += t[g][k];
        }
        for (int k = 0; k < 6; k++) csum[k] += c[k];
    }
    printf("%-10s |", "all 12");
    for (int k = 0; k < T_KINDS; k++) printf(" %6.3f %7s", sum[k], "");
    printf(" | %7.3fx %7.3fx\n", sum[T_ROW] / sum[T_TENSOR], sum[T_ROW] / sum[T_BLOCK]);
    printf("casts of the 4 linears, ms: row X both %.3f, dY both %.3f, W both from fp32 %.3f | block X both %.3f, dY "
           "both %.3f,"
           " W from fp32 %.3f\n",
           csum[0], csum[1], csum[2], csum[3], csum[4], csum[5]);
}

int main(int argc, char **argv) {
    int validate_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-validate") == 0) validate_only = 1;
        else FATAL("usage: %s [-validate]   (-validate: the probe and the checks, no timing)", argv[0]);
    }
    cudaDeviceProp prop = device_properties();
    printf("device: %s (sm_%d%d), cuBLASLt %zu\n", prop.name, prop.major, prop.minor, cublasLtGetVersion());
    matmul_init();
    probe();
    validate();
    if (!validate_only) bench();
    matmul_destroy();
    printf("fp8_rowwise: %d passed, %d failed\n", g_passed, g_failures);
    return g_failures ? 1 : 0;
}
