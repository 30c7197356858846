/*
Tests of the C reference model (dev/test/llama_ref.h), the yardstick of the GPU trainer:
- its backward against finite differences of its forward, for every parameter tensor, with and
  without grouped-query attention, with tied embeddings and with llama3 RoPE scaling (the
  differences are taken on a double-precision copy of the model, dev/test/gradcheck.c), and its
  fp32 gradient against that double one; a tied model against the untied one sharing its weights;
- against the PyTorch fixtures (dev/reference/llama_ref.py): fp32, and fp8 emulation including the
  final fp8 scaling state;
- the fp8 bookkeeping the recipe depends on: amax slots take the max over all micro-steps, every
  amax history (dY included) moves every step, scales follow the histories;
- bf16 master weights: AdamW's updates stored with llmc/bf16_round.h's rule and the weights' bits.
*/
#ifndef DEV_TEST_TEST_REF_H
#define DEV_TEST_TEST_REF_H

#include <math.h>
#include "harness.h"
#include "llama_ref.h" // the fp32 reference model
#include "fixture.h"   // fixture_load
#include "gradcheck.h" // ref_gradcheck_double

#define FIXTURE_DIR "dev/test/fixtures/"
#define FIXTURE_HOWTO "run the tests from the repository root; (re)make the fixtures there with: python3 dev/reference/llama_ref.py --out dev/test/fixtures (torch setup: dev/reference/README.md)"

// max |got - want| / max |want| over n values: an error measured against the tensor's scale, so
// near-zero elements don't dominate (a NaN in got makes it NaN)
static double max_rel_diff(const ref_real *got, const float *want, size_t n) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > maxdiff || isnan(d)) maxdiff = d;
        if (fabs(want[i]) > maxref) maxref = fabs(want[i]);
    }
    return maxdiff / maxref;
}

// the same for two double arrays
static double max_rel_diff_d(const double *got, const double *want, size_t n) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (d > maxdiff || isnan(d)) maxdiff = d;
        if (fabs(want[i]) > maxref) maxref = fabs(want[i]);
    }
    return maxdiff / maxref;
}

static void random_tokens(int *tokens, int n, int V, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) tokens[i] = (int)(random_u32(&rng) % V);
}

// Weights with O(1) activations everywhere (unlike the 0.02 training init, under which attention is
// nearly uniform and SiLU nearly linear, so errors in those backward terms would hardly show), norm
// weights away from 1 (so a forgotten weight in the RMSNorm backward shows), and random tokens.
static void gradcheck_data(const LlamaConfig *cfg, int n_tokens, float *params, int *inputs, int *targets, uint64_t seed) {
    size_t sizes[NUM_PARAM_TENSORS];
    param_sizes(cfg, sizes);
    uint64_t rng = seed;
    size_t off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        size_t fan_in = (p == P_W2) ? cfg->FF : cfg->C;
        double std = p == P_WTE ? 1.0 : 1.0 / sqrt((double)fan_in);
        for (size_t i = 0; i < sizes[p]; i++) {
            double r = random_normal(&rng);
            params[off + i] = (float)(param_is_decayed(p) ? std * r : 1.0 + 0.3 * r);
        }
        off += sizes[p];
    }
    for (int i = 0; i < n_tokens; i++) {
        inputs[i] = (int)(random_u32(&rng) % cfg->V);
        targets[i] = (int)(random_u32(&rng) % cfg->V);
    }
}

// Finite differences in double are accurate to better than 1e-8 of each tensor's largest gradient
// (see gradcheck.c; ~1e-9 measured), so 1e-6 leaves a wide margin and still catches a 1% error (1e-2) ten thousand times
// over. The fp32 model's gradient, with float storage and double accumulation, differs from the
// double one by a few float roundings per layer, ~1e-6; 1e-5 is the bar (tighter than the 1e-4 the
// PyTorch fp32 fixture is held to).
#define GRADCHECK_FD_TOL 1e-6
#define GRADCHECK_FP32_TOL 1e-5

