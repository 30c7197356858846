/*
GPU tests of the trainer: it is compiled in (#define TESTING) and checked against the C reference
model (dev/test/llama_ref.h, fp32, with the exact fp8 emulation) and the PyTorch fixtures.
Build and run on a GPU machine: make test_llama_fp8 && ./test_llama_fp8
The last line is "N passed, N failed"; the exit status is non-zero on any failure.

Error measure: for a tensor, max|gpu - ref| / max|ref| ("rel" below). Each tolerance says, where it
is set, what it allows and the errors measured against it.
Two kinds of fp8 checks: the end-to-end ones (first step, 6 steps, the PyTorch fixture) compare a
whole model against the C reference's emulation, where bf16 roundings flip fp8 codes and the noise
is as large as fp8 itself, so their tolerances are coarse and they guard against gross breakage;
the GEMM-by-GEMM probe tests feed each fp8 linear's own GPU inputs to the host codec and are exact
(codes, amaxes, scales) or within the bf16 output rounding (GEMMs). The probe tests are the sharp
ones: dev/test/test_mutations.sh shows each named fp8 bug failing them (dev/test/README.md).
Run a subset: ./test_llama_fp8 'name substring'.
*/
#define TESTING
#include "train_llama_fp8.cu"
#include "dev/test/harness.h"   // CHECK, run_test
#include "dev/test/llama_ref.h" // RefModel: the fp32 C reference with fp8 emulation
#include "dev/test/fixture.h"   // PyTorch fixture reader
#include "llmc/doc_mask.h"      // DocMask: the host definition of document masking's positions

static cudaStream_t g_stream;

static double rel_err(const float *a, const float *ref, size_t n) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        maxdiff = fmax(maxdiff, fabs((double)a[i] - ref[i]));
        maxref = fmax(maxref, fabs((double)ref[i]));
    }
    return maxref > 0.0 ? maxdiff / maxref : maxdiff;
}

static float *download_bf16(const floatX *d, size_t n) {
    floatX *h = (floatX *)mallocCheck(n * sizeof(floatX));
    float *f = (float *)mallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(h[i]);
    free(h);
    return f;
}

static float *download_f32(const float *d, size_t n) {
    float *f = (float *)mallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(f, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return f;
}

static void random_tokens(int *x, size_t n, int V, uint64_t seed) {
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) x[i] = (int)(random_u32(&rng) % (uint32_t)V);
}

// train_step on a test's host arrays: grad_accum micro-batches of inputs and targets, losses back.
static StepResult train_step_on(Model *m, const int *inputs, const int *targets, int grad_accum, const AdamWParams *h, float *losses) {
    StepBuffers b = {inputs, targets, losses, grad_accum};
    return train_step(m, &b, h, g_stream);
}

// A small model that still exercises every path: GQA, head size 64 (cuDNN takes it when T % 128 == 0),
// every GEMM dimension a multiple of 16 (fp8).
static LlamaConfig small_config(void) {
    LlamaConfig c = {512, 2, 256, 4, 2, 512, 128, 10000.0f, 1e-5f};
    return c;
}

enum { DOC_START = 1 }; // the document-start id of the document-masking tests (Llama 2's BOS)

// GPU first-step logits, loss and gradients of micro-batch 0 (no update).
typedef struct { float *logits, loss, *grads; } StepZero;

static StepZero gpu_step_zero(Model *m, const int *inputs, const int *targets) {
    int N = m->opt.B * m->opt.T;
    StepZero r;
    cudaCheck(cudaMemcpy(m->acts.inputs, inputs, N * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->acts.targets, targets, N * sizeof(int), cudaMemcpyHostToDevice));
    // logits first (the loss pass overwrites them with dlogits). In step 0 the casts scale live, so
    // this pass records amaxes; the slots are then cleared and the weights recast, and the loss pass
    // starts them afresh. Later steps record nothing here.
    m->w_fp8_stale = 1;
    recast_stale_weights(m, g_stream);
    zero_added_grads(m, g_stream);
    model_forward(m, m->fp8.on && m->step == 0 ? train_pass(m, 0) : eval_pass(m), 0, 0.0f, g_stream);
    r.logits = download_bf16(m->acts.logits, (size_t)N * m->cfg.V);
    if (m->fp8.on && m->step == 0) {
        Fp8State *fs = &m->fp8_state;
        cudaCheck(cudaMemset(fs->buffer + fs->layout.amax_slot, 0, fs->layout.num_tensors * sizeof(float)));
        m->w_fp8_stale = 1;
    }
    recast_stale_weights(m, g_stream);
    zero_added_grads(m, g_stream);
    model_forward(m, train_pass(m, 0), 1, 1.0f / N, g_stream);
    model_group_tokens(m, 0, inputs);
    model_backward(m, train_pass(m, 0), g_stream);
    cudaCheck(cudaDeviceSynchronize());
    float *losses = download_f32(m->acts.losses, N);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += losses[i];
    free(losses);
    r.loss = (float)(sum / N);
    r.grads = download_bf16(m->grads_memory, m->num_params);
    return r;
}

static void free_step_zero(StepZero *s) { free(s->logits); free(s->grads); }

static void check_grads(const Model *m, const float *gpu, const float *ref, double tol, const char *what) {
    size_t off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        double e = rel_err(gpu + off, ref + off, m->param_sizes[p]);
        printf("    %s grad %-8s rel %.2e\n", what, PARAM_NAMES[p], e);
        CHECK(e < tol, "%s: gradient of %s: rel %.3e >= %.1e", what, PARAM_NAMES[p], e, tol);
        off += m->param_sizes[p];
    }
}

// ----------------------------------------------------------------------------------------------
// bf16 against the C reference and the PyTorch fixture

// The small model with both Llama 3.2 features: tied embeddings (the lm_head is wte) and llama3 RoPE
// scaling with an original context of 32, so that most of the 32 frequency pairs of the 128
// positions are scaled (wavelengths above 32 / low_freq_factor are divided by the factor) and some
// interpolated.
static LlamaConfig small_llama32_config(void) {
    LlamaConfig c = small_config();
    c.tied_embeddings = 1;
    c.rope_scaling = ROPE_LLAMA3;
    c.rope_factor = 8.0f; c.rope_low_freq_factor = 1.0f; c.rope_high_freq_factor = 4.0f; c.rope_original_T = 32;
    return c;
}

// The bf16 budgets. bf16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3); weights,
// activations and stored gradients are each rounded once per layer stage and the errors add roughly
// as a random walk, amplified by how sensitive the model is. Measured (H200, 2026-12-01) on the small
// models with the reference's init (logits' RMS 0.17-0.32): logits up to 7.5e-3 of the largest
// (9.1e-3 against torch's fp32 fixture), loss 1.4e-5, gradients up to 1.45e-2 of each tensor's
// largest (ln2w against torch); over 10 steps on a memorized batch the losses stay within 1.6e-3.
// BF16_SMALL is 1.6x (logits) to 2x (gradients) those; its loss bar, 1e-3, is BF16_IMPORTED's.
// The imported Hugging Face fixtures (transformers' init: logits' RMS 1.05-1.07, 4-6x ours, so the
// softmaxes are sharper and pass rounding errors on more strongly) measured logits 1.7e-2 to 2.65e-2,
// gradients up to 3.6e-2, loss 3.3e-4, with cuDNN attention (T 128) and the plain kernel (T 64)
// alike, and the same shapes with our init 3.6e-3 to 4.8e-3: a matter of the weights' scale, not
// of a path. BF16_IMPORTED is about twice those (the loss 3x).
typedef struct { double logits, loss, grads; } Bf16Budget;
static const Bf16Budget BF16_SMALL = {1.5e-2, 1e-3, 3e-2};
static const Bf16Budget BF16_IMPORTED = {5e-2, 1e-3, 7e-2};
#define BF16_STEPS_TOL 5e-3

// The first-step tests' weights: the reference's init (seed 42), or (model_file) an imported Hugging
// Face model, which the references read on the host and the GPU model loads as -init_from does.
static void ref_weights(RefModel *r, const char *model_file) {
    if (!model_file) { ref_init_weights(r, 42); return; }
    Section ms[] = {{r->params, r->num_params * sizeof(float), 0}};
    read_sections(model_file, MODEL_MAGIC, NULL, 0, ms, 1, NULL);
}
static void gpu_weights(Model *m, const RefModel *r, const char *model_file) {
    if (model_file) load_model_file(m, model_file);
    else model_set_weights(m, r->params);
}

static void bf16_first_step_vs_cpu(LlamaConfig c, const char *model_file, Bf16Budget tol) {
    int B = 2, T = 128, N = B * T;
    RefModel ref;
    ref_init(&ref, &c, B, T, 0, 0, 0, 16, 0);
    ref_weights(&ref, model_file);
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    random_tokens(in, N, c.V, 1);
    random_tokens(tg, N, c.V, 2);
    float ref_loss = ref_compute_grads(&ref, in, tg, 1);

    Model m;
    ModelOptions mo = model_options(B, T, PREC_BF16);
    model_init(&m, &c, &mo, NULL);
    gpu_weights(&m, &ref, model_file);
    StepZero g = gpu_step_zero(&m, in, tg);
    double el = rel_err(g.logits, ref.logits, (size_t)N * c.V);
    printf("    logits rel %.2e | loss gpu %.6f cpu %.6f\n", el, g.loss, ref_loss);
    CHECK(el < tol.logits, "logits rel %.3e >= %.1e", el, tol.logits);
    CHECK(fabsf(g.loss - ref_loss) / ref_loss < tol.loss, "loss %.6f vs %.6f", g.loss, ref_loss);
    check_grads(&m, g.grads, ref.grads, tol.grads, "bf16 vs cpu");
    free_step_zero(&g);
    model_free(&m);
    free(in); free(tg);
    ref_free(&ref);
}
// -check 1's memory plan is what model_init allocates, for every option that changes a buffer: bf16,
// fp8 delayed and current, without the weight cache, -r 1, fp8 lm_head, block and row grains, the block
// and row fallbacks, bf16 moments, bf16 master weights (fp8: the weight cache then its own bytes; bf16),
// the moments in host memory (none on the device), document masking, tied embeddings.
static void test_memory_plan_is_model_init(void) {
    struct { const char *what; int precision; void (*set)(ModelOptions *); } cases[] = {
        {"bf16", PREC_BF16, NULL}, {"fp8 delayed", PREC_FP8, NULL},
        {"fp8 current", PREC_FP8, [](ModelOptions *o) { o->fp8_current = 1; }},
        {"fp8 without the weight cache", PREC_FP8, [](ModelOptions *o) { o->fp8_weight_cache = 0; }},
        {"fp8 -r 1", PREC_FP8, [](ModelOptions *o) { o->recompute = 1; }},
        {"bf16 -r 1", PREC_BF16, [](ModelOptions *o) { o->recompute = 1; }},
        {"fp8 lm_head", PREC_FP8, [](ModelOptions *o) { o->fp8_lm_head = 1; }},
        {"fp8 block grain", PREC_FP8, [](ModelOptions *o) { o->fp8_grain = FP8_GRAIN_BLOCK; }},
        {"fp8 block fallback", PREC_FP8, [](ModelOptions *o) { o->fp8_fallback = FP8_GRAIN_BLOCK; }},
        {"fp8 row grain", PREC_FP8, [](ModelOptions *o) { o->fp8_grain = FP8_GRAIN_ROW; }},
        {"fp8 row grain without the weight cache", PREC_FP8, [](ModelOptions *o) { o->fp8_grain = FP8_GRAIN_ROW; o->fp8_weight_cache = 0; }},
        {"fp8 row fallback", PREC_FP8, [](ModelOptions *o) { o->fp8_fallback = FP8_GRAIN_ROW; }},
        {"bf16 moments", PREC_FP8, [](ModelOptions *o) { o->moments_bf16 = 1; }},
        {"fp8 bf16 master weights", PREC_FP8, [](ModelOptions *o) { o->master_bf16 = 1; }},
        {"bf16 bf16 master weights", PREC_BF16, [](ModelOptions *o) { o->master_bf16 = 1; }},
        {"fp8 AdamW moments in host memory", PREC_FP8, [](ModelOptions *o) { o->adam_offload = 1; }},
        {"document masks", PREC_FP8, [](ModelOptions *o) { o->doc_mask = 1; o->doc_start_id = 1; }},
    };
    for (int tied = 0; tied < 2; tied++) {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            LlamaConfig c = small_config();
            c.tied_embeddings = tied;
            ModelOptions mo = model_options(2, 128, cases[i].precision);
            if (cases[i].set) cases[i].set(&mo);
            if (tied && mo.fp8_lm_head) continue; // refused: a tied lm_head is the embedding
            Model m;
            model_init(&m, &c, &mo, NULL);
            size_t plan = model_memory_plan(&c, &mo, 1);
            CHECK(plan == m.bytes_allocated, "%s%s: the plan says %zu bytes, model_init allocated %zu", cases[i].what, tied ? " (tied)" : "",
                  plan, m.bytes_allocated);
            model_free(&m);
        }
    }
}

static void test_bf16_first_step_vs_cpu(void) { bf16_first_step_vs_cpu(small_config(), NULL, BF16_SMALL); }
static void test_bf16_first_step_llama32_vs_cpu(void) { bf16_first_step_vs_cpu(small_llama32_config(), NULL, BF16_SMALL); }

// -master_weights bf16 after the first step, the GPU's bf16 weights against the reference's (both from
// the same bf16 weights, each update stochastically rounded with the weight's bits). At t = 1 AdamW
// moves weight i by lr (sign(g) x / (x + eps) + wd w), x = |g| times the clip factor, whatever
// the gradient's size. Where the GPU's gradient has the reference's sign the two fp32 updates differ
// by lr |x/(x + eps) - x'/(x' + eps)| (the two gradients' difference, seen through eps) and a few fp32
// ulps of arithmetic (8 allowed: a 2^-16 part of a bf16 ulp each), so the same random threshold
// separates them with probability that difference over the weight's bf16 ulp. The weights that differ
// may number the sum of those probabilities plus 5 of its standard deviations (and 1). Round-to-nearest,
// or other rounding bits, put about a quarter or a third of all weights on the other bf16 neighbour.
// norm: the GPU's gradient norm before clipping.
static void bf16_master_first_step(const Model *m, const RefModel *ref, float norm, const AdamWParams *h) {
    const double clip = h->grad_clip > 0.0f && norm > h->grad_clip ? h->grad_clip / norm : 1.0;
    float *w = download_bf16(m->params_memory, m->num_params), *g = download_bf16(m->grads_memory, m->num_params);
    size_t n = m->num_params, same_sign = 0, differ = 0;
    double expected = 0.0;
    for (size_t i = 0; i < n; i++) {
        // another sign: the two updates differ by 2 lr
        if ((g[i] > 0) != (ref->grads[i] > 0) || (g[i] < 0) != (ref->grads[i] < 0)) continue;
        same_sign++;
        differ += w[i] != ref->params[i];
        const double x = fabs(g[i]) * clip, xr = fabs(ref->grads[i]); // the reference's gradient is clipped already
        const double apart = h->lr * fabs(x / (x + h->eps) - xr / (xr + h->eps));
        const double ulp = ldexp(1.0, ilogbf(w[i] == 0.0f ? FLT_MIN : w[i]) - 7);
        const double p = apart / ulp + 8.0 / 65536.0;
        expected += p < 1.0 ? p : 1.0;
    }
    const double allowed = expected + 5.0 * sqrt(expected) + 1.0;
    printf("    first step: %zu of %zu gradients of the reference's sign, %zu of their bf16 weights differ"
           " (%.1f expected, %.1f allowed)\n", same_sign, n, differ, expected, allowed);
    CHECK(same_sign > n / 2, "only %zu of %zu gradients have the reference's sign", same_sign, n);
    CHECK(differ <= allowed, "%zu of %zu bf16 master weights differ from the reference's (%.1f allowed)", differ,
          same_sign, allowed);
    free(w); free(g);
}

// moments_bf16: AdamW's m and v in bf16 on the GPU (the reference keeps them in double); their
// stochastic rounding (2^-9 relative, unbiased) is small next to the bf16 weights' own rounding.
// master_bf16: -master_weights bf16 on the GPU and in the reference (ref_set_master_bf16: the same rule
// and bits), and after the first step the weights bit for bit (bf16_master_first_step).
static void ten_steps_vs_cpu(int moments_bf16, int master_bf16) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T, grad_accum = 2;
    RefModel ref;
    ref_init(&ref, &c, B, T, 0, 0, 0, 16, 0);
    ref_init_weights(&ref, 7);
    if (master_bf16) ref_set_master_bf16(&ref);
    int *in = (int *)mallocCheck(grad_accum * N * sizeof(int)), *tg = (int *)mallocCheck(grad_accum * N * sizeof(int));
    random_tokens(in, grad_accum * N, c.V, 3);
    random_tokens(tg, grad_accum * N, c.V, 4);
    Model m;
    ModelOptions mo = model_options(B, T, PREC_BF16);
    mo.moments_bf16 = moments_bf16; mo.master_bf16 = master_bf16;
    model_init(&m, &c, &mo, NULL);
    model_set_weights(&m, ref.params);
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float *losses = (float *)mallocCheck(grad_accum * N * sizeof(float));
    for (int step = 0; step < 10; step++) {
        float gn_ref, lref = ref_train_step(&ref, in, tg, grad_accum, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, &gn_ref);
        StepResult r = train_step_on(&m, in, tg, grad_accum, &h, losses);
        printf("    step %d loss gpu %.5f cpu %.5f | norm gpu %.4f cpu %.4f\n", step, r.loss, lref, r.norm, gn_ref);
        CHECK(!r.skipped && fabsf(r.loss - lref) / lref < BF16_STEPS_TOL, "step %d loss %.5f vs %.5f", step, r.loss, lref);
        if (master_bf16 && step == 0) bf16_master_first_step(&m, &ref, r.norm, &h);
    }
    free(losses); free(in); free(tg);
    model_free(&m);
    ref_free(&ref);
}
static void test_bf16_ten_steps_vs_cpu(void) { ten_steps_vs_cpu(0, 0); }
static void test_bf16_moments_ten_steps_vs_cpu(void) { ten_steps_vs_cpu(1, 0); }
static void test_bf16_master_ten_steps_vs_cpu(void) { ten_steps_vs_cpu(0, 1); }

static void test_bf16_vs_pytorch_fixture(void) {
    Fixture fx;
    if (!fixture_load(&fx, "dev/test/fixtures/llama_fp32.bin")) { CHECK(0, "%s (make it: python3 dev/reference/llama_ref.py --out dev/test/fixtures)", fx.error); return; }
    int N = fx.B * fx.T;
    Model m;
    ModelOptions mo = model_options(fx.B, fx.T, PREC_BF16);
    model_init(&m, &fx.cfg, &mo, NULL);
    model_set_weights(&m, fx.params);
    StepZero g = gpu_step_zero(&m, fx.inputs, fx.targets);
    double el = rel_err(g.logits, fx.logits, (size_t)N * fx.cfg.V);
    printf("    logits rel %.2e | loss gpu %.6f torch %.6f\n", el, g.loss, fx.loss);
    CHECK(el < BF16_SMALL.logits, "logits rel %.3e", el);
    CHECK(fabsf(g.loss - fx.loss) / fx.loss < BF16_SMALL.loss, "loss %.6f vs %.6f", g.loss, fx.loss);
    check_grads(&m, g.grads, fx.grads, BF16_SMALL.grads, "bf16 vs torch");
    free_step_zero(&g);
    model_free(&m);
    fixture_free(&fx);
}

// ----------------------------------------------------------------------------------------------
// fp8 against the C reference's emulation

// ||a - ref|| / ||ref||: a robust whole-tensor measure, for comparisons of two noise sources.
static double rms_rel(const float *a, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) { double d = (double)a[i] - ref[i]; num += d * d; den += (double)ref[i] * ref[i]; }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// The GPU casts bf16 values to fp8, the reference fp32 ones: an element within bf16 rounding of an fp8
// rounding boundary lands one fp8 step (up to 12.5% for E4M3) away, a noise as large as fp8
// quantization itself. Its size is measured, not guessed: the reference run again with every fp8
// cast's input rounded to bf16 first (fp8_bf16_inputs) differs from the plain reference by exactly
// that kind of flips, the "floor". The GPU may differ by that noise (twice: its other bf16
// roundings shift values too) plus the bf16 arithmetic budget of the bf16 tests. Measured (H200,
// 2026-12-01) the GPU's error was 0.8-1.3x the floor, so 2x leaves room for a second draw of the flip
// noise and nothing more: these checks cannot see a bug smaller than fp8 noise (the probe tests do).
static double fp8_tolerance(double floor, double bf16_budget) { return 2.0 * floor + bf16_budget; }

// A gradient's tolerance against the reference: bf16's budget, or in fp8 (refb, the emulation fed
// bf16-rounded inputs, not NULL) fp8_tolerance of the flip floor refb's gradient shows.
static double grad_tolerance(const RefModel *ref, const RefModel *refb, size_t off, size_t n, double bf16_budget) {
    return refb ? fp8_tolerance(rel_err(refb->grads + off, ref->grads + off, n), bf16_budget) : bf16_budget;
}

// Every tensor of the GPU's gradient against the reference's, each within grad_tolerance.
static void check_step_grads(const Model *m, const float *gpu, const RefModel *ref, const RefModel *refb, double bf16_budget,
                             const char *what) {
    size_t off = 0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        size_t n = m->param_sizes[p];
        double e = rel_err(gpu + off, ref->grads + off, n), tol = grad_tolerance(ref, refb, off, n, bf16_budget);
        printf("    %s grad %-8s rel %.2e (tolerance %.2e)\n", what, PARAM_NAMES[p], e, tol);
        CHECK(e < tol, "%s: gradient of %s: rel %.3e >= %.3e", what, PARAM_NAMES[p], e, tol);
        off += n;
    }
}

static void fp8_first_step_vs_cpu(LlamaConfig c, const char *model_file, Bf16Budget bf16) {
    int B = 2, T = 128, N = B * T;
    RefModel ref, refb, ref32;
    ref_init(&ref, &c, B, T, 1, 0, 0, 16, 0);
    ref_weights(&ref, model_file);
    ref_init(&refb, &c, B, T, 1, 0, 0, 16, 0);
    ref_weights(&refb, model_file);
    refb.fp8_bf16_inputs = 1;
    ref_init(&ref32, &c, B, T, 0, 0, 0, 16, 0);
    ref_weights(&ref32, model_file);
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    random_tokens(in, N, c.V, 1);
    random_tokens(tg, N, c.V, 2);
    float ref_loss = ref_compute_grads(&ref, in, tg, 1);
    ref_compute_grads(&refb, in, tg, 1);
    ref_compute_grads(&ref32, in, tg, 1);

    Model m;
    ModelOptions mo = model_options(B, T, PREC_FP8);
    model_init(&m, &c, &mo, NULL);
    gpu_weights(&m, &ref, model_file);
    StepZero g = gpu_step_zero(&m, in, tg);
    size_t nl = (size_t)N * c.V;
    double el = rel_err(g.logits, ref.logits, nl), floor_l = rel_err(refb.logits, ref.logits, nl);
    double tol_l = fp8_tolerance(floor_l, bf16.logits);
    printf("    logits rel %.2e (flip floor %.2e, tolerance %.2e) | loss gpu %.6f cpu %.6f\n", el, floor_l, tol_l, g.loss, ref_loss);
    CHECK(el < tol_l, "logits rel %.3e >= %.3e", el, tol_l);
    // it must be fp8 at all: closer (RMS) to the fp8 emulation than to the fp32 model
    double to_fp8 = rms_rel(g.logits, ref.logits, nl), to_fp32 = rms_rel(g.logits, ref32.logits, nl);
    printf("    logits RMS rel: to the fp8 emulation %.2e, to fp32 %.2e\n", to_fp8, to_fp32);
    CHECK(to_fp8 < to_fp32, "GPU fp8 logits are closer to fp32 (%.3e) than to the fp8 emulation (%.3e)", to_fp32, to_fp8);
    CHECK(fabsf(g.loss - ref_loss) / ref_loss < 1e-2, "loss %.6f vs %.6f", g.loss, ref_loss);
    check_step_grads(&m, g.grads, &ref, &refb, bf16.grads, "fp8");
    free_step_zero(&g);
    model_free(&m);
    free(in); free(tg);
    ref_free(&ref); ref_free(&refb); ref_free(&ref32);
}
static void test_fp8_first_step_vs_cpu(void) { fp8_first_step_vs_cpu(small_config(), NULL, BF16_SMALL); }
static void test_fp8_first_step_llama32_vs_cpu(void) { fp8_first_step_vs_cpu(small_llama32_config(), NULL, BF16_SMALL); }

// Hugging Face fixtures (dev/test/fixtures/hf: transformers' own random tiny models) imported by
// scripts/hf_import.py, run from here, then trained from as -init_from does: the shape (tied, llama3
// RoPE scaling) from the file, the weights through load_model_file; the first step in bf16 and fp8
// against the C reference on the same weights.
// scripts/*.py need the project's environment (numpy, safetensors, llama_fp8): .venv's python3 once make
// venv (or make test) has made it, else the python3 on PATH (make test and the mutation runner put .venv first)
static int have_venv(void) { return access(".venv/bin/python3", X_OK) == 0; }

