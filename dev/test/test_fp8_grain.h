/*
Tests of the reference's fp8 block scaling (llama_ref.h, "fp8 block scaling"; the spec is
dev/results/fp8_outliers/design.md): the block cast on hand-computed tensors with an outlier, the
block-scaled GEMM against the product of the dequantized operands, a block linear's three GEMMs
exact on values that every block holds exactly (where per-tensor scaling flushes a whole block), and
training steps with block linears against the fp32 reference and the per-tensor emulation, and the
fallback that moves a linear whose casts keep losing values to block scaling, to bf16 or to row-wise
scaling; and the row-wise casts, GEMM and linear (fp8 row-wise scaling, issue 42).
*/
#ifndef DEV_TEST_TEST_FP8_GRAIN_H
#define DEV_TEST_TEST_FP8_GRAIN_H

#include <math.h>
#include <float.h>
#include "harness.h"
#include "llama_ref.h"
#include "llmc/utils.h" // random_u32, random_normal

// |got - want| within an fp32 rounding of want
static int grain_close(double got, double want) { return fabs(got - want) <= fabs(want) * ldexp(1.0, -23); }

// A 2x256 tensor of 0.001 with one outlier, 3000, at (0, 5). Per-tensor E4M3 scaling (448/3000)
// takes 0.001 to 1.5e-4, under half the smallest subnormal (2^-10): all 511 small values are lost.
// In 1x128 blocks only the 127 beside the outlier are; every other block's scale is 448/0.001.
// With power-of-two scales: 2^3 = 8 for the outlier's block (448/3000 = 0.149 rounds down to 1/8),
// 2^-18 for the others (448000 rounds down to 262144), and 0.001 becomes 262.1 -> E4M3 256, the
// outlier 375 -> 384 (E4M3's spacing is 32 there).
static void test_grain_block_cast_outlier(void) {
    float in[2 * 256], out[2 * 256], sinv[4];
    for (int i = 0; i < 2 * 256; i++) in[i] = (i % 3) ? 0.001f : -0.001f;
    in[5] = 3000.0f;
    uint64_t per_tensor = 0;
    float st = 448.0f / 3000.0f;
    for (int i = 0; i < 2 * 256; i++) per_tensor += fp8_underflows(in[i], st, FP8_E4M3);
    CHECK(per_tensor == 511, "per-tensor: %llu underflows, want 511", (unsigned long long)per_tensor);

    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_block_cast(in, 2, 256, 1, FP8_E4M3, 0, 0, out, sinv, counts);
    CHECK(amax == 3000.0f, "tensor amax %g, want 3000", amax);
    CHECK(counts[FP8_UNDERFLOWS] == 127, "1x128: %llu underflows, want 127 (the outlier's block)", (unsigned long long)counts[FP8_UNDERFLOWS]);
    CHECK(grain_close(sinv[0], 3000.0 / 448.0), "block (0, 0) scale_inv %.9g, want 3000/448", sinv[0]);
    for (int b = 1; b < 4; b++) CHECK(grain_close(sinv[b], 0.001 / 448.0), "block %d scale_inv %.9g, want 0.001/448", b, sinv[b]);
    CHECK(out[5] == 448.0f && out[6] == 0.0f && out[128] == 448.0f && out[129] == -448.0f && out[256 + 200] == -448.0f,
          "1x128 codes: outlier %g, its neighbour %g, next blocks %g %g %g", out[5], out[6], out[128], out[129], out[256 + 200]);

    uint64_t c2[FP8_COUNTS] = {0, 0};
    ref_fp8_block_cast(in, 2, 256, 1, FP8_E4M3, 1, 0, out, sinv, c2);
    CHECK(sinv[0] == 8.0f && sinv[1] == ldexpf(1.0f, -18) && sinv[2] == ldexpf(1.0f, -18) && sinv[3] == ldexpf(1.0f, -18),
          "pow2 scale_invs %g %g %g %g, want 8 and 2^-18", sinv[0], sinv[1], sinv[2], sinv[3]);
    CHECK(out[5] == 384.0f && out[128] == 256.0f && out[129] == -256.0f && c2[FP8_UNDERFLOWS] == 127 && c2[FP8_SATURATIONS] == 0,
          "pow2 codes: outlier %g, small %g %g; %llu underflows, want 127", out[5], out[129], out[128], (unsigned long long)c2[FP8_UNDERFLOWS]);

    // a row of 200: blocks [0, 128) and the partial [128, 200) holding the outlier
    float row[200], rq[200], rs[2];
    for (int i = 0; i < 200; i++) row[i] = 0.001f;
    row[150] = 3000.0f;
    uint64_t c3[FP8_COUNTS] = {0, 0};
    ref_fp8_block_cast(row, 1, 200, 1, FP8_E4M3, 0, 0, rq, rs, c3);
    CHECK(c3[FP8_UNDERFLOWS] == 71 && grain_close(rs[1], 3000.0 / 448.0) && grain_close(rs[0], 0.001 / 448.0),
          "partial block: %llu underflows (want 71), scale_invs %g %g", (unsigned long long)c3[FP8_UNDERFLOWS], rs[0], rs[1]);

    // a zero block keeps scale 1; a NaN makes its block's scale 1 and the tensor amax NaN
    float z[256] = {0}, zq[256], zs[2];
    z[130] = NAN;
    z[131] = 2.0f;
    uint64_t c4[FP8_COUNTS] = {0, 0};
    float za = ref_fp8_block_cast(z, 1, 256, 1, FP8_E4M3, 0, 0, zq, zs, c4);
    CHECK(zs[0] == 1.0f && zs[1] == 1.0f && isnan(za) && zq[131] == 2.0f && isnan(zq[130]), "zero / NaN blocks: scale_invs %g %g amax %g", zs[0], zs[1], za);
}

