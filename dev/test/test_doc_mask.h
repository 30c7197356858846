/*
Document masking (issue 33): the C reference's option (llama_ref.h, ref_set_doc_mask) and the host
helper the trainer will use (llmc/doc_mask.h). The statement the reference is held to needs no second
implementation: each document of a packed row must compute exactly what it computes alone, as its own
row of the plain causal model with the same weights (its logits, its loss terms, and its share of the
weight gradient). Included by test_cpu.c after test_ref.h (gradcheck_data, gradcheck_run, max_rel_diff_d
and the gradient-check tolerances).
*/
#ifndef DEV_TEST_TEST_DOC_MASK_H
#define DEV_TEST_TEST_DOC_MASK_H

#include "harness.h"
#include "llama_ref.h"
#include "llmc/doc_mask.h" // DocMask, doc_mask_init, doc_mask_compute

enum { DOC_START = 1 }; // the document-start id of these tests' rows

// The packed model sums every document's rows in one double accumulation before rounding a weight
// gradient to float; the documents run alone round each document's sum first and the test adds those
// in double. The two differ by a few float roundings (~1e-7 of the tensor's largest gradient), and a
// key leaking across a document boundary or a position not restarted changes them at O(1e-2) or more.
#define DOC_MASK_GRAD_TOL 1e-5

// Random tokens other than DOC_START, then DOC_START at the listed flat positions.
static void doc_mask_tokens(int *tokens, int n, int V, uint64_t seed, const int *starts, int num_starts) {
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) tokens[i] = DOC_START + 1 + (int)(random_u32(&rng) % (V - DOC_START - 1));
    for (int s = 0; s < num_starts; s++) tokens[starts[s]] = DOC_START;
}

// Weights of gradcheck_data's kind (O(1) activations, so attention is far from uniform and a wrong key
// or position shows) into a float model.
static void doc_mask_weights(RefModel *model, const LlamaConfig *cfg, uint64_t seed) {
    float *params = (float *)mallocCheck(model->num_params * sizeof(float));
    int in[1], tg[1];
    gradcheck_data(cfg, 1, params, in, tg, seed);
    for (size_t i = 0; i < model->num_params; i++) model->params[i] = params[i];
    free(params);
}

// Forward and backward of the summed loss (each learned target's loss weighing 1), grads zeroed first.
static void doc_mask_sum_grads(RefModel *model, const int *inputs, const int *targets) {
    memset(model->grads, 0, model->num_params * sizeof(ref_real));
    model->micro_step = -1;
    ref_forward(model, inputs, targets);
    ref_backward_scaled(model, 1.0, 1.0);
}