static void imported_first_steps(const char *fixture) {
    char dir[] = "/tmp/llama_fp8_hf_XXXXXX", path[128], cmd[512];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    snprintf(path, sizeof(path), "%s/model.bin", dir);
    snprintf(cmd, sizeof(cmd), "%s scripts/hf_import.py dev/test/fixtures/hf/%s %s > %s/import.log 2>&1",
             have_venv() ? ".venv/bin/python3" : "python3", fixture, path, dir);
    int rc = system(cmd);
    CHECK(rc == 0, "%s failed (status %d); its output is in %s/import.log%s", cmd, rc, dir,
          have_venv() ? "" : " (there is no .venv/ here: make venv makes the environment scripts/hf_import.py needs)");
    if (rc != 0) return;
    LlamaConfig c = read_model_config(path);
    printf("    %s: V %d L %d C %d NH %d NKV %d FF %d tied %d rope scaling %d\n", fixture, c.V, c.L, c.C, c.NH, c.NKV, c.FF,
           c.tied_embeddings, c.rope_scaling);
    bf16_first_step_vs_cpu(c, path, BF16_IMPORTED);
    fp8_first_step_vs_cpu(c, path, BF16_IMPORTED);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "could not remove %s", dir);
}
static void test_imported_tied_first_step(void) { imported_first_steps("tied"); }
static void test_imported_llama3_first_step(void) { imported_first_steps("llama3"); }
static void test_imported_llama32_first_step(void) { imported_first_steps("llama32"); }

// Worst relative difference of two fp8 states' history and scale entries; counts entries that are
// zero on one side only.
static double fp8_state_diff(const float *a, const float *r, Fp8StateLayout lay, int *zero_mismatch) {
    double worst = 0.0;
    int H = lay.history_len;
    for (int t = 0; t < lay.num_tensors; t++) {
        for (int k = 0; k < H; k++) {
            float x = a[lay.amax_history + (size_t)t * H + k], y = r[lay.amax_history + (size_t)t * H + k];
            if ((x == 0.0f) != (y == 0.0f)) (*zero_mismatch)++;
            else if (y != 0.0f) worst = fmax(worst, fabs(x - y) / y);
        }
        worst = fmax(worst, fabs(a[lay.scale + t] - r[lay.scale + t]) / r[lay.scale + t]);
    }
    return worst;
}

// The GPU's counts of the step just made against the reference's, per tensor kind and count. The
// counts move with the values near a threshold, which the flip noise moves (the floor: the
// bf16-input reference against the plain one, twice as for the state) and the trajectories' drift
// too, and they are small integers here: tolerance 2 floor + 0.25 count + 2 sqrt(count + 4), all
// in values. Measured (H200, 2026-12-01, the four configurations below, 6 steps each) the largest
// difference was 0.65 of that (dY saturations of the delayed recipe: 75 against 53, floor 3).
// One exception, qkv's dY underflows: dQ of each sequence's first position is zero in exact
// arithmetic (its query attends to one key: dS = P (dP - D) with P = 1 and D = dP); the reference
// computes it as 0, cuDNN's backward as a rounding residue, most of which underflows. The GPU may
// count up to B * C of those per layer and micro-step more (measured: 164-698 of 2048); the probe
// tests check that no other qkv dY value underflows on the GPU.
static void fp8_counts_check(const Model *m, const RefModel *ref, const RefModel *refb, int step, int grad_accum) {
    const LlamaConfig *c = &m->cfg;
    int nt = m->fp8_state.layout.num_tensors;
    size_t nc = (size_t)FP8_COUNTS * nt;
    uint64_t *gpu = (uint64_t *)mallocCheck(nc * sizeof(uint64_t));
    cudaCheck(cudaMemcpy(gpu, m->fp8_state.counts + nc, nc * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    const double first_dq = (double)m->opt.B * c->C * grad_accum; // per layer
    for (int kind = 0; kind < FP8_KINDS; kind++) {
        for (int k = 0; k < FP8_COUNTS; k++) {
            double diff = 0.0, floor = 0.0, count = 0.0, excess = 0.0;
            for (int t = kind; t < nt; t += FP8_KINDS) {
                double g = (double)gpu[FP8_COUNTS * t + k], r = (double)ref->fp8_counts[FP8_COUNTS * t + k];
                double rb = (double)refb->fp8_counts[FP8_COUNTS * t + k];
                if (kind == FP8_DY && k == FP8_UNDERFLOWS && t < FP8_KINDS * LINS_PER_LAYER * c->L && t / FP8_KINDS % LINS_PER_LAYER == LIN_QKV) {
                    excess += g - r;
                    g -= fmin(fmax(g - r, 0.0), first_dq); // what the first positions' dQ may add is no difference
                }
                diff += fabs(g - r);
                floor += fabs(rb - r);
                count += r;
            }
            double tol = 2.0 * floor + 0.25 * count + 2.0 * sqrt(count + 4.0);
            const char *what = k == FP8_UNDERFLOWS ? "underflows" : "saturations";
            printf("    step %d %s %s: cpu %.0f, gpu differs by %.0f (flip floor %.0f, tolerance %.0f)\n", step, FP8_KIND_NAMES[kind], what,
                   count, diff, floor, tol);
            CHECK(diff < tol, "step %d: %s %s differ from the reference's by %.0f >= %.0f", step, FP8_KIND_NAMES[kind], what, diff, tol);
            if (kind == FP8_DY && k == FP8_UNDERFLOWS) {
                printf("    step %d qkv dY underflows beyond the reference's: %.0f (at most %.0f first-position dQ values)\n", step, excess,
                       first_dq * c->L);
                CHECK(excess > -tol && excess < first_dq * c->L + tol, "step %d: qkv dY underflows %.0f beyond the reference's, outside [0, %.0f]",
                      step, excess, first_dq * c->L);
            }
        }
    }
    free(gpu);
}

static void fp8_state_check(int current, int lm_head, int margin) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T, grad_accum = 2, H = 4;
    RefModel ref, refb;
    ref_init(&ref, &c, B, T, 1, current, lm_head, H, margin);
    ref_init_weights(&ref, 9);
    ref_init(&refb, &c, B, T, 1, current, lm_head, H, margin);
    ref_init_weights(&refb, 9);
    refb.fp8_bf16_inputs = 1;
    int *in = (int *)mallocCheck(grad_accum * N * sizeof(int)), *tg = (int *)mallocCheck(grad_accum * N * sizeof(int));
    random_tokens(in, grad_accum * N, c.V, 5);
    random_tokens(tg, grad_accum * N, c.V, 6);
    Model m;
    ModelOptions mo = model_options(B, T, PREC_FP8);
    mo.fp8_current = current; mo.fp8_history = H; mo.fp8_margin = margin; mo.fp8_lm_head = lm_head;
    model_init(&m, &c, &mo, NULL);
    model_set_weights(&m, ref.params);
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float *losses = (float *)mallocCheck(grad_accum * N * sizeof(float));
    for (int step = 0; step < 6; step++) {
        float gn_ref;
        float lref = ref_train_step(&ref, in, tg, grad_accum, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, &gn_ref);
        float lb = ref_train_step(&refb, in, tg, grad_accum, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, &gn_ref);
        float l = train_step_on(&m, in, tg, grad_accum, &h, losses).loss;
        double tol = fp8_tolerance(fabs(lb - lref) / lref, BF16_STEPS_TOL);
        printf("    step %d loss gpu %.5f cpu %.5f (bf16-input cpu %.5f, tolerance %.2e)\n", step, l, lref, lb, tol);
        CHECK(fabs(l - lref) / lref < tol, "step %d loss %.5f vs %.5f", step, l, lref);
        fp8_counts_check(&m, &ref, &refb, step, grad_accum);
    }
    Fp8StateLayout lay = m.fp8_state.layout;
    float *st = download_f32(m.fp8_state.buffer, lay.total);
    int zero_gpu = 0, zero_floor = 0;
    double worst = fp8_state_diff(st, ref.fp8_state, lay, &zero_gpu);
    double floor = fp8_state_diff(refb.fp8_state, ref.fp8_state, lay, &zero_floor);
    // amaxes also drift with the trajectories (their losses differ by up to 1.5e-2 after 6 steps).
    // Measured with seeds 1-6 besides this one's 9 (H200, 2026-12-01): worst / floor was 0.49-1.21
    // for the delayed recipe and 0.63-1.21 for the current one, so the current recipe does not differ
    // more in general; seed 9's current-recipe ratio of 2.17 (0.336 against a 0.155 floor, tolerance
    // 0.341) is the tail of a max over every entry, each a single draw of the flip noise. That
    // derivation (a max against one draw of a max) is the weak point: issue 20 replaces it.
    double tol = fp8_tolerance(floor, 3e-2);
    for (int t = 0; t < lay.num_tensors; t++) {
        CHECK(st[lay.scale_inv + t] == 1.0f / st[lay.scale + t], "scale_inv of tensor %d is not 1/scale", t);
        // the update rolls every slot into its history; the W slots then take the amaxes of the next
        // step's weights, cast right after the update
        if (t % FP8_KINDS == FP8_W) CHECK(st[lay.amax_slot + t] > 0.0f, "W slot of tensor %d empty after the update", t);
        else CHECK(st[lay.amax_slot + t] == 0.0f, "amax slot of tensor %d not cleared by the update", t);
    }
    printf("    fp8 state: worst relative difference of history and scale entries %.2e (flip floor %.2e, tolerance %.2e)\n",
           worst, floor, tol);
    CHECK(zero_gpu == 0, "%d history entries zero on one side only", zero_gpu);
    CHECK(worst < tol, "fp8 state differs: %.3e >= %.3e", worst, tol);
    free(st); free(losses); free(in); free(tg);
    model_free(&m);
    ref_free(&ref); ref_free(&refb);
}
static void test_fp8_state_vs_cpu(void) { fp8_state_check(0, 0, 0); }
static void test_fp8_current_recipe_vs_cpu(void) { fp8_state_check(1, 0, 0); }
static void test_fp8_lm_head_vs_cpu(void) { fp8_state_check(0, 1, 0); }
static void test_fp8_margin_vs_cpu(void) { fp8_state_check(0, 0, 1); }

// The PyTorch fp8 fixture (dev/reference/llama_ref.py: its own fp8 emulation, delayed scaling, grad
// accumulation 2) on the GPU: step-0 logits, the loss of every step and the final fp8 state. The
// GPU's bf16 roundings move values across fp8 rounding boundaries, so the budget is the same as
// against the C reference: twice the flip floor (the C reference with and without bf16 cast inputs
// on the fixture's own model) plus the bf16 budget.
static void test_fp8_vs_pytorch_fixture(void) {
    Fixture fx;
    if (!fixture_load(&fx, "dev/test/fixtures/llama_fp8.bin")) { CHECK(0, "%s (make it: python3 dev/reference/llama_ref.py --out dev/test/fixtures)", fx.error); return; }
    int N = fx.B * fx.T;
    RefModel ref, refb;
    ref_init(&ref, &fx.cfg, fx.B, fx.T, 1, 0, 0, fx.fp8_history, fx.fp8_margin);
    ref_init(&refb, &fx.cfg, fx.B, fx.T, 1, 0, 0, fx.fp8_history, fx.fp8_margin);
    memcpy(ref.params, fx.params, fx.num_params * sizeof(float));
    memcpy(refb.params, fx.params, fx.num_params * sizeof(float));
    refb.fp8_bf16_inputs = 1;
    ref_forward(&ref, fx.inputs, fx.targets);
    ref_forward(&refb, fx.inputs, fx.targets);
    size_t nl = (size_t)N * fx.cfg.V;
    double floor_l = rel_err(refb.logits, ref.logits, nl);
    ref_free(&ref); ref_free(&refb);
    ref_init(&refb, &fx.cfg, fx.B, fx.T, 1, 0, 0, fx.fp8_history, fx.fp8_margin);
    memcpy(refb.params, fx.params, fx.num_params * sizeof(float));
    refb.fp8_bf16_inputs = 1;

    Model m;
    ModelOptions mo = model_options(fx.B, fx.T, PREC_FP8);
    mo.fp8_history = fx.fp8_history; mo.fp8_margin = fx.fp8_margin;
    model_init(&m, &fx.cfg, &mo, NULL);
    model_set_weights(&m, fx.params);
    StepZero g = gpu_step_zero(&m, fx.inputs, fx.targets);
    double el = rel_err(g.logits, fx.logits, nl), tol_l = fp8_tolerance(floor_l, BF16_SMALL.logits);
    printf("    step-0 logits rel %.2e (flip floor %.2e, tolerance %.2e)\n", el, floor_l, tol_l);
    CHECK(el < tol_l, "step-0 logits rel %.3e >= %.3e", el, tol_l);
    free_step_zero(&g);
    model_free(&m);

    model_init(&m, &fx.cfg, &mo, NULL);
    model_set_weights(&m, fx.params);
    AdamWParams h = {fx.lr, fx.beta1, fx.beta2, fx.adam_eps, fx.weight_decay, fx.grad_clip};
    float *losses = (float *)mallocCheck((size_t)fx.grad_accum * N * sizeof(float));
    for (int s = 0; s < fx.nsteps; s++) {
        float lb = ref_train_step(&refb, fx.inputs, fx.targets, fx.grad_accum, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, NULL);
        StepResult r = train_step_on(&m, fx.inputs, fx.targets, fx.grad_accum, &h, losses);
        float l = r.loss;
        double tol = fp8_tolerance(fabs(lb - fx.losses[s]) / fx.losses[s], BF16_STEPS_TOL);
        printf("    step %d loss gpu %.5f torch %.5f (bf16-input cpu %.5f, tolerance %.2e)\n", s, l, fx.losses[s], lb, tol);
        CHECK(!r.skipped && fabs(l - fx.losses[s]) / fx.losses[s] < tol, "step %d loss %.5f vs torch %.5f", s, l, fx.losses[s]);
    }
    float *st = download_f32(m.fp8_state.buffer, m.fp8_state.layout.total);
    int zero_gpu = 0, zero_floor = 0;
    double worst = fp8_state_diff(st, fx.fp8_state, fx.fp8_layout, &zero_gpu);
    double floor = fp8_state_diff(refb.fp8_state, fx.fp8_state, fx.fp8_layout, &zero_floor), tol = fp8_tolerance(floor, 3e-2);
    printf("    fp8 state vs torch: worst %.2e (flip floor %.2e, tolerance %.2e)\n", worst, floor, tol);
    CHECK(zero_gpu == 0, "%d history entries zero on one side only", zero_gpu);
    CHECK(worst < tol, "fp8 state differs from torch's: %.3e >= %.3e", worst, tol);
    free(st); free(losses);
    model_free(&m);
    ref_free(&refb);
    fixture_free(&fx);
}

// ----------------------------------------------------------------------------------------------
// fp8 linears GEMM by GEMM, on the GPU's own inputs: the sharp check. A probe (FP8_GEMM_PROBE in
// the trainer) stops after every fp8 GEMM of three training steps and checks, on the host:
// - the codes: X, W and dY are exactly the host codec's E4M3/E5M2(bf16 value * scale), from the
//   very bf16 values the producer kernel wrote (the model is given bf16 copies of the norm and
//   SwiGLU outputs and of w13's dY, which fp8 training does not keep: the kernels then write both,
//   and the fp8 copy is cast from the rounded bf16 value either way, llmc/packed.cuh); W from the
//   step's master weights; the transposes (dY^T, X^T, W^T) exactly the transposes of the codes the
//   forward and the dY producer wrote, each the very operand its GEMM read (w2's X^T is written by
//   SwiGLU's forward beside the row-major codes fprop reads, or under -r 1 by the recomputed SwiGLU;
//   w13's dY^T by SwiGLU's backward);
// - the amaxes: each tensor's slot is exactly max |bf16 value| of its one producer (one micro-step);
// - the scales: delayed, every cast of the step uses the scale the step began with, and that state
//   is the host rule (fp8_update_state, margin included) applied to the state the last GEMM of the
//   previous step saw; live (the first step, the current recipe), each scale is the host rule on
//   that tensor's own amax;
// - the GEMMs: Y, dX and dW against the fp64 product of the decoded codes times the two scale_invs
//   (tolerances below);
// - the fp8 health counts: each tensor's underflows and saturations of the step are exactly
//   fp8_underflows / fp8_saturates summed over the values its casts cast (a fourth run pushes the X
//   scales down and the dY scales up in its last step, so that both counts are large).
// A mutation run (dev/test/test_mutations.sh, dev/test/README.md) shows each named bug failing here.
// A block-scaled linear (-fp8_grain block, -fp8_fallback block; llmc/fp8_block.cuh) is held to the C
// reference's block casts (dev/test/llama_ref.h: ref_fp8_block_cast) on the same bf16 values: every
// code of X, X^T, W, W^T, dY and dY^T and every block scale_inv bit for bit (the GPU's in cuBLASLt's
// layouts, mapped onto the reference's row-major ones), W^T the transpose of W's codes and grid, the
// slots max |bf16 value| and the per-tensor scales untouched (block scales are current: no live
// scale even in step 0), the counts of every cast made (X and dY twice); Y, dX and dW within the bf16
// output rounding of ref_fp8_block_gemm on the GPU's codes and scales. A linear fallen back to bf16
// runs no fp8 GEMM and must record and count nothing, its slots and histories 0.

#define PROBE_MAX_L 4
typedef struct {
    const Model *model;        // the model being probed (the probe sees only each GEMM's view)
    int live;                  // this step's casts scale live (the first step, or the current recipe)
    float *state0;             // (host) the fp8 state the step began with
    float *master;             // (host) the step's fp32 master weights
    float *last_state;         // (host) the fp8 state at the latest backward GEMM: what the update reads
    uint8_t *x[LINS_PER_LAYER + 1][PROBE_MAX_L], *w[LINS_PER_LAYER + 1][PROBE_MAX_L]; // each forward's codes
    float *x_src[LINS_PER_LAYER + 1][PROBE_MAX_L];  // a block linear's forward bf16 X, for its X^T in the backward
    float *w_sinv[LINS_PER_LAYER + 1][PROBE_MAX_L]; // and the reference's scale_invs of its W (row-major over the blocks)
    uint64_t *counts;          // (NT, FP8_COUNTS) this step's underflows and saturations by the host definition
    long bad_codes, codes, bad_transposes, bad_slots, bad_scales, bad_sinv, sinvs;
    long qkv_dy_under_elsewhere; // qkv dY underflows outside the first positions' dQ
    double worst[3][2];        // Y, dX, dW over the step's GEMMs: max |gpu - fp64| / max |fp64|, RMS relative error
    int gemms;
} Probe;
static Probe g_probe;

static uint8_t *download_u8(const void *d, size_t n) {
    uint8_t *h = (uint8_t *)mallocCheck(n);
    cudaCheck(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    return h;
}

// Codes of src (n bf16 values, host floats) of tensor t against the host codec, and what the cast
// lost into the step's counts; returns max |src|.
static float probe_codes(const uint8_t *codes, const float *src, size_t n, int t, float scale, Fp8Format fmt) {
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        amax = fmaxf(amax, fabsf(src[i]));
        g_probe.bad_codes += codes[i] != fp8_encode(src[i] * scale, fmt);
        g_probe.counts[FP8_COUNTS * t + FP8_UNDERFLOWS] += fp8_underflows(src[i], scale, fmt);
        g_probe.counts[FP8_COUNTS * t + FP8_SATURATIONS] += fp8_saturates(src[i], scale, fmt);
    }
    g_probe.codes += n;
    return amax;
}

// The slot and the scale of tensor t, whose values just cast had largest magnitude amax.
static void probe_slot_scale(const Model *m, const float *st, int t, float amax, const char *what) {
    Fp8StateLayout lay = m->fp8_state.layout;
    float want = g_probe.live ? fp8_compute_scale(amax, fp8_max_of(t), m->opt.fp8_margin, g_probe.state0[lay.scale + t])
                              : g_probe.state0[lay.scale + t];
    if (st[lay.amax_slot + t] != amax && g_probe.bad_slots++ < 5)
        printf("    %s: amax slot %g, max |bf16 value| %g\n", what, st[lay.amax_slot + t], amax);
    if (st[lay.scale + t] != want && g_probe.bad_scales++ < 5)
        printf("    %s: scale %g, the host rule gives %g (%s)\n", what, st[lay.scale + t], want, g_probe.live ? "live" : "delayed");
}

// out (rows, cols) bf16 on the GPU against sum_k a[r][k] b[c][k] * sa * sb (a, b codes, each with a
// row and an element stride); records max |gpu - fp64| / max |fp64| in worst[0] and the RMS
// relative error ||gpu - fp64|| / ||fp64|| in worst[1].
static void probe_gemm(double worst[2], const floatX *out_d, int rows, int cols, int K, const uint8_t *a, size_t a_row, size_t a_k,
                       Fp8Format fa, float sa, const uint8_t *b, size_t b_row, size_t b_k, Fp8Format fb, float sb) {
    float *out = download_bf16(out_d, (size_t)rows * cols);
    float da[256], db[256];
    for (int i = 0; i < 256; i++) { da[i] = fp8_decode((uint8_t)i, fa); db[i] = fp8_decode((uint8_t)i, fb); }
    double maxdiff = 0.0, maxref = 0.0, sqdiff = 0.0, sqref = 0.0;
    #pragma omp parallel for reduction(max : maxdiff, maxref) reduction(+ : sqdiff, sqref)
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) acc += (double)da[a[r * a_row + k * a_k]] * db[b[c * b_row + k * b_k]];
            acc *= (double)sa * sb;
            double d = out[(size_t)r * cols + c] - acc;
            maxdiff = fmax(maxdiff, fabs(d));
            maxref = fmax(maxref, fabs(acc));
            sqdiff += d * d;
            sqref += acc * acc;
        }
    }
    free(out);
    worst[0] = fmax(worst[0], maxref > 0.0 ? maxdiff / maxref : maxdiff);
    worst[1] = fmax(worst[1], sqref > 0.0 ? sqrt(sqdiff / sqref) : sqrt(sqdiff));
}

static void probe_transpose(const uint8_t *t, const uint8_t *codes, int rows, int cols, const char *what) {
    long bad = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) bad += t[(size_t)c * rows + r] != codes[(size_t)r * cols + c];
    if (bad && g_probe.bad_transposes < 5) printf("    %s: %ld elements differ from the transpose\n", what, bad);
    g_probe.bad_transposes += bad;
}

// ---- the block-scaled linears' GEMMs

// The reference's block cast (ref_fp8_block_cast: blocks of br rows x 128 columns) of src, (rows, cols)
// bf16 values as host floats: the codes the GPU must write into `codes` (decoded values encode back
// exactly), the scale_invs row-major over the blocks into sinv, the cast's counts into tensor t's.
// Returns max |src|.
static float probe_block_ref(const float *src, int rows, int cols, int br, Fp8Format fmt, int t, uint8_t *codes, float *sinv) {
    size_t n = (size_t)rows * cols;
    float *dec = (float *)mallocCheck(n * sizeof(float));
    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_block_cast(src, rows, cols, br, fmt, 0, 0, dec, sinv, counts);
    for (size_t i = 0; i < n; i++) codes[i] = fp8_encode(dec[i], fmt);
    for (int k = 0; k < FP8_COUNTS; k++) g_probe.counts[FP8_COUNTS * t + k] += counts[k];
    free(dec);
    return amax;
}

// Where cuBLASLt's layout keeps block (p, b) of a (rows, cols) operand's scale_invs: VEC128 (1x128
// blocks, br 1) at b * rows + p, BLK128x128 (br 128) at p * L4 + b (llmc/fp8_block.cuh).
static size_t probe_block_at(int rows, int cols, int br, int p, int b) {
    return br == 1 ? (size_t)b * rows + p : (size_t)p * fp8_block_grid_ld(cols) + b;
}

// An operand as the GPU holds it: its codes decoded and its scale_invs, from cuBLASLt's layout into
// the reference's (row-major over the blocks), what ref_fp8_block_gemm multiplies.
typedef struct { float *dec, *sinv; } BlockOperand;
static BlockOperand probe_block_gpu(const void *codes_d, const float *sinv_d, int rows, int cols, int br, Fp8Format fmt) {
    size_t n = (size_t)rows * cols, P = CEIL_DIV(rows, br), L = CEIL_DIV(cols, 128);
    size_t count = br == 1 ? fp8_block_vec_count(rows, cols) : fp8_block_grid_count(rows, cols);
    uint8_t *codes = download_u8(codes_d, n);
    float *gs = download_f32(sinv_d, count);
    BlockOperand o = {(float *)mallocCheck(n * sizeof(float)), (float *)mallocCheck(P * L * sizeof(float))};
    for (size_t i = 0; i < n; i++) o.dec[i] = fp8_decode(codes[i], fmt);
    for (size_t p = 0; p < P; p++)
        for (size_t b = 0; b < L; b++) o.sinv[p * L + b] = gs[probe_block_at(rows, cols, br, (int)p, (int)b)];
    free(codes); free(gs);
    return o;
}
static void free_block_operand(BlockOperand *o) { free(o->dec); free(o->sinv); }

// The GPU's codes and scale_invs of a (rows, cols) operand of tensor t against the reference's block
// cast of src (its counts into the probe's); the reference's scale_invs into sinv_ref if not NULL.
// Returns max |src|.
static float probe_block_operand(const void *codes_d, const float *sinv_d, const float *src, int rows, int cols, int br, Fp8Format fmt,
                                 int t, const char *what, float *sinv_ref) {
    size_t n = (size_t)rows * cols, P = CEIL_DIV(rows, br), L = CEIL_DIV(cols, 128);
    uint8_t *want = (uint8_t *)mallocCheck(n), *got = download_u8(codes_d, n);
    float *sinv = (float *)mallocCheck(P * L * sizeof(float));
    float amax = probe_block_ref(src, rows, cols, br, fmt, t, want, sinv);
    BlockOperand o = probe_block_gpu(codes_d, sinv_d, rows, cols, br, fmt);
    long bad = 0, bad_s = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != want[i];
    for (size_t i = 0; i < P * L; i++) bad_s += memcmp(&o.sinv[i], &sinv[i], sizeof(float)) != 0;
    if ((bad || bad_s) && g_probe.bad_codes + g_probe.bad_sinv < 5)
        printf("    %s: %ld of %zu codes and %ld of %zu block scale_invs differ from the reference's\n", what, bad, n, bad_s, P * L);
    g_probe.bad_codes += bad; g_probe.codes += n;
    g_probe.bad_sinv += bad_s; g_probe.sinvs += P * L;
    if (sinv_ref) memcpy(sinv_ref, sinv, P * L * sizeof(float));
    free(want); free(got); free(sinv);
    free_block_operand(&o);
    return amax;
}