// A 256x256 weight of 0.001 with 3000 at (3, 200): in 128x128 blocks only block (0, 1) loses its
// other 16,383 values; the grid of scale_invs is row-major over the blocks.
static void test_grain_block_cast_weight(void) {
    float *w = (float *)mallocCheck(256 * 256 * sizeof(float)), *q = (float *)mallocCheck(256 * 256 * sizeof(float)), s[4];
    for (int i = 0; i < 256 * 256; i++) w[i] = 0.001f;
    w[3 * 256 + 200] = 3000.0f;
    uint64_t c[FP8_COUNTS] = {0, 0};
    ref_fp8_block_cast(w, 256, 256, FP8_BLOCK, FP8_E4M3, 0, 0, q, s, c);
    CHECK(c[FP8_UNDERFLOWS] == 128 * 128 - 1, "%llu underflows, want 16383", (unsigned long long)c[FP8_UNDERFLOWS]);
    CHECK(grain_close(s[1], 3000.0 / 448.0) && grain_close(s[0], 0.001 / 448.0) && grain_close(s[2], 0.001 / 448.0) &&
          grain_close(s[3], 0.001 / 448.0), "scale_invs %g %g %g %g", s[0], s[1], s[2], s[3]);
    CHECK(q[3 * 256 + 201] == 0.0f && q[3 * 256 + 100] == 448.0f && q[130 * 256 + 200] == 448.0f, "codes beside and away from the outlier");
    free(w);
    free(q);
}

// The block GEMM against its definition written as the double product of the dequantized operands
// (code * scale_inv of its block), on operands whose blocks differ by up to 2^40 in magnitude, alone
// and added to an output of 1: within the fp32 roundings of the sum and of the addition, plus 1e-14
// of the sum of |products| for the double sums' own order.
static void test_grain_block_gemm(void) {
    enum { I = 3, J = 130, K = 300 };
    float *a = (float *)mallocCheck(I * K * sizeof(float)), *b = (float *)mallocCheck(J * K * sizeof(float));
    float *aq = (float *)mallocCheck(I * K * sizeof(float)), *bq = (float *)mallocCheck(J * K * sizeof(float));
    float sa[I * 3], sb[2 * 3], out[I * J];
    uint64_t rng = 7;
    for (int i = 0; i < I * K; i++) a[i] = (float)(random_normal(&rng) * ldexp(1.0, ((i % K) / 128) * 13 - 20 + (i / K) * 3));
    for (int i = 0; i < J * K; i++) b[i] = (float)(random_normal(&rng) * ldexp(1.0, 10 - ((i % K) / 128) * 9 - (i / K / 128) * 5));
    for (int pow2 = 0; pow2 < 2; pow2++) {
        uint64_t c[FP8_COUNTS] = {0, 0};
        ref_fp8_block_cast(a, I, K, 1, FP8_E4M3, pow2, 0, aq, sa, c);
        ref_fp8_block_cast(b, J, K, FP8_BLOCK, FP8_E4M3, pow2, 0, bq, sb, c);
        for (int acc = 0; acc < 2; acc++) {
            for (int i = 0; i < I * J; i++) out[i] = acc ? 1.0f : 0.0f;
            ref_fp8_block_gemm(out, aq, sa, 1, bq, sb, FP8_BLOCK, I, J, K, acc);
            int bad = 0;
            for (int i = 0; i < I; i++) {
                for (int j = 0; j < J; j++) {
                    double want = acc ? 1.0 : 0.0, mag = 0.0;
                    for (int k = 0; k < K; k++) {
                        double p = ((double)aq[i * K + k] * sa[i * 3 + k / 128]) * ((double)bq[j * K + k] * sb[(j / 128) * 3 + k / 128]);
                        want += p;
                        mag += fabs(p);
                    }
                    double sum = want - (acc ? 1.0 : 0.0);
                    if (fabs(out[i * J + j] - want) > (fabs(sum) + fabs(want)) * ldexp(1.0, -24) + mag * 1e-14 && bad++ < 3)
                        CHECK(0, "pow2 %d accumulate %d: out[%d][%d] = %.9g, want %.9g", pow2, acc, i, j, out[i * J + j], want);
                }
            }
        }
    }
    free(a); free(b); free(aq); free(bq);
}

