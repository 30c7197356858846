/*
The fp8 grain study of issue 34 (dev/results/fp8_outliers/cpu_study.md): runs the fp32 C reference
(dev/test/llama_ref.h) forward and backward on a real model and real text, and for every linear's
X, W and dY as they reach it (the reference's fp8_observer) counts what an fp8 cast would lose under
each candidate scaling grain, with the reference's own cast functions:
  tensor   one scale per tensor from its amax (today's rule, with the current tensor's amax);
  1x128    block scaling: X and dY in 1x128 blocks along the reduction dimension of each GEMM
           that reads them (rows for fprop/dgrad, the transposes for wgrad), W in 128x128 blocks,
           fp32 scales (and "pow2": each scale rounded down to a power of two);
  smooth   Smooth-SwiGLU, w2 only: X's channel c divided by s_c = the power of two at or above the
           channel's amax over the batch, W's column c multiplied by it, then per-tensor scaling;
           "smooth >= median" scales only the channels above the median channel amax, by the power of
           two at or above amax / median.
An underflow is a non-zero value cast to +-0, a saturation one clipped to the format's max
(llmc/fp8.h). For the fprop GEMMs of some layers' w2 it also prints the relative Frobenius error of
Y = X W^T from each candidate's fp8 operands against the product of the fp32 ones.

Build and run from the repository root:
  make dev/test/tools/fp8_grain_study
  ./dev/test/tools/fp8_grain_study MODEL.bin SHARD.bin B T BATCHES [GEMM_LAYERS] > study.md
SHARD.bin is a token shard in the model's vocabulary (dev/data/tokenize_text.py), read from its start
as the trainer's loader reads it without shuffling; GEMM_LAYERS is a comma-separated list of the
layers whose w2 fprop error is printed (default 11,28,5).
*/
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "llmc/model_file.h"    // model_file_open, model_file_read_weights
#include "llmc/dataloader.h"    // DataLoader
#include "dev/test/llama_ref.h" // RefModel, ref_compute_grads, ref_fp8_block_cast, ref_fp8_block_gemm

enum { G_TENSOR, G_BLOCK, G_POW2, G_SMOOTH, G_SMOOTH_MED, NUM_GRAINS };
static const char *const GRAIN_NAMES[NUM_GRAINS] = {"tensor", "1x128", "1x128 pow2", "smooth", "smooth >= median"};
#define MAX_GEMM_LAYERS 8

// What the casts of one tensor (linear lin, kind) lost, summed over the batches. Row-wise casts feed
// fprop (X) and dgrad (dY), the transposed (column) casts wgrad; W has one cast.
typedef struct {
    uint64_t n, under[NUM_GRAINS], under_t[NUM_GRAINS], sat[NUM_GRAINS];
    float amax;
} TensorStats;

typedef struct {
    RefModel *model;
    TensorStats *stats; // (fp8 linears, FP8_KINDS)
    int batch;
    const ref_real *x; // the X the current linear's forward has just been given
    int gemm_layers[MAX_GEMM_LAYERS], num_gemm_layers;
    // [grain, or NUM_GRAINS for bf16 operands (for scale)][the whole Y's, the mean of its rows']
    double gemm_err[MAX_GEMM_LAYERS][NUM_GRAINS + 1][2];
    ref_real *buf_a, *buf_b, *buf_c, *buf_d;
    float *sinv_a, *sinv_b;
} Study;

static float tensor_amax(const ref_real *v, size_t n) {
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) if (fabsf((float)v[i]) > amax) amax = fabsf((float)v[i]);
    return amax;
}

// a per-tensor cast with the scale of the tensor's own amax; returns the scale
static float cast_tensor(const ref_real *v, size_t n, Fp8Format f, ref_real *out, uint64_t *under, uint64_t *sat) {
    float scale = fp8_compute_scale(tensor_amax(v, n), fp8_format_max(f), 0, 1.0f);
    for (size_t i = 0; i < n; i++) {
        if (out != NULL) out[i] = (ref_real)fp8_quantize((float)v[i], scale, f);
        *under += fp8_underflows((float)v[i], scale, f);
        *sat += fp8_saturates((float)v[i], scale, f);
    }
    return scale;
}