// The GPU's n bf16 outputs at out_d against the reference's `want`: max |gpu - ref| / max |ref| into
// worst[0], the RMS relative error into worst[1].
static void probe_out_error(double worst[2], const floatX *out_d, const float *want, size_t n) {
    float *out = download_bf16(out_d, n);
    double maxdiff = 0.0, maxref = 0.0, sqdiff = 0.0, sqref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - want[i];
        maxdiff = fmax(maxdiff, fabs(d));
        maxref = fmax(maxref, fabs((double)want[i]));
        sqdiff += d * d;
        sqref += (double)want[i] * want[i];
    }
    worst[0] = fmax(worst[0], maxref > 0.0 ? maxdiff / maxref : maxdiff);
    worst[1] = fmax(worst[1], sqref > 0.0 ? sqrt(sqdiff / sqref) : sqrt(sqdiff));
    free(out);
}

// out (I, J) bf16 on the GPU against ref_fp8_block_gemm of the GPU's operands (a (I, K) in blocks of
// bra rows, b (J, K) of brb), into worst as probe_out_error.
static void probe_block_gemm(double worst[2], const floatX *out_d, int I, int J, int K, BlockOperand a, int bra, BlockOperand b, int brb) {
    float *want = (float *)mallocCheck((size_t)I * J * sizeof(float));
    ref_fp8_block_gemm(want, a.dec, a.sinv, bra, b.dec, b.sinv, brb, I, J, K, 0);
    probe_out_error(worst, out_d, want, (size_t)I * J);
    free(want);
}

static float *transposed(const float *in, int rows, int cols) {
    float *t = (float *)mallocCheck((size_t)rows * cols * sizeof(float));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = in[(size_t)r * cols + c];
    return t;
}

// A block tensor's slot after its casts: max |bf16 value|; its per-tensor scale is the one the step
// began with (the block casts set none, live or not).
static void probe_block_slot(const Model *m, const float *st, int t, float amax, const char *what) {
    Fp8StateLayout lay = m->fp8_state.layout;
    if (st[lay.amax_slot + t] != amax && g_probe.bad_slots++ < 5) printf("    %s: amax slot %g, max |bf16 value| %g\n", what, st[lay.amax_slot + t], amax);
    if (st[lay.scale + t] != g_probe.state0[lay.scale + t] && g_probe.bad_scales++ < 5)
        printf("    %s: a block tensor's per-tensor scale moved within the step, %g to %g\n", what, g_probe.state0[lay.scale + t], st[lay.scale + t]);
}

static void fp8_block_gemm_probe(const Model *m, const Fp8GemmView *v, const float *st, const char *what) {
    const LlamaConfig *c = &m->cfg;
    int l = v->l, lin = v->lin, N = v->N, IN = v->IN, OUT = v->OUT;
    int tx = fp8_tensor(c, l, lin, FP8_X), tw = fp8_tensor(c, l, lin, FP8_W), tdy = fp8_tensor(c, l, lin, FP8_DY);
    if (!v->backward) {
        CHECK(v->src != NULL, "%s: the probe needs the bf16 X", what);
        if (v->src == NULL) return;
        float *src = download_bf16(v->src, (size_t)N * IN);
        probe_block_slot(m, st, tx, probe_block_operand(v->a, v->a_sinv, src, N, IN, 1, FP8_E4M3, tx, what, NULL), what);
        // W: bf16(master) in 128x128 blocks, as AdamW's master or the weight cast makes it
        size_t wn = (size_t)IN * OUT, at = m->param[LINEAR_PARAM[lin]] - m->params_memory + (size_t)l * wn;
        float *wsrc = (float *)mallocCheck(wn * sizeof(float));
        for (size_t i = 0; i < wn; i++) wsrc[i] = __bfloat162float(__float2bfloat16_rn(g_probe.master[at + i]));
        free(g_probe.w_sinv[lin][l]);
        g_probe.w_sinv[lin][l] = (float *)mallocCheck((size_t)CEIL_DIV(OUT, 128) * CEIL_DIV(IN, 128) * sizeof(float));
        probe_block_slot(m, st, tw, probe_block_operand(v->b, v->b_sinv, wsrc, OUT, IN, 128, FP8_E4M3, tw, what, g_probe.w_sinv[lin][l]), what);
        BlockOperand x = probe_block_gpu(v->a, v->a_sinv, N, IN, 1, FP8_E4M3), w = probe_block_gpu(v->b, v->b_sinv, OUT, IN, 128, FP8_E4M3);
        probe_block_gemm(g_probe.worst[0], v->out, N, OUT, IN, x, 1, w, 128);
        free_block_operand(&x); free_block_operand(&w);
        free(g_probe.w[lin][l]); free(g_probe.x_src[lin][l]);
        g_probe.w[lin][l] = download_u8(v->b, wn);
        g_probe.x_src[lin][l] = src;
        free(wsrc);
        return;
    }
    CHECK(v->src != NULL && g_probe.x_src[lin][l] != NULL, "%s: the probe needs the bf16 dY and the forward's X", what);
    if (v->src == NULL || g_probe.x_src[lin][l] == NULL) return;
    float *src = download_bf16(v->src, (size_t)N * OUT), *src_t = transposed(src, N, OUT), *x_t = transposed(g_probe.x_src[lin][l], N, IN);
    float amax = probe_block_operand(v->a, v->a_sinv, src, N, OUT, 1, FP8_E5M2, tdy, what, NULL);
    probe_block_operand(v->a_t, v->a_t_sinv, src_t, OUT, N, 1, FP8_E5M2, tdy, what, NULL);
    probe_block_slot(m, st, tdy, amax, what);
    probe_block_slot(m, st, tx, probe_block_operand(v->x_t, v->x_t_sinv, x_t, IN, N, 1, FP8_E4M3, tx, what, NULL), what);
    // W^T: W's codes transposed, and W's blocks' scale_invs transposed
    size_t wn = (size_t)IN * OUT, Lin = CEIL_DIV(IN, 128), Lout = CEIL_DIV(OUT, 128);
    uint8_t *wt = download_u8(v->b, wn);
    probe_transpose(wt, g_probe.w[lin][l], OUT, IN, what);
    BlockOperand w_t = probe_block_gpu(v->b, v->b_sinv, IN, OUT, 128, FP8_E4M3);
    long bad_s = 0;
    for (size_t b = 0; b < Lin; b++)
        for (size_t p = 0; p < Lout; p++) bad_s += memcmp(&w_t.sinv[b * Lout + p], &g_probe.w_sinv[lin][l][p * Lin + b], sizeof(float)) != 0;
    if (bad_s && g_probe.bad_sinv < 5) printf("    %s: %ld of W^T's %zu block scale_invs are not W's transposed\n", what, bad_s, Lin * Lout);
    g_probe.bad_sinv += bad_s; g_probe.sinvs += Lin * Lout;
    BlockOperand dy = probe_block_gpu(v->a, v->a_sinv, N, OUT, 1, FP8_E5M2), dy_t = probe_block_gpu(v->a_t, v->a_t_sinv, OUT, N, 1, FP8_E5M2);
    BlockOperand xt = probe_block_gpu(v->x_t, v->x_t_sinv, IN, N, 1, FP8_E4M3);
    probe_block_gemm(g_probe.worst[1], v->out, N, IN, OUT, dy, 1, w_t, 128); // dX = dY W, with W^T (IN, OUT) in the TN form
    probe_block_gemm(g_probe.worst[2], v->dw, OUT, IN, N, dy_t, 1, xt, 1);   // dW = dY^T X over the tokens
    free_block_operand(&dy); free_block_operand(&dy_t); free_block_operand(&xt); free_block_operand(&w_t);
    free(src); free(src_t); free(x_t); free(wt);
}

// ---- the row-scaled linears' GEMMs (llmc/recipe_row.cuh): every operand E4M3 with one scale_inv per row

// The GPU's codes and per-row scale_invs of a (rows, cols) operand against the reference's row cast of
// src (ref_fp8_row_cast), bit for bit; the cast's counts into tensor t's (t < 0: a recast that counts
// nothing, W^T's). Returns max |src|.
static float probe_row_operand(const void *codes_d, const float *sinv_d, const float *src, int rows, int cols, int t,
                               const char *what) {
    size_t n = (size_t)rows * cols;
    float *dec = (float *)mallocCheck(n * sizeof(float)), *sinv = (float *)mallocCheck(rows * sizeof(float));
    uint64_t counts[FP8_COUNTS] = {0, 0};
    float amax = ref_fp8_row_cast(src, rows, cols, 0, dec, sinv, counts);
    uint8_t *got = download_u8(codes_d, n);
    float *gs = download_f32(sinv_d, rows);
    long bad = 0, bad_s = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != fp8_encode(dec[i], FP8_E4M3);
    for (int r = 0; r < rows; r++) bad_s += memcmp(&gs[r], &sinv[r], sizeof(float)) != 0;
    if ((bad || bad_s) && g_probe.bad_codes + g_probe.bad_sinv < 5)
        printf("    %s: %ld of %zu codes and %ld of %d row scale_invs differ from the reference's\n", what, bad, n, bad_s, rows);
    g_probe.bad_codes += bad; g_probe.codes += n;
    g_probe.bad_sinv += bad_s; g_probe.sinvs += rows;
    for (int k = 0; t >= 0 && k < FP8_COUNTS; k++) g_probe.counts[FP8_COUNTS * t + k] += counts[k];
    free(dec); free(sinv); free(got); free(gs);
    return amax;
}

// out (I, J) bf16 on the GPU against ref_fp8_row_gemm of the GPU's operands, a (I, K) and b (J, K) E4M3
// codes with their row scale_invs, into worst as probe_out_error.
static void probe_row_gemm(double worst[2], const floatX *out_d, int I, int J, int K, const void *a_d, const float *sa_d,
                           const void *b_d, const float *sb_d) {
    uint8_t *a = download_u8(a_d, (size_t)I * K), *b = download_u8(b_d, (size_t)J * K);
    float *sa = download_f32(sa_d, I), *sb = download_f32(sb_d, J);
    float *da = (float *)mallocCheck((size_t)I * K * sizeof(float)), *db = (float *)mallocCheck((size_t)J * K * sizeof(float));
    float *want = (float *)mallocCheck((size_t)I * J * sizeof(float));
    for (size_t i = 0; i < (size_t)I * K; i++) da[i] = fp8_decode(a[i], FP8_E4M3);
    for (size_t i = 0; i < (size_t)J * K; i++) db[i] = fp8_decode(b[i], FP8_E4M3);
    ref_fp8_row_gemm(want, da, sa, db, sb, I, J, K, 0);
    probe_out_error(worst, out_d, want, (size_t)I * J);
    free(a); free(b); free(sa); free(sb); free(da); free(db); free(want);
}

// A row-scaled linear's GEMM: forward X per token and W per output row (W from bf16(master), as the
// weight cast or AdamW's master makes it), Y; backward dY per token and dY^T, X^T per column of the
// forward's X, W^T per input column of W (a recast, counted nowhere), dX and dW. Slots and scales as a
// block tensor's (current scaling: the per-tensor scale never moves).
static void fp8_row_gemm_probe(const Model *m, const Fp8GemmView *v, const float *st, const char *what) {
    const LlamaConfig *c = &m->cfg;
    int l = v->l, lin = v->lin, N = v->N, IN = v->IN, OUT = v->OUT;
    int tx = fp8_tensor(c, l, lin, FP8_X), tw = fp8_tensor(c, l, lin, FP8_W), tdy = fp8_tensor(c, l, lin, FP8_DY);
    size_t wn = (size_t)IN * OUT, at = m->param[LINEAR_PARAM[lin]] - m->params_memory + (size_t)l * wn;
    float *wsrc = (float *)mallocCheck(wn * sizeof(float));
    for (size_t i = 0; i < wn; i++) wsrc[i] = __bfloat162float(__float2bfloat16_rn(g_probe.master[at + i]));
    if (!v->backward) {
        CHECK(v->src != NULL, "%s: the probe needs the bf16 X", what);
        if (v->src == NULL) { free(wsrc); return; }
        float *src = download_bf16(v->src, (size_t)N * IN);
        probe_block_slot(m, st, tx, probe_row_operand(v->a, v->a_sinv, src, N, IN, tx, what), what);
        probe_block_slot(m, st, tw, probe_row_operand(v->b, v->b_sinv, wsrc, OUT, IN, tw, what), what);
        probe_row_gemm(g_probe.worst[0], v->out, N, OUT, IN, v->a, v->a_sinv, v->b, v->b_sinv);
        free(g_probe.x_src[lin][l]);
        g_probe.x_src[lin][l] = src;
        free(wsrc);
        return;
    }
    CHECK(v->src != NULL && g_probe.x_src[lin][l] != NULL, "%s: the probe needs the bf16 dY and the forward's X", what);
    if (v->src == NULL || g_probe.x_src[lin][l] == NULL) { free(wsrc); return; }
    float *src = download_bf16(v->src, (size_t)N * OUT), *src_t = transposed(src, N, OUT);
    float *x_t = transposed(g_probe.x_src[lin][l], N, IN), *w_t = transposed(wsrc, OUT, IN);
    float amax = probe_row_operand(v->a, v->a_sinv, src, N, OUT, tdy, what);
    probe_row_operand(v->a_t, v->a_t_sinv, src_t, OUT, N, tdy, what);
    probe_block_slot(m, st, tdy, amax, what);
    probe_block_slot(m, st, tx, probe_row_operand(v->x_t, v->x_t_sinv, x_t, IN, N, tx, what), what);
    probe_row_operand(v->b, v->b_sinv, w_t, IN, OUT, -1, what);
    probe_row_gemm(g_probe.worst[1], v->out, N, IN, OUT, v->a, v->a_sinv, v->b, v->b_sinv);     // dX = dY W, W^T in the TN form
    probe_row_gemm(g_probe.worst[2], v->dw, OUT, IN, N, v->a_t, v->a_t_sinv, v->x_t, v->x_t_sinv); // dW = dY^T X over the tokens
    free(src); free(src_t); free(x_t); free(w_t); free(wsrc);
}

static void fp8_gemm_probe(const Fp8GemmView *v) {
    const Model *m = g_probe.model;
    cudaCheck(cudaDeviceSynchronize());
    const LlamaConfig *c = &m->cfg;
    Fp8StateLayout lay = m->fp8_state.layout;
    float *st = download_f32(m->fp8_state.buffer, lay.total);
    int l = v->l, lin = v->lin, N = v->N, IN = v->IN, OUT = v->OUT;
    size_t wn = (size_t)IN * OUT;
    char what[96];
    snprintf(what, sizeof(what), "layer %d %s %s", l, LINEAR_NAMES[lin < LINS_PER_LAYER ? lin : 0], v->backward ? "backward" : "forward");
    if (lin == LIN_LM_HEAD) snprintf(what, sizeof(what), "lm_head %s", v->backward ? "backward" : "forward");
    int tx = fp8_tensor(c, l, lin, FP8_X), tw = fp8_tensor(c, l, lin, FP8_W), tdy = fp8_tensor(c, l, lin, FP8_DY);
    if (v->a_sinv != NULL) { // a block- or row-scaled linear
        if (linear_grain(&m->linears, l, lin) == FP8_GRAIN_ROW) fp8_row_gemm_probe(m, v, st, what);
        else fp8_block_gemm_probe(m, v, st, what);
        if (v->backward) { free(g_probe.last_state); g_probe.last_state = st; st = NULL; }
    } else if (!v->backward) {
        CHECK(v->src != NULL, "%s: the probe needs the bf16 X", what);
        if (v->src == NULL) { free(st); return; }
        uint8_t *x = download_u8(v->a, (size_t)N * IN), *w = download_u8(v->b, wn);
        float *src = download_bf16(v->src, (size_t)N * IN);
        probe_slot_scale(m, st, tx, probe_codes(x, src, (size_t)N * IN, tx, st[lay.scale + tx], FP8_E4M3), what);
        // W: bf16(master), as AdamW or the weight cast makes it (round to nearest even)
        size_t at = m->param[LINEAR_PARAM[lin]] - m->params_memory + (size_t)l * wn;
        float *wsrc = (float *)mallocCheck(wn * sizeof(float));
        for (size_t i = 0; i < wn; i++) wsrc[i] = __bfloat162float(__float2bfloat16_rn(g_probe.master[at + i]));
        probe_slot_scale(m, st, tw, probe_codes(w, wsrc, wn, tw, st[lay.scale + tw], FP8_E4M3), what);
        probe_gemm(g_probe.worst[0], v->out, N, OUT, IN, x, IN, 1, FP8_E4M3, st[lay.scale_inv + tx], w, IN, 1, FP8_E4M3,
                   st[lay.scale_inv + tw]);
        free(g_probe.x[lin][l]); free(g_probe.w[lin][l]);
        g_probe.x[lin][l] = x; g_probe.w[lin][l] = w;
        free(src); free(wsrc);
    } else {
        CHECK(v->src != NULL && g_probe.x[lin][l] != NULL, "%s: the probe needs the bf16 dY and the forward's codes", what);
        if (v->src == NULL || g_probe.x[lin][l] == NULL) { free(st); return; }
        const uint8_t *x = g_probe.x[lin][l], *w = g_probe.w[lin][l];
        uint8_t *dy = download_u8(v->a, (size_t)N * OUT), *wt = download_u8(v->b, wn);
        uint8_t *dyt = download_u8(v->a_t, (size_t)N * OUT), *xt = download_u8(v->x_t, (size_t)N * IN);
        float *src = download_bf16(v->src, (size_t)N * OUT);
        probe_slot_scale(m, st, tdy, probe_codes(dy, src, (size_t)N * OUT, tdy, st[lay.scale + tdy], FP8_E5M2), what);
        if (lin == LIN_QKV) { // only the first positions' dQ (zero in exact arithmetic, fp8_counts_check) may underflow
            for (int n = 0; n < N; n++)
                for (int j = n % m->opt.T == 0 ? c->C : 0; j < OUT; j++)
                    g_probe.qkv_dy_under_elsewhere += fp8_underflows(src[(size_t)n * OUT + j], st[lay.scale + tdy], FP8_E5M2);
        }
        probe_transpose(dyt, dy, N, OUT, what);
        probe_transpose(xt, x, N, IN, what);
        probe_transpose(wt, w, OUT, IN, what);
        // dX (N, IN) = dY W; dW (OUT, IN) = dY^T X, from the forward's codes (the transposes are checked above)
        probe_gemm(g_probe.worst[1], v->out, N, IN, OUT, dy, OUT, 1, FP8_E5M2, st[lay.scale_inv + tdy], w, 1, IN, FP8_E4M3,
                   st[lay.scale_inv + tw]);
        probe_gemm(g_probe.worst[2], v->dw, OUT, IN, N, dy, 1, OUT, FP8_E5M2, st[lay.scale_inv + tdy], x, 1, IN, FP8_E4M3,
                   st[lay.scale_inv + tx]);
        free(g_probe.last_state);
        g_probe.last_state = st;
        st = NULL;
        free(dy); free(wt); free(dyt); free(xt); free(src);
    }
    g_probe.gemms++;
    free(st);
}

// The GPU multiplies the same codes exactly and accumulates in fp32, then rounds to bf16: an error
// uniform over half an ulp, whose RMS is ulp / sqrt(12) = 1.1e-3 to 2.3e-3 of a value. Measured on
// the H200 (2026-12-01, all three configurations, 3 steps each): RMS relative error 1.67e-3 to
// 2.06e-3 (the output rounding, nothing else), max |diff| / max |ref| 2.8e-3 to 5.2e-3. The
// tolerances are twice the worst measured. A GEMM fed the bf16 tensors instead of the codes is off
// by the fp8 quantization itself: the bf16_backward mutation measured dW RMS 5.9e-2, 15x GEMM_RMS_TOL.
#define GEMM_MAX_TOL 1e-2
#define GEMM_RMS_TOL 4e-3

// Scales pushed off the recipe's, before a step: X's down 2^12 (values below ~2^-10 of the amax
// underflow), dY's up 2^6 (values above 1/64 of the amax saturate). W, already cast, keeps its own.
static void push_scales_off(Model *m) {
    Fp8State *fs = &m->fp8_state;
    Fp8StateLayout lay = fs->layout;
    float *st = download_f32(fs->buffer, lay.total);
    for (int t = 0; t < lay.num_tensors; t++) {
        int kind = t % FP8_KINDS;
        if (kind == FP8_W) continue;
        st[lay.scale + t] *= kind == FP8_X ? 0x1p-12f : 0x1p6f;
        st[lay.scale_inv + t] = 1.0f / st[lay.scale + t];
    }
    cudaCheck(cudaMemcpy(fs->buffer, st, lay.total * sizeof(float), cudaMemcpyHostToDevice));
    fp8_publish_scale_inv(fs->gemm_scale_inv, fs->buffer + lay.scale_inv, lay.num_tensors, g_stream);
    free(st);
}