// A value that a block with amax 2^e holds exactly under power-of-two block scaling: m 2^(e - bits)
// with |m| <= 2^bits (bits = 4 for E4M3, whose scale is then 2^(8 - e) and the scaled value 16 m <= 256;
// 3 for E5M2, scale 2^(15 - e), scaled 2^12 m <= 2^15), m = +-2^bits where `top` puts the block's amax.
static float grain_exact_value(uint64_t *rng, int e, int bits, int top) {
    int m = top ? (1 << bits) : (int)(random_u32(rng) % ((1u << bits) + 1));
    return ldexpf((random_u32(rng) & 1) ? (float)-m : (float)m, e - bits);
}

// The exact-linear tests' linear: layer 0's w2 (K = FF = 320, M = C = 160) of a one-layer model, on
// N = 16 tokens; the test sets its grain, fills X, dY and W, and checks it with grain_w2_check_exact.
enum { W2_N = 16, W2_K = 320, W2_M = 160 };
typedef struct {
    RefModel model;
    float *x, *dy, *w; // X (W2_N, W2_K), dY (W2_N, W2_M), W (W2_M, W2_K): the model's weights
} GrainW2;

static void grain_w2_model(RefModel *model) {
    const LlamaConfig cfg = {32, 1, W2_M, 2, 1, W2_K, 8, 10000.0f, 1e-5f};
    ref_init(model, &cfg, 2, 8, 1, 0, 0, 1, 0); // B * T = W2_N
}

static void grain_w2_init(GrainW2 *g, int grain, int pow2) {
    grain_w2_model(&g->model);
    ref_set_fp8_grain(&g->model, LIN_W2, grain, pow2);
    g->x = (float *)mallocCheck(W2_N * W2_K * sizeof(float));
    g->dy = (float *)mallocCheck(W2_N * W2_M * sizeof(float));
    g->w = g->model.param_ptr[P_W2];
}

static void grain_w2_free(GrainW2 *g) {
    free(g->x);
    free(g->dy);
    ref_free(&g->model);
}

// How many of X's values a per-tensor linear with the same W flushes to zero in its forward: what the
// grain under test keeps.
static uint64_t grain_w2_per_tensor_x_underflows(const GrainW2 *g) {
    RefModel pt;
    grain_w2_model(&pt);
    float *y = (float *)mallocCheck(W2_N * W2_M * sizeof(float));
    memcpy(pt.param_ptr[P_W2], g->w, W2_M * W2_K * sizeof(float));
    ref_fp8_cast_weights(&pt);
    pt.micro_step = 0;
    ref_linear_forward(&pt, LIN_W2, y, g->x, pt.acts.xq_w2, P_W2, 0, W2_N, W2_K, W2_M);
    uint64_t under = pt.fp8_counts[FP8_COUNTS * fp8_tensor_index(0, LIN_W2, FP8_X) + FP8_UNDERFLOWS];
    free(y);
    ref_free(&pt);
    return under;
}

// The linear (its grain block or row) run forward and backward on X and dY built so that every block or
// row of every cast holds its values exactly: Y, dX and dW must equal the double products of the fp32
// operands rounded once to fp32, and no cast may lose a value.
static void grain_w2_check_exact(GrainW2 *g, const char *grain) {
    RefModel *model = &g->model;
    const int N = W2_N, K = W2_K, M = W2_M;
    const float *x = g->x, *dy = g->dy, *w = g->w;
    float *y = (float *)mallocCheck((size_t)N * M * sizeof(float)), *dx = (float *)mallocCheck((size_t)N * K * sizeof(float));
    ref_fp8_cast_weights(model);
    model->micro_step = 0;
    ref_linear_forward(model, LIN_W2, y, x, model->acts.xq_w2, P_W2, 0, N, K, M);
    ref_linear_backward(model, LIN_W2, dx, dy, x, model->acts.xq_w2, P_W2, 0, N, K, M);
    int bad_y = 0, bad_dx = 0, bad_dw = 0;
    for (int n = 0; n < N; n++) {
        for (int m = 0; m < M; m++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += (double)x[n * K + k] * w[m * K + k];
            if (y[n * M + m] != (float)s && bad_y++ < 3) CHECK(0, "Y[%d][%d] = %.9g, want %.9g", n, m, y[n * M + m], s);
        }
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int m = 0; m < M; m++) s += (double)dy[n * M + m] * w[m * K + k];
            if (dx[n * K + k] != (float)s && bad_dx++ < 3) CHECK(0, "dX[%d][%d] = %.9g, want %.9g", n, k, dx[n * K + k], s);
        }
    }
    for (int m = 0; m < M; m++) {
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += (double)dy[n * M + m] * x[n * K + k];
            float got = model->grad_ptr[P_W2][m * K + k];
            if (got != (float)s && bad_dw++ < 3) CHECK(0, "dW[%d][%d] = %.9g, want %.9g", m, k, got, s);
        }
    }
    for (int kind = 0; kind < FP8_KINDS; kind++) {
        const uint64_t *c = model->fp8_counts + FP8_COUNTS * fp8_tensor_index(0, LIN_W2, kind);
        CHECK(c[FP8_UNDERFLOWS] == 0 && c[FP8_SATURATIONS] == 0, "%s %s: %llu underflows %llu saturations, want none", grain,
              FP8_KIND_NAMES[kind], (unsigned long long)c[FP8_UNDERFLOWS], (unsigned long long)c[FP8_SATURATIONS]);
    }
    free(y);
    free(dx);
}