// Row 0: three documents, one of them a single BOS (consecutive BOS); row 1 starts mid-document (its
// first token is no BOS but starts a document all the same) and holds a second one.
static void test_doc_mask_packed_is_documents_alone(void) {
    LlamaConfig cfg = {23, 2, 16, 4, 2, 24, 10, 50.0f, 1e-5f}; // GQA; theta 50, so positions turn pairs far
    enum { B = 2, T = 10 };
    const int starts[] = {0, 4, 5, T + 6};
    const int doc_first[] = {0, 4, 5, T, T + 6}, doc_end[] = {4, 5, T, T + 6, 2 * T};
    int num_docs = 5, V = cfg.V, QKV = config_qkv_width(&cfg);
    int inputs[B * T], targets[B * T];
    doc_mask_tokens(inputs, B * T, V, 31, starts, 4);
    random_tokens(targets, B * T, V, 32);

    RefModel packed;
    ref_init(&packed, &cfg, B, T, 0, 0, 0, 0, 0);
    doc_mask_weights(&packed, &cfg, 33);
    ref_set_doc_mask(&packed, DOC_START);
    doc_mask_sum_grads(&packed, inputs, targets);

    double *alone_grads = (double *)callocCheck(packed.num_params, sizeof(double));
    double worst_logit = 0.0;
    for (int d = 0; d < num_docs; d++) {
        int first = doc_first[d], len = doc_end[d] - doc_first[d];
        RefModel alone;
        ref_init(&alone, &cfg, 1, len, 0, 0, 0, 0, 0);
        memcpy(alone.params, packed.params, packed.num_params * sizeof(ref_real));
        doc_mask_sum_grads(&alone, inputs + first, targets + first);
        for (size_t i = 0; i < packed.num_params; i++) alone_grads[i] += alone.grads[i];
        for (int t = 0; t < len; t++) {
            const ref_real *got = packed.logits + (size_t)(first + t) * V, *want = alone.logits + (size_t)t * V;
            double maxref = 0.0, maxdiff = 0.0;
            for (int v = 0; v < V; v++) {
                double diff = fabs((double)got[v] - want[v]);
                if (!(diff <= maxdiff)) maxdiff = diff;
                if (fabs(want[v]) > maxref) maxref = fabs(want[v]);
            }
            if (!(maxdiff / maxref <= worst_logit)) worst_logit = maxdiff / maxref;
            // each loss term is log-sum-exp minus the target's logit, both of the row compared above
            double loss_got = packed.acts.lse[first + t] - got[targets[first + t]];
            double loss_want = alone.acts.lse[t] - want[targets[first + t]];
            CHECK(fabs(loss_got - loss_want) <= 1e-6 * fabs(loss_want),
                  "document %d position %d: loss term packed %.9g, alone %.9g", d, t, loss_got, loss_want);
            // RoPE scores depend only on t - t2, so positions shifted by a document's start would leave
            // the logits equal up to rounding: the rotated q and k themselves say whether they restarted
            for (int l = 0; l < cfg.L; l++) {
                const ref_real *q_got = packed.acts.qkv + ((size_t)l * B * T + first + t) * QKV;
                const ref_real *q_want = alone.acts.qkv + ((size_t)l * len + t) * QKV;
                double qmax = 0.0, qdiff = 0.0;
                for (int j = 0; j < QKV; j++) {
                    double diff = fabs((double)q_got[j] - q_want[j]);
                    if (!(diff <= qdiff)) qdiff = diff;
                    if (fabs(q_want[j]) > qmax) qmax = fabs(q_want[j]);
                }
                CHECK(qdiff <= 1e-6 * qmax, "document %d position %d layer %d: q, k after RoPE differ from alone by %.3g (max %.3g)",
                      d, t, l, qdiff, qmax);
            }
        }
        ref_free(&alone);
    }
    // the logits of a document's rows are computed from the same floats in the same order either way
    CHECK(worst_logit <= 1e-6, "logits packed vs documents alone: max|diff|/max|alone| = %.3g", worst_logit);

    double worst_grad = 0.0;
    for (int p = 0; p < NUM_PARAM_TENSORS; p++) {
        if (packed.param_sizes[p] == 0) continue;
        size_t off = packed.grad_ptr[p] - packed.grads, n = packed.param_sizes[p];
        double *got = (double *)mallocCheck(n * sizeof(double));
        for (size_t i = 0; i < n; i++) got[i] = packed.grads[off + i];
        double err = max_rel_diff_d(got, alone_grads + off, n);
        CHECK(err <= DOC_MASK_GRAD_TOL, "%s: gradient packed vs sum of documents alone: max|diff|/max = %.3g (tol %.0e)",
              PARAM_NAMES[p], err, DOC_MASK_GRAD_TOL);
        if (!(err <= worst_grad)) worst_grad = err;
        free(got);
    }
    printf("    logits %.2g, weight gradients %.2g (relative, worst) against the %d documents alone\n",
           worst_logit, worst_grad, num_docs);
    free(alone_grads);
    ref_free(&packed);
}