// The last step's health counts on the GPU against the probe's host counts: every entry exactly.
static void probe_check_counts(const Model *m, int step, int want_both) {
    size_t nc = (size_t)FP8_COUNTS * m->fp8_state.layout.num_tensors;
    uint64_t *gpu = (uint64_t *)mallocCheck(nc * sizeof(uint64_t));
    cudaCheck(cudaMemcpy(gpu, m->fp8_state.counts + nc, nc * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    long bad = 0;
    uint64_t total[FP8_COUNTS] = {0, 0};
    for (size_t i = 0; i < nc; i++) {
        if (gpu[i] != g_probe.counts[i] && bad++ < 5)
            printf("    tensor %zu %s: %llu on the GPU, %llu by the host definition\n", i / FP8_COUNTS,
                   i % FP8_COUNTS == FP8_UNDERFLOWS ? "underflows" : "saturations", (unsigned long long)gpu[i],
                   (unsigned long long)g_probe.counts[i]);
        total[i % FP8_COUNTS] += g_probe.counts[i];
    }
    printf("    step %d health: %llu underflows, %llu saturations in all; %ld counts differ; %ld qkv dY underflows outside the"
           " first positions' dQ\n", step, (unsigned long long)total[FP8_UNDERFLOWS], (unsigned long long)total[FP8_SATURATIONS], bad,
           g_probe.qkv_dy_under_elsewhere);
    CHECK(bad == 0, "step %d: %ld fp8 health counts differ from the host definition", step, bad);
    if (want_both) CHECK(total[FP8_UNDERFLOWS] > 1000 && total[FP8_SATURATIONS] > 1000,
                         "step %d: the pushed scales gave only %llu underflows and %llu saturations", step,
                         (unsigned long long)total[FP8_UNDERFLOWS], (unsigned long long)total[FP8_SATURATIONS]);
    free(gpu);
}

// Of the X and dY tensors (whose scales the probe holds to the host rule under every recipe and
// weight cache), how many the update about to run on state st scales differently for dropping the
// oldest entry of their full history: that entry is larger than every other entry and the slot.
static int probe_drops_deciding(const float *st, Fp8StateLayout lay) {
    int H = lay.history_len, n = 0;
    for (int t = 0; t < lay.num_tensors; t++) {
        if (t % FP8_KINDS == FP8_W) continue;
        const float *hist = st + lay.amax_history + (size_t)t * H;
        float kept = isfinite(st[lay.amax_slot + t]) ? st[lay.amax_slot + t] : 0.0f;
        for (int k = 0; k < H - 1; k++) if (isfinite(hist[k]) && hist[k] > kept) kept = hist[k];
        n += isfinite(hist[H - 1]) && hist[H - 1] > kept;
    }
    return n;
}

// The linears' grains of a probed run: all per-tensor; layer 0's w2 and qkv block-scaled, the rest
// per-tensor (set as the fallback sets them; its threshold 100% switches nothing else); every linear
// block-scaled (-fp8_grain block); layer 0's w2 and layer 1's qkv fallen back to bf16; the same two
// row-scaled (-fp8_fallback row); every linear row-scaled (-fp8_grain row).
enum { PROBE_PER_TENSOR, PROBE_SOME_BLOCK, PROBE_ALL_BLOCK, PROBE_SOME_BF16, PROBE_SOME_ROW, PROBE_ALL_ROW };

// `steps` steps (the first live, then delayed unless current) with every fp8 GEMM probed, amax
// history length `history`; with push_off, the last step runs with push_scales_off's scales. More
// steps than history + 1 roll entries out of full histories, each update checked against the host rule.
static void fp8_probed_steps(int current, int weight_cache, int margin, int lm_head, int recompute, int push_off, int history,
                             int steps, int grains = PROBE_PER_TENSOR) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T, L = c.L;
    if (L > PROBE_MAX_L) FATAL("fp8_probed_steps: the probe keeps the codes of %d layers, the model has %d", PROBE_MAX_L, L);
    size_t NC = (size_t)N * c.C, NFF = (size_t)N * c.FF;
    Model m;
    ModelOptions mo = model_options(B, T, PREC_FP8);
    mo.fp8_current = current; mo.fp8_history = history; mo.fp8_margin = margin; mo.recompute = recompute;
    mo.fp8_weight_cache = weight_cache; mo.fp8_lm_head = lm_head;
    if (grains == PROBE_ALL_BLOCK) mo.fp8_grain = FP8_GRAIN_BLOCK;
    if (grains == PROBE_ALL_ROW) mo.fp8_grain = FP8_GRAIN_ROW;
    const int some = grains == PROBE_SOME_BLOCK ? FP8_GRAIN_BLOCK : grains == PROBE_SOME_BF16 ? FP8_GRAIN_BF16
                   : grains == PROBE_SOME_ROW ? FP8_GRAIN_ROW : 0;
    if (some) {
        mo.fp8_fallback = some;
        mo.fp8_fallback_millionths = 1000000; mo.fp8_fallback_patience = 1;
    }
    model_init(&m, &c, &mo, NULL);
    if (some) { linear_set_grain(&m.linears, 0, LIN_W2, some); linear_set_grain(&m.linears, some == FP8_GRAIN_BF16 ? 1 : 0, LIN_QKV, some); }
    float *w = (float *)mallocCheck(m.num_params * sizeof(float));
    model_init_weights(&m, 51, w);
    model_set_weights(&m, w);
    free(w);
    // the bf16 copies fp8 training does not keep: the producers then write them beside the fp8 copy
    Activations *a = &m.acts;
    a->ln1 = (floatX *)cudaMallocCheck(L * NC * sizeof(floatX), "probe ln1");
    a->ln2 = (floatX *)cudaMallocCheck(L * NC * sizeof(floatX), "probe ln2");
    a->swiglu = (floatX *)cudaMallocCheck((recompute ? 1 : L) * NFF * sizeof(floatX), "probe swiglu");
    a->dfch = (floatX *)cudaMallocCheck(2 * NFF * sizeof(floatX), "probe dfch");
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    float *losses = (float *)mallocCheck(N * sizeof(float));
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    Fp8StateLayout lay = m.fp8_state.layout;
    memset(&g_probe, 0, sizeof(g_probe));
    g_probe.model = &m;
    g_probe.counts = (uint64_t *)mallocCheck((size_t)FP8_COUNTS * lay.num_tensors * sizeof(uint64_t));
    g_fp8_gemm_probe = fp8_gemm_probe;
    int per_step = 0, rolled_out = 0, decided = 0;
    for (int l = 0; l < L; l++)
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? m.fp8.lm_head : 0); lin++) per_step += 2 * (linear_grain(&m.linears, l, lin) != FP8_GRAIN_BF16);
    for (int step = 0; step < steps; step++) {
        random_tokens(in, N, c.V, 60 + step);
        random_tokens(tg, N, c.V, 70 + step);
        free(g_probe.state0); free(g_probe.master);
        g_probe.state0 = download_f32(m.fp8_state.buffer, lay.total);
        g_probe.master = download_f32(m.master, m.num_params);
        g_probe.live = current || step == 0;
        if (step > 0) { // the state this step began with is the host rule applied to what the last GEMM saw
            float *want = g_probe.last_state;
            if (step > history) { // the update after step - 1 found the history full
                rolled_out++;
                decided += probe_drops_deciding(want, lay);
            }
            fp8_update_state(want, lay, margin);
            long bad = 0;
            for (int t = 0; t < lay.num_tensors; t++) {
                int kind = t % FP8_KINDS;
                for (int k = 0; k < lay.history_len; k++)
                    bad += g_probe.state0[lay.amax_history + (size_t)t * lay.history_len + k] != want[lay.amax_history + (size_t)t * lay.history_len + k];
                if (kind == FP8_W && (weight_cache || current)) continue; // scaled again (live) or filled by the next weights' cast
                bad += g_probe.state0[lay.amax_slot + t] != 0.0f;
                bad += g_probe.state0[lay.scale + t] != want[lay.scale + t] || g_probe.state0[lay.scale_inv + t] != want[lay.scale_inv + t];
            }
            CHECK(bad == 0, "step %d: %ld fp8 state entries differ from the host update of the previous step's state", step, bad);
        }
        if (push_off && step == 2) {
            push_scales_off(&m);
            free(g_probe.state0);
            g_probe.state0 = download_f32(m.fp8_state.buffer, lay.total);
        }
        memset(g_probe.counts, 0, (size_t)FP8_COUNTS * lay.num_tensors * sizeof(uint64_t));
        g_probe.gemms = 0;
        g_probe.bad_codes = g_probe.codes = g_probe.bad_transposes = g_probe.bad_slots = g_probe.bad_scales = g_probe.bad_sinv = g_probe.sinvs = 0;
        g_probe.qkv_dy_under_elsewhere = 0;
        memset(g_probe.worst, 0, sizeof(g_probe.worst));
        train_step_on(&m, in, tg, 1, &h, losses);
        printf("    step %d (%s): %d GEMMs; codes differing %ld of %ld, transposes %ld, slots %ld, scales %ld, block scale_invs %ld of %ld; "
               "GEMM error max/RMS Y %.2e/%.2e dX %.2e/%.2e dW %.2e/%.2e\n", step, g_probe.live ? "live" : "delayed", g_probe.gemms,
               g_probe.bad_codes, g_probe.codes, g_probe.bad_transposes, g_probe.bad_slots, g_probe.bad_scales, g_probe.bad_sinv, g_probe.sinvs,
               g_probe.worst[0][0], g_probe.worst[0][1], g_probe.worst[1][0], g_probe.worst[1][1], g_probe.worst[2][0], g_probe.worst[2][1]);
        CHECK(g_probe.gemms == per_step, "step %d: the probe saw %d fp8 GEMMs, want %d", step, g_probe.gemms, per_step);
        CHECK(g_probe.bad_codes == 0, "step %d: %ld fp8 codes differ from the host codec", step, g_probe.bad_codes);
        CHECK(g_probe.bad_transposes == 0, "step %d: %ld transposed codes differ", step, g_probe.bad_transposes);
        CHECK(g_probe.bad_slots == 0, "step %d: %ld amax slots differ from max |bf16 value|", step, g_probe.bad_slots);
        CHECK(g_probe.bad_scales == 0, "step %d: %ld casts used another scale than the recipe's", step, g_probe.bad_scales);
        CHECK(g_probe.bad_sinv == 0, "step %d: %ld block scale_invs differ from the reference's", step, g_probe.bad_sinv);
        if (grains != PROBE_PER_TENSOR && grains != PROBE_SOME_BF16)
            CHECK(g_probe.sinvs > 0, "step %d: no block- or row-scaled GEMM was probed", step);
        for (int l = 0; l < L && g_probe.last_state; l++) { // a linear fallen back to bf16 records nothing
            for (int lin = 0; lin < LINS_PER_LAYER; lin++) {
                if (linear_grain(&m.linears, l, lin) != FP8_GRAIN_BF16) continue;
                long recorded = 0;
                for (int k = 0; k < FP8_KINDS; k++) {
                    int t = fp8_tensor_index(l, lin, k);
                    recorded += g_probe.last_state[lay.amax_slot + t] != 0.0f;
                    for (int j = 0; j < lay.history_len; j++) recorded += g_probe.last_state[lay.amax_history + (size_t)t * lay.history_len + j] != 0.0f;
                }
                CHECK(recorded == 0, "step %d: layer %d %s, fallen back to bf16, has %ld non-zero amax slots or history entries", step, l,
                      LINEAR_NAMES[lin], recorded);
            }
        }
        for (int k = 0; k < 3; k++) {
            const char *which = k == 0 ? "Y" : k == 1 ? "dX" : "dW";
            CHECK(g_probe.worst[k][0] < GEMM_MAX_TOL, "step %d: %s GEMM max error %.3e >= %.0e", step, which, g_probe.worst[k][0], GEMM_MAX_TOL);
            CHECK(g_probe.worst[k][1] < GEMM_RMS_TOL, "step %d: %s GEMM RMS error %.3e >= %.0e", step, which, g_probe.worst[k][1], GEMM_RMS_TOL);
        }
        probe_check_counts(&m, step, push_off && step == 2);
        if (!push_off) CHECK(g_probe.qkv_dy_under_elsewhere == 0, "step %d: %ld qkv dY values underflow outside the first positions' dQ",
                             step, g_probe.qkv_dy_under_elsewhere);
    }
    if (steps > history + 1) {
        printf("    %d updates rolled an entry out of a full history (length %d); in %d X and dY tensor updates the entry rolled"
               " out was the largest, so their scales hold only if it is dropped\n", rolled_out, history, decided);
        CHECK(decided > 0, "no dropped history entry was the largest: the window's end was never tested");
    }
    g_fp8_gemm_probe = NULL;
    for (int lin = 0; lin <= LINS_PER_LAYER; lin++)
        for (int l = 0; l < PROBE_MAX_L; l++) { free(g_probe.x[lin][l]); free(g_probe.w[lin][l]); free(g_probe.x_src[lin][l]); free(g_probe.w_sinv[lin][l]); }
    free(g_probe.state0); free(g_probe.master); free(g_probe.last_state); free(g_probe.counts);
    memset(&g_probe, 0, sizeof(g_probe));
    cudaCheck(cudaFree(a->ln1)); cudaCheck(cudaFree(a->ln2)); cudaCheck(cudaFree(a->swiglu)); cudaCheck(cudaFree(a->dfch));
    free(in); free(tg); free(losses);
    model_free(&m);
}
static void test_fp8_probed_delayed(void) { fp8_probed_steps(0, 1, 0, 0, 0, 0, 4, 3); }
static void test_fp8_probed_margin_no_cache(void) { fp8_probed_steps(0, 0, 1, 1, 1, 0, 4, 3); }
static void test_fp8_probed_current(void) { fp8_probed_steps(1, 1, 0, 0, 0, 0, 4, 3); }
static void test_fp8_probed_current_recompute(void) { fp8_probed_steps(1, 1, 0, 0, 1, 0, 4, 3); }
static void test_fp8_probed_pushed_scales(void) { fp8_probed_steps(0, 1, 0, 0, 0, 1, 4, 3); }
// Block scaling: layer 0's w2 and qkv block-scaled among per-tensor linears (delayed, W cast by AdamW
// then made again in blocks; the live first step); every linear block-scaled with the fp8 lm_head,
// W cast per use and -r 1 (wo's and w2's X^T cast afresh in the backward, the lm_head's kept); and
// two linears fallen back to bf16 (no fp8 GEMM, nothing recorded or counted for them).
static void test_fp8_probed_block_some(void) { fp8_probed_steps(0, 1, 0, 0, 0, 0, 4, 3, PROBE_SOME_BLOCK); }
static void test_fp8_probed_block_all(void) { fp8_probed_steps(0, 0, 0, 1, 1, 0, 4, 3, PROBE_ALL_BLOCK); }
static void test_fp8_probed_bf16_fallback(void) { fp8_probed_steps(0, 1, 0, 0, 0, 0, 4, 3, PROBE_SOME_BF16); }
// Row-wise scaling, as block's two: layer 0's w2 and qkv row-scaled among per-tensor linears (W cast by
// AdamW, then made again per row from the master); every linear row-scaled with the fp8 lm_head, W cast
// per use and -r 1 (wo's and w2's X^T cast afresh in the backward, the lm_head's kept).
static void test_fp8_probed_row_some(void) { fp8_probed_steps(0, 1, 0, 0, 0, 0, 4, 3, PROBE_SOME_ROW); }
static void test_fp8_probed_row_all(void) { fp8_probed_steps(0, 0, 0, 1, 1, 0, 4, 3, PROBE_ALL_ROW); }

// A small fp8 model with the trainer's own random init.
static void small_fp8_model(Model *m, int history, uint64_t seed) {
    LlamaConfig c = small_config();
    ModelOptions mo = model_options(2, 128, PREC_FP8);
    mo.fp8_history = history;
    model_init(m, &c, &mo, NULL);
    float *w = (float *)mallocCheck(m->num_params * sizeof(float));
    model_init_weights(m, seed, w);
    model_set_weights(m, w);
    free(w);
}

// The seed bug: dY amax buffers never updated. Every linear's dY slot must be non-zero after a
// backward, and the update must move it into the history.
static void test_fp8_dy_amax_updates(void) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    Model m;
    small_fp8_model(&m, 4, 3);
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    random_tokens(in, N, c.V, 11);
    random_tokens(tg, N, c.V, 12);
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float *losses = (float *)mallocCheck(N * sizeof(float));
    Fp8State *fs = &m.fp8_state;
    Fp8StateLayout lay = fs->layout;
    train_step_on(&m, in, tg, 1, &h, losses);
    float *before = download_f32(fs->buffer, lay.total);
    // forward + backward only: the slots must fill during the backward pass itself
    fp8_cast_weights(&m, g_stream);
    cudaCheck(cudaMemcpy(m.acts.inputs, in, N * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m.acts.targets, tg, N * sizeof(int), cudaMemcpyHostToDevice));
    model_forward(&m, train_pass(&m, 0), 1, 1.0f / N, g_stream);
    float *after_fwd = download_f32(fs->buffer, lay.total);
    model_group_tokens(&m, 0, in);
    model_backward(&m, train_pass(&m, 0), g_stream);
    float *after_bwd = download_f32(fs->buffer, lay.total);
    for (int l = 0; l < c.L; l++) {
        for (int lin = 0; lin < LINS_PER_LAYER; lin++) {
            int t = fp8_tensor_index(l, lin, FP8_DY);
            CHECK(after_fwd[lay.amax_slot + t] == 0.0f, "layer %d %s: dY slot written before the backward", l, LINEAR_NAMES[lin]);
            CHECK(after_bwd[lay.amax_slot + t] > 0.0f && isfinite(after_bwd[lay.amax_slot + t]),
                  "layer %d %s: dY amax slot not updated by the backward pass (%g)", l, LINEAR_NAMES[lin], after_bwd[lay.amax_slot + t]);
        }
    }
    fp8_update_scales(fs->buffer, fs->gemm_scale_inv, lay, 0, g_stream);
    float *after = download_f32(fs->buffer, lay.total);
    for (int t = 0; t < lay.num_tensors; t++) {
        CHECK(after[lay.amax_history + (size_t)t * 4] == after_bwd[lay.amax_slot + t], "tensor %d: history[0] is not the slot", t);
        CHECK(after[lay.amax_history + (size_t)t * 4 + 1] == before[lay.amax_history + (size_t)t * 4], "tensor %d: history did not roll", t);
    }
    free(before); free(after_fwd); free(after_bwd); free(after); free(in); free(tg); free(losses);
    model_free(&m);
}

// With gradient accumulation the slot must hold the max over all micro-steps, not the last one's.
static void test_fp8_amax_max_over_microsteps(void) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    Model m;
    small_fp8_model(&m, 4, 5);
    int *in = (int *)mallocCheck(2 * N * sizeof(int)), *tg = (int *)mallocCheck(2 * N * sizeof(int));
    random_tokens(in, 2 * N, c.V, 21);
    random_tokens(tg, 2 * N, c.V, 22);
    for (int i = 0; i < N; i++) in[N + i] = in[N + i] % 16; // a different token distribution in micro-batch 1
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float *losses = (float *)mallocCheck(2 * N * sizeof(float));
    train_step_on(&m, in, tg, 1, &h, losses); // past the live first step
    Fp8State *fs = &m.fp8_state;
    Fp8StateLayout lay = fs->layout;
    float *slots[3];
    int runs[3][2] = {{0, -1}, {1, -1}, {0, 1}};
    for (int r = 0; r < 3; r++) {
        cudaCheck(cudaMemset(fs->buffer + lay.amax_slot, 0, lay.num_tensors * sizeof(float)));
        fp8_cast_weights(&m, g_stream);
        for (int k = 0; k < 2 && runs[r][k] >= 0; k++) {
            const int *mi = in + (size_t)runs[r][k] * N;
            cudaCheck(cudaMemcpy(m.acts.inputs, mi, N * sizeof(int), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(m.acts.targets, tg + (size_t)runs[r][k] * N, N * sizeof(int), cudaMemcpyHostToDevice));
            model_forward(&m, train_pass(&m, k), 1, 0.5f / N, g_stream);
            model_group_tokens(&m, k, mi);
            model_backward(&m, train_pass(&m, k), g_stream);
        }
        slots[r] = download_f32(fs->buffer + lay.amax_slot, lay.num_tensors);
    }
    int differ = 0;
    for (int t = 0; t < lay.num_tensors; t++) {
        float want = fmaxf(slots[0][t], slots[1][t]);
        CHECK(slots[2][t] == want, "tensor %d: slot %g after two micro-steps, max of the two alone %g", t, slots[2][t], want);
        differ += slots[0][t] != slots[1][t];
    }
    CHECK(differ > 0, "the two micro-batches gave identical amaxes: the test cannot tell max from last");
    for (int r = 0; r < 3; r++) free(slots[r]);
    free(in); free(tg); free(losses);
    model_free(&m);
}

// A few steps of the small model from the trainer's init, with new tokens every step in pinned host
// buffers, as the trainer's (so -cuda_graph 1 replays from the second step on; swap_at >= 0 moves
// the batches to other buffers from that step on, which must capture the graph again); the losses,
// the fp32 master weights and the fp8 state (host copies) after them, and the graph's counts.
// Before step SMALL_EVENT_STEP (step 1 has captured a graph by then) `between` may run what the main
// loop or a new attention plan does between steps, and from accum_one_from on the steps accumulate 1
// micro-batch instead of 2. With doc_mask, -doc_mask 1: a token below 16 becomes DOC_START, so every
// micro-batch has its own documents (one start in 32 tokens).
#define TRAIN_SMALL_STEPS 4
#define SMALL_EVENT_STEP 2
enum { BETWEEN_NOTHING, BETWEEN_WORKSPACE_MOVES, BETWEEN_EVAL_CHECKPOINT };
typedef struct {
    int precision, recompute, weight_cache, current, cuda_graph, swap_at;
    int tied, lm_head;  // tied embeddings; -fp8_lm_head 1
    int accum_one_from; // grad accumulation 1 from this step on (2 before it); -1: 2 throughout
    int between;        // BETWEEN_*: what runs before step SMALL_EVENT_STEP
    int doc_mask;       // -doc_mask 1
    int fp8_grain;      // -fp8_grain: FP8_GRAIN_BLOCK for every linear block-scaled
} SmallRun;
typedef struct {
    float losses[TRAIN_SMALL_STEPS], *master, *state;
    size_t num_params;
    Fp8StateLayout lay;
    int captures, replays;
    const void *workspace[2]; // BETWEEN_WORKSPACE_MOVES: cuDNN's workspace before and after the move
    size_t workspace_bytes[2];
    float val_loss;           // BETWEEN_EVAL_CHECKPOINT: evaluate()'s loss
} Trained;

static SmallRun small_run(int precision) {
    SmallRun r = {precision, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_NOTHING};
    return r;
}

// cuDNN's workspace moved as building a plan for a larger shape moves it (cudnn_att_reserve_workspace:
// a larger buffer replaces it), except that the old buffer lives on until the run ends (returned, for
// cudaFree): a graph that still replayed with it would show in the capture count, not as a crash.
static void *move_attention_workspace(Trained *r) {
    r->workspace[0] = attention_workspace();
    void *old = NULL;
#ifdef ENABLE_CUDNN
    old = g_cudnn_workspace;
    r->workspace_bytes[0] = g_cudnn_workspace_bytes;
    g_cudnn_workspace_bytes += (size_t)64 << 20;
    g_cudnn_workspace = cudaMallocCheck(g_cudnn_workspace_bytes, "test: the moved cuDNN workspace");
    r->workspace_bytes[1] = g_cudnn_workspace_bytes;
#endif
    r->workspace[1] = attention_workspace();
    return old;
}

// What the main loop does after a step when it evaluates and checkpoints: evaluate() on val data (2
// positions of a synthetic loader), through the step's pinned host losses as the main loop passes
// them, then checkpoint_step into a fresh directory (removed after). Returns the val loss. The
// evaluation must record nothing: every amax slot and history and every health count is byte for
// byte what it was, and so is every scale under the delayed recipe (the current one's evaluation
// scales live, and its training rescales every cast anyway).
static float eval_and_checkpoint(Model *m, float *host_losses) {
    DataLoader val;
    dataloader_init_synthetic(&val, m->opt.B, m->opt.T, 0, 1, m->cfg.V, 9);
    const Fp8State *fs = &m->fp8_state;
    size_t kept = m->fp8.live_always ? fs->layout.scale : fs->layout.total, nc = 2 * (size_t)FP8_COUNTS * fs->layout.num_tensors;
    float *state = fs->buffer ? download_f32(fs->buffer, kept) : NULL;
    uint64_t *counts = fs->buffer ? (uint64_t *)download_u8(fs->counts, nc * sizeof(uint64_t)) : NULL;
    float loss = evaluate(m, &val, 2, host_losses, g_stream);
    if (fs->buffer) {
        float *state_after = download_f32(fs->buffer, kept);
        uint64_t *counts_after = (uint64_t *)download_u8(fs->counts, nc * sizeof(uint64_t));
        CHECK(memcmp(state, state_after, kept * sizeof(float)) == 0, "evaluate() changed the fp8 %s",
              m->fp8.live_always ? "amax slots or histories" : "state");
        CHECK(memcmp(counts, counts_after, nc * sizeof(uint64_t)) == 0, "evaluate() changed the fp8 health counts");
        free(state); free(state_after); free(counts); free(counts_after);
    }
    char dir[] = "/tmp/llama_fp8_graph_XXXXXX", model_path[1024], state_path[1024], cmd[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    ts.grad_accum = 2; ts.world = 1;
    data_state_save(&ts, &val);
    checkpoint_step(m, &ts, dir, 0, 1); // run id 1
    checkpoint_paths(dir, m->step, 0, model_path, state_path);
    CHECK(access(model_path, R_OK) == 0 && access(state_path, R_OK) == 0, "the checkpoint between the steps is missing: %s", model_path);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "could not remove %s", dir);
    dataloader_free(&val);
    return loss;
}

static Trained train_small(SmallRun run) {
    LlamaConfig c = small_config();
    c.tied_embeddings = run.tied;
    int B = 2, T = 128, N = B * T, grad_accum = 2;
    size_t n = (size_t)grad_accum * N;
    int *in[2], *tg[2];
    float *losses;
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaMallocHost(&in[k], n * sizeof(int)));
        cudaCheck(cudaMallocHost(&tg[k], n * sizeof(int)));
    }
    cudaCheck(cudaMallocHost(&losses, n * sizeof(float)));
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    Model m;
    ModelOptions mo = model_options(B, T, run.precision);
    mo.fp8_history = 4; mo.recompute = run.recompute; mo.fp8_weight_cache = run.weight_cache;
    mo.fp8_current = run.current; mo.cuda_graph = run.cuda_graph; mo.fp8_lm_head = run.lm_head;
    mo.doc_mask = run.doc_mask; mo.doc_start_id = DOC_START; mo.fp8_grain = run.fp8_grain;
    model_init(&m, &c, &mo, NULL);
    float *w = (float *)mallocCheck(m.num_params * sizeof(float));
    model_init_weights(&m, 13, w);
    model_set_weights(&m, w);
    Trained r;
    memset(&r, 0, sizeof(r));
    void *old_workspace = NULL;
    for (int s = 0; s < TRAIN_SMALL_STEPS; s++) {
        if (s == SMALL_EVENT_STEP && run.between == BETWEEN_WORKSPACE_MOVES) old_workspace = move_attention_workspace(&r);
        if (s == SMALL_EVENT_STEP && run.between == BETWEEN_EVAL_CHECKPOINT) r.val_loss = eval_and_checkpoint(&m, losses);
        int k = run.swap_at >= 0 && s >= run.swap_at;
        int accum = run.accum_one_from >= 0 && s >= run.accum_one_from ? 1 : grad_accum;
        random_tokens(in[k], (size_t)accum * N, c.V, 31 + 2 * s);
        for (size_t i = 0; run.doc_mask && i < (size_t)accum * N; i++) if (in[k][i] < 16) in[k][i] = DOC_START;
        random_tokens(tg[k], (size_t)accum * N, c.V, 32 + 2 * s);
        r.losses[s] = train_step_on(&m, in[k], tg[k], accum, &h, losses).loss;
    }
    cudaCheck(cudaDeviceSynchronize());
    r.num_params = m.num_params;
    r.master = download_f32(m.master, m.num_params);
    r.lay = m.fp8_state.layout;
    r.state = run.precision == PREC_FP8 ? download_f32(m.fp8_state.buffer, r.lay.total) : NULL;
    r.captures = m.graph.captures;
    r.replays = m.graph.replays;
    model_free(&m);
    if (old_workspace) cudaCheck(cudaFree(old_workspace));
    free(w);
    for (int k = 0; k < 2; k++) { cudaCheck(cudaFreeHost(in[k])); cudaCheck(cudaFreeHost(tg[k])); }
    cudaCheck(cudaFreeHost(losses));
    return r;
}

// Bit for bit: the losses, every master weight and (fp8) the amax histories, scales and scale_invs.
// The slots are left out: the W slots hold the next step's weight amaxes only when W is cached.
static void expect_same_training(Trained a, Trained b, const char *what) {
    for (int s = 0; s < TRAIN_SMALL_STEPS; s++) {
        printf("    step %d loss %.7f and %.7f\n", s, a.losses[s], b.losses[s]);
        CHECK(a.losses[s] == b.losses[s], "%s: step %d loss %.9g vs %.9g", what, s, a.losses[s], b.losses[s]);
    }
    long differ = 0;
    for (size_t i = 0; i < a.num_params; i++) differ += memcmp(&a.master[i], &b.master[i], 4) != 0;
    CHECK(differ == 0, "%s: %ld of %zu master weights differ", what, differ, a.num_params);
    if (a.state) {
        size_t from = a.lay.amax_history;
        CHECK(memcmp(a.state + from, b.state + from, (a.lay.total - from) * sizeof(float)) == 0,
              "%s: the fp8 histories or scales differ", what);
    }
    free(a.master); free(b.master); free(a.state); free(b.state);
}