// Layer 0's w2 (K = FF = 320, M = C = 160, N = 16 tokens) as a block linear with power-of-two scales,
// on X, W and dY built so that every block of every cast (X and dY in 1x128 blocks along K and M and,
// transposed, along the tokens; W in 128x128 blocks) holds its values exactly: the first 128
// columns sit near 2^6 and the rest near 2^-16 (X), W's blocks near 2^0 and 2^-6, dY's near 2^2 and
// 2^-12. Every product and partial sum is then exact in double, so Y, dX and dW must equal the
// double products of the fp32 operands rounded once to fp32. Per-tensor scaling of the same X
// (scale 448/2^6 = 7) flushes every non-zero value of its small block.
static void test_grain_block_linear_exact(void) {
    GrainW2 g;
    grain_w2_init(&g, FP8_GRAIN_BLOCK, 1);
    uint64_t rng = 11, small_nonzero = 0;
    for (int n = 0; n < W2_N; n++) {
        for (int k = 0; k < W2_K; k++) {
            g.x[n * W2_K + k] = grain_exact_value(&rng, k < 128 ? 6 : -16, 4, n == 0 || k % 128 == 0);
            small_nonzero += k >= 128 && g.x[n * W2_K + k] != 0.0f;
        }
        for (int m = 0; m < W2_M; m++)
            g.dy[n * W2_M + m] = grain_exact_value(&rng, m < 128 ? 2 : -12, 3, n == 0 || m % 128 == 0);
    }
    for (int m = 0; m < W2_M; m++)
        for (int k = 0; k < W2_K; k++)
            g.w[m * W2_K + k] = grain_exact_value(&rng, (m < 128) == (k < 128 || k >= 256) ? 0 : -6, 4,
                                                  m % 128 == 0 && k % 128 == 0);
    grain_w2_check_exact(&g, "block");
    uint64_t under = grain_w2_per_tensor_x_underflows(&g);
    CHECK(under == small_nonzero && small_nonzero > 0, "per-tensor X: %llu underflows, want the small block's %llu non-zero values",
          (unsigned long long)under, (unsigned long long)small_nonzero);
    grain_w2_free(&g);
}

// The training step with every block linear in fp8 (block with fp32 and power-of-two scales, row-wise)
// against the fp32 reference: step 0's gradient and three steps' losses. Its fp8 rounding is the same kind as
// per-tensor scaling's on a model without outliers, so it must not be worse than that emulation's
// by more than a quarter (gradient error) and stay within 10% of the fp32 gradient (E4M3's relative
// rounding is at most 2^-4, E5M2's 2^-3, and a gradient averages many of them); the losses of three
// AdamW steps within 1% of fp32's, and falling. The learning rate is 1e-3: AdamW's first steps move
// every weight by about lr whatever its gradient's size, so with 1e-2 (half this init's weights)
// rounding noise in near-zero gradient entries flips whole updates and the runs part ways.
static void test_grain_training_step(void) {
    const LlamaConfig cfg = {64, 2, 128, 2, 1, 256, 16, 10000.0f, 1e-5f};
    int B = 2, T = 16, inputs[32], targets[32];
    uint64_t rng = 5;
    for (int i = 0; i < B * T; i++) { inputs[i] = (int)(random_u32(&rng) % cfg.V); targets[i] = (int)(random_u32(&rng) % cfg.V); }
    double err[4];
    float *ref_grads = NULL, losses[5][3];
    for (int mode = -1; mode < 4; mode++) { // fp32, per-tensor, block fp32 scales, block pow2 scales, row
        RefModel m;
        ref_init(&m, &cfg, B, T, mode >= 0, 0, 0, 4, 0);
        ref_init_weights(&m, 3);
        for (int lin = 0; mode >= 1 && lin < LINS_PER_LAYER * cfg.L; lin++)
            ref_set_fp8_grain(&m, lin, mode == 3 ? FP8_GRAIN_ROW : FP8_GRAIN_BLOCK, mode == 2);
        ref_compute_grads(&m, inputs, targets, 1);
        if (mode < 0) {
            ref_grads = (float *)mallocCheck(m.num_params * sizeof(float));
            memcpy(ref_grads, m.grads, m.num_params * sizeof(float));
        } else {
            double num = 0.0, den = 0.0;
            for (size_t i = 0; i < m.num_params; i++) {
                num += ((double)m.grads[i] - ref_grads[i]) * ((double)m.grads[i] - ref_grads[i]);
                den += (double)ref_grads[i] * ref_grads[i];
            }
            err[mode] = sqrt(num / den);
        }
        for (int s = 0; s < 3; s++) losses[mode + 1][s] = ref_train_step(&m, inputs, targets, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, NULL);
        ref_free(&m);
    }
    for (int k = 1; k < 4; k++) {
        const char *name = k == 1 ? "block, fp32 scales" : k == 2 ? "block, pow2 scales" : "row";
        CHECK(err[k] < 0.1 && err[k] <= 1.25 * err[0], "%s: gradient error %.3e, per-tensor %.3e", name, err[k],
              err[0]);
        for (int s = 0; s < 3; s++) {
            float d = fabsf(losses[k + 1][s] - losses[0][s]), d_pt = fabsf(losses[1][s] - losses[0][s]);
            CHECK(d <= 0.01f * losses[0][s] && losses[k + 1][2] < losses[k + 1][0],
                  "%s step %d: loss %.6f, fp32 %.6f (per-tensor off by %.2e)", name, s, losses[k + 1][s], losses[0][s],
                  d_pt);
        }
    }
    free(ref_grads);
}