// A batch whose documents all start at row starts (a BOS at position 0 of one row, none in the other)
// is one document per row: masked and unmasked give the same bytes.
static void test_doc_mask_no_start_inside_is_unmasked(void) {
    LlamaConfig cfg = {23, 2, 16, 4, 2, 24, 8, 50.0f, 1e-5f};
    enum { B = 2, T = 8 };
    const int starts[] = {0};
    int inputs[B * T], targets[B * T];
    doc_mask_tokens(inputs, B * T, cfg.V, 41, starts, 1);
    random_tokens(targets, B * T, cfg.V, 42);
    RefModel plain, masked;
    ref_init(&plain, &cfg, B, T, 0, 0, 0, 0, 0);
    ref_init(&masked, &cfg, B, T, 0, 0, 0, 0, 0);
    doc_mask_weights(&plain, &cfg, 43);
    memcpy(masked.params, plain.params, plain.num_params * sizeof(ref_real));
    ref_set_doc_mask(&masked, DOC_START);
    ref_real loss_plain = ref_compute_grads(&plain, inputs, targets, 1);
    ref_real loss_masked = ref_compute_grads(&masked, inputs, targets, 1);
    CHECK(memcmp(&loss_plain, &loss_masked, sizeof(ref_real)) == 0, "loss %.9g unmasked, %.9g masked", loss_plain, loss_masked);
    CHECK(memcmp(plain.logits, masked.logits, (size_t)B * T * cfg.V * sizeof(ref_real)) == 0, "logits differ");
    CHECK(memcmp(plain.grads, masked.grads, plain.num_params * sizeof(ref_real)) == 0, "gradients differ");
    ref_free(&plain);
    ref_free(&masked);
}

// Finite differences of the masked model (in double) against its backward, and the fp32 backward
// against the double one, every tensor, as test_ref.h's gradient checks do for the plain model.
static void test_doc_mask_gradcheck(void) {
    LlamaConfig cfg = {19, 2, 16, 4, 2, 20, 7, 50.0f, 1e-5f};
    enum { B = 2, T = 7, ACCUM = 2 };
    size_t sizes[NUM_PARAM_TENSORS], num_params = param_sizes(&cfg, sizes);
    int inputs[ACCUM * B * T], targets[ACCUM * B * T];
    float *params = (float *)mallocCheck(num_params * sizeof(float));
    gradcheck_data(&cfg, ACCUM * B * T, params, inputs, targets, 51);
    // documents start mid-row in every row (two BOS in a row once); the random inputs may add more
    const int starts[] = {3, T + 2, T + 3, 2 * T + 5, 3 * T + 1};
    for (int s = 0; s < 5; s++) inputs[starts[s]] = DOC_START;
    gradcheck_run(&cfg, B, T, ACCUM, DOC_START, params, inputs, targets);
    free(params);
}

// The helper on hand-written rows (id 1): BOS at 0, mid-row and twice in a row; a row with no BOS;
// a row starting mid-document with its last token a BOS; then batches whose last document is the longest.
static void test_doc_mask_helper_rows(void) {
    enum { B = 3, T = 6 };
    const int inputs[B * T] = {1, 5, 6, 1, 1, 7,
                               5, 6, 7, 8, 9, 4,
                               4, 1, 5, 5, 5, 1};
    const int want_pos[B * T] = {0, 1, 2, 0, 0, 1,
                                 0, 1, 2, 3, 4, 5,
                                 0, 0, 1, 2, 3, 0};
    const int want_offsets[] = {0, 3, 4, 6, 12, 13, 17, 18};
    DocMask dm;
    doc_mask_init(&dm, B, T, 1, 10);
    doc_mask_compute(&dm, inputs);
    CHECK(dm.num_docs == 7, "num_docs %d, want 7", dm.num_docs);
    CHECK(dm.max_doc_len == 6, "max_doc_len %d, want 6", dm.max_doc_len);
    for (int i = 0; i < B * T; i++) CHECK(dm.pos[i] == want_pos[i], "pos[%d] = %d, want %d", i, dm.pos[i], want_pos[i]);
    for (int d = 0; d <= 7 && d <= dm.num_docs; d++)
        CHECK(dm.doc_offsets[d] == want_offsets[d], "doc_offsets[%d] = %d, want %d", d, dm.doc_offsets[d], want_offsets[d]);
    doc_mask_free(&dm);
    // the longest document the last one: a whole row without a BOS after rows of shorter ones
    const int tail[2 * T] = {1, 5, 1, 5, 5, 1,
                             7, 7, 7, 7, 7, 7};
    doc_mask_init(&dm, 2, T, 1, 10);
    doc_mask_compute(&dm, tail);
    CHECK(dm.num_docs == 4 && dm.max_doc_len == 6, "the last document the longest: %d documents, max_doc_len %d, want 4 and 6", dm.num_docs,
          dm.max_doc_len);
    doc_mask_free(&dm);
}