// Every tensor's double backward (grads) against finite differences (fd), and the fp32 backward
// (grads32) against the double one, within the bars above; prints the worst tensor of each. A tied
// lm_head (size 0) is skipped: wte's gradient holds both uses.
static void gradcheck_compare(const size_t sizes[NUM_PARAM_TENSORS], const double *grads, const double *fd, const float *grads32) {
    double worst_fd = 0.0, worst_fp32 = 0.0;
    size_t off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        if (sizes[p] == 0) continue;
        double *g32 = (double *)mallocCheck(sizes[p] * sizeof(double)), maxfd = 0.0;
        for (size_t i = 0; i < sizes[p]; i++) {
            g32[i] = grads32[off + i];
            if (fabs(fd[off + i]) > maxfd) maxfd = fabs(fd[off + i]);
        }
        double err_fd = max_rel_diff_d(grads + off, fd + off, sizes[p]);
        double err_fp32 = max_rel_diff_d(g32, grads + off, sizes[p]);
        CHECK(maxfd > 1e-6, "%s: finite-difference gradient is ~0 (max %.3g): the check would be vacuous", PARAM_NAMES[p], maxfd);
        CHECK(err_fd < GRADCHECK_FD_TOL, "%s: backward vs finite differences: max|diff|/max|fd| = %.3g (tol %.0e)", PARAM_NAMES[p], err_fd, GRADCHECK_FD_TOL);
        CHECK(err_fp32 < GRADCHECK_FP32_TOL, "%s: fp32 vs double gradient: max|diff|/max|ref| = %.3g (tol %.0e)", PARAM_NAMES[p], err_fp32, GRADCHECK_FP32_TOL);
        if (!(err_fd <= worst_fd)) worst_fd = err_fd;
        if (!(err_fp32 <= worst_fp32)) worst_fp32 = err_fp32;
        off += sizes[p];
        free(g32);
    }
    printf("    worst tensor: backward vs finite differences %.2g, fp32 vs double %.2g\n", worst_fd, worst_fp32);
}

// The gradient check of the model cfg with weights params on grad_accum micro-batches of inputs and
// targets (B x T each), document masking at doc_start_id (< 0: off): the double backward against finite
// differences and the fp32 reference's backward against the double one (gradcheck_compare).
static void gradcheck_run(const LlamaConfig *cfg, int B, int T, int grad_accum, int doc_start_id, const float *params,
                          const int *inputs, const int *targets) {
    size_t sizes[NUM_PARAM_TENSORS], num_params = param_sizes(cfg, sizes);
    double *grads = (double *)mallocCheck(num_params * sizeof(double)), *fd = (double *)mallocCheck(num_params * sizeof(double));
    ref_gradcheck_double(cfg, B, T, grad_accum, doc_start_id, params, inputs, targets, grads, fd);

    RefModel model;
    ref_init(&model, cfg, B, T, 0, 0, 0, 0, 0);
    for (size_t i = 0; i < num_params; i++) model.params[i] = params[i];
    if (doc_start_id >= 0) ref_set_doc_mask(&model, doc_start_id);
    ref_compute_grads(&model, inputs, targets, grad_accum);

    gradcheck_compare(sizes, grads, fd, model.grads);
    ref_free(&model);
    free(grads);
    free(fd);
}

static void gradcheck_config(const LlamaConfig *cfg, int B, int T, int grad_accum, uint64_t seed) {
    size_t sizes[NUM_PARAM_TENSORS], num_params = param_sizes(cfg, sizes);
    int n_tokens = grad_accum * B * T;
    float *params = (float *)mallocCheck(num_params * sizeof(float));
    int *inputs = (int *)mallocCheck(n_tokens * sizeof(int)), *targets = (int *)mallocCheck(n_tokens * sizeof(int));
    gradcheck_data(cfg, n_tokens, params, inputs, targets, seed);
    gradcheck_run(cfg, B, T, grad_accum, -1, params, inputs, targets);
    free(params);
    free(inputs);
    free(targets);
}

static void test_ref_gradcheck_gqa(void) {
    // 2 query heads per key/value head; theta 10000; two micro-batches
    LlamaConfig cfg = {23, 2, 16, 4, 2, 24, 6, 10000.0f, 1e-5f};
    gradcheck_config(&cfg, 2, 6, 2, 11);
}

static void test_ref_gradcheck_mha(void) {
    // NKV == NH; a small theta, so every RoPE pair turns by a large angle
    LlamaConfig cfg = {19, 2, 12, 3, 3, 20, 5, 50.0f, 1e-5f};
    gradcheck_config(&cfg, 2, 5, 1, 12);
}

static void test_ref_gradcheck_tied(void) {
    // lm_head = wte: wte's gradient is the embedding's plus the output layer's
    LlamaConfig cfg = {23, 2, 16, 4, 2, 24, 6, 10000.0f, 1e-5f, 1};
    gradcheck_config(&cfg, 2, 6, 1, 13);
}