// The fallback (ref_fp8_auto_grain, threshold 1%, patience 2) on a model with a massive activation
// at one token, as pretrained models have them (SmolLM2's layer 11 w2 input: ~3300 at a few
// positions): only token 7, the first input, has embedding dimension 5 (set to 1, the rest of its
// row 0), layer 0's wo writes nothing there, and its w13 up row 3 reads only that dimension, with
// weight 3000, so SwiGLU channel 3 is ~10^3 at that position and 0 elsewhere. The linears switched after each step must be exactly
// those this test finds over 1% (underflows plus saturations over the values cast, from the step's
// counts and the linears' shapes) in that step and the one before, layer 0's w2 among them, and none
// after the first step. With target block the switched w2 then loses under 1% of its X (the
// outlier's 1x128 block holds 127 of its 2 x 64 x 256 row-wise and transposed values), with target
// row too (the outlier's token holds 255; its channel is 0 at every other token); with target bf16 it
// casts nothing at all.
static void test_grain_auto_fallback(void) {
    const LlamaConfig cfg = {64, 2, 128, 2, 1, 256, 32, 10000.0f, 1e-5f};
    enum { B = 2, T = 32, NLIN = 8, TOK = 7, DIM = 5 };
    int inputs[B * T], targets[B * T];
    uint64_t rng = 5;
    for (int i = 0; i < B * T; i++) {
        do { inputs[i] = (int)(random_u32(&rng) % cfg.V); } while (inputs[i] == TOK);
        targets[i] = (int)(random_u32(&rng) % cfg.V);
    }
    inputs[0] = TOK;
    const int rows[LINS_PER_LAYER] = {config_qkv_width(&cfg), cfg.C, 2 * cfg.FF, cfg.C};
    const int cols[LINS_PER_LAYER] = {cfg.C, cfg.C, cfg.C, cfg.FF};
    const int grains[3] = {FP8_GRAIN_BLOCK, FP8_GRAIN_BF16, FP8_GRAIN_ROW};
    for (int ti = 0; ti < 3; ti++) {
        const int target = grains[ti];
        RefModel m;
        ref_init(&m, &cfg, B, T, 1, 0, 0, 4, 0);
        ref_init_weights(&m, 3);
        float *wte = m.param_ptr[P_WTE], *up = m.param_ptr[P_W13] + (size_t)(cfg.FF + 3) * cfg.C;
        for (int t = 0; t < cfg.V; t++) wte[(size_t)t * cfg.C + DIM] = 0.0f;
        for (int c = 0; c < cfg.C; c++) { wte[(size_t)TOK * cfg.C + c] = c == DIM ? 1.0f : 0.0f; up[c] = c == DIM ? 3000.0f : 0.0f; }
        for (int c = 0; c < cfg.C; c++) m.param_ptr[P_WO][(size_t)DIM * cfg.C + c] = 0.0f; // attention adds nothing to it
        int over_before[NLIN] = {0};
        double x_lost_tensor = 0.0; // the fraction of w2's X per-tensor scaling lost in step 1, before its switch
        for (int step = 0; step < 3; step++) {
            int grain_before[NLIN];
            for (int lin = 0; lin < NLIN; lin++) grain_before[lin] = m.fp8_grain ? m.fp8_grain[lin] : FP8_GRAIN_TENSOR;
            ref_train_step(&m, inputs, targets, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, NULL);
            int over[NLIN], want = 0;
            for (int lin = 0; lin < NLIN; lin++) {
                double n[FP8_KINDS] = {(double)B * T * cols[lin % 4], (double)rows[lin % 4] * cols[lin % 4], (double)B * T * rows[lin % 4]};
                over[lin] = 0;
                for (int kind = 0; kind < FP8_KINDS; kind++) {
                    const uint64_t *c = m.fp8_counts + FP8_COUNTS * (FP8_KINDS * lin + kind);
                    if ((double)(c[0] + c[1]) / n[kind] > 0.01) over[lin] = 1;
                }
                want += grain_before[lin] == FP8_GRAIN_TENSOR && over[lin] && over_before[lin];
            }
            int got = ref_fp8_auto_grain(&m, 1, 0.01, 2, target);
            CHECK(got == want && (step > 0 || got == 0), "target %d step %d: %d linears switched, want %d", target, step, got, want);
            for (int lin = 0; lin < NLIN; lin++) {
                int should = grain_before[lin] != FP8_GRAIN_TENSOR || (over[lin] && over_before[lin]);
                CHECK((m.fp8_grain[lin] == target) == should, "target %d step %d: linear %d grain %d (over now %d, before %d)", target, step, lin,
                      m.fp8_grain[lin], over[lin], over_before[lin]);
                over_before[lin] = grain_before[lin] == FP8_GRAIN_TENSOR && over[lin];
            }
            if (step == 1) {
                const uint64_t *cx = m.fp8_counts + FP8_COUNTS * fp8_tensor_index(0, LIN_W2, FP8_X);
                x_lost_tensor = (double)(cx[0] + cx[1]) / ((double)B * T * cfg.FF);
                CHECK(m.fp8_grain[LIN_W2] == target, "target %d: layer 0's w2 should have switched after step 1",
                      target);
            }
            if (step == 2) {
                const uint64_t *cx = m.fp8_counts + FP8_COUNTS * fp8_tensor_index(0, LIN_W2, FP8_X);
                const uint64_t *cw = m.fp8_counts + FP8_COUNTS * fp8_tensor_index(0, LIN_W2, FP8_W);
                if (target == FP8_GRAIN_BLOCK) {
                    // the block casts count X twice (rows, transposed): 2 B T FF values
                    CHECK((double)cx[FP8_UNDERFLOWS] < 0.01 * 2 * B * T * cfg.FF, "block: layer 0 w2 X lost %llu values", (unsigned long long)cx[FP8_UNDERFLOWS]);
                } else if (target == FP8_GRAIN_ROW) {
                    // the outlier's token loses most of its row in the per-token cast (and other tokens their
                    // smallest values), but less of X than per-tensor scaling lost
                    double lost = (double)(cx[0] + cx[1]) / (2.0 * B * T * cfg.FF);
                    CHECK(lost < x_lost_tensor,
                          "row: layer 0 w2 X lost %.4f of its values, per-tensor %.4f the step before", lost,
                          x_lost_tensor);
                } else {
                    CHECK(cx[0] + cx[1] + cw[0] + cw[1] == 0 && m.fp8_state[m.fp8_layout.amax_slot + fp8_tensor_index(0, LIN_W2, FP8_X)] == 0.0f,
                          "bf16: layer 0 w2 still casts (%llu %llu counts)", (unsigned long long)(cx[0] + cx[1]), (unsigned long long)(cw[0] + cw[1]));
                }
            }
        }
        ref_free(&m);
    }
}