// The helper and the reference on the same random batch: the trainer will feed the helper's positions
// to its kernels and be compared with the reference, so the two statements of the rule must agree.
static void test_doc_mask_helper_matches_reference(void) {
    enum { B = 4, T = 37 };
    int inputs[B * T], ref_pos[B * T];
    uint64_t rng = 61;
    for (int i = 0; i < B * T; i++) inputs[i] = (int)(random_u32(&rng) % 5); // id 1 about every fifth token
    DocMask dm;
    doc_mask_init(&dm, B, T, 1, 5);
    doc_mask_compute(&dm, inputs);
    ref_doc_positions(ref_pos, inputs, B, T, 1);
    CHECK(memcmp(dm.pos, ref_pos, sizeof(ref_pos)) == 0, "helper positions differ from the reference's");
    // every token lies in the document of doc_offsets that holds it, at its offset from that start
    int d = 0;
    for (int i = 0; i < B * T; i++) {
        while (d + 1 < dm.num_docs && dm.doc_offsets[d + 1] <= i) d++;
        CHECK(dm.pos[i] == i - dm.doc_offsets[d], "token %d: pos %d, document %d starts at %d", i, dm.pos[i], d, dm.doc_offsets[d]);
    }
    doc_mask_free(&dm);
}

static void doc_mask_bad_id(void *arg) {
    DocMask dm;
    doc_mask_init(&dm, 2, 4, *(int *)arg, 10);
}

static void ref_doc_mask_bad_id(void *arg) {
    LlamaConfig cfg = {23, 2, 16, 4, 2, 24, 8, 50.0f, 1e-5f};
    RefModel model;
    ref_init(&model, &cfg, 1, 4, 0, 0, 0, 0, 0);
    ref_set_doc_mask(&model, *(int *)arg);
}

static void test_doc_mask_bad_id(void) {
    const int ids[] = {-1, 10, 23};
    char err[512];
    for (int k = 0; k < 2; k++) {
        int status = run_expect_fatal(doc_mask_bad_id, (void *)&ids[k], err, sizeof(err));
        CHECK(status != 0 && strstr(err, "document-start id") != NULL && strstr(err, "outside the vocabulary [0, 10)") != NULL,
              "helper, id %d: status %d, stderr: %s", ids[k], status, err);
    }
    int status = run_expect_fatal(ref_doc_mask_bad_id, (void *)&ids[2], err, sizeof(err));
    CHECK(status != 0 && strstr(err, "document-start id 23 is outside the vocabulary [0, 23)") != NULL,
          "reference, id 23: status %d, stderr: %s", status, err);
}

static void run_doc_mask_tests(void) {
    run_test("doc mask: each document of a packed row computes what it computes alone (logits, loss, gradients)",
             test_doc_mask_packed_is_documents_alone);
    run_test("doc mask: no document start inside a row, masked == unmasked bytes", test_doc_mask_no_start_inside_is_unmasked);
    run_test("doc mask: gradient check of every tensor, masked reference, grad_accum 2", test_doc_mask_gradcheck);
    run_test("doc mask: helper boundaries and positions on hand-written rows", test_doc_mask_helper_rows);
    run_test("doc mask: helper positions match the reference's, offsets consistent", test_doc_mask_helper_matches_reference);
    run_test("doc mask: a document-start id outside the vocabulary is refused", test_doc_mask_bad_id);
}

#endif