static void test_ref_gradcheck_llama3(void) {
    // HS 8, theta 50: wavelengths 2 pi / f = 6.3, 16.7, 44.4, 118 against original context 64 with
    // low 1, high 4: the first pair keeps its frequency (< 16), the last is divided by the factor
    // (> 64) and the two between are interpolated, so every branch of rope_inv_freq is used
    LlamaConfig cfg = {19, 2, 16, 2, 1, 20, 6, 50.0f, 1e-5f, 0, ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
    gradcheck_config(&cfg, 2, 6, 1, 14);
}

// A tied model is the untied one whose lm_head is a copy of wte: same logits (the same floats are
// multiplied), and its wte gradient is the untied model's wte plus lm_head gradients.
static void test_ref_tied_is_untied_with_shared_weights(void) {
    LlamaConfig untied = {23, 2, 16, 4, 2, 24, 6, 10000.0f, 1e-5f}, tied = untied;
    tied.tied_embeddings = 1;
    enum { B = 2, T = 6 };
    int inputs[B * T], targets[B * T];
    random_tokens(inputs, B * T, untied.V, 5);
    random_tokens(targets, B * T, untied.V, 6);
    RefModel mu, mt;
    ref_init(&mu, &untied, B, T, 0, 0, 0, 0, 0);
    ref_init(&mt, &tied, B, T, 0, 0, 0, 0, 0);
    ref_init_weights(&mu, 7);
    CHECK(mt.num_params + mu.param_sizes[P_LM_HEAD] == mu.num_params && mt.param_sizes[P_LM_HEAD] == 0,
          "tied model: %zu parameters, untied %zu", mt.num_params, mu.num_params);
    memcpy(mu.param_ptr[P_LM_HEAD], mu.param_ptr[P_WTE], mu.param_sizes[P_WTE] * sizeof(ref_real));
    memcpy(mt.params, mu.params, mt.num_params * sizeof(ref_real)); // every tensor but lm_head, same order
    ref_compute_grads(&mu, inputs, targets, 1);
    ref_compute_grads(&mt, inputs, targets, 1);
    size_t nl = (size_t)B * T * untied.V, nw = mu.param_sizes[P_WTE];
    CHECK(memcmp(mu.logits, mt.logits, nl * sizeof(ref_real)) == 0, "tied and untied logits differ");
    double *sum = (double *)mallocCheck(nw * sizeof(double)), *got = (double *)mallocCheck(nw * sizeof(double));
    for (size_t i = 0; i < nw; i++) {
        sum[i] = (double)mu.grad_ptr[P_WTE][i] + mu.grad_ptr[P_LM_HEAD][i];
        got[i] = mt.grad_ptr[P_WTE][i];
    }
    double err = max_rel_diff_d(got, sum, nw);
    CHECK(err < GRADCHECK_FP32_TOL, "tied wte gradient vs untied wte + lm_head gradients: %.3g (tol %.0e)", err, GRADCHECK_FP32_TOL);
    printf("    wte gradient vs the untied sum: %.2g\n", err);
    free(sum);
    free(got);
    ref_free(&mu);
    ref_free(&mt);
}

// ----------------------------------------------------------------------------------------------
// PyTorch fixtures

// Loads dev/test/fixtures/<name>; a missing or bad file is a test failure that says how to make it.
static int load_fixture(Fixture *fx, const char *name, int want_fp8) {
    char path[256];
    snprintf(path, sizeof(path), FIXTURE_DIR "%s", name);
    if (!fixture_load(fx, path)) {
        CHECK(0, "%s\n      %s", fx->error, FIXTURE_HOWTO);
        return 0;
    }
    if (fx->fp8 != want_fp8) {
        CHECK(0, "%s has fp8 = %d, this test expects %d: %s", path, fx->fp8, want_fp8, FIXTURE_HOWTO);
        fixture_free(fx);
        return 0;
    }
    return 1;
}

// A fresh model with the fixture's config (fp8 delayed recipe, fp8 block linears only) and weights.
static void fixture_model(RefModel *model, const Fixture *fx) {
    ref_init(model, &fx->cfg, fx->B, fx->T, fx->fp8, 0, 0, fx->fp8_history, fx->fp8_margin);
    for (size_t i = 0; i < model->num_params; i++) model->params[i] = fx->params[i];
}

typedef struct { double logits, loss, grads, losses, fp8_state; } FixtureTol;

// Runs the fixture's experiment on the reference and compares: step-0 logits of micro-batch 0,
// step-0 loss and gradient (each tensor on its own scale), the loss of every step, and with fp8 the
// whole fp8 state after the last update (slots, histories, scales, scale_invs, element by element).
static void compare_with_fixture(const Fixture *fx, const FixtureTol *tol) {
    size_t BT = (size_t)fx->B * fx->T;
    RefModel model;
    fixture_model(&model, fx);
    ref_forward(&model, fx->inputs, fx->targets);
    double err_logits = max_rel_diff(model.logits, fx->logits, BT * fx->cfg.V);
    CHECK(err_logits < tol->logits, "step-0 logits: max|diff|/max|ref| = %.3g (tol %.0e)", err_logits, tol->logits);
    ref_free(&model);

    fixture_model(&model, fx);
    ref_real loss = ref_compute_grads(&model, fx->inputs, fx->targets, fx->grad_accum);
    double err_loss = fabs(loss - fx->loss) / fabs(fx->loss), worst_grads = 0.0;
    CHECK(err_loss < tol->loss, "step-0 loss %.8g vs %.8g: rel diff %.3g (tol %.0e)", (double)loss, fx->loss, err_loss, tol->loss);
    int worst_p = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        size_t off = model.param_ptr[p] - model.params;
        double e = max_rel_diff(model.grads + off, fx->grads + off, model.param_sizes[p]);
        CHECK(e < tol->grads, "step-0 grad of %s: max|diff|/max|ref| = %.3g (tol %.0e)", PARAM_NAMES[p], e, tol->grads);
        if (!(e <= worst_grads)) { worst_grads = e; worst_p = p; }
    }
    ref_free(&model);

    fixture_model(&model, fx);
    double err_losses = 0.0;
    for (int s = 0; s < fx->nsteps; s++) {
        ref_real l = ref_train_step(&model, fx->inputs, fx->targets, fx->grad_accum, fx->lr, fx->beta1, fx->beta2,
                                    fx->adam_eps, fx->weight_decay, fx->grad_clip, NULL);
        double e = fabs(l - fx->losses[s]) / fabs(fx->losses[s]);
        CHECK(e < tol->losses, "step %d loss %.8g vs %.8g: rel diff %.3g (tol %.0e)", s, (double)l, fx->losses[s], e, tol->losses);
        if (!(e <= err_losses)) err_losses = e;
    }
    double err_state = 0.0;
    if (fx->fp8) {
        Fp8StateLayout lay = fx->fp8_layout;
        CHECK(model.fp8_layout.total == lay.total, "fp8 state length %zu vs the fixture's %zu", model.fp8_layout.total, lay.total);
        for (size_t i = 0; i < lay.total && model.fp8_layout.total == lay.total; i++) {
            double got = model.fp8_state[i], want = fx->fp8_state[i];
            double e = got == want ? 0.0 : fabs(got - want) / fabs(want); // 0 only matches 0
            const char *part = i < lay.amax_history ? "amax_slot" : i < lay.scale ? "amax_history" : i < lay.scale_inv ? "scale" : "scale_inv";
            size_t t = i < lay.amax_history ? i : i < lay.scale ? (i - lay.amax_history) / lay.history_len
                     : i < lay.scale_inv ? i - lay.scale : i - lay.scale_inv;
            CHECK(e < tol->fp8_state, "fp8 %s of tensor %zu (%s of %s, linear %zu): %.8g vs %.8g (rel diff %.3g, tol %.0e)", part, t,
                  FP8_KIND_NAMES[t % FP8_KINDS], LINEAR_NAMES[(t / FP8_KINDS) % LINS_PER_LAYER], t / FP8_KINDS, got, want, e, tol->fp8_state);
            if (!(e <= err_state)) err_state = e;
        }
    }
    ref_free(&model);
    printf("    logits %.2g, loss %.2g, grads %.2g (%s), step losses %.2g%s", err_logits, err_loss, worst_grads,
           PARAM_NAMES[worst_p], err_losses, fx->fp8 ? "" : "\n");
    if (fx->fp8) printf(", fp8 state %.2g\n", err_state);
}