// Row-wise casts (ref_fp8_row_cast) of the 2x256 tensor of 0.001 with 3000 at (0, 5): per row, row 0's
// scale 448/3000 = 0.149 rounds down to 1/8 (its 255 small values go to 1.25e-4, under half the
// smallest subnormal, 2^-10: lost), row 1's 448000 to 2^18 (0.001 -> 262.1 -> E4M3 256, nothing lost);
// the outlier 375 -> 384. Per column (the cast of the transpose) only column 5 holds the outlier, so
// only its other value is lost, and every other column's scale is 2^18. A zero row keeps scale 1,
// a row with a NaN scale 1 and the amax NaN, a row of 2^-130 (fmax / amax past the float range)
// scale 2^127 (FLT_MAX rounded down), its codes 2^-3.
static void test_grain_row_cast(void) {
    float in[2 * 256], t[256 * 2], out[2 * 256], sinv[256];
    for (int i = 0; i < 2 * 256; i++) in[i] = (i % 3) ? 0.001f : -0.001f;
    in[5] = 3000.0f;
    uint64_t c[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_row_cast(in, 2, 256, 0, out, sinv, c);
    CHECK(amax == 3000.0f && sinv[0] == 8.0f && sinv[1] == ldexpf(1.0f, -18),
          "per row: amax %g, scale_invs %g %g, want 3000, 8, 2^-18", amax, sinv[0], sinv[1]);
    CHECK(c[FP8_UNDERFLOWS] == 255 && c[FP8_SATURATIONS] == 0,
          "per row: %llu underflows %llu saturations, want 255 and 0", (unsigned long long)c[FP8_UNDERFLOWS],
          (unsigned long long)c[FP8_SATURATIONS]);
    CHECK(out[5] == 384.0f && out[6] == 0.0f && out[256 + 1] == 256.0f && out[256 + 2] == -256.0f,
          "per row codes: %g %g %g %g", out[5], out[6], out[256 + 1], out[256 + 2]);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 256; k++) t[k * 2 + r] = in[r * 256 + k];
    uint64_t ct[FP8_COUNTS] = {0, 0};
    ref_fp8_row_cast(t, 256, 2, 0, out, sinv, ct);
    int others = 0;
    for (int k = 0; k < 256; k++) others += k != 5 && sinv[k] == ldexpf(1.0f, -18);
    CHECK(ct[FP8_UNDERFLOWS] == 1 && sinv[5] == 8.0f && others == 255,
          "per column: %llu underflows (want 1), column 5's scale_inv %g"
          " (want 8), %d others at 2^-18 (want 255)",
          (unsigned long long)ct[FP8_UNDERFLOWS], sinv[5], others);
    float sp[3 * 16] = {0}, sq[3 * 16], ss[3];
    sp[16 + 3] = NAN;
    sp[16 + 4] = 1.0f;
    for (int k = 0; k < 16; k++) sp[32 + k] = ldexpf(1.0f, -130);
    uint64_t cs[FP8_COUNTS] = {0, 0};
    float sa = ref_fp8_row_cast(sp, 3, 16, 0, sq, ss, cs);
    CHECK(ss[0] == 1.0f && ss[1] == 1.0f && ss[2] == ldexpf(1.0f, -127) && isnan(sa) && sq[16 + 4] == 1.0f &&
              sq[32] == 0.125f,
          "zero / NaN / tiny rows: scale_invs %g %g %g (want 1, 1, 2^-127), amax %g, codes %g %g", ss[0], ss[1], ss[2],
          sa, sq[16 + 4], sq[32]);
}