// One row of the graph test: a run, and the graphs its -cuda_graph 1 form must capture (StepGraphKey's
// rule: once in step 1, again whenever something the graph keeps moves); moving the host buffers at
// step 3 must capture once more.
typedef struct { const char *what; SmallRun run; int captures; } GraphCase;

// -cuda_graph 1 replays the forward and backward passes that -cuda_graph 0 queues kernel by kernel:
// the same training, bit for bit, with new tokens each step (so a graph that replayed a stale copy of
// the batch or of the embedding backward's token lists would differ), grad accumulation, and a
// recapture when the host buffers move. The counts show the graphs did run.
static void cuda_graph_identical(GraphCase gc) {
    const char *what = gc.what;
    SmallRun eager = gc.run, swapped = gc.run;
    eager.cuda_graph = 0;
    swapped.swap_at = 3;
    Trained e = train_small(eager), g = train_small(gc.run), s = train_small(swapped);
    printf("  %s: %d captures and %d replays; with the buffers moved at step 3, %d and %d\n", what, g.captures, g.replays,
           s.captures, s.replays);
    CHECK(e.captures == 0 && e.replays == 0, "%s: -cuda_graph 0 captured %d graphs", what, e.captures);
    CHECK(g.captures == gc.captures && g.replays == TRAIN_SMALL_STEPS - 1, "%s: %d captures and %d replays, expected %d and %d",
          what, g.captures, g.replays, gc.captures, TRAIN_SMALL_STEPS - 1);
    CHECK(s.captures == gc.captures + 1 && s.replays == TRAIN_SMALL_STEPS - 1,
          "%s: with the buffers moved at step 3, %d captures and %d replays, expected %d and %d", what, s.captures,
          s.replays, gc.captures + 1, TRAIN_SMALL_STEPS - 1);
    if (gc.run.between == BETWEEN_WORKSPACE_MOVES) {
        printf("    cuDNN workspace before step %d: %p (%zu bytes), then %p (%zu bytes)\n", SMALL_EVENT_STEP, g.workspace[0],
               g.workspace_bytes[0], g.workspace[1], g.workspace_bytes[1]);
        CHECK(g.workspace[0] != NULL && g.workspace[1] != g.workspace[0], "%s: the cuDNN workspace did not move (%p, then %p)", what,
              g.workspace[0], g.workspace[1]);
    }
    if (gc.run.between == BETWEEN_EVAL_CHECKPOINT) {
        printf("    val loss between the steps %.7f and %.7f\n", e.val_loss, g.val_loss);
        CHECK(isfinite(e.val_loss) && e.val_loss == g.val_loss, "%s: val loss %.9g vs %.9g", what, e.val_loss, g.val_loss);
    }
    Trained e2 = train_small(eager);
    expect_same_training(e, g, what);
    expect_same_training(e2, s, what);
}

static void test_cuda_graph_identical(void) {
    // run: precision, -r, weight cache, current recipe, -cuda_graph, swap_at, tied, -fp8_lm_head, accum_one_from, between, -doc_mask
    static const GraphCase cases[] = {
        {"bf16", {PREC_BF16, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_NOTHING}, 1},
        {"fp8 delayed", {PREC_FP8, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_NOTHING}, 1},
        {"fp8 current recipe", {PREC_FP8, 0, 1, 1, 1, -1, 0, 0, -1, BETWEEN_NOTHING}, 1},
        {"bf16 -r 1", {PREC_BF16, 1, 1, 0, 1, -1, 0, 0, -1, BETWEEN_NOTHING}, 1},
        {"fp8 -r 1", {PREC_FP8, 1, 1, 0, 1, -1, 0, 0, -1, BETWEEN_NOTHING}, 1},
        {"bf16 tied embeddings", {PREC_BF16, 0, 1, 0, 1, -1, 1, 0, -1, BETWEEN_NOTHING}, 1},
        {"fp8 tied embeddings", {PREC_FP8, 0, 1, 0, 1, -1, 1, 0, -1, BETWEEN_NOTHING}, 1},
        {"fp8 -fp8_lm_head 1", {PREC_FP8, 0, 1, 0, 1, -1, 0, 1, -1, BETWEEN_NOTHING}, 1},
        // 1 micro-step from step 2 on: another loss scale and micro-step count, so another graph (the
        // token lists keep their 2 slots: the loss scale and the count are what tell the steps apart)
        {"bf16 grad accumulation 2, then 1 from step 2", {PREC_BF16, 0, 1, 0, 1, -1, 0, 0, SMALL_EVENT_STEP, BETWEEN_NOTHING}, 2},
        {"fp8 grad accumulation 2, then 1 from step 2", {PREC_FP8, 0, 1, 0, 1, -1, 0, 0, SMALL_EVENT_STEP, BETWEEN_NOTHING}, 2},
#ifdef ENABLE_CUDNN
        // the attention plans run in the moved workspace: the graph must be captured again
        {"fp8, the cuDNN workspace moved before step 2", {PREC_FP8, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_WORKSPACE_MOVES}, 2},
#endif
        // nothing a graph keeps moves: the same graph replays, and the evaluation must leave nothing
        // that makes the replayed step differ from the step queued kernel by kernel
        {"bf16, evaluation and a checkpoint before step 2", {PREC_BF16, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_EVAL_CHECKPOINT}, 1},
        {"fp8 delayed, evaluation and a checkpoint before step 2", {PREC_FP8, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_EVAL_CHECKPOINT}, 1},
        {"fp8 current recipe, evaluation and a checkpoint before step 2", {PREC_FP8, 0, 1, 1, 1, -1, 0, 0, -1, BETWEEN_EVAL_CHECKPOINT}, 1},
        // the documents change every micro-step: the positions must be made inside the graph, from its tokens
        {"bf16 -doc_mask 1", {PREC_BF16, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_NOTHING, 1}, 1},
        {"fp8 -doc_mask 1, evaluation and a checkpoint before step 2", {PREC_FP8, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_EVAL_CHECKPOINT, 1}, 1},
        // block scaling's casts and scale_invs inside the graph; evaluation between the steps runs them too
        {"fp8 -fp8_grain block, evaluation and a checkpoint before step 2", {PREC_FP8, 0, 1, 0, 1, -1, 0, 0, -1, BETWEEN_EVAL_CHECKPOINT, 0,
                                                                            FP8_GRAIN_BLOCK}, 1},
        {"fp8 -fp8_grain block -r 1 -fp8_lm_head 1", {PREC_FP8, 1, 1, 0, 1, -1, 0, 1, -1, BETWEEN_NOTHING, 0, FP8_GRAIN_BLOCK}, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) cuda_graph_identical(cases[i]);
}

// -fp8_weight_cache 0 casts each layer's W when it is used instead of all of them once per step:
// the same scales and codes, so the same training, bit for bit.
static void test_fp8_weight_cache_off_identical(void) {
    SmallRun off = small_run(PREC_FP8);
    off.weight_cache = 0;
    expect_same_training(train_small(off), train_small(small_run(PREC_FP8)), "-fp8_weight_cache 0 vs 1");
    // block scaling: W cast in 128x128 blocks per use, or once a step (after AdamW's cast, from the master)
    SmallRun block = small_run(PREC_FP8);
    block.fp8_grain = FP8_GRAIN_BLOCK;
    off.fp8_grain = FP8_GRAIN_BLOCK;
    expect_same_training(train_small(off), train_small(block), "-fp8_grain block: -fp8_weight_cache 0 vs 1");
}

// -r 1 recomputes SwiGLU in the backward pass (fp8: recast with the forward's scale): the same values,
// so the same training, bit for bit (the tests run with the deterministic attention backward).
static void test_recompute_identical(void) {
    for (int precision = PREC_BF16; precision <= PREC_FP8; precision++) {
        SmallRun r1 = small_run(precision);
        r1.recompute = 1;
        expect_same_training(train_small(r1), train_small(small_run(precision)), precision == PREC_FP8 ? "fp8 -r 1 vs -r 0" : "bf16 -r 1 vs -r 0");
    }
}

// One GPU: AdamW writes the E4M3 weights of the next step itself. They must be exactly the host
// codec's E4M3(bf16(master) * scale) with that step's scale, and each W slot the max |bf16(master)|
// of its layer, the amax the next step's scale update rolls in.
static void test_fp8_weights_made_by_adamw(void) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    Model m;
    small_fp8_model(&m, 4, 41);
    CHECK(m.fp8.w_by_adamw, "one GPU with delayed scaling should make the fp8 weights in AdamW");
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    random_tokens(in, N, c.V, 42);
    random_tokens(tg, N, c.V, 43);
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float *losses = (float *)mallocCheck(N * sizeof(float));
    for (int s = 0; s < 3; s++) train_step_on(&m, in, tg, 1, &h, losses);
    cudaCheck(cudaDeviceSynchronize());
    Fp8StateLayout lay = m.fp8_state.layout;
    float *master = download_f32(m.master, m.num_params), *state = download_f32(m.fp8_state.buffer, lay.total);
    long bad_codes = 0, checked = 0;
    for (int lin = 0; lin < LINS_PER_LAYER; lin++) {
        size_t n = (size_t)linear_in(&c, lin) * linear_out(&c, lin), at = m.param[LINEAR_PARAM[lin]] - m.params_memory;
        uint8_t *codes = (uint8_t *)mallocCheck(c.L * n);
        cudaCheck(cudaMemcpy(codes, linear_of(&m.linears, 0, lin)->w_fp8, c.L * n, cudaMemcpyDeviceToHost));
        for (int l = 0; l < c.L; l++) {
            int t = fp8_tensor(&c, l, lin, FP8_W);
            float scale = state[lay.scale + t], amax = 0.0f;
            for (size_t i = 0; i < n; i++) {
                float w = __bfloat162float(__float2bfloat16_rn(master[at + l * n + i]));
                amax = fmaxf(amax, fabsf(w));
                bad_codes += codes[l * n + i] != fp8_encode(w * scale, FP8_E4M3);
                checked++;
            }
            CHECK(state[lay.amax_slot + t] == amax, "layer %d %s: W slot %g, max |bf16(master)| %g", l,
                  LINEAR_NAMES[lin], state[lay.amax_slot + t], amax);
        }
        free(codes);
    }
    printf("    %ld of %ld E4M3 weight codes differ from the host codec\n", bad_codes, checked);
    CHECK(bad_codes == 0, "AdamW's fp8 weights are not E4M3(bf16(master) * scale)");
    free(master); free(state); free(in); free(tg); free(losses);
    model_free(&m);
}

// ----------------------------------------------------------------------------------------------
// Issue 29.7's GPU coverage (written 2026-12-01 without a GPU): the amax history past its window,
// fp8 lm_head with the weight cache on, the tied-embedding gradient with grad accumulation. (The CUDA
// graph cases are rows of the graph test above.)

// History 4 and 8 steps: the updates after steps 4, 5 and 6 roll an entry out of full histories; the
// probe checks each update (history, slot, scale) against the host rule and counts the scales that
// dropping the oldest entry set, so that the window's end is shown to matter.
static void test_fp8_probed_history_window(void) { fp8_probed_steps(0, 1, 0, 0, 0, 0, 4, 8); }

// -fp8_lm_head 1 with the weight cache on: delayed, AdamW writes the lm_head's E4M3 copy with the
// block linears' (fp8.w_by_adamw); current, fp8_cast_weights recasts it after the update. Every
// lm_head GEMM's W codes must be E4M3(bf16(master) * scale) of that step's weights.
static void test_fp8_probed_lm_head_cached(void) {
    fp8_probed_steps(0, 1, 0, 1, 0, 0, 4, 3);
    fp8_probed_steps(1, 1, 0, 1, 0, 0, 4, 3);
}

// One optimizer step of grad_accum micro-batches from the init of seed 42 in the C reference (ref; fp8
// emulation when fp8) and, in fp8, the flip floor's emulation fed bf16-rounded inputs (refb; left
// untouched in bf16). Returns the reference's step loss.
static float ref_step_pair(RefModel *ref, RefModel *refb, const LlamaConfig *c, int B, int T, int fp8, const int *in,
                           const int *tg, int grad_accum) {
    ref_init(ref, c, B, T, fp8, 0, 0, 16, 0);
    ref_init_weights(ref, 42);
    float loss = ref_compute_grads(ref, in, tg, grad_accum);
    if (fp8) {
        ref_init(refb, c, B, T, 1, 0, 0, 16, 0);
        ref_init_weights(refb, 42);
        refb->fp8_bf16_inputs = 1;
        ref_compute_grads(refb, in, tg, grad_accum);
    }
    return loss;
}

// The GPU's step from weights params: one train_step over grad_accum micro-batches with lr 0, no
// clipping and no decay, so the gradient buffer holds the step's gradient, returned downloaded (the
// per-target losses in losses, grad_accum * B * T). m is left initialised for the caller to free.
static float *gpu_step_grads(Model *m, const LlamaConfig *c, int B, int T, int precision, const float *params, const int *in,
                             const int *tg, int grad_accum, float *losses, float *loss, int *skipped) {
    ModelOptions mo = model_options(B, T, precision);
    model_init(m, c, &mo, NULL);
    model_set_weights(m, params);
    AdamWParams h = {0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f};
    StepResult r = train_step_on(m, in, tg, grad_accum, &h, losses);
    *loss = r.loss;
    *skipped = r.skipped;
    cudaCheck(cudaDeviceSynchronize());
    return download_bf16(m->grads_memory, m->num_params);
}

// Tied embeddings with 2 micro-batches: wte's gradient is the lm_head's (a GEMM) and the embedding's
// (a scatter) added up over both micro-steps in one tensor. One optimizer step against the C
// reference, the gradient read after train_step (lr 0, no clipping, no decay: the buffer holds the
// step's gradient), tolerances as the first-step tests' (bf16 budget; fp8: twice the flip floor plus
// it). The premise: half of micro-batch 1's own gradient (what keeping only the last micro-step's
// would leave) is far from the step's, further than the tolerance.
static void tied_grad_accum_vs_cpu(int precision) {
    LlamaConfig c = small_config();
    c.tied_embeddings = 1;
    int B = 2, T = 128, N = B * T, grad_accum = 2, fp8 = precision == PREC_FP8;
    int *in = (int *)mallocCheck(grad_accum * N * sizeof(int)), *tg = (int *)mallocCheck(grad_accum * N * sizeof(int));
    random_tokens(in, grad_accum * N, c.V, 81);
    random_tokens(tg, grad_accum * N, c.V, 82);
    RefModel ref, refb, last;
    float ref_loss = ref_step_pair(&ref, &refb, &c, B, T, fp8, in, tg, grad_accum);
    ref_init(&last, &c, B, T, 0, 0, 0, 16, 0);
    ref_init_weights(&last, 42);
    ref_compute_grads(&last, in + N, tg + N, 1);
    Model m;
    float *losses = (float *)mallocCheck(grad_accum * N * sizeof(float)), l;
    int skipped;
    float *grads = gpu_step_grads(&m, &c, B, T, precision, ref.params, in, tg, grad_accum, losses, &l, &skipped);
    printf("    loss gpu %.6f cpu %.6f\n", l, ref_loss);
    CHECK(!skipped && fabsf(l - ref_loss) / ref_loss < (fp8 ? 1e-2 : BF16_SMALL.loss), "loss %.6f vs the reference's %.6f", l, ref_loss);
    check_step_grads(&m, grads, &ref, fp8 ? &refb : NULL, BF16_SMALL.grads, fp8 ? "tied fp8" : "tied bf16");
    size_t n = m.param_sizes[P_WTE]; // wte is the first tensor: offset 0
    double tol = grad_tolerance(&ref, fp8 ? &refb : NULL, 0, n, BF16_SMALL.grads);
    float *half_last = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) half_last[i] = 0.5f * last.grads[i];
    double premise = rel_err(half_last, ref.grads, n);
    printf("    wte: half of micro-batch 1's own gradient is rel %.2e from the step's\n", premise);
    CHECK(premise > tol, "half of micro-batch 1's wte gradient is within the tolerance (%.3e): the test cannot tell", premise);
    free(half_last);
    if (fp8) ref_free(&refb);
    free(grads); free(losses); free(in); free(tg);
    model_free(&m);
    ref_free(&ref); ref_free(&last);
}
static void test_tied_grad_accum_bf16_vs_cpu(void) { tied_grad_accum_vs_cpu(PREC_BF16); }
static void test_tied_grad_accum_fp8_vs_cpu(void) { tied_grad_accum_vs_cpu(PREC_FP8); }

// ----------------------------------------------------------------------------------------------
// Safety: saturation, zero and NaN amaxes; the GPU casts agree with the host codec.

static void test_fp8_cast_saturates_and_matches_host(void) {
    const size_t n = 1 << 16;
    floatX *h = (floatX *)mallocCheck(n * sizeof(floatX));
    uint64_t rng = 77;
    for (size_t i = 0; i < n; i++) { // every bf16 bit pattern except NaNs: covers subnormals, huge and inf
        uint16_t bits = (uint16_t)i;
        float f;
        uint32_t u = (uint32_t)bits << 16;
        memcpy(&f, &u, 4);
        h[i] = isnan(f) ? __float2bfloat16(random_normal(&rng)) : __float2bfloat16(f);
    }
    floatX *d = (floatX *)cudaMallocCheck(n * sizeof(floatX), "test input");
    uint8_t *out = (uint8_t *)cudaMallocCheck(n, "test output");
    float *amax_scale = (float *)cudaMallocCheck(2 * sizeof(float), "test scale");
    float init[2] = {0.0f, 1.0f};
    cudaCheck(cudaMemcpy(d, h, n * sizeof(floatX), cudaMemcpyHostToDevice));
    uint8_t *codes = (uint8_t *)mallocCheck(n);
    for (int fmt = 0; fmt < 2; fmt++) {
        cudaCheck(cudaMemcpy(amax_scale, init, sizeof(init), cudaMemcpyHostToDevice));
        fp8_cast(out, fmt, d, n, amax_scale, NULL, amax_scale + 1, g_stream);
        cudaCheck(cudaMemcpy(codes, out, n, cudaMemcpyDeviceToHost));
        int mismatch = 0, nonfinite = 0;
        for (size_t i = 0; i < n; i++) {
            float x = __bfloat162float(h[i]);
            if (codes[i] != fp8_encode(x, (Fp8Format)fmt)) mismatch++;
            if (!isfinite(fp8_decode(codes[i], (Fp8Format)fmt))) nonfinite++;
        }
        CHECK(mismatch == 0, "%s: %d GPU casts differ from the host codec", fmt ? "E5M2" : "E4M3", mismatch);
        CHECK(nonfinite == 0, "%s: %d casts of finite or infinite inputs gave inf/NaN (must saturate)", fmt ? "E5M2" : "E4M3", nonfinite);
    }
    free(codes); free(h);
    cudaCheck(cudaFree(d)); cudaCheck(cudaFree(out)); cudaCheck(cudaFree(amax_scale));
}