static void test_ref_fixture_fp32(void) {
    // The PyTorch side is float64 rounded to float32, so these bound the C reference's own fp32
    // rounding: 1e-5 on losses (and on the logits, computed before any gradient), 1e-4 on each
    // gradient tensor relative to its largest element.
    FixtureTol tol = {1e-5, 1e-5, 1e-4, 1e-5, 0.0};
    Fixture fx;
    if (!load_fixture(&fx, "llama_fp32.bin", 0)) return;
    CHECK(fx.cfg.NKV < fx.cfg.NH, "llama_fp32.bin should be a GQA config (NKV %d, NH %d)", fx.cfg.NKV, fx.cfg.NH);
    compare_with_fixture(&fx, &tol);
    fixture_free(&fx);
}

static void test_ref_fixture_fp8(void) {
    // Both sides compute in float32, so without fp8 rounding flips they agree to float rounding
    // (~1e-6). A flip (a value within float noise of a rounding boundary landing on the other side)
    // moves one element by a whole fp8 step (1/8 to 1/16 of it in E4M3, 1/4 to 1/8 in E5M2) and its
    // effect spreads downstream, diluted by the sums it enters: ~1e-3 of a gradient tensor's largest
    // element in this config. A missing cast, a wrong format or a wrong scale changes every element
    // of a linear's output by a few percent. So: 10x the fp32 bars on losses and logits, 1e-3 on the
    // gradients; the fp8 state (amaxes are maxima of fp32 values, scales fp32 quotients of them)
    // should match to float rounding, 1e-5, which also pins every scale exactly enough to catch a
    // wrong format max, margin or history window.
    FixtureTol tol = {1e-4, 1e-4, 1e-3, 1e-4, 1e-5};
    Fixture fx;
    if (!load_fixture(&fx, "llama_fp8.bin", 1)) return;
    CHECK(fx.grad_accum > 1, "llama_fp8.bin should use gradient accumulation (grad_accum %d)", fx.grad_accum);
    compare_with_fixture(&fx, &tol);
    fixture_free(&fx);
}