// The row GEMM against its definition, the double product of the dequantized operands (code times its
// row's scale_inv), on rows whose magnitudes differ by up to 2^40, alone and added to an output of 1,
// within the fp32 roundings as test_grain_block_gemm.
static void test_grain_row_gemm(void) {
    enum { I = 5, J = 130, K = 300 };
    float *a = (float *)mallocCheck(I * K * sizeof(float)), *b = (float *)mallocCheck(J * K * sizeof(float));
    float *aq = (float *)mallocCheck(I * K * sizeof(float)), *bq = (float *)mallocCheck(J * K * sizeof(float));
    float sa[I], sb[J], out[I * J];
    uint64_t rng = 9, c[FP8_COUNTS] = {0, 0};
    for (int i = 0; i < I * K; i++) a[i] = (float)(random_normal(&rng) * ldexp(1.0, (i / K) * 10 - 20));
    for (int i = 0; i < J * K; i++) b[i] = (float)(random_normal(&rng) * ldexp(1.0, 10 - (i / K) % 7 * 3));
    ref_fp8_row_cast(a, I, K, 0, aq, sa, c);
    ref_fp8_row_cast(b, J, K, 0, bq, sb, c);
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < I * J; i++) out[i] = acc ? 1.0f : 0.0f;
        ref_fp8_row_gemm(out, aq, sa, bq, sb, I, J, K, acc);
        int bad = 0;
        for (int i = 0; i < I; i++) {
            for (int j = 0; j < J; j++) {
                double want = acc ? 1.0 : 0.0, mag = 0.0;
                for (int k = 0; k < K; k++) {
                    double p = ((double)aq[i * K + k] * sa[i]) * ((double)bq[j * K + k] * sb[j]);
                    want += p;
                    mag += fabs(p);
                }
                double sum = want - (acc ? 1.0 : 0.0);
                if (fabs(out[i * J + j] - want) > (fabs(sum) + fabs(want)) * ldexp(1.0, -24) + mag * 1e-14 && bad++ < 3)
                    CHECK(0, "accumulate %d: out[%d][%d] = %.9g, want %.9g", acc, i, j, out[i * J + j], want);
            }
        }
    }
    free(a); free(b); free(aq); free(bq);
}

// m 2^(er + ec - 4), |m| <= 16 (16 where `top` puts the row's and the column's amax): with row
// exponents er and column exponents ec spanning at most 13 binades each, a cast per row (scale
// 2^(8 - er - max ec)) or per column (2^(8 - max er - ec)) holds every such value exactly in E4M3
// (16 m 2^-13 >= 2^-9, a multiple of the smallest subnormal, with at most 4 significant bits).
static float grain_row_value(uint64_t *rng, int er, int ec, int top) {
    int m = top ? 16 : (int)(random_u32(rng) % 17);
    return ldexpf((random_u32(rng) & 1) ? (float)-m : (float)m, er + ec - 4);
}