// Smooth-SwiGLU's channel scales of X (rows, cols): the power of two at or above each column's amax
// (1 for an all-zero column), so that dividing X and multiplying W by it is exact.
static int cmp_float(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

// With above_median, only the channels whose amax passes the median channel's are scaled, by the
// power of two at or above amax / median: X's outlier channels come down to the median's level and
// W's columns only grow, so W keeps its small values (the plain scales multiply the columns of
// nearly dead channels by tiny powers of two).
static void smooth_scales(const ref_real *x, int rows, int cols, float *s, int above_median) {
    for (int c = 0; c < cols; c++) {
        float amax = 0.0f;
        for (int r = 0; r < rows; r++) if (fabsf((float)x[(size_t)r * cols + c]) > amax) amax = fabsf((float)x[(size_t)r * cols + c]);
        int e;
        float m = frexpf(amax, &e); // amax = m 2^e, m in [0.5, 1)
        s[c] = amax > 0.0f ? ldexpf(1.0f, m == 0.5f ? e - 1 : e) : 1.0f;
        if (above_median) s[cols + c] = amax;
    }
    if (!above_median) return;
    float *sorted = s + 2 * cols; // s holds 3 * cols floats in this mode
    memcpy(sorted, s + cols, cols * sizeof(float));
    qsort(sorted, cols, sizeof(float), cmp_float);
    float median = sorted[cols / 2];
    for (int c = 0; c < cols; c++) {
        float r = median > 0.0f ? s[cols + c] / median : 1.0f;
        int e;
        float m = frexpf(r, &e);
        s[c] = r > 1.0f ? ldexpf(1.0f, m == 0.5f ? e - 1 : e) : 1.0f;
    }
}

// The relative Frobenius error of y (rows, cols) against ref, of the whole matrix and averaged over
// the rows: a few outlier tokens dominate the first, the second weighs every token alike.
static void rel_error(double err[2], const ref_real *y, const ref_real *ref, int rows, int cols) {
    double num = 0.0, den = 0.0, mean = 0.0;
    for (int r = 0; r < rows; r++) {
        double rn = 0.0, rd = 0.0;
        for (int c = 0; c < cols; c++) {
            double d = (double)y[(size_t)r * cols + c] - ref[(size_t)r * cols + c];
            rn += d * d;
            rd += (double)ref[(size_t)r * cols + c] * ref[(size_t)r * cols + c];
        }
        num += rn;
        den += rd;
        mean += sqrt(rn / rd) / rows;
    }
    err[0] = sqrt(num / den);
    err[1] = mean;
}

// The fprop error of w2 (N, K) x (M, K)^T under every grain, from the fp32 x and w.
static void gemm_errors(Study *st, int slot, const ref_real *x, const ref_real *w, int N, int K, int M) {
    size_t NK = (size_t)N * K, MK = (size_t)M * K;
    ref_real *yref = st->buf_c, *y = st->buf_d, *xq = st->buf_a, *wq = st->buf_b;
    uint64_t u = 0, s = 0;
    ref_matmul_forward(yref, x, w, N, K, M, 1.0);
    float sx = cast_tensor(x, NK, FP8_E4M3, xq, &u, &s), sw = cast_tensor(w, MK, FP8_E4M3, wq, &u, &s);
    ref_matmul_forward(y, xq, wq, N, K, M, (double)(1.0f / sx) * (1.0f / sw));
    rel_error(st->gemm_err[slot][G_TENSOR], y, yref, N, M);
    for (int pow2 = 0; pow2 < 2; pow2++) {
        uint64_t c[FP8_COUNTS] = {0, 0};
        ref_fp8_block_cast(x, N, K, 1, FP8_E4M3, pow2, 0, xq, st->sinv_a, c);
        ref_fp8_block_cast(w, M, K, FP8_BLOCK, FP8_E4M3, pow2, 0, wq, st->sinv_b, c);
        ref_fp8_block_gemm(y, xq, st->sinv_a, 1, wq, st->sinv_b, FP8_BLOCK, N, M, K, 0);
        rel_error(st->gemm_err[slot][pow2 ? G_POW2 : G_BLOCK], y, yref, N, M);
    }
    float *sc = (float *)mallocCheck(3 * K * sizeof(float));
    for (int med = 0; med < 2; med++) {
        smooth_scales(x, N, K, sc, med);
        for (size_t i = 0; i < NK; i++) xq[i] = x[i] / sc[i % K];
        for (size_t i = 0; i < MK; i++) wq[i] = w[i] * sc[i % K];
        sx = cast_tensor(xq, NK, FP8_E4M3, xq, &u, &s);
        sw = cast_tensor(wq, MK, FP8_E4M3, wq, &u, &s);
        ref_matmul_forward(y, xq, wq, N, K, M, (double)(1.0f / sx) * (1.0f / sw));
        rel_error(st->gemm_err[slot][med ? G_SMOOTH_MED : G_SMOOTH], y, yref, N, M);
    }
    for (size_t i = 0; i < NK; i++) xq[i] = ref_round_bf16((float)x[i]);
    for (size_t i = 0; i < MK; i++) wq[i] = ref_round_bf16((float)w[i]);
    ref_matmul_forward(y, xq, wq, N, K, M, 1.0);
    rel_error(st->gemm_err[slot][NUM_GRAINS], y, yref, N, M);
    free(sc);
}

static void observe(void *ctx, int lin, int kind, const ref_real *v, int rows, int cols) {
    Study *st = (Study *)ctx;
    RefModel *model = st->model;
    int L = model->cfg.L;
    if (kind == FP8_X) st->x = v;
    if (kind == FP8_W && st->batch > 0) return; // the weights do not change between batches
    TensorStats *ts = &st->stats[FP8_KINDS * lin + kind];
    Fp8Format f = fp8_kind_format(kind);
    size_t n = (size_t)rows * cols;
    ts->n += n;
    float amax = tensor_amax(v, n);
    if (amax > ts->amax) ts->amax = amax;
    cast_tensor(v, n, f, NULL, &ts->under[G_TENSOR], &ts->sat[G_TENSOR]);
    for (int pow2 = 0; pow2 < 2; pow2++) {
        int g = pow2 ? G_POW2 : G_BLOCK;
        uint64_t c[FP8_COUNTS] = {0, 0}, ct[FP8_COUNTS] = {0, 0};
        ref_fp8_block_cast(v, rows, cols, kind == FP8_W ? FP8_BLOCK : 1, f, pow2, 0, st->buf_a, st->sinv_a, c);
        if (kind != FP8_W) {
            ref_transpose(st->buf_b, v, rows, cols);
            ref_fp8_block_cast(st->buf_b, cols, rows, 1, f, pow2, 0, st->buf_a, st->sinv_a, ct);
        }
        ts->under[g] += c[FP8_UNDERFLOWS];
        ts->under_t[g] += ct[FP8_UNDERFLOWS];
        ts->sat[g] += c[FP8_SATURATIONS] + ct[FP8_SATURATIONS];
    }
    // Smooth-SwiGLU applies to w2's X and W only; the other tensors keep per-tensor scaling
    if (lin < LINS_PER_LAYER * L && lin % LINS_PER_LAYER == LIN_W2 && kind != FP8_DY) {
        int K = cols; // FF for both
        float *sc = (float *)mallocCheck(3 * K * sizeof(float));
        for (int med = 0; med < 2; med++) {
            int g = med ? G_SMOOTH_MED : G_SMOOTH;
            smooth_scales(st->x, model->B * model->T, K, sc, med);
            for (size_t i = 0; i < n; i++) st->buf_a[i] = kind == FP8_X ? v[i] / sc[i % K] : v[i] * sc[i % K];
            cast_tensor(st->buf_a, n, f, NULL, &ts->under[g], &ts->sat[g]);
        }
        free(sc);
        if (kind == FP8_W && st->batch == 0) {
            for (int i = 0; i < st->num_gemm_layers; i++) {
                if (lin == LINS_PER_LAYER * st->gemm_layers[i] + LIN_W2) gemm_errors(st, i, st->x, v, model->B * model->T, cols, rows);
            }
        }
    }
}

static double frac(uint64_t a, uint64_t n) { return n ? (double)a / (double)n : 0.0; }

// the candidate's underflow fraction of tensor t over all of its casts
static double under_frac(const Study *st, int t, int g) {
    const TensorStats *ts = &st->stats[t];
    int kind = t % FP8_KINDS, lin = t / FP8_KINDS, L = st->model->cfg.L;
    int smoothed = lin < LINS_PER_LAYER * L && lin % LINS_PER_LAYER == LIN_W2 && kind != FP8_DY;
    if ((g == G_SMOOTH || g == G_SMOOTH_MED) && !smoothed) g = G_TENSOR;
    if (g == G_BLOCK || g == G_POW2) {
        if (kind == FP8_W) return frac(ts->under[g], ts->n);
        return frac(ts->under[g] + ts->under_t[g], 2 * ts->n);
    }
    return frac(ts->under[g], ts->n);
}

static void tensor_name(const Study *st, int t, char *buf, size_t len) {
    int lin = t / FP8_KINDS, kind = t % FP8_KINDS, L = st->model->cfg.L;
    if (lin == LINS_PER_LAYER * L) snprintf(buf, len, "lm_head %s", FP8_KIND_NAMES[kind]);
    else snprintf(buf, len, "layer %d %s %s", lin / LINS_PER_LAYER, LINEAR_NAMES[lin % LINS_PER_LAYER], FP8_KIND_NAMES[kind]);
}

static void report(const Study *st, int nt) {
    char name[64];
    printf("### Underflow by candidate (fraction of the values cast; 1x128: row-wise and transposed casts together)\n\n");
    printf("| candidate | mean X | mean W | mean dY | tensors above 1%% | worst | 2nd | 3rd | worst saturation |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < NUM_GRAINS; g++) {
        double mean[FP8_KINDS] = {0, 0, 0};
        int above = 0, top[3] = {-1, -1, -1}, worst_sat = 0;
        for (int t = 0; t < nt; t++) {
            double u = under_frac(st, t, g);
            mean[t % FP8_KINDS] += u / (nt / FP8_KINDS);
            if (u > 0.01) above++;
            for (int k = 0; k < 3; k++) {
                if (top[k] < 0 || u > under_frac(st, top[k], g)) {
                    for (int j = 2; j > k; j--) top[j] = top[j - 1];
                    top[k] = t;
                    break;
                }
            }
            int gs = (g == G_SMOOTH || g == G_SMOOTH_MED) && t % FP8_KINDS == FP8_DY ? G_TENSOR : g;
            if (frac(st->stats[t].sat[gs], st->stats[t].n) > frac(st->stats[worst_sat].sat[gs], st->stats[worst_sat].n)) worst_sat = t;
        }
        printf("| %s | %.2e | %.2e | %.2e | %d |", GRAIN_NAMES[g], mean[FP8_X], mean[FP8_W], mean[FP8_DY], above);
        for (int k = 0; k < 3; k++) {
            tensor_name(st, top[k], name, sizeof(name));
            printf(" %s %.2e |", name, under_frac(st, top[k], g));
        }
        tensor_name(st, worst_sat, name, sizeof(name));
        int gs = (g == G_SMOOTH || g == G_SMOOTH_MED) && worst_sat % FP8_KINDS == FP8_DY ? G_TENSOR : g;
        printf(" %s %.1e |\n", name, frac(st->stats[worst_sat].sat[gs], st->stats[worst_sat].n));
    }
    printf("\n### Tensors above 0.5%% underflow under per-tensor scaling (the 1%% fallback trips on those above 1%%)\n\n");
    printf("| tensor | amax | tensor | 1x128 (rows / transposed) | 1x128 pow2 (rows / transposed) | smooth | smooth >= median |\n|---|---|---|---|---|---|---|\n");
    for (int t = 0; t < nt; t++) {
        const TensorStats *ts = &st->stats[t];
        if (under_frac(st, t, G_TENSOR) <= 0.005) continue;
        tensor_name(st, t, name, sizeof(name));
        printf("| %s | %.4g | %.2e | %.2e / %.2e | %.2e / %.2e | %.2e | %.2e |\n", name, ts->amax, under_frac(st, t, G_TENSOR),
               frac(ts->under[G_BLOCK], ts->n), frac(ts->under_t[G_BLOCK], ts->n), frac(ts->under[G_POW2], ts->n),
               frac(ts->under_t[G_POW2], ts->n), under_frac(st, t, G_SMOOTH), under_frac(st, t, G_SMOOTH_MED));
    }
    printf("\n### w2 fprop error, ||Y - X W^T||_F / ||X W^T||_F of the whole Y / mean over its rows (first batch)\n\n| layer | w2 X amax |");
    for (int g = 0; g < NUM_GRAINS; g++) printf(" %s |", GRAIN_NAMES[g]);
    printf(" bf16 operands |\n|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < st->num_gemm_layers; i++) {
        int l = st->gemm_layers[i];
        printf("| %d | %.4g |", l, st->stats[fp8_tensor_index(l, LIN_W2, FP8_X)].amax);
        for (int g = 0; g <= NUM_GRAINS; g++) printf(" %.2e / %.2e |", st->gemm_err[i][g][0], st->gemm_err[i][g][1]);
        printf("\n");
    }
    printf("\n### Every tensor's amax and underflow\n\n| tensor | amax | values | tensor | 1x128 | pow2 | smooth | smooth >= median |\n|---|---|---|---|---|---|---|---|\n");
    for (int t = 0; t < nt; t++) {
        tensor_name(st, t, name, sizeof(name));
        printf("| %s | %.4g | %llu | %.2e | %.2e | %.2e | %.2e | %.2e |\n", name, st->stats[t].amax, (unsigned long long)st->stats[t].n,
               under_frac(st, t, G_TENSOR), under_frac(st, t, G_BLOCK), under_frac(st, t, G_POW2), under_frac(st, t, G_SMOOTH),
               under_frac(st, t, G_SMOOTH_MED));
    }
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s MODEL.bin SHARD.bin B T BATCHES [GEMM_LAYERS, default 11,28,5]\n", argv[0]);
        return 1;
    }
    const char *model_path = argv[1], *shard_path = argv[2];
    int B = atoi(argv[3]), T = atoi(argv[4]), batches = atoi(argv[5]);
    if (B <= 0 || T <= 0 || batches <= 0) FATAL("B, T and BATCHES must be positive, got '%s' '%s' '%s'", argv[3], argv[4], argv[5]);
    Study st;
    memset(&st, 0, sizeof(st));
    const char *layers = argc == 7 ? argv[6] : "11,28,5";
    for (const char *p = layers; *p != '\0' && st.num_gemm_layers < MAX_GEMM_LAYERS;) {
        char *end;
        long l = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0')) FATAL("GEMM_LAYERS: '%s' is not a comma-separated list of layers", layers);
        st.gemm_layers[st.num_gemm_layers++] = (int)l;
        p = *end == ',' ? end + 1 : end;
    }

    int32_t header[MODEL_HEADER_INTS];
    LlamaConfig cfg;
    FILE *f = model_file_open(model_path, header, &cfg);
    for (int i = 0; i < st.num_gemm_layers; i++) {
        if (st.gemm_layers[i] < 0 || st.gemm_layers[i] >= cfg.L) FATAL("GEMM_LAYERS: layer %d is not in [0, %d)", st.gemm_layers[i], cfg.L);
    }
    RefModel model;
    ref_init(&model, &cfg, B, T, 0, 0, 0, 0, 0);
    model_file_read_weights(f, model_path, header, model.params, model.num_params);

    int nt = fp8_num_tensors(&cfg, 1); // the lm_head too (its fp8 cast is optional in the trainer)
    size_t N = (size_t)B * T, widest = cfg.V > 2 * cfg.FF ? cfg.V : 2 * cfg.FF;
    size_t big = N * widest > (size_t)cfg.V * cfg.C ? N * widest : (size_t)cfg.V * cfg.C;
    st.model = &model;
    st.stats = (TensorStats *)callocCheck(nt, sizeof(TensorStats));
    st.buf_a = (ref_real *)mallocCheck(big * sizeof(ref_real));
    st.buf_b = (ref_real *)mallocCheck(big * sizeof(ref_real));
    st.buf_c = (ref_real *)mallocCheck(N * cfg.C * sizeof(ref_real));
    st.buf_d = (ref_real *)mallocCheck(N * cfg.C * sizeof(ref_real));
    size_t nmax = N > widest ? N : widest;
    st.sinv_a = (float *)mallocCheck(nmax * ref_ceil_div(nmax, FP8_BLOCK) * sizeof(float));
    st.sinv_b = (float *)mallocCheck(nmax * ref_ceil_div(nmax, FP8_BLOCK) * sizeof(float));
    model.fp8_observer = observe;
    model.fp8_observer_ctx = &st;

    DataLoader dl;
    dataloader_init(&dl, shard_path, B, T, 0, 1, 0, 0, cfg.V);
    double loss = 0.0, t0 = monotonic_seconds();
    for (st.batch = 0; st.batch < batches; st.batch++) {
        dataloader_next_batch(&dl);
        loss += ref_compute_grads(&model, dl.inputs, dl.targets, 1);
    }
    printf("%s on %s: %d batches of %d x %d tokens from the shard's start, mean loss %.4f, fp32 reference forward and"
           " backward, %.0f s\n\n", model_path, shard_path, batches, B, T, loss / batches, monotonic_seconds() - t0);
    report(&st, nt);
    dataloader_free(&dl);
    ref_free(&model);
    return 0;
}