static void test_fp8_update_keeps_scale_on_bad_amax(void) {
    int NT = 6, H = 4;
    Fp8StateLayout lay = fp8_state_layout(NT, H);
    float *h = (float *)mallocCheck(lay.total * sizeof(float)), *h2 = (float *)mallocCheck(lay.total * sizeof(float));
    fp8_state_init(h, lay);
    for (int t = 0; t < NT; t++) h[lay.scale + t] = 4.0f, h[lay.scale_inv + t] = 0.25f;
    h[lay.amax_slot + 0] = 0.0f;      // all-zero gradient
    h[lay.amax_slot + 1] = NAN;
    h[lay.amax_slot + 2] = INFINITY;
    h[lay.amax_slot + 3] = 2.0f;      // ordinary
    h[lay.amax_slot + 4] = 1e-40f;    // scale would overflow
    h[lay.amax_slot + 5] = 7.0f;
    float *d = (float *)cudaMallocCheck(lay.total * sizeof(float), "test state");
    cudaCheck(cudaMemcpy(d, h, lay.total * sizeof(float), cudaMemcpyHostToDevice));
    fp8_update_scales(d, NULL, lay, 0, g_stream);
    cudaCheck(cudaMemcpy(h2, d, lay.total * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(h2[lay.scale + 0] == 4.0f, "zero amax changed the scale to %g", h2[lay.scale + 0]);
    CHECK(h2[lay.scale + 1] == 4.0f, "NaN amax changed the scale to %g", h2[lay.scale + 1]);
    CHECK(h2[lay.scale + 2] == 4.0f, "inf amax changed the scale to %g", h2[lay.scale + 2]);
    CHECK(h2[lay.scale + 3] == FP8_E4M3_MAX / 2.0f, "scale %g, want 448/2", h2[lay.scale + 3]);
    CHECK(h2[lay.scale + 4] == FLT_MAX, "overflowing scale %g, want FLT_MAX", h2[lay.scale + 4]);
    CHECK(h2[lay.scale + 5] == FP8_E5M2_MAX / 7.0f, "dY scale %g, want 57344/7", h2[lay.scale + 5]);
    fp8_update_state(h, lay, 0); // the host rule must agree bit for bit
    CHECK(memcmp(h, h2, lay.total * sizeof(float)) == 0, "GPU and host scale updates differ");
    free(h); free(h2);
    cudaCheck(cudaFree(d));
}

// ----------------------------------------------------------------------------------------------
// Attention: the cuDNN fused path against the plain kernel (forward and backward) where cuDNN takes
// the shape, and the dispatcher's fallback (T not a multiple of 128) against the plain kernel.

static floatX *upload_random_bf16(size_t n, uint64_t seed, float scale) {
    floatX *h = (floatX *)mallocCheck(n * sizeof(floatX));
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(scale * random_normal(&rng));
    floatX *d = (floatX *)cudaMallocCheck(n * sizeof(floatX), "test tensor");
    cudaCheck(cudaMemcpy(d, h, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// The dispatcher (cuDNN when it takes the shape, else the plain kernel) and the plain kernel, each
// against the fp32 C reference on the same bf16 inputs. Both compute in fp32 and round the outputs
// to bf16 once (2^-9); the backward sums over up to T keys in its own order and rounds dq, dk, dv,
// so 1e-2 of the largest element bounds the error of either.
static void attention_case(int B, int T, int NH, int NKV, int HS) {
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nst = (size_t)B * NH * T;
    floatX *qkv = upload_random_bf16(nqkv, 100 + T, 1.0f), *dout = upload_random_bf16(nout, 200 + T, 1.0f);
    float *hq = download_bf16(qkv, nqkv), *hd = download_bf16(dout, nout);
    float *ref_out = (float *)mallocCheck(nout * sizeof(float)), *ref_dqkv = (float *)callocCheck(nqkv, sizeof(float));
    float *att = (float *)mallocCheck((size_t)B * NH * T * T * sizeof(float));
    ref_attention_forward(ref_out, att, hq, B, T, NH, NKV, HS);
    ref_attention_backward(ref_dqkv, hd, hq, att, B, T, NH, NKV, HS);
    floatX *out = (floatX *)cudaMallocCheck(nout * sizeof(floatX), "test out");
    floatX *dqkv = (floatX *)cudaMallocCheck(nqkv * sizeof(floatX), "test dqkv");
    float *stats = (float *)cudaMallocCheck(nst * sizeof(float), "test stats");
    // forms: the dispatcher with the deterministic backward, with the fast one, the plain kernels
    for (int form = 0; form < 3; form++) {
        if (form == 2) {
            attention_forward_plain(out, stats, qkv, NULL, B, T, NH, NKV, HS, g_stream);
            attention_backward_plain(dqkv, dout, qkv, out, stats, NULL, B, T, NH, NKV, HS, g_stream);
        } else {
            attention_init(1, form == 0);
            cudaCheck(cudaMemset(dqkv, 0xFF, nqkv * sizeof(floatX))); // NaNs: every element must be written
            attention_forward(out, stats, qkv, NULL, NULL, B, T, NH, NKV, HS, g_stream);
            attention_backward(dqkv, dout, qkv, out, stats, NULL, NULL, B, T, NH, NKV, HS, g_stream);
        }
        cudaCheck(cudaDeviceSynchronize());
        float *o = download_bf16(out, nout), *d = download_bf16(dqkv, nqkv);
        double eo = rel_err(o, ref_out, nout), ed = rel_err(d, ref_dqkv, nqkv);
        const char *path = form == 2 ? "plain" : attention_path(B, T, NH, NKV, HS, 1, 0);
        const char *how = form == 2 ? "" : form == 0 ? ", deterministic" : ", fast backward";
        printf("    B %d T %d NH %d NKV %d HS %d, %s%s: out rel %.2e, dqkv rel %.2e\n", B, T, NH, NKV, HS, path, how, eo, ed);
        CHECK(eo < 1e-2 && ed < 1e-2, "attention (%s%s, T %d) vs reference: out %.3e dqkv %.3e", path, how, T, eo, ed);
        free(o); free(d);
    }
    attention_init(1, 1); // the other tests compare runs bit for bit
    free(hq); free(hd); free(ref_out); free(ref_dqkv); free(att);
    cudaCheck(cudaFree(out)); cudaCheck(cudaFree(dqkv)); cudaCheck(cudaFree(stats));
    cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(dout));
}

static void test_attention_paths(void) {
    attention_case(2, 256, 8, 2, 64);   // T % 128 == 0: the cuDNN path (when built with cuDNN), GQA
    attention_case(1, 384, 4, 4, 128);  // multi-head, head size 128
    attention_case(2, 200, 4, 2, 64);   // T % 128 != 0: the dispatcher falls back to the plain kernel
#ifdef ENABLE_CUDNN
    CHECK(strcmp(attention_path(2, 256, 8, 2, 64, 1, 0), "cudnn") == 0, "built with cuDNN, T = 256 must take the cuDNN path");
    CHECK(strcmp(attention_path(1, 384, 4, 4, 128, 1, 0), "cudnn") == 0, "built with cuDNN, HS = 128 must take the cuDNN path");
#endif
    CHECK(strcmp(attention_path(2, 200, 4, 2, 64, 1, 0), "cudnn") != 0, "T = 200 must not take the cuDNN path");
}

// ----------------------------------------------------------------------------------------------
// Resume: 6 steps straight == 3 steps, checkpoint, fresh process state, load, 3 steps (bit-exact).

// bf16 master weights: the checkpoint's model file must hold the bf16 weights widened to fp32, exactly.
static void check_model_file_is_bf16_weights(const Model *m, const char *dir, int step) {
    char model_path[1024], state_path[1024];
    checkpoint_paths(dir, step, 0, model_path, state_path);
    float *file = (float *)mallocCheck(m->num_params * sizeof(float));
    float *w = download_bf16(m->params_memory, m->num_params);
    Section ms[] = {{file, m->num_params * sizeof(float), 0}};
    read_sections(model_path, MODEL_MAGIC, NULL, 0, ms, 1, NULL);
    size_t differ = 0;
    for (size_t i = 0; i < m->num_params; i++) differ += memcmp(&file[i], &w[i], sizeof(float)) != 0;
    CHECK(differ == 0, "%s: %zu of %zu weights are not the bf16 weights'", model_path, differ, m->num_params);
    free(file); free(w);
}

// offload_resumed: the resumed run (run 1) keeps AdamW's moments in host memory (-adam_offload 1) from
// its first step, through the checkpoint and the new model it loads into: the straight run's moments
// are on the GPU, so the two agree only if the offloaded moments train, save and load as device ones.
static void resume_check(int precision, int moments_bf16, int recompute, int master_bf16, int offload_resumed) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T, grad_accum = 2, steps = 6, half = 3;
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float straight[6], resumed[6];
    int *in, *tg; // pinned, as the trainer's: both runs replay CUDA graphs, the resumed one a new capture
    float *losses;
    cudaCheck(cudaMallocHost(&in, grad_accum * N * sizeof(int)));
    cudaCheck(cudaMallocHost(&tg, grad_accum * N * sizeof(int)));
    cudaCheck(cudaMallocHost(&losses, grad_accum * N * sizeof(float)));
    float *w = NULL;
    char dir[] = "/tmp/llama_fp8_resume_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    for (int run = 0; run < 2; run++) {
        Model m;
        ModelOptions mo = model_options(B, T, precision);
        mo.fp8_history = 4; mo.moments_bf16 = moments_bf16; mo.recompute = recompute; mo.master_bf16 = master_bf16;
        mo.adam_offload = run == 1 && offload_resumed;
        model_init(&m, &c, &mo, NULL);
        if (!w) { w = (float *)mallocCheck(m.num_params * sizeof(float)); model_init_weights(&m, 11, w); }
        model_set_weights(&m, w);
        DataLoader dl;
        dataloader_init_synthetic(&dl, B, T, 0, 1, c.V, 5);
        TrainState ts;
        memset(&ts, 0, sizeof(ts));
        ts.grad_accum = grad_accum; ts.world = 1;
        for (int s = 0; s < steps; s++) {
            if (run == 1 && s == half) { // save, then continue in a brand-new model and loader
                data_state_save(&ts, &dl);
                checkpoint_step(&m, &ts, dir, 0, 1); // run id 1
                if (master_bf16) check_model_file_is_bf16_weights(&m, dir, half);
                dataloader_free(&dl);
                model_free(&m);
                model_init(&m, &c, &mo, NULL);
                dataloader_init_synthetic(&dl, B, T, 0, 1, c.V, 5);
                load_checkpoint(&m, &ts, dir, half);
                dataloader_load_state(&dl, ts.data, (size_t)ts.data_bytes, dir, 0);
            }
            next_batches(&dl, grad_accum, in, tg);
            (run == 0 ? straight : resumed)[s] = train_step_on(&m, in, tg, grad_accum, &h, losses).loss;
        }
        dataloader_free(&dl);
        model_free(&m);
    }
    for (int s = half; s < steps; s++) {
        printf("    step %d straight %.7f resumed %.7f\n", s, straight[s], resumed[s]);
        CHECK(straight[s] == resumed[s], "step %d: %.9g straight vs %.9g resumed (must be bit-exact)", s, straight[s], resumed[s]);
    }
    free(w);
    cudaCheck(cudaFreeHost(in)); cudaCheck(cudaFreeHost(tg)); cudaCheck(cudaFreeHost(losses));
}
static void test_resume_bitexact_bf16(void) { resume_check(PREC_BF16, 0, 0, 0, 0); }
static void test_resume_bitexact_fp8(void) { resume_check(PREC_FP8, 0, 0, 0, 0); }
static void test_resume_bitexact_fp8_recompute(void) { resume_check(PREC_FP8, 0, 1, 0, 0); }
static void test_resume_bitexact_fp8_bf16_moments(void) { resume_check(PREC_FP8, 1, 0, 0, 0); }
static void test_resume_bitexact_fp8_bf16_master(void) { resume_check(PREC_FP8, 1, 0, 1, 0); }
static void test_resume_bitexact_adam_offload(void) {
    resume_check(PREC_FP8, 1, 0, 0, 1); // bf16 moments, the default
    resume_check(PREC_BF16, 0, 0, 1, 1); // fp32 moments, bf16 master weights
}


// ----------------------------------------------------------------------------------------------
// fp8 block scaling and the fallback (issue 34) against the C reference's emulation

// The first step with linears off per-tensor scaling against the reference with the same grains
// (ref_set_fp8_grain): every linear block-scaled (-fp8_grain block) or row-scaled (-fp8_grain row), or
// layer 0's w2 and layer 1's qkv fallen back to bf16. The budgets are fp8_first_step_vs_cpu's: twice
// the flip floor of the bf16-input reference, plus bf16's.
static void grains_first_step_vs_cpu(int grain) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    RefModel ref, refb;
    ref_init(&ref, &c, B, T, 1, 0, 0, 16, 0);
    ref_init(&refb, &c, B, T, 1, 0, 0, 16, 0);
    ref_init_weights(&ref, 42);
    ref_init_weights(&refb, 42);
    refb.fp8_bf16_inputs = 1;
    const int bf16_lin[2] = {fp8_linear(&c, 0, LIN_W2), fp8_linear(&c, 1, LIN_QKV)};
    for (int i = 0; i < fp8_num_linears(&c, 0); i++) {
        int g = grain != FP8_GRAIN_BF16 ? grain : i == bf16_lin[0] || i == bf16_lin[1] ? FP8_GRAIN_BF16 : FP8_GRAIN_TENSOR;
        ref_set_fp8_grain(&ref, i, g, 0);
        ref_set_fp8_grain(&refb, i, g, 0);
    }
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    random_tokens(in, N, c.V, 1);
    random_tokens(tg, N, c.V, 2);
    float ref_loss = ref_compute_grads(&ref, in, tg, 1);
    ref_compute_grads(&refb, in, tg, 1);

    Model m;
    ModelOptions mo = model_options(B, T, PREC_FP8);
    if (grain != FP8_GRAIN_BF16) mo.fp8_grain = grain;
    else { mo.fp8_fallback = FP8_GRAIN_BF16; mo.fp8_fallback_millionths = 1000000; mo.fp8_fallback_patience = 1; }
    model_init(&m, &c, &mo, NULL);
    if (grain == FP8_GRAIN_BF16) { linear_set_grain(&m.linears, 0, LIN_W2, FP8_GRAIN_BF16); linear_set_grain(&m.linears, 1, LIN_QKV, FP8_GRAIN_BF16); }
    model_set_weights(&m, ref.params);
    StepZero g = gpu_step_zero(&m, in, tg);
    size_t nl = (size_t)N * c.V;
    double el = rel_err(g.logits, ref.logits, nl), floor_l = rel_err(refb.logits, ref.logits, nl);
    double tol_l = fp8_tolerance(floor_l, BF16_SMALL.logits);
    printf("    %s: logits rel %.2e (flip floor %.2e, tolerance %.2e) | loss gpu %.6f cpu %.6f\n", FP8_GRAIN_NAMES[grain], el, floor_l, tol_l,
           g.loss, ref_loss);
    CHECK(el < tol_l, "logits rel %.3e >= %.3e", el, tol_l);
    CHECK(fabsf(g.loss - ref_loss) / ref_loss < 1e-2, "loss %.6f vs %.6f", g.loss, ref_loss);
    check_step_grads(&m, g.grads, &ref, &refb, BF16_SMALL.grads, FP8_GRAIN_NAMES[grain]);
    free_step_zero(&g);
    model_free(&m);
    free(in); free(tg);
    ref_free(&ref); ref_free(&refb);
}
static void test_fp8_block_first_step_vs_cpu(void) { grains_first_step_vs_cpu(FP8_GRAIN_BLOCK); }
static void test_fp8_bf16_fallback_first_step_vs_cpu(void) { grains_first_step_vs_cpu(FP8_GRAIN_BF16); }
static void test_fp8_row_first_step_vs_cpu(void) { grains_first_step_vs_cpu(FP8_GRAIN_ROW); }

// Training with every linear row-scaled (-fp8_grain row): 6 steps of 2 micro-steps against the C
// reference's row emulation (fp8_state_check's loss budget: twice the flip floor of the bf16-input
// emulation, plus bf16's), and against the same training in bf16 on the GPU: within 1% of its loss,
// the bound the CPU suite holds the emulations to against fp32 (test_fp8_grain.h's training steps:
// E4M3's relative rounding is at most 2^-4 per value, and every logit and loss averages many of them).
static void test_fp8_row_training_vs_cpu_and_bf16(void) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T, grad_accum = 2;
    RefModel ref, refb;
    ref_init(&ref, &c, B, T, 1, 0, 0, 16, 0);
    ref_init(&refb, &c, B, T, 1, 0, 0, 16, 0);
    ref_init_weights(&ref, 11);
    ref_init_weights(&refb, 11);
    refb.fp8_bf16_inputs = 1;
    for (int i = 0; i < fp8_num_linears(&c, 0); i++) {
        ref_set_fp8_grain(&ref, i, FP8_GRAIN_ROW, 0);
        ref_set_fp8_grain(&refb, i, FP8_GRAIN_ROW, 0);
    }
    int *in = (int *)mallocCheck(grad_accum * N * sizeof(int)), *tg = (int *)mallocCheck(grad_accum * N * sizeof(int));
    random_tokens(in, grad_accum * N, c.V, 12);
    random_tokens(tg, grad_accum * N, c.V, 13);
    Model row, bf16;
    ModelOptions mo = model_options(B, T, PREC_FP8), mb = model_options(B, T, PREC_BF16);
    mo.fp8_grain = FP8_GRAIN_ROW;
    model_init(&row, &c, &mo, NULL);
    model_init(&bf16, &c, &mb, NULL);
    model_set_weights(&row, ref.params);
    model_set_weights(&bf16, ref.params);
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float *losses = (float *)mallocCheck(grad_accum * N * sizeof(float));
    for (int step = 0; step < 6; step++) {
        float gn;
        float lref = ref_train_step(&ref, in, tg, grad_accum, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, &gn);
        float lb = ref_train_step(&refb, in, tg, grad_accum, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, &gn);
        float l = train_step_on(&row, in, tg, grad_accum, &h, losses).loss;
        float l16 = train_step_on(&bf16, in, tg, grad_accum, &h, losses).loss;
        double tol = fp8_tolerance(fabs(lb - lref) / lref, BF16_STEPS_TOL);
        printf("    step %d loss row gpu %.5f cpu %.5f (bf16-input cpu %.5f, tolerance %.2e) | bf16 gpu %.5f (row off by %.2e)\n", step,
               l, lref, lb, tol, l16, fabs(l - l16) / l16);
        CHECK(fabs(l - lref) / lref < tol, "step %d: row loss %.5f vs the reference's %.5f", step, l, lref);
        CHECK(fabs(l - l16) / l16 < 1e-2, "step %d: row loss %.5f vs bf16's %.5f", step, l, l16);
    }
    free(losses); free(in); free(tg);
    model_free(&row); model_free(&bf16);
    ref_free(&ref); ref_free(&refb);
}

// The fallback's fixture, dev/test/test_fp8_grain.h's test_grain_auto_fallback at T 128: token 7,
// only at position 0, is the one token with embedding dimension 5 (1 there, 0 elsewhere in its row),
// which layer 0's wo leaves alone and its w13 up row 3 reads with weight 3000, so SwiGLU channel 3 is
// ~10^3 at that position and 0 elsewhere: a massive activation as pretrained models have them. Under
// per-tensor scaling layer 0's w2 X then loses ~50% of its values and its w13 W ~26% (the 3000 sets
// W's amax). In the reference (measured on the CPU, 5 steps, lr 1e-3, with and without bf16 inputs)
// every other tensor loses under 0.05% in every step but layer 0's qkv dY: 0.57-0.92% in step 2,
// under 0.1% in step 3, up to 0.46% in step 4 (with patience 3, where w13 and w2 switch a step later:
// 0.64-1.41% in step 2, under 0.5% in step 3), so it is never over twice in a row, even with the
// B x C first-position dQ values (0.39% of the tensor) the GPU's attention backward may add
// (fp8_counts_check).
static LlamaConfig outlier_config(void) {
    LlamaConfig c = {64, 2, 128, 2, 1, 256, 128, 10000.0f, 1e-5f};
    return c;
}
enum { OUTLIER_B = 2, OUTLIER_T = 128, OUTLIER_N = OUTLIER_B * OUTLIER_T, OUTLIER_TOK = 7, OUTLIER_DIM = 5 };
static const AdamWParams OUTLIER_ADAMW = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};

// The reference with the fixture's weights (bf16_inputs: the flip floor's), and its batch (in, tg:
// OUTLIER_N each), the same every step.
static void outlier_fixture(RefModel *ref, int bf16_inputs, int *in, int *tg) {
    LlamaConfig cfg = outlier_config();
    ref_init(ref, &cfg, OUTLIER_B, OUTLIER_T, 1, 0, 0, 4, 0);
    ref->fp8_bf16_inputs = bf16_inputs;
    ref_init_weights(ref, 3);
    float *wte = ref->param_ptr[P_WTE], *up = ref->param_ptr[P_W13] + (size_t)(cfg.FF + 3) * cfg.C;
    for (int t = 0; t < cfg.V; t++) wte[(size_t)t * cfg.C + OUTLIER_DIM] = 0.0f;
    for (int c = 0; c < cfg.C; c++) {
        wte[(size_t)OUTLIER_TOK * cfg.C + c] = c == OUTLIER_DIM ? 1.0f : 0.0f;
        up[c] = c == OUTLIER_DIM ? 3000.0f : 0.0f;
        ref->param_ptr[P_WO][(size_t)OUTLIER_DIM * cfg.C + c] = 0.0f; // attention adds nothing to it
    }
    uint64_t rng = 5;
    for (int i = 0; i < OUTLIER_N; i++) {
        do { in[i] = (int)(random_u32(&rng) % cfg.V); } while (in[i] == OUTLIER_TOK);
        tg[i] = (int)(random_u32(&rng) % cfg.V);
    }
    in[0] = OUTLIER_TOK;
}

// A GPU model of the fixture with the fallback to `target` (threshold 1%, `patience`).
static void outlier_model(Model *m, const RefModel *ref, int target, int patience, int cuda_graph) {
    LlamaConfig cfg = outlier_config();
    ModelOptions mo = model_options(OUTLIER_B, OUTLIER_T, PREC_FP8);
    mo.fp8_history = 4; mo.cuda_graph = cuda_graph;
    mo.fp8_fallback = target; mo.fp8_fallback_millionths = 10000; mo.fp8_fallback_patience = patience;
    model_init(m, &cfg, &mo, NULL);
    model_set_weights(m, ref->params);
}

// The step after which each fp8 linear left per-tensor scaling (-1: not yet), from its grains.
static void note_switches(const unsigned char *gpu, const int *ref, int nlin, int step, int *gpu_at, int *ref_at) {
    for (int i = 0; i < nlin; i++) {
        if (gpu && gpu[i] != FP8_GRAIN_TENSOR && gpu_at[i] < 0) gpu_at[i] = step;
        if (ref && ref[i] != FP8_GRAIN_TENSOR && ref_at[i] < 0) ref_at[i] = step;
    }
}

// The fallback on the GPU and in the reference (ref_fp8_auto_grain after each step, patience 2) on the
// fixture: the same linears must switch after the same step, layer 0's w13 and w2 after step 1, and
// the bf16-input reference must agree (else a decision sits within the flip noise and the GPU cannot
// be held to it). The losses within the fp8 budget of the 6-step tests. After the switch, with target
// block, w2's X loses under 1% of its values (both casts), which per-tensor scaling lost ~50% of;
// with target bf16, nothing of w2's or w13's is cast: the last step's counts 0, W's slot (the next
// step's weights, already cast) 0 and the newest history entries 0.
static void fallback_vs_cpu(int target) {
    LlamaConfig c = outlier_config();
    RefModel ref, refb;
    int in[OUTLIER_N], tg[OUTLIER_N];
    outlier_fixture(&ref, 0, in, tg);
    outlier_fixture(&refb, 1, in, tg);
    Model m;
    outlier_model(&m, &ref, target, 2, 1);
    const AdamWParams h = OUTLIER_ADAMW;
    int nlin = fp8_num_linears(&c, 0), gpu_at[8], ref_at[8], refb_at[8];
    for (int i = 0; i < nlin; i++) gpu_at[i] = ref_at[i] = refb_at[i] = -1;
    float losses[OUTLIER_N];
    for (int step = 0; step < 4; step++) {
        float lref = ref_train_step(&ref, in, tg, 1, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, NULL);
        float lb = ref_train_step(&refb, in, tg, 1, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_clip, NULL);
        ref_fp8_auto_grain(&ref, 1, 0.01, 2, target);
        ref_fp8_auto_grain(&refb, 1, 0.01, 2, target);
        StepResult r = train_step_on(&m, in, tg, 1, &h, losses);
        note_switches(m.linears.grain, ref.fp8_grain, nlin, step, gpu_at, ref_at);
        note_switches(NULL, refb.fp8_grain, nlin, step, NULL, refb_at);
        double tol = fp8_tolerance(fabs(lb - lref) / lref, BF16_STEPS_TOL);
        printf("    step %d loss gpu %.5f cpu %.5f (bf16-input cpu %.5f, tolerance %.2e); switched now: %d on the GPU, grains", step, r.loss,
               lref, lb, tol, m.linears.num_switched);
        for (int i = 0; i < nlin; i++) printf(" %d/%d", m.linears.grain[i], ref.fp8_grain[i]);
        printf(" (gpu/cpu)\n");
        CHECK(!r.skipped && fabs(r.loss - lref) / lref < tol, "step %d loss %.5f vs %.5f", step, r.loss, lref);
    }
    for (int i = 0; i < nlin; i++) {
        CHECK(ref_at[i] == refb_at[i], "premise: linear %d switched after step %d in the reference, %d with bf16 inputs", i, ref_at[i], refb_at[i]);
        CHECK(gpu_at[i] == ref_at[i], "target %s: linear %d (layer %d %s) switched after step %d on the GPU, %d in the reference",
              FP8_GRAIN_NAMES[target], i, i / LINS_PER_LAYER, LINEAR_NAMES[i % LINS_PER_LAYER], gpu_at[i], ref_at[i]);
    }
    CHECK(ref_at[fp8_linear(&c, 0, LIN_W2)] == 1 && ref_at[fp8_linear(&c, 0, LIN_W13)] == 1,
          "premise: the reference switched layer 0's w2 after step %d, w13 after step %d (the fixture makes both switch after step 1)",
          ref_at[fp8_linear(&c, 0, LIN_W2)], ref_at[fp8_linear(&c, 0, LIN_W13)]);
    size_t nc = (size_t)FP8_COUNTS * m.fp8_state.layout.num_tensors;
    uint64_t *counts = (uint64_t *)download_u8(m.fp8_state.counts + nc, nc * sizeof(uint64_t));
    Fp8StateLayout lay = m.fp8_state.layout;
    float *st = download_f32(m.fp8_state.buffer, lay.total);
    int tx = fp8_tensor_index(0, LIN_W2, FP8_X);
    if (target == FP8_GRAIN_BLOCK) {
        double cast = linear_values_cast(&m.linears, 0, LIN_W2, FP8_X, 1);
        printf("    block: layer 0's w2 X lost %llu of %.0f values in the last step\n", (unsigned long long)counts[FP8_COUNTS * tx + FP8_UNDERFLOWS], cast);
        CHECK(cast == 2.0 * OUTLIER_N * c.FF && (double)counts[FP8_COUNTS * tx + FP8_UNDERFLOWS] < 0.01 * cast,
              "block: layer 0's w2 X lost %llu of %.0f values", (unsigned long long)counts[FP8_COUNTS * tx + FP8_UNDERFLOWS], cast);
    } else {
        long recorded = 0;
        for (int lin = LIN_W13; lin <= LIN_W2; lin++) {
            for (int k = 0; k < FP8_KINDS; k++) {
                int t = fp8_tensor_index(0, lin, k);
                recorded += counts[FP8_COUNTS * t] != 0 || counts[FP8_COUNTS * t + 1] != 0 || st[lay.amax_history + (size_t)t * lay.history_len] != 0.0f;
                recorded += k == FP8_W && st[lay.amax_slot + t] != 0.0f;
            }
        }
        CHECK(recorded == 0, "bf16: layer 0's w13 and w2 recorded or counted %ld times after their switch", recorded);
    }
    free(counts); free(st);
    model_free(&m);
    ref_free(&ref); ref_free(&refb);
}
static void test_fp8_fallback_block_vs_cpu(void) { fallback_vs_cpu(FP8_GRAIN_BLOCK); }
static void test_fp8_fallback_bf16_vs_cpu(void) { fallback_vs_cpu(FP8_GRAIN_BF16); }

// Resume across the fallback: 5 steps straight == 2 steps, a checkpoint, a new model, the checkpoint
// loaded, 3 steps; the losses bit for bit, and the grains and steps over the threshold at the end.
// Patience 2 (target block): layer 0's w13 and w2 switched after step 1, before the checkpoint, and
// must resume switched. Patience 3 (target bf16): they switch after step 2, after the resume, which
// needs their 2 steps over from the state file. Pinned batches: both runs replay CUDA graphs, captured
// again after the switch.
static void fallback_resume_check(int target, int patience) {
    LlamaConfig c = outlier_config();
    RefModel ref;
    int in0[OUTLIER_N], tg0[OUTLIER_N], *in, *tg, steps = 5, half = 2;
    outlier_fixture(&ref, 0, in0, tg0);
    float *losses, straight[5], resumed[5];
    cudaCheck(cudaMallocHost(&in, OUTLIER_N * sizeof(int)));
    cudaCheck(cudaMallocHost(&tg, OUTLIER_N * sizeof(int)));
    cudaCheck(cudaMallocHost(&losses, OUTLIER_N * sizeof(float)));
    memcpy(in, in0, sizeof(in0));
    memcpy(tg, tg0, sizeof(tg0));
    char dir[] = "/tmp/llama_fp8_fallback_XXXXXX", cmd[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    int nlin = fp8_num_linears(&c, 0);
    unsigned char grains[2][8];
    int over[2][8], loaded_switched = -1;
    for (int run = 0; run < 2; run++) {
        Model m;
        outlier_model(&m, &ref, target, patience, 1);
        TrainState ts;
        memset(&ts, 0, sizeof(ts));
        ts.grad_accum = 1; ts.world = 1;
        for (int s = 0; s < steps; s++) {
            if (run == 1 && s == half) {
                checkpoint_step(&m, &ts, dir, 0, 1); // run id 1
                model_free(&m);
                outlier_model(&m, &ref, target, patience, 1);
                load_checkpoint(&m, &ts, dir, half);
                loaded_switched = 0;
                for (int i = 0; i < nlin; i++) loaded_switched += m.linears.grain[i] != FP8_GRAIN_TENSOR;
            }
            (run == 0 ? straight : resumed)[s] = train_step_on(&m, in, tg, 1, &OUTLIER_ADAMW, losses).loss;
        }
        memcpy(grains[run], m.linears.grain, nlin);
        memcpy(over[run], m.linears.over_steps, nlin * sizeof(int));
        model_free(&m);
    }
    for (int s = half; s < steps; s++) {
        printf("    step %d straight %.7f resumed %.7f\n", s, straight[s], resumed[s]);
        CHECK(straight[s] == resumed[s], "step %d: %.9g straight vs %.9g resumed (must be bit-exact)", s, straight[s], resumed[s]);
    }
    int switched = 0;
    for (int i = 0; i < nlin; i++) {
        switched += grains[0][i] == target;
        CHECK(grains[0][i] == grains[1][i] && over[0][i] == over[1][i], "linear %d: grain %d after %d steps over straight, %d after %d resumed", i,
              grains[0][i], over[0][i], grains[1][i], over[1][i]);
    }
    printf("    patience %d: %d linears switched to %s by the end; the resumed model loaded %d switched\n", patience, switched, FP8_GRAIN_NAMES[target],
           loaded_switched);
    CHECK(switched >= 2 && loaded_switched == (patience == 2 ? switched : 0), "patience %d: %d switched, %d of them loaded switched (want %s)",
          patience, switched, loaded_switched, patience == 2 ? "all" : "none: they switch after the resume");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "could not remove %s", dir);
    cudaCheck(cudaFreeHost(in)); cudaCheck(cudaFreeHost(tg)); cudaCheck(cudaFreeHost(losses));
    ref_free(&ref);
}
static void test_fp8_fallback_resume_bitexact(void) {
    fallback_resume_check(FP8_GRAIN_BLOCK, 2);
    fallback_resume_check(FP8_GRAIN_BF16, 3);
}