// ----------------------------------------------------------------------------------------------
// fp8 bookkeeping

static const LlamaConfig FP8_TEST_CFG = {29, 2, 16, 4, 2, 32, 8, 10000.0f, 1e-5f};
enum { FP8_TEST_B = 2, FP8_TEST_T = 8, FP8_TEST_BT = FP8_TEST_B * FP8_TEST_T };

// With the `current` recipe every cast scales by its own amax, so a micro-step's values do not depend
// on the micro-steps before it: after two micro-steps every slot (lm_head's included) must hold the
// max of the slots of each micro-step run alone, with the same 1/grad_accum loss scaling.
// (float8_experimental's fill_ kept only the last micro-step's.)
static void test_ref_fp8_amax_max_over_micro_steps(void) {
    int inputs[2 * FP8_TEST_BT], targets[2 * FP8_TEST_BT];
    random_tokens(inputs, 2 * FP8_TEST_BT, FP8_TEST_CFG.V, 1);
    random_tokens(targets, 2 * FP8_TEST_BT, FP8_TEST_CFG.V, 2);
    RefModel both, first, second;
    RefModel *models[3] = {&both, &first, &second};
    for (int k = 0; k < 3; k++) {
        ref_init(models[k], &FP8_TEST_CFG, FP8_TEST_B, FP8_TEST_T, 1, 1, 1, 4, 0);
        ref_init_weights(models[k], 42);
    }
    ref_compute_grads(&both, inputs, targets, 2);
    ref_forward(&first, inputs, targets);
    ref_backward(&first, 0.5f);
    ref_forward(&second, inputs + FP8_TEST_BT, targets + FP8_TEST_BT);
    ref_backward(&second, 0.5f);
    Fp8StateLayout lay = both.fp8_layout;
    int wins_first = 0, wins_second = 0;
    for (int t = 0; t < lay.num_tensors; t++) {
        float a = first.fp8_state[lay.amax_slot + t], b = second.fp8_state[lay.amax_slot + t];
        float got = both.fp8_state[lay.amax_slot + t], want = a > b ? a : b;
        CHECK(got == want, "tensor %d: slot %.9g after both micro-steps, max of each alone %.9g (%.9g, %.9g)", t, got, want, a, b);
        CHECK(got > 0.0f, "tensor %d: amax never recorded", t);
        wins_first += a > b;
        wins_second += b > a;
    }
    // otherwise "keep the last" or "keep the first" would pass too
    CHECK(wins_first > 0 && wins_second > 0, "each micro-batch should hold the larger amax somewhere (%d, %d tensors)", wins_first, wins_second);
    for (int k = 0; k < 3; k++) ref_free(models[k]);
}

