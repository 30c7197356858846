/*
Causal GQA attention (llmc/attention.cuh, llmc/cudnn_att.cuh): validation, then benchmark.

Build and run, from dev/cuda:
  nvcc -O3 -arch=sm_90 -DENABLE_CUDNN -I../.. attention.cu -lcudnn -o attention && ./attention
  (no cuDNN: drop -DENABLE_CUDNN and -lcudnn; the cuDNN checks then report SKIP)
  ./attention [all|plain|cudnn]   which versions to validate and time (default all; cudnn: both forms)

Versions:
  plain  the kernels in llmc/attention.cuh: flash-style loops over 32-row shared-memory tiles, one warp
         per query (forward, dQ) or key (dK/dV) row, fp32 accumulation, no atomics. Any T, HS <= 256.
  cudnn  cuDNN's fused flash attention through the backend graph API (llmc/cudnn_att.cuh): T % 128 == 0,
         HS % 8 == 0, HS <= 128; deterministic backward (dQ written directly, no fp32 accumulator).
  cudnn-fast  the same forward; the backward accumulates dQ in fp32 with atomics (the trainer's
         default, -deterministic 0): not bit-reproducible, so its second runs are checked against
         the reference instead of bit for bit.

What it checks (every line says PASS or FAIL; the exit status is non-zero if anything failed):
  1. Against a CPU reference in double, on small shapes: out, stats, dq, dk, dv of each version.
     (B=2,T=128,NH=4,NKV=2,HS=64), (B=1,T=200,NH=4,NKV=4,HS=64) (T % 128 != 0: cuDNN must decline it
     and the dispatcher must take the plain path), (B=2,T=256,NH=8,NKV=2,HS=128).
     Outputs are pre-filled with NaN bytes, so an element a kernel forgets to write fails the check
     (the backward must write, not accumulate, all of dqkv). Each deterministic version is run twice
     and must be bitwise identical (the trainer's -deterministic 1 resume is bit-exact).
     attention_forward/backward (the dispatcher, deterministic) must be bitwise identical to the
     version attention_path() names.
  2. both cuDNN forms against the plain kernels on a bigger shape (B=2,T=1024,NH=16,NKV=4,HS=128).
  3. Timing (CUDA events, warm-up, median) of forward and backward at B=2,T=4096,NH=32,HS=128 with
     NKV=32 (llama2-7b) and NKV=8 (GQA), in TFLOP/s with causal FLOPs halved:
     forward 4*B*NH*T*T*HS/2, backward 2.5x that; plus a bitwise determinism check at that size.
*/
#include "llmc/attention.cuh"
#include "bench_common.h" // upload, download, fill_uniform, time_median_ms, device_properties

// ---------------------------------------------------------------------------------------------------
// Tolerances. bf16 keeps 8 significant bits: one rounding of a value errs by up to 2^-9 ~ 0.2% of it.
// The plain path rounds only its outputs; cuDNN also rounds P to bf16 before P x V and dS before
// dS x K and dS^T x Q, each term erring by ~2^-9 relative; summed over up to T terms with mixed signs
// the error stays a few 2^-9 of the tensor's scale. So: elementwise |err| <= 2e-2 * max|ref| (~10 bf16
// half-ulps of the largest value) and RMS(err) <= 1e-2 * RMS(ref). A real bug (a wrong mask, head
// mapping, scale or transposition) gives errors of order the values themselves.
// stats are fp32 log-sum-exps of exact bf16 inputs: fp32 arithmetic is ~1e-6 relative; 2e-3 (absolute,
// or relative above 1) leaves room for the fused kernel's fast exp/log and catches any real error.
#define TOL_MAX_REL 2e-2
#define TOL_RMS_REL 1e-2
#define TOL_STATS 2e-3

enum { PATH_PLAIN, PATH_CUDNN, PATH_CUDNN_FAST, NUM_PATHS };
static const char *path_names[NUM_PATHS] = {"plain", "cudnn", "cudnn-fast"};