// -cuda_graph 1 across a switch: the fixture's 4 steps with graphs against the same steps launched
// kernel by kernel, losses, master weights and fp8 histories and scales bit for bit; the graph
// captured in step 1, step 2 (the first after the switch, which may build and tune new GEMM plans)
// run kernel by kernel, and captured again in step 3 (StepGraphKey's grains): 2 captures, 2 replays.
// A replay of step 1's graph would run the switched linears per-tensor.
static void test_fp8_fallback_graph_recapture(void) {
    RefModel ref;
    int in0[OUTLIER_N], tg0[OUTLIER_N], *in, *tg;
    outlier_fixture(&ref, 0, in0, tg0);
    float *losses;
    cudaCheck(cudaMallocHost(&in, OUTLIER_N * sizeof(int)));
    cudaCheck(cudaMallocHost(&tg, OUTLIER_N * sizeof(int)));
    cudaCheck(cudaMallocHost(&losses, OUTLIER_N * sizeof(float)));
    memcpy(in, in0, sizeof(in0));
    memcpy(tg, tg0, sizeof(tg0));
    for (int target = FP8_GRAIN_BLOCK; target <= FP8_GRAIN_BF16; target++) {
        Trained t[2];
        for (int graph = 0; graph < 2; graph++) {
            Model m;
            outlier_model(&m, &ref, target, 2, graph);
            memset(&t[graph], 0, sizeof(Trained));
            for (int s = 0; s < TRAIN_SMALL_STEPS; s++) t[graph].losses[s] = train_step_on(&m, in, tg, 1, &OUTLIER_ADAMW, losses).loss;
            cudaCheck(cudaDeviceSynchronize());
            t[graph].num_params = m.num_params;
            t[graph].master = download_f32(m.master, m.num_params);
            t[graph].lay = m.fp8_state.layout;
            t[graph].state = download_f32(m.fp8_state.buffer, t[graph].lay.total);
            t[graph].captures = m.graph.captures;
            t[graph].replays = m.graph.replays;
            model_free(&m);
        }
        printf("  target %s: %d captures and %d replays\n", FP8_GRAIN_NAMES[target], t[1].captures, t[1].replays);
        CHECK(t[1].captures == 2 && t[1].replays == 2, "target %s: %d captures and %d replays, expected 2 and 2", FP8_GRAIN_NAMES[target],
              t[1].captures, t[1].replays);
        expect_same_training(t[0], t[1], target == FP8_GRAIN_BLOCK ? "fallback to block: graphs vs none" : "fallback to bf16: graphs vs none");
    }
    cudaCheck(cudaFreeHost(in)); cudaCheck(cudaFreeHost(tg)); cudaCheck(cudaFreeHost(losses));
    ref_free(&ref);
}

// ----------------------------------------------------------------------------------------------
// The main loop's end of a run, and evaluation without training (issue 30 items 3 and 4)

// A last step whose gradient is not finite (a NaN planted in the final norm's bf16 weight, which both
// precisions' forward reads: the loss is NaN, the update skipped) still ends the run with its
// checkpoint, through the main loop's own after_step and checkpoint_step; the checkpoint (the fp32
// master weights, which the skipped update left as the last good step made them) then resumes.
static void nonfinite_last_step_checkpoint(int precision) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    AdamWParams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    Options o = default_options();
    o.max_steps = 2; o.ckpt_every = 0; o.val_every = 0; o.sample_every = 0;
    int *in, *tg;
    float *losses;
    cudaCheck(cudaMallocHost(&in, N * sizeof(int)));
    cudaCheck(cudaMallocHost(&tg, N * sizeof(int)));
    cudaCheck(cudaMallocHost(&losses, N * sizeof(float)));
    char dir[] = "/tmp/llama_fp8_nanlast_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    Model m;
    ModelOptions mo = model_options(B, T, precision);
    mo.fp8_history = 4;
    model_init(&m, &c, &mo, NULL);
    float *w = (float *)mallocCheck(m.num_params * sizeof(float));
    model_init_weights(&m, 17, w);
    model_set_weights(&m, w);
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    ts.grad_accum = 1; ts.world = 1;
    int bad = 0, wrote = 0;
    for (int step = 0; step < o.max_steps; step++) {
        if (step == o.max_steps - 1) {
            floatX nan_bf16 = __float2bfloat16(NAN);
            cudaCheck(cudaMemcpy(m.param[P_LNFW], &nan_bf16, sizeof(floatX), cudaMemcpyHostToDevice));
        }
        random_tokens(in, N, c.V, 41 + 2 * step);
        random_tokens(tg, N, c.V, 42 + 2 * step);
        StepResult r = train_step_on(&m, in, tg, 1, &h, losses);
        cudaCheck(cudaDeviceSynchronize());
        if (step == o.max_steps - 1) CHECK(!isfinite(r.loss) && r.skipped, "the planted NaN gave loss %g, update skipped %d", r.loss, r.skipped);
        int work = after_step(&o, step, isfinite(r.loss) && !r.skipped, 0, 0, 0, 1, &bad);
        if (work & AFTER_CHECKPOINT) { checkpoint_step(&m, &ts, dir, 0, 1); wrote++; } // run id 1
    }
    char model_path[1024], state_path[1024];
    checkpoint_paths(dir, o.max_steps, 0, model_path, state_path);
    CHECK(wrote == 1 && access(model_path, R_OK) == 0 && access(state_path, R_OK) == 0,
          "the run whose last step was not finite wrote %d checkpoints; %s %s", wrote, model_path, access(model_path, R_OK) == 0 ? "exists" : "missing");
    CheckpointCtx cc = {&m, &ts, 1};
    CheckpointRanks ranks = checkpoint_ranks(&cc);
    int picked = checkpoint_pick(&ranks, dir, 1);
    CHECK(picked == o.max_steps, "-y 1 would resume from step %d, not %d", picked, o.max_steps);
    model_free(&m);
    Model back;
    model_init(&back, &c, &mo, NULL);
    if (wrote) {
        load_checkpoint(&back, &ts, dir, o.max_steps);
        float *master = download_f32(back.master, back.num_params);
        long bad_weights = 0;
        for (size_t i = 0; i < back.num_params; i++) bad_weights += !isfinite(master[i]);
        CHECK(bad_weights == 0, "%ld master weights of the checkpoint are not finite", bad_weights);
        free(master);
    }
    model_free(&back);
    free(w);
    cudaCheck(cudaFreeHost(in)); cudaCheck(cudaFreeHost(tg)); cudaCheck(cudaFreeHost(losses));
}
static void test_nonfinite_last_step_checkpoint(void) {
    nonfinite_last_step_checkpoint(PREC_BF16);
    nonfinite_last_step_checkpoint(PREC_FP8);
}

// The logits (B*T*V, as floats) of one forward of `tokens`: an evaluation's (nothing recorded) when
// eval is set, else the first micro-step's of a training step.
static float *forward_logits(Model *m, const int *tokens, int eval) {
    size_t N = (size_t)m->opt.B * m->opt.T;
    cudaCheck(cudaMemcpy(m->acts.inputs, tokens, N * sizeof(int), cudaMemcpyHostToDevice));
    model_forward(m, eval ? eval_pass(m) : train_pass(m, 0), 0, 0.0f, g_stream);
    cudaCheck(cudaDeviceSynchronize());
    return download_bf16(m->acts.logits, N * m->cfg.V);
}

// -x 0 in fp8: what evaluate_only does before evaluating or sampling (fp8_ready_for_eval, with the
// first val batch or the sample's prompt), then a forward that records nothing, as evaluate() and
// sample_text() run it, must give exactly the logits of the first training step's forward of the
// same tokens: the weights cast, and the scales those of that step (delayed: set live by the
// calibration forward; current: every cast live, evaluation included). Before, -x 0 without val data
// read never-cast weights with scales of 1, and the current recipe evaluated with stale scales. The
// sample's prompt (a document start, then zeros) and random tokens (a val batch) both. Against bf16's
// logits of the same weights: fp8's error must be smaller than the logits themselves (RMS), a gross
// check that garbage (bf16 bytes read as E4M3) fails; the sharp one is the exact match.
static void eval_only_fp8(int current) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    int *prompt = (int *)callocCheck(N, sizeof(int)), *batch = (int *)mallocCheck(N * sizeof(int));
    prompt[0] = 1;
    random_tokens(batch, N, c.V, 51);
    const int *inputs[2] = {prompt, batch};
    const char *what[2] = {"the sample's prompt", "a val batch"};
    ModelOptions mo = model_options(B, T, PREC_FP8), mb = model_options(B, T, PREC_BF16);
    mo.fp8_current = current;
    size_t nl = (size_t)N * c.V;
    for (int k = 0; k < 2; k++) {
        Model trained, evaluated, bf16;
        model_init(&trained, &c, &mo, NULL);
        model_init(&evaluated, &c, &mo, NULL);
        model_init(&bf16, &c, &mb, NULL);
        float *w = (float *)mallocCheck(trained.num_params * sizeof(float));
        model_init_weights(&trained, 23, w);
        model_set_weights(&trained, w);
        model_set_weights(&evaluated, w);
        model_set_weights(&bf16, w);
        recast_stale_weights(&trained, g_stream); // as train_step does before the first forward
        float *want = forward_logits(&trained, inputs[k], 0);
        fp8_ready_for_eval(&evaluated, inputs[k], g_stream);
        float *got = forward_logits(&evaluated, inputs[k], 1);
        float *ref = forward_logits(&bf16, inputs[k], 1);
        long differ = 0;
        for (size_t i = 0; i < nl; i++) differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        double to_bf16 = rms_rel(got, ref, nl);
        printf("    %s, %s recipe: %ld of %zu logits differ from the first training step's; RMS rel to bf16 %.3e\n", what[k],
               current ? "current" : "delayed", differ, nl, to_bf16);
        CHECK(differ == 0, "%s (%s): %ld of %zu evaluation logits differ from the first training step's", what[k], current ? "current" : "delayed", differ, nl);
        CHECK(to_bf16 < 1.0, "%s (%s): fp8 evaluation logits are %.3e (RMS rel) from bf16's", what[k], current ? "current" : "delayed", to_bf16);
        free(want); free(got); free(ref); free(w);
        model_free(&trained); model_free(&evaluated); model_free(&bf16);
    }
    free(prompt); free(batch);
}
static void test_eval_only_fp8_delayed(void) { eval_only_fp8(0); }
static void test_eval_only_fp8_current(void) { eval_only_fp8(1); }
// ----------------------------------------------------------------------------------------------
// loss masks

// One optimizer step of 2 micro-batches with loss-masked targets (-1) against the C reference: the
// step's loss is the mean over its learned targets, 192 in micro-batch 0 and 16 in micro-batch 1, so
// the mean of the two micro-batches' means would weigh each of micro-batch 1's targets 6.5x more
// than the step's mean does (and give another loss); a masked target has loss 0 and no gradient. The
// gradient is read after train_step (lr 0, no clipping: the buffer holds the step's gradient);
// tolerances as the first-step tests' (bf16 budget; fp8: twice the flip floor plus it).
static void masked_step_vs_cpu(int precision) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T, grad_accum = 2, fp8 = precision == PREC_FP8;
    int *in = (int *)mallocCheck(grad_accum * N * sizeof(int)), *tg = (int *)mallocCheck(grad_accum * N * sizeof(int));
    random_tokens(in, grad_accum * N, c.V, 5);
    random_tokens(tg, grad_accum * N, c.V, 6);
    int learned[2] = {0, 0};
    for (int k = 0; k < grad_accum; k++) {
        for (int i = 0; i < N; i++) {
            int keep = k == 0 ? i % 4 != 0 : i % 16 == 3;
            if (!keep) tg[k * N + i] = -1;
            learned[k] += keep;
        }
    }
    RefModel ref, refb;
    float ref_loss = ref_step_pair(&ref, &refb, &c, B, T, fp8, in, tg, grad_accum);
    RefModel ref32; // the fp32 model's micro-batch means, for the mean of means
    ref_init(&ref32, &c, B, T, 0, 0, 0, 16, 0);
    ref_init_weights(&ref32, 42);
    double mean_of_means = 0.0;
    for (int k = 0; k < grad_accum; k++) {
        ref32.micro_step = -1;
        mean_of_means += ref_forward(&ref32, in + k * N, tg + k * N) / grad_accum;
    }
    ref_free(&ref32);
    Model m;
    float *losses = (float *)mallocCheck(grad_accum * N * sizeof(float)), l;
    int skipped;
    float *grads = gpu_step_grads(&m, &c, B, T, precision, ref.params, in, tg, grad_accum, losses, &l, &skipped);
    double loss_tol = fp8 ? 1e-2 : BF16_SMALL.loss;
    printf("    %d and %d learned targets | loss gpu %.6f cpu %.6f (mean of the micro-batches' means %.6f)\n", learned[0], learned[1],
           l, ref_loss, mean_of_means);
    // the premise: bf16's loss budget tells the step's mean from the mean of means (with random weights
    // every target's loss is near ln V, so they differ by ~0.4%); fp8's wider budget does not, and
    // there its gradients tell them apart (trainer_mean_of_means fails both)
    CHECK(fabs(mean_of_means - ref_loss) / ref_loss > 2 * BF16_SMALL.loss, "the data cannot tell the step's mean (%.6f) from the"
          " mean of means (%.6f)", ref_loss, mean_of_means);
    CHECK(!skipped && fabsf(l - ref_loss) / ref_loss < loss_tol, "loss %.6f vs the reference's %.6f", l, ref_loss);
    int nonzero_masked = 0;
    for (int i = 0; i < grad_accum * N; i++) nonzero_masked += tg[i] < 0 && losses[i] != 0.0f;
    CHECK(nonzero_masked == 0, "%d masked targets have a non-zero loss", nonzero_masked);
    check_step_grads(&m, grads, &ref, fp8 ? &refb : NULL, BF16_SMALL.grads, fp8 ? "masked fp8" : "masked bf16");
    if (fp8) ref_free(&refb);
    free(grads);
    free(losses);
    model_free(&m);
    free(in); free(tg);
    ref_free(&ref);
}
static void test_masked_step_bf16_vs_cpu(void) { masked_step_vs_cpu(PREC_BF16); }
static void test_masked_step_fp8_vs_cpu(void) { masked_step_vs_cpu(PREC_FP8); }

// evaluate() on loss-masked val data (a shard and its mask: 2 positions of B 2 x T 64, bf16) against
// the C reference: the mean over both positions' learned targets, from each position's learned mean
// and count. Position 0 learns 3 of its 4 targets in 4, position 1 one in 16, so the mean of the
// positions' means (an evaluation that drops the counts) and the mean over every target (one that
// ignores the masks) are both further from it than the bf16 loss budget (checked: the premise).
static void test_masked_val_loss_vs_cpu(void) {
    LlamaConfig c = small_config();
    int B = 2, T = 64, N = B * T, P = 2, n = P * N + 1;
    char dir[] = "/tmp/llama_fp8_mval_XXXXXX", shard[1024], mask[1100], cmd[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    snprintf(shard, sizeof(shard), "%s/val.bin", dir);
    snprintf(mask, sizeof(mask), "%s.mask", shard);
    int *tokens = (int *)mallocCheck(n * sizeof(int)), h[256];
    random_tokens(tokens, n, c.V, 11);
    uint16_t *t16 = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
    unsigned char *bytes = (unsigned char *)mallocCheck(n);
    for (int i = 0; i < n; i++) {
        t16[i] = (uint16_t)tokens[i];
        int target = i - 1; // token i is target i - 1 of the run: position target / N
        bytes[i] = i > 0 && (target < N ? target % 4 != 0 : target % 16 == 3);
    }
    memset(h, 0, sizeof(h));
    h[0] = SHARD_MAGIC_U16; h[1] = SHARD_VERSION_U16; h[2] = n;
    FILE *f = fopenCheck(shard, "wb");
    fwriteCheck(h, sizeof(int), 256, f);
    fwriteCheck(t16, sizeof(uint16_t), n, f);
    fcloseCheck(f);
    h[0] = MASK_MAGIC; h[1] = MASK_VERSION;
    f = fopenCheck(mask, "wb");
    fwriteCheck(h, sizeof(int), 256, f);
    fwriteCheck(bytes, 1, n, f);
    fcloseCheck(f);
    DataLoader val;
    dataloader_init_eval(&val, shard, B, T, c.V, 0);
    RefModel ref;
    ref_init(&ref, &c, B, T, 0, 0, 0, 16, 0);
    ref_init_weights(&ref, 42);
    double sum = 0.0, learned = 0.0, mean_of_means = 0.0, every = 0.0;
    int *all = (int *)mallocCheck(N * sizeof(int));
    for (int p = 0; p < P; p++) {
        dataloader_read_position(&val, p);
        int k = 0;
        for (int i = 0; i < N; i++) k += val.targets[i] >= 0;
        double l = ref_forward(&ref, val.inputs, val.targets);
        sum += l * k; learned += k; mean_of_means += l / P;
        for (int i = 0; i < N; i++) all[i] = tokens[p * N + i + 1];
        every += ref_forward(&ref, val.inputs, all) / P;
    }
    double want = sum / learned;
    Model m;
    ModelOptions mo = model_options(B, T, PREC_BF16);
    model_init(&m, &c, &mo, NULL);
    model_set_weights(&m, ref.params);
    float *host_losses;
    cudaCheck(cudaMallocHost(&host_losses, N * sizeof(float)));
    float got = evaluate(&m, &val, P, host_losses, g_stream);
    printf("    %g learned targets | val loss gpu %.6f cpu %.6f (the mean of the positions' means %.6f, over every target %.6f)\n",
           learned, got, want, mean_of_means, every);
    CHECK(fabs(mean_of_means - want) / want > 2 * BF16_SMALL.loss && fabs(every - want) / want > 2 * BF16_SMALL.loss,
          "the data cannot tell the learned targets' mean (%.6f) from the mean of means (%.6f) or the mean over every target (%.6f)",
          want, mean_of_means, every);
    CHECK(fabs(got - want) / want < BF16_SMALL.loss, "masked val loss %.6f vs the reference's %.6f", got, want);
    cudaCheck(cudaFreeHost(host_losses));
    model_free(&m);
    ref_free(&ref);
    dataloader_free(&val);
    free(tokens); free(t16); free(bytes); free(all);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "could not remove %s", dir);
}

// ----------------------------------------------------------------------------------------------
// Document masking (-doc_mask 1, issue 33): each token's position in its document, made on the GPU
// (doc_positions), the plain attention kernels and RoPE that take it, and cuDNN with the additive bias
// doc_bias_forward makes from it, against the host helper (llmc/doc_mask.h) and the C reference's
// option (ref_set_doc_mask). cuDNN takes a document-masked call given the bias, where it takes the
// shape (llmc/attention.cuh), so with cuDNN on the results are cuDNN's, held to cuDNN's tolerances.

// Row r of a batch with several documents, by kind r % 4 (DOC_START at the listed positions, other
// tokens drawn from [DOC_START + 1, V)):
//   0: documents starting at 0, 1, 2, 15, 16, 33, 47, T/2 + 5 and T - 1: lone BOSes (documents of
//      length 1) at 0, 1, 15 and T - 1, the row's last token; starts on and off the kernels' 16-row
//      blocks and 32-key tiles;
//   1: starts mid-document (no BOS at 0: the row's first token starts a document all the same), one
//      more document from T/2 + 3;
//   2: a BOS at every position, T documents of length 1;
//   3: no BOS at all, one document of length T.
static void doc_mask_rows(int *tokens, int B, int T, int V, uint64_t seed) {
    uint64_t rng = seed;
    for (int b = 0; b < B; b++) {
        int *row = tokens + (size_t)b * T;
        for (int t = 0; t < T; t++) row[t] = DOC_START + 1 + (int)(random_u32(&rng) % (uint32_t)(V - DOC_START - 1));
        const int starts[] = {0, 1, 2, 15, 16, 33, 47, T / 2 + 5, T - 1};
        switch (b % 4) {
        case 0: for (int k = 0; k < 9; k++) if (starts[k] < T) row[starts[k]] = DOC_START; break;
        case 1: row[T / 2 + 3] = DOC_START; break;
        case 2: for (int t = 0; t < T; t++) row[t] = DOC_START; break;
        default: break;
        }
    }
}

// Host positions of tokens (B, T) by llmc/doc_mask.h, in a caller-freed array.
static int *host_doc_positions(const int *tokens, int B, int T) {
    DocMask dm;
    doc_mask_init(&dm, B, T, DOC_START, INT_MAX);
    doc_mask_compute(&dm, tokens);
    int *pos = (int *)mallocCheck((size_t)B * T * sizeof(int));
    memcpy(pos, dm.pos, (size_t)B * T * sizeof(int));
    doc_mask_free(&dm);
    return pos;
}