// Delayed recipe, fp8 lm_head, gradient accumulation: after every step each tensor's slot is back to
// 0, its history has rolled with a new positive amax in front (dY included: the amaxes the seed
// tracker found frozen), and its scale is the one of its history's max.
static void test_ref_fp8_histories_move(void) {
    int inputs[2 * FP8_TEST_BT], targets[2 * FP8_TEST_BT];
    random_tokens(inputs, 2 * FP8_TEST_BT, FP8_TEST_CFG.V, 3);
    random_tokens(targets, 2 * FP8_TEST_BT, FP8_TEST_CFG.V, 4);
    int H = 3, margin = 1;
    RefModel model;
    ref_init(&model, &FP8_TEST_CFG, FP8_TEST_B, FP8_TEST_T, 1, 0, 1, H, margin);
    ref_init_weights(&model, 43);
    Fp8StateLayout lay = model.fp8_layout;
    CHECK(lay.num_tensors == FP8_KINDS * (LINS_PER_LAYER * FP8_TEST_CFG.L + 1), "%d fp8 tensors", lay.num_tensors);
    float *prev = (float *)mallocCheck(lay.total * sizeof(float));
    for (int step = 0; step < 4; step++) {
        memcpy(prev, model.fp8_state, lay.total * sizeof(float));
        ref_train_step(&model, inputs, targets, 2, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, NULL);
        const float *st = model.fp8_state, *hist = st + lay.amax_history;
        for (int t = 0; t < lay.num_tensors; t++) {
            const float *h = hist + (size_t)t * H, *ph = prev + lay.amax_history + (size_t)t * H;
            int kind = t % FP8_KINDS;
            CHECK(st[lay.amax_slot + t] == 0.0f, "step %d tensor %d: slot not reset", step, t);
            CHECK(h[0] > 0.0f && isfinite(h[0]), "step %d tensor %d (%s): amax %g not recorded", step, t, FP8_KIND_NAMES[kind], h[0]);
            CHECK(h[0] != ph[0], "step %d tensor %d (%s): amax %g did not move", step, t, FP8_KIND_NAMES[kind], h[0]);
            for (int i = 1; i < H; i++) CHECK(h[i] == ph[i - 1], "step %d tensor %d: history did not roll", step, t);
            float amax = 0.0f;
            for (int i = 0; i < H; i++) if (h[i] > amax) amax = h[i];
            float want = (fp8_format_max(fp8_kind_format(kind)) / amax) / 2.0f;
            CHECK(st[lay.scale + t] == want && st[lay.scale_inv + t] == 1.0f / want, "step %d tensor %d: scale %g, want %g",
                  step, t, st[lay.scale + t], want);
        }
    }
    free(prev);
    ref_free(&model);
}