// the cuDNN backward form a path runs (the dispatcher's is the deterministic one here)
static void select_backward_form(int path) {
#ifdef ENABLE_CUDNN
    cudnn_att_set_deterministic(path != PATH_CUDNN_FAST);
#else
    (void)path;
#endif
}

typedef struct { int B, T, NH, NKV, HS; } Shape;

static int g_checks = 0, g_failed = 0;

static void report(int ok) {
    g_checks++;
    if (!ok) g_failed++;
}

// ---------------------------------------------------------------------------------------------------
// CPU reference (double)

// out (B, T, NH*HS), lse (B, NH, T), dqkv (B, T, NH + 2*NKV, HS) from qkv and dout (the values of bf16s).
static void attention_reference(double *out, double *lse, double *dqkv, const float *qkv, const float *dout, Shape s) {
    const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS, H3 = NH + 2 * NKV;
    const double scale = 1.0 / sqrt((double)HS);
    double *p = (double *)mallocCheck(T * sizeof(double));
    double *o = (double *)mallocCheck(HS * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * H3 * HS * sizeof(double));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const int hk = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * H3 * HS + (size_t)h * HS;
                const float *dO = dout + ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
                double m = -INFINITY;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * H3 * HS + (size_t)(NH + hk) * HS;
                    double dot = 0.0;
                    for (int d = 0; d < HS; d++) dot += (double)q[d] * k[d];
                    p[u] = dot * scale;
                    if (p[u] > m) m = p[u];
                }
                double sum = 0.0;
                for (int u = 0; u <= t; u++) { p[u] = exp(p[u] - m); sum += p[u]; }
                for (int u = 0; u <= t; u++) p[u] /= sum;
                lse[((size_t)b * NH + h) * T + t] = m + log(sum);
                for (int d = 0; d < HS; d++) o[d] = 0.0;
                for (int u = 0; u <= t; u++) {
                    const float *v = qkv + ((size_t)b * T + u) * H3 * HS + (size_t)(NH + NKV + hk) * HS;
                    for (int d = 0; d < HS; d++) o[d] += p[u] * v[d];
                }
                double D = 0.0;
                for (int d = 0; d < HS; d++) {
                    out[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d] = o[d];
                    D += (double)dO[d] * o[d];
                }
                double *dq = dqkv + ((size_t)b * T + t) * H3 * HS + (size_t)h * HS;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * H3 * HS + (size_t)(NH + hk) * HS;
                    const float *v = qkv + ((size_t)b * T + u) * H3 * HS + (size_t)(NH + NKV + hk) * HS;
                    double *dk = dqkv + ((size_t)b * T + u) * H3 * HS + (size_t)(NH + hk) * HS;
                    double *dv = dqkv + ((size_t)b * T + u) * H3 * HS + (size_t)(NH + NKV + hk) * HS;
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += (double)dO[d] * v[d];
                    const double ds = p[u] * (dp - D);
                    for (int d = 0; d < HS; d++) {
                        dq[d] += scale * ds * k[d];
                        dk[d] += scale * ds * q[d];
                        dv[d] += p[u] * dO[d];
                    }
                }
            }
        }
    }
    free(p);
    free(o);
}

// ---------------------------------------------------------------------------------------------------
// comparisons