static int *upload_ints(const int *h, size_t n) {
    int *d = (int *)cudaMallocCheck(n * sizeof(int), "test ints");
    cudaCheck(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

// doc_positions (one warp per row, a scan over the lanes' chunks) against llmc/doc_mask.h, exactly:
// the four kinds of rows, and rows of random density, for T of one partial chunk per lane (77), a
// multiple of 32 (128) and more tokens than lanes times chunks divide evenly (1000).
static void test_doc_positions_vs_host(void) {
    const int Ts[] = {77, 128, 1000};
    for (int k = 0; k < 3; k++) {
        int B = 8, T = Ts[k], V = 512;
        size_t n = (size_t)B * T;
        int *tokens = (int *)mallocCheck(n * sizeof(int));
        doc_mask_rows(tokens, B, T, V, 700 + T);
        uint64_t rng = 800 + T;
        for (int b = 4; b < B; b++) // rows 4..7: a start with probability 1/2, 1/16, 1/128, 1/1024
            for (int t = 0; t < T; t++) tokens[(size_t)b * T + t] = random_u32(&rng) % (2u << (3 * (b - 4))) == 0 ? DOC_START : 2 + t % 7;
        int *want = host_doc_positions(tokens, B, T);
        int *in_d = upload_ints(tokens, n), *pos_d = (int *)cudaMallocCheck(n * sizeof(int), "test positions");
        doc_positions(pos_d, in_d, B, T, DOC_START, g_stream);
        int *got = (int *)mallocCheck(n * sizeof(int));
        cudaCheck(cudaMemcpy(got, pos_d, n * sizeof(int), cudaMemcpyDeviceToHost));
        long differ = 0;
        size_t first_bad = n;
        for (size_t i = 0; i < n; i++) {
            if (got[i] != want[i] && first_bad == n) first_bad = i;
            differ += got[i] != want[i];
        }
        printf("    B %d T %d: %ld of %zu positions differ from llmc/doc_mask.h's\n", B, T, differ, n);
        CHECK(differ == 0, "T %d: %ld positions differ; the first, row %zu token %zu: %d, want %d", T, differ, first_bad / T,
              first_bad % T, first_bad < n ? got[first_bad] : 0, first_bad < n ? want[first_bad] : 0);
        free(tokens); free(want); free(got);
        cudaCheck(cudaFree(in_d)); cudaCheck(cudaFree(pos_d));
    }
}

// Document-masked attention, forward and backward, on bf16 inputs against the fp32 C reference with the
// same positions (its own rule, ref_attention_*_docs): the plain kernels, then the dispatcher with
// cuDNN on (deterministic and fast backward) given doc_bias_forward's bias. Where cuDNN takes the shape
// (T % 128 == 0) the dispatcher must run it there (attention_path); where it does not, it must give the
// plain kernels' bytes. Tolerance as attention_case's for both paths (1e-2 of the largest element); the
// premise: the unmasked reference is further from the masked one than that. Each cuDNN form first runs
// the shape unmasked (against the unmasked reference), so the plan cache holds the causal plans of the
// very shape the masked calls that follow must not be given.
static void attention_doc_mask_case(int B, int T, int NH, int NKV, int HS) {
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nst = (size_t)B * NH * T;
    int *tokens = (int *)mallocCheck((size_t)B * T * sizeof(int));
    doc_mask_rows(tokens, B, T, 512, 900 + T);
    int *pos = (int *)mallocCheck((size_t)B * T * sizeof(int));
    ref_doc_positions(pos, tokens, B, T, DOC_START);
    int *pos_d = upload_ints(pos, (size_t)B * T);
    floatX *bias = (floatX *)cudaMallocCheck((size_t)B * T * T * sizeof(floatX), "test document bias");
    doc_bias_forward(bias, pos_d, B, T, g_stream);
    floatX *qkv = upload_random_bf16(nqkv, 300 + T, 1.0f), *dout = upload_random_bf16(nout, 400 + T, 1.0f);
    float *hq = download_bf16(qkv, nqkv), *hd = download_bf16(dout, nout);
    float *ref_out = (float *)mallocCheck(nout * sizeof(float)), *ref_dqkv = (float *)callocCheck(nqkv, sizeof(float));
    float *unmasked = (float *)mallocCheck(nout * sizeof(float)), *unmasked_dqkv = (float *)callocCheck(nqkv, sizeof(float));
    float *att = (float *)mallocCheck((size_t)B * NH * T * T * sizeof(float));
    ref_attention_forward(unmasked, att, hq, B, T, NH, NKV, HS);
    ref_attention_backward(unmasked_dqkv, hd, hq, att, B, T, NH, NKV, HS);
    ref_attention_forward_docs(ref_out, att, hq, pos, B, T, NH, NKV, HS);
    ref_attention_backward_docs(ref_dqkv, hd, hq, att, pos, B, T, NH, NKV, HS);
    double premise = rel_err(unmasked, ref_out, nout);
    CHECK(premise > 1e-2, "B %d T %d: the unmasked reference is within the tolerance of the masked one (%.3e)", B, T, premise);
    floatX *out = (floatX *)cudaMallocCheck(nout * sizeof(floatX), "test out");
    floatX *dqkv = (floatX *)cudaMallocCheck(nqkv * sizeof(floatX), "test dqkv");
    float *stats = (float *)cudaMallocCheck(nst * sizeof(float), "test stats");
    float *plain_o = NULL, *plain_d = NULL;
    // forms: the plain kernels, the dispatcher with cuDNN on and its deterministic backward, with its fast one
    for (int form = 0; form < 3; form++) {
        if (form > 0) { // the unmasked call of the shape first (see above)
            attention_init(1, form == 1);
            attention_forward(out, stats, qkv, NULL, NULL, B, T, NH, NKV, HS, g_stream);
            attention_backward(dqkv, dout, qkv, out, stats, NULL, NULL, B, T, NH, NKV, HS, g_stream);
            cudaCheck(cudaDeviceSynchronize());
            float *o = download_bf16(out, nout), *d = download_bf16(dqkv, nqkv);
            double eo = rel_err(o, unmasked, nout), ed = rel_err(d, unmasked_dqkv, nqkv);
            CHECK(eo < 1e-2 && ed < 1e-2, "unmasked attention (T %d) vs reference: out %.3e dqkv %.3e", T, eo, ed);
            free(o); free(d);
        }
        cudaCheck(cudaMemset(out, 0xFF, nout * sizeof(floatX))); // NaNs: every element must be written
        cudaCheck(cudaMemset(dqkv, 0xFF, nqkv * sizeof(floatX)));
        if (form == 0) {
            attention_forward_plain(out, stats, qkv, pos_d, B, T, NH, NKV, HS, g_stream);
            attention_backward_plain(dqkv, dout, qkv, out, stats, pos_d, B, T, NH, NKV, HS, g_stream);
        } else {
            attention_forward(out, stats, qkv, pos_d, bias, B, T, NH, NKV, HS, g_stream);
            attention_backward(dqkv, dout, qkv, out, stats, pos_d, bias, B, T, NH, NKV, HS, g_stream);
        }
        cudaCheck(cudaDeviceSynchronize());
        float *o = download_bf16(out, nout), *d = download_bf16(dqkv, nqkv);
        double eo = rel_err(o, ref_out, nout), ed = rel_err(d, ref_dqkv, nqkv);
        const char *fwd = form == 0 ? "plain" : attention_path(B, T, NH, NKV, HS, 0, 1);
        const char *bwd = form == 0 ? "plain" : attention_path(B, T, NH, NKV, HS, 1, 1);
        const char *how = form == 0 ? "plain kernels" : form == 1 ? "dispatcher, deterministic" : "dispatcher, fast backward";
        printf("    B %d T %d NH %d NKV %d HS %d, %s (forward %s, backward %s): out rel %.2e, dqkv rel %.2e (unmasked reference:"
               " out rel %.2e)\n", B, T, NH, NKV, HS, how, fwd, bwd, eo, ed, premise);
        CHECK(eo < 1e-2 && ed < 1e-2, "document-masked attention (%s, %s, T %d) vs reference: out %.3e dqkv %.3e", how, bwd, T, eo, ed);
        if (form == 0) {
            plain_o = o; plain_d = d;
            continue;
        }
        const int on_cudnn = strcmp(fwd, "cudnn") == 0 && strcmp(bwd, "cudnn") == 0;
#ifdef ENABLE_CUDNN
        CHECK(on_cudnn == (T % 128 == 0), "built with cuDNN, document-masked T %d must %stake the cuDNN path (forward %s, backward %s)",
              T, T % 128 == 0 ? "" : "not ", fwd, bwd);
#endif
        if (!on_cudnn) {
            CHECK(memcmp(o, plain_o, nout * sizeof(float)) == 0 && memcmp(d, plain_d, nqkv * sizeof(float)) == 0,
                  "document-masked attention (%s, T %d) off cuDNN is not the plain kernels' bit for bit", how, T);
        }
        free(o); free(d);
    }
    attention_init(1, 1); // the other tests compare runs bit for bit
    free(plain_o); free(plain_d);
    free(tokens); free(pos); free(hq); free(hd); free(ref_out); free(ref_dqkv); free(unmasked); free(unmasked_dqkv); free(att);
    cudaCheck(cudaFree(pos_d)); cudaCheck(cudaFree(bias)); cudaCheck(cudaFree(out)); cudaCheck(cudaFree(dqkv));
    cudaCheck(cudaFree(stats)); cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(dout));
}

static void test_attention_doc_mask(void) {
    attention_doc_mask_case(4, 256, 8, 2, 64);  // a shape cuDNN takes, GQA; the four kinds of rows
    attention_doc_mask_case(2, 384, 4, 4, 128); // cuDNN, multi-head, head size 128
    attention_doc_mask_case(4, 200, 4, 4, 128); // T % 32 != 0: the plain kernels, also with cuDNN on
}

// One optimizer step of 2 micro-batches with -doc_mask 1 (bf16) against the C reference's document
// masking: micro-batch 0 has rows of the four kinds of doc_mask_rows, micro-batch 1 the kinds shifted
// by one row, so each micro-step must mask by its own tokens. The step's loss and gradient (read after
// train_step: lr 0, no clipping, no decay), then micro-batch 1's q, k after RoPE (and v) of every layer
// and its logits (a forward after the step, on the weights lr 0 left). RoPE scores depend only on
// t - t2, so positions not restarted at a document's start would leave the logits equal up to
// rounding: the rotated q and k show them (an offset of one position turns pair 0 by a radian).
// Tolerances: the bf16 budgets of the first-step tests (qkv: the logits' bar; it is computed before
// them), which run on cuDNN. Premise: the reference without document masking is further than them. Run
// with cuDNN off (the plain kernels) and on (cuDNN with the document bias: the model must have made it,
// and the shape's document-masked attention must run on cuDNN), each against the reference.
static void test_doc_mask_step_vs_cpu(void) {
    LlamaConfig c = small_config();
    int B = 4, T = 128, N = B * T, grad_accum = 2, QKV = config_qkv_width(&c);
    size_t nqkv = (size_t)c.L * N * QKV, nl = (size_t)N * c.V;
    int *in = (int *)mallocCheck(grad_accum * N * sizeof(int)), *tg = (int *)mallocCheck(grad_accum * N * sizeof(int));
    doc_mask_rows(in, B, T, c.V, 51);
    int *shifted = (int *)mallocCheck((B + 1) * T * sizeof(int));
    doc_mask_rows(shifted, B + 1, T, c.V, 52);
    memcpy(in + N, shifted + T, N * sizeof(int)); // rows of kinds 1, 2, 3, 0
    free(shifted);
    random_tokens(tg, grad_accum * N, c.V, 53);
    RefModel ref, unmasked;
    ref_init(&ref, &c, B, T, 0, 0, 0, 16, 0);
    ref_init_weights(&ref, 42);
    ref_set_doc_mask(&ref, DOC_START);
    float ref_loss = ref_compute_grads(&ref, in, tg, grad_accum);
    ref_init(&unmasked, &c, B, T, 0, 0, 0, 16, 0);
    ref_init_weights(&unmasked, 42);
    ref_compute_grads(&unmasked, in, tg, grad_accum);
    double premise_logits = rel_err(unmasked.logits, ref.logits, nl), premise_qkv = rel_err(unmasked.acts.qkv, ref.acts.qkv, (size_t)N * QKV);
    printf("    the unmasked reference: logits rel %.2e, layer 0 qkv rel %.2e from the masked one\n", premise_logits, premise_qkv);
    CHECK(premise_logits > BF16_SMALL.logits && premise_qkv > BF16_SMALL.logits,
          "the unmasked reference is within the tolerance of the masked one (logits %.3e, layer 0 qkv %.3e)", premise_logits, premise_qkv);
    float loss[2], *grads[2], *qkv[2], *logits[2];
    for (int use_cudnn = 0; use_cudnn < 2; use_cudnn++) {
        attention_init(use_cudnn, 1);
        Model m;
        ModelOptions mo = model_options(B, T, PREC_BF16);
        mo.doc_mask = 1; mo.doc_start_id = DOC_START;
        model_init(&m, &c, &mo, NULL);
        model_set_weights(&m, ref.params);
#ifdef ENABLE_CUDNN
        CHECK((m.acts.doc_bias != NULL) == use_cudnn, "cuDNN %s: the document bias is %s", use_cudnn ? "on" : "off",
              m.acts.doc_bias ? "allocated" : "missing");
        if (use_cudnn) CHECK(attention_uses_cudnn(B, T, c.NH, c.NKV, c.C / c.NH, 1), "document-masked attention of B %d T %d is not on cuDNN", B, T);
#endif
        AdamWParams h = {0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f};
        float *losses = (float *)mallocCheck(grad_accum * N * sizeof(float));
        StepResult r = train_step_on(&m, in, tg, grad_accum, &h, losses);
        loss[use_cudnn] = r.loss;
        cudaCheck(cudaDeviceSynchronize());
        grads[use_cudnn] = download_bf16(m.grads_memory, m.num_params);
        qkv[use_cudnn] = download_bf16(m.acts.qkv, nqkv); // micro-batch 1's, whose inputs acts.inputs still holds
        model_forward(&m, eval_pass(&m), 0, 0.0f, g_stream);
        cudaCheck(cudaDeviceSynchronize());
        logits[use_cudnn] = download_bf16(m.acts.logits, nl);
        const char *what = use_cudnn ? "doc mask, cuDNN on" : "doc mask, cuDNN off";
        double el = rel_err(logits[use_cudnn], ref.logits, nl);
        printf("    %s: loss gpu %.6f cpu %.6f | logits rel %.2e\n", what, loss[use_cudnn], ref_loss, el);
        CHECK(!r.skipped && fabsf(loss[use_cudnn] - ref_loss) / ref_loss < BF16_SMALL.loss, "%s: loss %.6f vs %.6f", what, loss[use_cudnn], ref_loss);
        CHECK(el < BF16_SMALL.logits, "%s: micro-batch 1's logits rel %.3e >= %.1e", what, el, BF16_SMALL.logits);
        for (int l = 0; l < c.L; l++) {
            size_t off = (size_t)l * N * QKV;
            double eq = rel_err(qkv[use_cudnn] + off, ref.acts.qkv + off, (size_t)N * QKV), worst = 0.0;
            int worst_token = 0;
            for (int i = 0; i < N; i++) { // the token whose q, k, v are furthest from the reference's, relative to its own largest
                double e = rel_err(qkv[use_cudnn] + off + (size_t)i * QKV, ref.acts.qkv + off + (size_t)i * QKV, QKV);
                if (!(e <= worst)) { worst = e; worst_token = i; }
            }
            printf("    %s: layer %d q, k after RoPE and v rel %.2e; worst token (row %d position %d) %.2e of its own largest\n", what, l,
                   eq, worst_token / T, worst_token % T, worst);
            CHECK(eq < BF16_SMALL.logits, "%s: layer %d qkv after RoPE rel %.3e >= %.1e", what, l, eq, BF16_SMALL.logits);
        }
        check_grads(&m, grads[use_cudnn], ref.grads, BF16_SMALL.grads, what);
        free(losses);
        model_free(&m);
    }
    attention_init(1, 1);
    for (int k = 0; k < 2; k++) { free(grads[k]); free(qkv[k]); free(logits[k]); }
    free(in); free(tg);
    ref_free(&ref); ref_free(&unmasked);
}

// -doc_mask 1 on a batch with no document start inside a row (row 0 begins with a BOS, row 1 has none)
// is -doc_mask 0: on the plain kernels (cuDNN off) bit for bit (logits, loss, gradients); with cuDNN on
// -doc_mask 1 runs cuDNN's document-masked plans, whose bias is then all 0, and -doc_mask 0 its causal
// ones: the same arithmetic in another kernel (the bias added after the scale may change how cuDNN
// folds the scale into its exponent), so bit for bit is not promised there and the two runs are held
// to BF16_SMALL's budgets, which bound each run's distance from the fp32 reference (the number of
// differing values is printed: 0 says the kernels agree bit for bit).
static void test_doc_mask_no_start_inside_is_unmasked(void) {
    LlamaConfig c = small_config();
    int B = 2, T = 128, N = B * T;
    int *in = (int *)mallocCheck(N * sizeof(int)), *tg = (int *)mallocCheck(N * sizeof(int));
    uint64_t rng = 61;
    for (int i = 0; i < N; i++) in[i] = DOC_START + 1 + (int)(random_u32(&rng) % (uint32_t)(c.V - DOC_START - 1));
    in[0] = DOC_START;
    random_tokens(tg, N, c.V, 62);
    for (int use_cudnn = 0; use_cudnn < 2; use_cudnn++) {
        attention_init(use_cudnn, 1);
        const char *what = use_cudnn ? "cuDNN on" : "cuDNN off";
        StepZero r[2];
        Model m[2];
        for (int doc_mask = 0; doc_mask < 2; doc_mask++) {
            ModelOptions mo = model_options(B, T, PREC_BF16);
            mo.doc_mask = doc_mask; mo.doc_start_id = DOC_START;
            model_init(&m[doc_mask], &c, &mo, NULL);
            float *w = (float *)mallocCheck(m[doc_mask].num_params * sizeof(float));
            model_init_weights(&m[doc_mask], 19, w);
            model_set_weights(&m[doc_mask], w);
            r[doc_mask] = gpu_step_zero(&m[doc_mask], in, tg);
            free(w);
        }
        CHECK(m[1].acts.doc_pos != NULL, "-doc_mask 1 made no document positions");
#ifdef ENABLE_CUDNN
        if (use_cudnn) CHECK(m[1].acts.doc_bias != NULL && attention_uses_cudnn(B, T, c.NH, c.NKV, c.C / c.NH, 1),
                             "%s: -doc_mask 1 does not run on cuDNN", what);
#endif
        long dl = 0, dg = 0;
        for (size_t i = 0; i < (size_t)N * c.V; i++) dl += memcmp(&r[0].logits[i], &r[1].logits[i], sizeof(float)) != 0;
        for (size_t i = 0; i < m[0].num_params; i++) dg += memcmp(&r[0].grads[i], &r[1].grads[i], sizeof(float)) != 0;
        double el = rel_err(r[1].logits, r[0].logits, (size_t)N * c.V);
        printf("    %s: loss %.7f and %.7f; %ld logits and %ld gradients differ (logits rel %.2e)\n", what, r[0].loss, r[1].loss,
               dl, dg, el);
        if (!use_cudnn) {
            CHECK(r[0].loss == r[1].loss && dl == 0 && dg == 0, "%s: -doc_mask 1 without a document start inside a row differs"
                  " from -doc_mask 0: loss %.9g vs %.9g, %ld logits, %ld gradients", what, r[0].loss, r[1].loss, dl, dg);
        } else {
            CHECK(fabsf(r[1].loss - r[0].loss) / r[0].loss < BF16_SMALL.loss && el < BF16_SMALL.logits,
                  "%s: -doc_mask 1 without a document start inside a row vs -doc_mask 0: loss %.9g vs %.9g, logits rel %.3e",
                  what, r[1].loss, r[0].loss, el);
            check_grads(&m[1], r[1].grads, r[0].grads, BF16_SMALL.grads, "-doc_mask 1 vs 0, cuDNN on");
        }
        for (int k = 0; k < 2; k++) { model_free(&m[k]); free_step_zero(&r[k]); }
    }
    attention_init(1, 1);
    free(in); free(tg);
}

int main(int argc, char **argv) {
    if (argc > 1) g_test_filter = argv[1]; // run only the tests whose name contains it
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    g_num_sms = prop.multiProcessorCount;
    printf("GPU tests on %s\n", prop.name);
    cudaCheck(cudaStreamCreate(&g_stream));
    matmul_init();
    attention_init(1, 1); // deterministic: several tests compare runs bit for bit
    run_test("fp8 GPU casts saturate and match the host codec", test_fp8_cast_saturates_and_matches_host);
    run_test("fp8 scale update keeps the scale on zero/NaN/inf amax", test_fp8_update_keeps_scale_on_bad_amax);
    run_test("attention: cuDNN fused and plain kernel vs reference, forward and backward", test_attention_paths);
    run_test("-check 1's device memory plan is what model_init allocates", test_memory_plan_is_model_init);
    run_test("bf16 first step vs C reference", test_bf16_first_step_vs_cpu);
    run_test("bf16 first step vs PyTorch fixture", test_bf16_vs_pytorch_fixture);
    run_test("bf16 10 steps vs C reference", test_bf16_ten_steps_vs_cpu);
    run_test("bf16 10 steps with bf16 AdamW moments vs C reference", test_bf16_moments_ten_steps_vs_cpu);
    run_test("bf16 10 steps with bf16 master weights vs C reference (the first update bit for bit)",
             test_bf16_master_ten_steps_vs_cpu);
    run_test("fp8 first step vs C reference emulation", test_fp8_first_step_vs_cpu);
    run_test("bf16 first step, tied embeddings + llama3 RoPE scaling, vs C reference", test_bf16_first_step_llama32_vs_cpu);
    run_test("fp8 first step, tied embeddings + llama3 RoPE scaling, vs C reference emulation", test_fp8_first_step_llama32_vs_cpu);
    run_test("imported Hugging Face fixture 'tied': first step in bf16 and fp8 vs C reference", test_imported_tied_first_step);
    run_test("imported Hugging Face fixture 'llama3' (RoPE scaling): first step in bf16 and fp8 vs C reference", test_imported_llama3_first_step);
    run_test("imported Hugging Face fixture 'llama32' (tied + scaling): first step in bf16 and fp8 vs C reference", test_imported_llama32_first_step);
    run_test("fp8 state after 6 steps with grad accumulation vs C reference", test_fp8_state_vs_cpu);
    run_test("fp8 current recipe: 6 steps with grad accumulation vs C reference", test_fp8_current_recipe_vs_cpu);
    run_test("fp8 with -fp8_lm_head 1: 6 steps with grad accumulation vs C reference", test_fp8_lm_head_vs_cpu);
    run_test("fp8 dY amax updated by the backward pass", test_fp8_dy_amax_updates);
    run_test("fp8 amax slot is the max over micro-steps", test_fp8_amax_max_over_microsteps);
    run_test("fp8 linears GEMM by GEMM: codes, amaxes, scales, outputs (delayed, W cast by AdamW)", test_fp8_probed_delayed);
    run_test("fp8 linears GEMM by GEMM: margin 1, W cast per use, fp8 lm_head, -r 1", test_fp8_probed_margin_no_cache);
    run_test("fp8 linears GEMM by GEMM: current recipe", test_fp8_probed_current);
    run_test("fp8 linears GEMM by GEMM: current recipe, -r 1", test_fp8_probed_current_recompute);
    run_test("fp8 linears GEMM by GEMM: scales pushed off, large underflow and saturation counts", test_fp8_probed_pushed_scales);
    run_test("fp8 with -fp8_margin 1: 6 steps with grad accumulation vs C reference", test_fp8_margin_vs_cpu);
    run_test("fp8 steps vs PyTorch fixture llama_fp8.bin (logits, losses, fp8 state)", test_fp8_vs_pytorch_fixture);
    run_test("fp8 weight cache off trains bit-identically (losses, weights, fp8 state)", test_fp8_weight_cache_off_identical);
    run_test("-r 1 trains bit-identically to -r 0 (bf16 and fp8: losses, weights, fp8 state)", test_recompute_identical);
    run_test("-cuda_graph 1 trains bit-identically to 0 (bf16, fp8 delayed and current, -r 1, tied, fp8 lm_head, -doc_mask 1; new tokens each"
             " step, recapture; grad accumulation changed, cuDNN workspace moved, evaluation and checkpoint between steps)", test_cuda_graph_identical);
    run_test("fp8 weights made by AdamW match the host codec", test_fp8_weights_made_by_adamw);
    run_test("fp8 linears GEMM by GEMM: amax history past its window (history 4, 8 steps)", test_fp8_probed_history_window);
    run_test("fp8 linears GEMM by GEMM: fp8 lm_head with the weight cache on (delayed: cast by AdamW; current)", test_fp8_probed_lm_head_cached);
    run_test("fp8 block linears GEMM by GEMM: layer 0 w2 and qkv block-scaled among per-tensor ones (codes, block scale_invs, slots, counts,"
             " outputs vs the reference's block casts)", test_fp8_probed_block_some);
    run_test("fp8 block linears GEMM by GEMM: every linear block-scaled, fp8 lm_head, W cast per use, -r 1", test_fp8_probed_block_all);
    run_test("fp8 linears GEMM by GEMM: two linears fallen back to bf16 (no fp8 GEMM; nothing recorded or counted for them)",
             test_fp8_probed_bf16_fallback);
    run_test("fp8 block scaling: first step with every linear block-scaled vs C reference emulation", test_fp8_block_first_step_vs_cpu);
    run_test("fp8 row linears GEMM by GEMM: layer 0 w2 and qkv row-scaled among per-tensor ones (codes, row scale_invs, slots, counts,"
             " outputs vs the reference's row casts)", test_fp8_probed_row_some);
    run_test("fp8 row linears GEMM by GEMM: every linear row-scaled, fp8 lm_head, W cast per use, -r 1", test_fp8_probed_row_all);
    run_test("fp8 row scaling: first step with every linear row-scaled vs C reference emulation", test_fp8_row_first_step_vs_cpu);
    run_test("fp8 row scaling: 6 steps of -fp8_grain row vs C reference emulation and within 1% of bf16's loss",
             test_fp8_row_training_vs_cpu_and_bf16);
    run_test("fp8 fallback: first step with two linears in bf16 vs C reference emulation", test_fp8_bf16_fallback_first_step_vs_cpu);
    run_test("fp8 fallback to block: the planted outlier: its linears switch after the step ref_fp8_auto_grain switches them", test_fp8_fallback_block_vs_cpu);
    run_test("fp8 fallback to bf16: the planted outlier: its linears switch after the step ref_fp8_auto_grain switches them; nothing cast after",
             test_fp8_fallback_bf16_vs_cpu);
    run_test("fp8 fallback: resume across a switch is bit-exact (switched before the checkpoint; and after it, from the saved steps over)",
             test_fp8_fallback_resume_bitexact);
    run_test("fp8 fallback: -cuda_graph 1 captures again after a switch and trains bit-identically to 0", test_fp8_fallback_graph_recapture);
    run_test("tied embeddings, 2 micro-batches: bf16 gradient vs C reference", test_tied_grad_accum_bf16_vs_cpu);
    run_test("tied embeddings, 2 micro-batches: fp8 gradient vs C reference emulation", test_tied_grad_accum_fp8_vs_cpu);
    run_test("resume is bit-exact (bf16)", test_resume_bitexact_bf16);
    run_test("resume is bit-exact (fp8)", test_resume_bitexact_fp8);
    run_test("resume is bit-exact (fp8, -r 1)", test_resume_bitexact_fp8_recompute);
    run_test("resume is bit-exact (fp8, bf16 AdamW moments)", test_resume_bitexact_fp8_bf16_moments);
    run_test("resume is bit-exact (fp8, bf16 AdamW moments, bf16 master weights; the model file the bf16 weights)",
             test_resume_bitexact_fp8_bf16_master);
    run_test("-adam_offload 1: moments in host memory train, checkpoint and resume as the device moments, bit for bit "
             "(fp8 bf16 moments; bf16 fp32 moments, bf16 master weights)", test_resume_bitexact_adam_offload);
    run_test("a non-finite last step still writes the end-of-run checkpoint (bf16, fp8)", test_nonfinite_last_step_checkpoint);
    run_test("-x 0 in fp8: evaluation logits are the first training step's (delayed recipe; prompt and val batch)", test_eval_only_fp8_delayed);
    run_test("-x 0 in fp8: evaluation logits are the first training step's (current recipe: live in evaluation)", test_eval_only_fp8_current);
    run_test("loss masks: 2 micro-batches of 192 and 16 learned targets, bf16 loss and gradient vs C reference", test_masked_step_bf16_vs_cpu);
    run_test("loss masks: 2 micro-batches of 192 and 16 learned targets, fp8 loss and gradient vs C reference emulation", test_masked_step_fp8_vs_cpu);
    run_test("loss masks: evaluate() on masked val data, the mean over its learned targets vs C reference", test_masked_val_loss_vs_cpu);
    run_test("document masking: the document positions made on the GPU are llmc/doc_mask.h's", test_doc_positions_vs_host);
    run_test("document masking: attention forward and backward vs reference (plain kernels; the dispatcher with cuDNN on: cuDNN with the"
             " document bias where it takes the shape, else the plain kernels' bytes)", test_attention_doc_mask);
    run_test("document masking: 2 micro-batches of rows with several documents, bf16 loss, gradient, qkv after RoPE and logits vs C reference"
             " (cuDNN off and on)", test_doc_mask_step_vs_cpu);
    run_test("document masking: -doc_mask 1 without a document start inside a row is -doc_mask 0 (bit for bit on the plain kernels,"
             " within the bf16 budgets on cuDNN)", test_doc_mask_no_start_inside_is_unmasked);
    if (g_tests_passed + g_tests_failed == 0) { printf("no test matches '%s'\n", g_test_filter); g_tests_failed = 1; }
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