// Layer 0's w2 (K = 320, M = 160, N = 16 tokens) as a row linear, on X, W and dY built so that every
// row of every cast (X and dY per token and, for wgrad, per column; W per output row and, for dgrad,
// per input column) holds its values exactly: X's odd tokens sit 2^-13 below the even ones and its odd
// columns 2^-3 below, W's odd rows and columns 2^-3 below, dY's tokens 1 mod 3 2^-8 below and its odd
// columns 2^-3 below. The products' sums then need at most 33 bits: exact in double, so Y, dX and dW
// must equal the double products of the fp32 operands rounded once to fp32, with no value lost. Per-
// tensor scaling of the same X (448 / 1) loses its smallest values (2^-20 448 < 2^-10).
static void test_grain_row_linear_exact(void) {
    GrainW2 g;
    grain_w2_init(&g, FP8_GRAIN_ROW, 0);
    uint64_t rng = 13;
    for (int n = 0; n < W2_N; n++) {
        for (int k = 0; k < W2_K; k++)
            g.x[n * W2_K + k] = grain_row_value(&rng, n % 2 ? -13 : 0, k % 2 ? -3 : 0, n == 0 || k == 0);
        for (int m = 0; m < W2_M; m++)
            g.dy[n * W2_M + m] = grain_row_value(&rng, n % 3 == 1 ? -8 : 0, m % 2 ? -3 : 0, n == 0 || m == 0);
    }
    for (int m = 0; m < W2_M; m++)
        for (int k = 0; k < W2_K; k++)
            g.w[m * W2_K + k] = grain_row_value(&rng, m % 2 ? -3 : 0, k % 2 ? -3 : 0, m == 0 || k == 0);
    grain_w2_check_exact(&g, "row");
    const float *slot = g.model.fp8_state + g.model.fp8_layout.amax_slot;
    CHECK(slot[fp8_tensor_index(0, LIN_W2, FP8_X)] == 1.0f && slot[fp8_tensor_index(0, LIN_W2, FP8_W)] == 1.0f &&
              slot[fp8_tensor_index(0, LIN_W2, FP8_DY)] == 1.0f,
          "row slots X %g W %g dY %g, want the amaxes 1", slot[fp8_tensor_index(0, LIN_W2, FP8_X)],
          slot[fp8_tensor_index(0, LIN_W2, FP8_W)], slot[fp8_tensor_index(0, LIN_W2, FP8_DY)]);
    CHECK(grain_w2_per_tensor_x_underflows(&g) > 0, "per-tensor X: no value lost, so the test's X does not need row scales");
    grain_w2_free(&g);
}

static void grain_set_mid_step(void *arg) {
    (void)arg;
    const LlamaConfig cfg = {32, 1, 16, 2, 1, 32, 8, 10000.0f, 1e-5f};
    RefModel m;
    int tok[16] = {0};
    ref_init(&m, &cfg, 2, 8, 1, 0, 0, 1, 0);
    ref_forward(&m, tok, tok);
    ref_set_fp8_grain(&m, 0, FP8_GRAIN_BLOCK, 0);
}

static void test_grain_refusals(void) {
    char err[512];
    int rc = run_expect_fatal(grain_set_mid_step, NULL, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "between optimizer steps") != NULL, "setting a grain mid-step: exit %d, stderr '%s'", rc, err);
}

static void run_fp8_grain_tests(void) {
    run_test("fp8 grain: 1x128 cast of a 2x256 outlier tensor (per-tensor loses 511 values, 1x128 127), pow2, partial, zero, NaN", test_grain_block_cast_outlier);
    run_test("fp8 grain: 128x128 cast of a weight with one outlier", test_grain_block_cast_weight);
    run_test("fp8 grain: block GEMM = double product of the dequantized operands", test_grain_block_gemm);
    run_test("fp8 grain: block linear's Y, dX, dW exact where every block holds its values; per-tensor flushes a block", test_grain_block_linear_exact);
    run_test("fp8 grain: row casts per row and per column: pow2 scales, the outlier's row / column only loses, zero, "
             "NaN, tiny",
             test_grain_row_cast);
    run_test("fp8 grain: row GEMM = double product of the dequantized operands", test_grain_row_gemm);
    run_test(
        "fp8 grain: row linear's Y, dX, dW exact where every row and column holds its values; per-tensor loses some",
        test_grain_row_linear_exact);
    run_test(
        "fp8 grain: training steps with block and row linears: gradient and losses vs fp32, no worse than per-tensor",
        test_grain_training_step);
    run_test(
        "fp8 grain: the fallback switches exactly the linears over 1% in 2 consecutive steps, to block, bf16 or row",
        test_grain_auto_fallback);
    run_test("fp8 grain: a grain change inside an optimizer step is refused", test_grain_refusals);
}

#endif