// Compares n values of gpu against ref with the tolerances above; prints one line.
static int check_close(const char *what, const double *gpu, const double *ref, size_t n) {
    double max_ref = 0.0, max_err = 0.0, sum_ref2 = 0.0, sum_err2 = 0.0;
    size_t worst = 0, nonfinite = 0, first_nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) {
            if (nonfinite++ == 0) first_nonfinite = i;
            continue;
        }
        const double err = fabs(gpu[i] - ref[i]);
        if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
        if (err > max_err) { max_err = err; worst = i; }
        sum_ref2 += ref[i] * ref[i];
        sum_err2 += err * err;
    }
    const double rms_ref = sqrt(sum_ref2 / n), rms_err = sqrt(sum_err2 / n);
    const int ok = nonfinite == 0 && max_err <= TOL_MAX_REL * max_ref && rms_err <= TOL_RMS_REL * rms_ref;
    if (nonfinite) {
        printf("    %-6s %zu non-finite values (first at %zu: %g, ref %g) -- unwritten or NaN output  FAIL\n",
               what, nonfinite, first_nonfinite, gpu[first_nonfinite], ref[first_nonfinite]);
    } else {
        printf("    %-6s max|err| %.2e (%.2e of max|ref| %.3g; at %zu: %.5f vs %.5f), rms err/ref %.2e  %s\n",
               what, max_err, max_ref > 0 ? max_err / max_ref : 0.0, max_ref, worst, gpu[worst], ref[worst],
               rms_ref > 0 ? rms_err / rms_ref : 0.0, ok ? "PASS" : "FAIL");
    }
    report(ok);
    return ok;
}

static int check_stats(const double *gpu, const double *ref, size_t n) {
    double max_err = 0.0;
    size_t worst = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) { nonfinite++; continue; }
        const double err = fabs(gpu[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (err > max_err) { max_err = err; worst = i; }
    }
    const int ok = nonfinite == 0 && max_err <= TOL_STATS;
    printf("    %-6s max err %.2e (at %zu: %.6f vs %.6f), %zu non-finite  %s\n", "stats", max_err, worst, gpu[worst],
           ref[worst], nonfinite, ok ? "PASS" : "FAIL");
    report(ok);
    return ok;
}

static double *to_double_bf16(const floatX *x, size_t n) {
    double *r = (double *)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) r[i] = __bfloat162float(x[i]);
    return r;
}
static double *to_double_f32(const float *x, size_t n) {
    double *r = (double *)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) r[i] = x[i];
    return r;
}

// heads [h0, h0 + nh) of a (B, T, H, HS) tensor
static double *extract_heads(const double *x, Shape s, int H, int h0, int nh) {
    double *r = (double *)mallocCheck((size_t)s.B * s.T * nh * s.HS * sizeof(double));
    size_t k = 0;
    for (size_t bt = 0; bt < (size_t)s.B * s.T; bt++)
        for (int h = h0; h < h0 + nh; h++)
            for (int d = 0; d < s.HS; d++) r[k++] = x[(bt * H + h) * s.HS + d];
    return r;
}

// dq, dk, dv of a packed dqkv (bf16) against a reference (double), one line each
static void check_dqkv(const floatX *gpu, const double *ref, Shape s) {
    const int H3 = s.NH + 2 * s.NKV;
    const char *names[3] = {"dq", "dk", "dv"};
    const int h0[3] = {0, s.NH, s.NH + s.NKV}, nh[3] = {s.NH, s.NKV, s.NKV};
    double *gpu_all = to_double_bf16(gpu, (size_t)s.B * s.T * H3 * s.HS);
    for (int i = 0; i < 3; i++) {
        double *g = extract_heads(gpu_all, s, H3, h0[i], nh[i]);
        double *r = extract_heads(ref, s, H3, h0[i], nh[i]);
        check_close(names[i], g, r, (size_t)s.B * s.T * nh[i] * s.HS);
        free(g);
        free(r);
    }
    free(gpu_all);
}

static void check_bitwise(const char *what, const void *a, const void *b, size_t bytes) {
    const int ok = memcmp(a, b, bytes) == 0;
    size_t first = 0;
    if (!ok) while (((const unsigned char *)a)[first] == ((const unsigned char *)b)[first]) first++;
    if (ok) printf("    %-40s bitwise identical  PASS\n", what);
    else printf("    %-40s differ (first at byte %zu)  FAIL\n", what, first);
    report(ok);
}

// ---------------------------------------------------------------------------------------------------
// running one version

typedef struct {
    Shape s;
    floatX *qkv, *out, *dout, *dqkv; // device
    float *stats;
    size_t n_qkv, n_out, n_stats;
} Buffers;