// ref_round_bf16 sets every fp8 tolerance of the GPU tests (through fp8_bf16_inputs), so it is
// checked against an independent rule: of the two bf16 neighbours of x, the nearer (computed in
// double), ties to the even code; inf and NaN stay; past the largest bf16 value it rounds to inf.
static void test_ref_round_bf16(void) {
    uint64_t s = 7;
    long bad = 0, ties = 0, n = 0;
    for (int k = 0; k < 200000; k++) {
        uint32_t bits = random_u32(&s);
        if (k % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u; // exact ties
        float x;
        memcpy(&x, &bits, 4);
        if (isnan(x)) continue;
        uint32_t lo_bits = bits & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
        float lo, hi;
        memcpy(&lo, &lo_bits, 4);
        memcpy(&hi, &hi_bits, 4); // the next code away from zero (inf after the largest finite value)
        // distances in magnitude; the code after the largest finite one stands for 2^128
        double ax = fabs((double)x), dlo = ax - fabs((double)lo), dhi = (isinf(hi) ? ldexp(1.0, 128) : fabs((double)hi)) - ax;
        float want = (bits & 0xffffu) == 0 ? x : dlo < dhi ? lo : dhi < dlo ? hi : ((lo_bits >> 16) & 1u) ? hi : lo;
        ties += (bits & 0xffffu) == 0x8000u;
        float got = ref_round_bf16(x);
        bad += memcmp(&got, &want, 4) != 0;
        n++;
    }
    CHECK(bad == 0, "%ld of %ld roundings differ from the nearest-even bf16 neighbour", bad, n);
    CHECK(ties > 40000, "only %ld ties drawn", ties);
    float inf = INFINITY, big = 3.4e38f;
    CHECK(ref_round_bf16(inf) == inf && ref_round_bf16(-inf) == -inf && isnan(ref_round_bf16(NAN)), "inf/NaN changed");
    CHECK(isinf(ref_round_bf16(big)), "3.4e38 should round to inf in bf16, got %g", ref_round_bf16(big));
}

// fp8_bf16_inputs must reach every cast (X, W, dY, the lm_head's): each amax is then the max of
// bf16-rounded values, itself a bf16 value. Without the flag almost none is.
static void test_ref_fp8_bf16_inputs_reach_every_cast(void) {
    int inputs[FP8_TEST_BT], targets[FP8_TEST_BT];
    random_tokens(inputs, FP8_TEST_BT, FP8_TEST_CFG.V, 5);
    random_tokens(targets, FP8_TEST_BT, FP8_TEST_CFG.V, 6);
    for (int flag = 0; flag < 2; flag++) {
        RefModel model;
        ref_init(&model, &FP8_TEST_CFG, FP8_TEST_B, FP8_TEST_T, 1, 0, 1, 4, 0);
        ref_init_weights(&model, 44);
        model.fp8_bf16_inputs = flag;
        ref_compute_grads(&model, inputs, targets, 1);
        Fp8StateLayout lay = model.fp8_layout;
        int bf16_amaxes = 0;
        for (int t = 0; t < lay.num_tensors; t++) {
            float a = model.fp8_state[lay.amax_slot + t];
            CHECK(a > 0.0f, "tensor %d: no amax recorded", t);
            bf16_amaxes += ref_round_bf16(a) == a;
            if (flag) CHECK(ref_round_bf16(a) == a, "fp8_bf16_inputs: tensor %d (%s) amax %.9g is not a bf16 value", t,
                            FP8_KIND_NAMES[t % FP8_KINDS], a);
        }
        if (!flag) CHECK(bf16_amaxes < lay.num_tensors / 2, "without the flag %d of %d amaxes are bf16 values: the check is blind",
                         bf16_amaxes, lay.num_tensors);
        ref_free(&model);
    }
}

// fp8 health in the reference: each cast adds its underflows and saturations (fp8_underflows,
// fp8_saturates of the value it casts, bf16-rounded with fp8_bf16_inputs) to its tensor's counts; the
// casts of a step add up; a new step starts from zero.
static void test_ref_fp8_health_counts(void) {
    RefModel model;
    ref_init(&model, &FP8_TEST_CFG, FP8_TEST_B, FP8_TEST_T, 1, 0, 0, 4, 0);
    ref_init_weights(&model, 45);
    Fp8StateLayout lay = model.fp8_layout;
    int t = fp8_tensor_index(1, LIN_W13, FP8_DY); // an E5M2 tensor
    float half_min = ldexpf(1.0f, -17), max = FP8_E5M2_MAX;
    ref_real in[] = {0.0f, half_min, -half_min, nextafterf(half_min, 1.0f), 1.0f, -max, nextafterf(max, INFINITY), -INFINITY,
                     1e30f, NAN, ldexpf(1.0f, -20)};
    ref_real out[sizeof(in) / sizeof(in[0])];
    size_t n = sizeof(in) / sizeof(in[0]);
    model.fp8_state[lay.scale + t] = 1.0f;
    ref_fp8_cast(&model, t, in, out, n, 0);
    CHECK(model.fp8_counts[2 * t] == 3 && model.fp8_counts[2 * t + 1] == 3, "one cast: %llu underflows (want 3), %llu saturations (want 3)",
          (unsigned long long)model.fp8_counts[2 * t], (unsigned long long)model.fp8_counts[2 * t + 1]);
    model.fp8_state[lay.scale + t] = 0.5f; // 2^-17 * 0.5 underflows too; 57344 * 0.5 no longer saturates
    ref_fp8_cast(&model, t, in, out, n, 0);
    CHECK(model.fp8_counts[2 * t] == 3 + 4 && model.fp8_counts[2 * t + 1] == 3 + 2, "two casts add up: %llu, %llu (want 7, 5)",
          (unsigned long long)model.fp8_counts[2 * t], (unsigned long long)model.fp8_counts[2 * t + 1]);
    for (int k = 0; k < 2 * lay.num_tensors; k++) if (k / 2 != t) CHECK(model.fp8_counts[k] == 0, "count %d of another tensor moved", k);
    int inputs[FP8_TEST_BT], targets[FP8_TEST_BT];
    random_tokens(inputs, FP8_TEST_BT, FP8_TEST_CFG.V, 7);
    random_tokens(targets, FP8_TEST_BT, FP8_TEST_CFG.V, 8);
    for (int k = 0; k < 2 * lay.num_tensors; k++) model.fp8_counts[k] = 1000000; // more than any tensor of this model holds
    ref_compute_grads(&model, inputs, targets, 1);
    int reset = 1;
    for (int k = 0; k < 2 * lay.num_tensors; k++) reset &= model.fp8_counts[k] < 1000000;
    CHECK(reset, "a new step does not start its counts from zero");
    ref_free(&model);
}

static void ref_forward_bad_token(void *arg) {
    (void)arg;
    RefModel model;
    ref_init(&model, &FP8_TEST_CFG, 1, 2, 0, 0, 0, 0, 0);
    int inputs[2] = {0, FP8_TEST_CFG.V}, targets[2] = {0, 0};
    ref_forward(&model, inputs, targets);
}

// bf16 master weights (ref_set_master_bf16): the weights start as the nearest bf16 values, and each
// AdamW step stores element i's fp32 update rounded stochastically with bf16_round_weight_bits(i, t),
// so a bf16-master model and an fp32 one from the same weights and moments store, at every element,
// the fp32 one's value so rounded; both steps' bits differ (t counts), and a quarter or so of the
// weights land on the other neighbour than round-to-nearest's (so the check sees the rounding).
static void test_ref_master_bf16(void) {
    int inputs[FP8_TEST_BT], targets[FP8_TEST_BT];
    random_tokens(inputs, FP8_TEST_BT, FP8_TEST_CFG.V, 5);
    random_tokens(targets, FP8_TEST_BT, FP8_TEST_CFG.V, 6);
    RefModel fp32, bf16;
    ref_init(&fp32, &FP8_TEST_CFG, FP8_TEST_B, FP8_TEST_T, 0, 0, 0, 4, 0);
    ref_init(&bf16, &FP8_TEST_CFG, FP8_TEST_B, FP8_TEST_T, 0, 0, 0, 4, 0);
    ref_init_weights(&bf16, 44);
    ref_set_master_bf16(&bf16);
    size_t n = bf16.num_params, not_bf16 = 0;
    for (size_t i = 0; i < n; i++) not_bf16 += (ref_real)ref_round_bf16((float)bf16.params[i]) != bf16.params[i];
    CHECK(not_bf16 == 0, "%zu of %zu weights not bf16 values after ref_set_master_bf16", not_bf16, n);
    for (int t = 1; t <= 2; t++) {
        memcpy(fp32.params, bf16.params, n * sizeof(ref_real)); // the same weights; the moments already agree
        ref_train_step(&fp32, inputs, targets, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, NULL);
        ref_train_step(&bf16, inputs, targets, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, NULL);
        size_t bad = 0, first_bad = 0, off_nearest = 0;
        for (size_t i = 0; i < n; i++) {
            const float w = (float)fp32.params[i];
            const ref_real want = bf16_bits_to_float(bf16_round_stochastic(w, bf16_round_weight_bits(i, t) & 0xffffu));
            if (bf16.params[i] != want && bad++ == 0) first_bad = i;
            off_nearest += bf16.params[i] != (ref_real)ref_round_bf16(w);
        }
        CHECK(bad == 0, "step %d: %zu of %zu weights not the fp32 update rounded with their bits (first: %zu, %.9g)", t, bad, n, first_bad,
              (double)bf16.params[first_bad]);
        CHECK(off_nearest > n / 8, "step %d: only %zu of %zu weights off round-to-nearest (the test's premise)", t, off_nearest, n);
        CHECK(memcmp(fp32.m, bf16.m, n * sizeof(ref_real)) == 0 && memcmp(fp32.v, bf16.v, n * sizeof(ref_real)) == 0,
              "step %d: the moments differ (the same gradients were expected)", t);
    }
    ref_free(&fp32);
    ref_free(&bf16);
}

static void test_ref_bad_token_is_fatal(void) {
    char err[512];
    int status = run_expect_fatal(ref_forward_bad_token, NULL, err, sizeof(err));
    CHECK(status != 0, "a token outside the vocabulary must exit non-zero");
    CHECK(strstr(err, "outside the vocabulary") != NULL, "message: %s", err);
}

static void run_ref_tests(void) {
    run_test("ref: gradient check of every tensor, GQA (NKV < NH), grad_accum 2", test_ref_gradcheck_gqa);
    run_test("ref: gradient check of every tensor, NKV == NH", test_ref_gradcheck_mha);
    run_test("ref: gradient check of every tensor, tied embeddings", test_ref_gradcheck_tied);
    run_test("ref: gradient check of every tensor, llama3 RoPE scaling", test_ref_gradcheck_llama3);
    run_test("ref: tied embeddings = untied with lm_head a copy of wte (logits, summed gradient)", test_ref_tied_is_untied_with_shared_weights);
    run_test("ref: fp32 matches the PyTorch fixture llama_fp32.bin", test_ref_fixture_fp32);
    run_test("ref: fp8 emulation matches the PyTorch fixture llama_fp8.bin (fp8 state included)", test_ref_fixture_fp8);
    run_test("ref: fp8 amax slots hold the max over all micro-steps", test_ref_fp8_amax_max_over_micro_steps);
    run_test("ref: fp8 amax histories (dY included) move every step, scales follow them", test_ref_fp8_histories_move);
    run_test("ref: ref_round_bf16 is round-to-nearest-even bf16", test_ref_round_bf16);
    run_test("ref: fp8_bf16_inputs rounds the input of every fp8 cast", test_ref_fp8_bf16_inputs_reach_every_cast);
    run_test("ref: fp8 health counts: underflows and saturations per tensor, summed over a step's casts", test_ref_fp8_health_counts);
    run_test("ref: bf16 master weights: every AdamW update stochastically rounded with its index's and step's bits",
             test_ref_master_bf16);
    run_test("ref: a token outside the vocabulary is fatal", test_ref_bad_token_is_fatal);
}

#endif