static Buffers buffers_alloc(Shape s) {
    Buffers d;
    d.s = s;
    d.n_qkv = (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HS;
    d.n_out = (size_t)s.B * s.T * s.NH * s.HS;
    d.n_stats = (size_t)s.B * s.NH * s.T;
    d.qkv = (floatX *)cudaMallocCheck(d.n_qkv * sizeof(floatX), "qkv");
    d.dqkv = (floatX *)cudaMallocCheck(d.n_qkv * sizeof(floatX), "dqkv");
    d.out = (floatX *)cudaMallocCheck(d.n_out * sizeof(floatX), "out");
    d.dout = (floatX *)cudaMallocCheck(d.n_out * sizeof(floatX), "dout");
    d.stats = (float *)cudaMallocCheck(d.n_stats * sizeof(float), "stats");
    return d;
}

static void buffers_free(Buffers *d) {
    cudaCheck(cudaFree(d->qkv));
    cudaCheck(cudaFree(d->dqkv));
    cudaCheck(cudaFree(d->out));
    cudaCheck(cudaFree(d->dout));
    cudaCheck(cudaFree(d->stats));
}

// Why this version cannot run this shape, or NULL if it can (cuDNN: builds the plans).
static const char *path_unavailable(int path, Shape s) {
    if (path == PATH_PLAIN) return NULL;
#ifdef ENABLE_CUDNN
    const char *fwd = attention_path(s.B, s.T, s.NH, s.NKV, s.HS, 0);
    if (strcmp(fwd, "cudnn") != 0) return fwd;
    select_backward_form(path);
    const char *bwd = attention_path(s.B, s.T, s.NH, s.NKV, s.HS, 1);
    select_backward_form(PATH_CUDNN);
    if (strcmp(bwd, "cudnn") != 0) return bwd;
    return NULL;
#else
    (void)s;
    return "built without ENABLE_CUDNN";
#endif
}

static void run_forward(int path, Buffers *d) {
    Shape s = d->s;
    if (path == PATH_PLAIN) {
        attention_forward_plain(d->out, d->stats, d->qkv, s.B, s.T, s.NH, s.NKV, s.HS, 0);
        return;
    }
#ifdef ENABLE_CUDNN
    if (cudnn_att_forward(d->out, d->stats, d->qkv, s.B, s.T, s.NH, s.NKV, s.HS, 0)) return;
#endif
    FATAL("the cuDNN forward was asked to run a shape it has no plan for");
}

static void run_backward(int path, Buffers *d) {
    Shape s = d->s;
    if (path == PATH_PLAIN) {
        attention_backward_plain(d->dqkv, d->dout, d->qkv, d->out, d->stats, s.B, s.T, s.NH, s.NKV, s.HS, 0);
        return;
    }
#ifdef ENABLE_CUDNN
    select_backward_form(path);
    const int ran = cudnn_att_backward(d->dqkv, d->dout, d->qkv, d->out, d->stats, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    select_backward_form(PATH_CUDNN);
    if (ran) return;
#endif
    FATAL("the cuDNN backward was asked to run a shape it has no plan for");
}

// The results of one run, on the host.
typedef struct { floatX *out, *dqkv; float *stats; } HostResults;

static HostResults results_alloc(const Buffers *d) {
    HostResults r;
    r.out = (floatX *)mallocCheck(d->n_out * sizeof(floatX));
    r.dqkv = (floatX *)mallocCheck(d->n_qkv * sizeof(floatX));
    r.stats = (float *)mallocCheck(d->n_stats * sizeof(float));
    return r;
}

static void results_free(HostResults *r) { free(r->out); free(r->dqkv); free(r->stats); }

// forward then backward, outputs pre-filled with NaN bytes (0xFF), results copied to r
static void run_both(int path, Buffers *d, HostResults *r) {
    cudaCheck(cudaMemset(d->out, 0xFF, d->n_out * sizeof(floatX)));
    cudaCheck(cudaMemset(d->stats, 0xFF, d->n_stats * sizeof(float)));
    cudaCheck(cudaMemset(d->dqkv, 0xFF, d->n_qkv * sizeof(floatX)));
    run_forward(path, d);
    run_backward(path, d);
    cudaCheck(cudaDeviceSynchronize());
    download(r->out, d->out, d->n_out);
    download(r->stats, d->stats, d->n_stats);
    download(r->dqkv, d->dqkv, d->n_qkv);
}

static void fill_host_random(floatX *x_bf16, float *x_f32, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) {
        x_bf16[i] = __float2bfloat16(random_normal(rng));
        if (x_f32) x_f32[i] = __bfloat162float(x_bf16[i]); // the reference sees exactly the bf16 values
    }
}

// d's qkv and dout get N(0, 1) values rounded to bf16, drawn from seed; qkv_f and dout_f (unless NULL)
// the same values as floats, for the CPU reference.
static void upload_random_inputs(Buffers *d, uint64_t seed, float *qkv_f, float *dout_f) {
    floatX *qkv_h = (floatX *)mallocCheck(d->n_qkv * sizeof(floatX)), *dout_h = (floatX *)mallocCheck(d->n_out * sizeof(floatX));
    uint64_t rng = seed;
    fill_host_random(qkv_h, qkv_f, d->n_qkv, &rng);
    fill_host_random(dout_h, dout_f, d->n_out, &rng);
    upload(d->qkv, qkv_h, d->n_qkv);
    upload(d->dout, dout_h, d->n_out);
    free(qkv_h);
    free(dout_h);
}

// ---------------------------------------------------------------------------------------------------
// 1. small shapes against the CPU reference

static void validate_small(Shape s, const int use[NUM_PATHS], uint64_t seed) {
    printf("\nB=%d T=%d NH=%d NKV=%d HS=%d vs CPU reference (double)\n", s.B, s.T, s.NH, s.NKV, s.HS);
    Buffers d = buffers_alloc(s);
    float *qkv_f = (float *)mallocCheck(d.n_qkv * sizeof(float)), *dout_f = (float *)mallocCheck(d.n_out * sizeof(float));
    upload_random_inputs(&d, seed, qkv_f, dout_f);
    double *out_ref = (double *)mallocCheck(d.n_out * sizeof(double));
    double *lse_ref = (double *)mallocCheck(d.n_stats * sizeof(double));
    double *dqkv_ref = (double *)mallocCheck(d.n_qkv * sizeof(double));
    attention_reference(out_ref, lse_ref, dqkv_ref, qkv_f, dout_f, s);

    HostResults res[NUM_PATHS], again = results_alloc(&d);
    int ran[NUM_PATHS] = {0, 0, 0};
    for (int path = 0; path < NUM_PATHS; path++) {
        if (!use[path]) continue;
        const char *why_not = path_unavailable(path, s);
        if (why_not != NULL) {
            printf("  %s: SKIP (%s)\n", path_names[path], why_not);
            continue;
        }
        printf("  %s:\n", path_names[path]);
        res[path] = results_alloc(&d);
        ran[path] = 1;
        run_both(path, &d, &res[path]);
        double *g = to_double_bf16(res[path].out, d.n_out);
        check_close("out", g, out_ref, d.n_out);
        free(g);
        g = to_double_f32(res[path].stats, d.n_stats);
        check_stats(g, lse_ref, d.n_stats);
        free(g);
        check_dqkv(res[path].dqkv, dqkv_ref, s);
        run_both(path, &d, &again);
        check_bitwise("second run: out", res[path].out, again.out, d.n_out * sizeof(floatX));
        check_bitwise("second run: stats", res[path].stats, again.stats, d.n_stats * sizeof(float));
        if (path == PATH_CUDNN_FAST) {
            printf("    second run's dqkv (atomics: checked against the reference, not bit for bit):\n");
            check_dqkv(again.dqkv, dqkv_ref, s);
        } else {
            check_bitwise("second run: dqkv", res[path].dqkv, again.dqkv, d.n_qkv * sizeof(floatX));
        }
    }
    // the dispatcher must take (and match) the path it says it takes
    const char *fwd_path = attention_path(s.B, s.T, s.NH, s.NKV, s.HS, 0);
    const char *bwd_path = attention_path(s.B, s.T, s.NH, s.NKV, s.HS, 1);
    const int fwd_is = strcmp(fwd_path, "cudnn") == 0 ? PATH_CUDNN : PATH_PLAIN;
    const int bwd_is = strcmp(bwd_path, "cudnn") == 0 ? PATH_CUDNN : PATH_PLAIN;
    printf("  dispatcher: forward -> %s, backward -> %s\n", fwd_path, bwd_path);
    if (s.T % 128 != 0) {
        const int ok = fwd_is == PATH_PLAIN && bwd_is == PATH_PLAIN;
        printf("    T %% 128 != 0 takes the plain path  %s\n", ok ? "PASS" : "FAIL");
        report(ok);
    }
    if (ran[fwd_is] && ran[bwd_is] && fwd_is == bwd_is) {
        cudaCheck(cudaMemset(d.out, 0xFF, d.n_out * sizeof(floatX)));
        cudaCheck(cudaMemset(d.dqkv, 0xFF, d.n_qkv * sizeof(floatX)));
        attention_forward(d.out, d.stats, d.qkv, s.B, s.T, s.NH, s.NKV, s.HS, 0);
        attention_backward(d.dqkv, d.dout, d.qkv, d.out, d.stats, s.B, s.T, s.NH, s.NKV, s.HS, 0);
        cudaCheck(cudaDeviceSynchronize());
        download(again.out, d.out, d.n_out);
        download(again.dqkv, d.dqkv, d.n_qkv);
        check_bitwise("dispatcher out == its path's", again.out, res[fwd_is].out, d.n_out * sizeof(floatX));
        check_bitwise("dispatcher dqkv == its path's", again.dqkv, res[fwd_is].dqkv, d.n_qkv * sizeof(floatX));
    }
    for (int path = 0; path < NUM_PATHS; path++) if (ran[path]) results_free(&res[path]);
    results_free(&again);
    free(qkv_f); free(dout_f);
    free(out_ref); free(lse_ref); free(dqkv_ref);
    buffers_free(&d);
}

// ---------------------------------------------------------------------------------------------------
// 2. cuDNN against the plain kernels on a bigger shape

static void validate_cudnn_vs_plain(Shape s, int path, uint64_t seed) {
    printf("\nB=%d T=%d NH=%d NKV=%d HS=%d: %s vs plain (plain as the reference)\n", s.B, s.T, s.NH, s.NKV, s.HS,
           path_names[path]);
    const char *why_not = path_unavailable(path, s);
    if (why_not != NULL) {
        printf("  SKIP (%s)\n", why_not);
        return;
    }
    Buffers d = buffers_alloc(s);
    upload_random_inputs(&d, seed, NULL, NULL);
    HostResults plain = results_alloc(&d), fused = results_alloc(&d);
    run_both(PATH_PLAIN, &d, &plain);
    run_both(path, &d, &fused);
    double *g = to_double_bf16(fused.out, d.n_out), *r = to_double_bf16(plain.out, d.n_out);
    check_close("out", g, r, d.n_out);
    free(g); free(r);
    g = to_double_f32(fused.stats, d.n_stats);
    r = to_double_f32(plain.stats, d.n_stats);
    check_stats(g, r, d.n_stats);
    free(g); free(r);
    r = to_double_bf16(plain.dqkv, d.n_qkv);
    check_dqkv(fused.dqkv, r, s);
    free(r);
    results_free(&plain);
    results_free(&fused);
    buffers_free(&d);
}

// ---------------------------------------------------------------------------------------------------
// 3. timing

static void benchmark(Shape s, const int use[NUM_PATHS]) {
    printf("\nB=%d T=%d NH=%d NKV=%d HS=%d timing (median; causal FLOPs halved)\n", s.B, s.T, s.NH, s.NKV, s.HS);
    Buffers d = buffers_alloc(s);
    fill_uniform(d.qkv, d.n_qkv, 1234u, 1.0f);
    fill_uniform(d.dout, d.n_out, 5678u, 1.0f);
    cudaCheck(cudaDeviceSynchronize());
    const double fwd_flops = 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS / 2.0, bwd_flops = 2.5 * fwd_flops;
    HostResults first = results_alloc(&d), second = results_alloc(&d);
    for (int path = 0; path < NUM_PATHS; path++) {
        if (!use[path]) continue;
        const char *why_not = path_unavailable(path, s); // cuDNN: builds the plans outside the timing
        if (why_not != NULL) {
            printf("  %-10s SKIP (%s)\n", path_names[path], why_not);
            continue;
        }
        const int iters = path == PATH_PLAIN ? 5 : 20;
        const float fwd_ms = time_median_ms([&] { run_forward(path, &d); }, iters, 2); // leaves out/stats for the backward
        const float bwd_ms = time_median_ms([&] { run_backward(path, &d); }, iters, 2);
        printf("  %-10s forward %8.3f ms %7.1f TFLOP/s | backward %8.3f ms %7.1f TFLOP/s\n", path_names[path],
               fwd_ms, fwd_flops / fwd_ms / 1e9, bwd_ms, bwd_flops / bwd_ms / 1e9);
        if (path == PATH_CUDNN_FAST) continue; // not bit-reproducible by design
        run_both(path, &d, &first);
        run_both(path, &d, &second);
        char what[64];
        snprintf(what, sizeof(what), "%s: second run: dqkv", path_names[path]);
        check_bitwise(what, first.dqkv, second.dqkv, d.n_qkv * sizeof(floatX));
        snprintf(what, sizeof(what), "%s: second run: out", path_names[path]);
        check_bitwise(what, first.out, second.out, d.n_out * sizeof(floatX));
    }
    results_free(&first);
    results_free(&second);
    buffers_free(&d);
}

// ---------------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    int use[NUM_PATHS] = {1, 1, 1};
    if (strcmp(mode, "plain") == 0) use[PATH_CUDNN] = use[PATH_CUDNN_FAST] = 0;
    else if (strcmp(mode, "cudnn") == 0) use[PATH_PLAIN] = 0;
    else if (strcmp(mode, "all") != 0) {
        fprintf(stderr, "usage: %s [all|plain|cudnn]\n", argv[0]);
        return EXIT_FAILURE;
    }
    cudaDeviceProp prop = device_properties();
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    attention_init(use[PATH_CUDNN], 1);

    // 1. against the CPU reference (the dispatcher check needs both versions' results: mode all)
    const Shape small[3] = {{2, 128, 4, 2, 64}, {1, 200, 4, 4, 64}, {2, 256, 8, 2, 128}};
    for (int i = 0; i < 3; i++) validate_small(small[i], use, 42 + i);
    // 2. cuDNN against the plain kernels
    if (use[PATH_PLAIN] && use[PATH_CUDNN]) {
        const Shape big = {2, 1024, 16, 4, 128};
        validate_cudnn_vs_plain(big, PATH_CUDNN, 7);
        validate_cudnn_vs_plain(big, PATH_CUDNN_FAST, 7);
    }
    // 3. timing
    const Shape timed[2] = {{2, 4096, 32, 32, 128}, {2, 4096, 32, 8, 128}};
    for (int i = 0; i < 2; i++) benchmark(timed[i], use);

    attention_destroy();
    printf("\nattention: %d checks, %d failed: %s\n", g_checks, g_failed, g_failed == 0 ? "PASS" : "FAIL");
    return g_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
