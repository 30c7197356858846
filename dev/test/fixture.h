/*
Reader for the fixture files that dev/reference/llama_ref.py writes (format: dev/test/README.md):
a tiny model's config, weights and tokens, and what PyTorch computed from them (step-0 logits, loss
and gradient, the losses of a few optimizer steps, the final fp8 state). Every field is validated
and the file size must match the header exactly, so a stale or truncated fixture is reported as
such instead of being compared as garbage. Errors are not fatal: fixture_load returns 0 and leaves
a message in fx->error, so a test can fail and the suite go on. Little-endian hosts only (as the
writer). Plain C, also C++.
*/
#ifndef DEV_TEST_FIXTURE_H
#define DEV_TEST_FIXTURE_H

#include <stdio.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include "llmc/llama_config.h" // LlamaConfig, param_sizes, config_check
#include "llmc/fp8_layout.h"   // Fp8StateLayout, fp8_state_layout, fp8_num_tensors
#include "llmc/utils.h"        // mallocCheck

#define FIXTURE_MAGIC 20261130
#define FIXTURE_VERSION 1
#define FIXTURE_HEADER_INTS 256
#define FIXTURE_FHEADER_FLOATS 16

typedef struct {
    LlamaConfig cfg; // max_T = T
    int B, T, nsteps, fp8, fp8_history, fp8_margin, grad_accum;
    size_t num_params;
    float lr, beta1, beta2, adam_eps, weight_decay, grad_clip;
    int *inputs, *targets; // (grad_accum, B, T)
    float *params;         // (num_params) initial weights, llama_config.h order
    float *logits;         // (B, T, V) step 0, micro-batch 0
    float loss;            // step 0, mean over the micro-batches
    float *grads;          // (num_params) step-0 gradient of that loss, before clipping
    float *losses;         // (nsteps) loss of each optimizer step
    Fp8StateLayout fp8_layout; // fp8_lm_head 0
    float *fp8_state;      // (fp8_layout.total) after the last step's update; NULL without fp8
    char error[512];       // why fixture_load failed
} Fixture;

static void fixture_free(Fixture *fx) {
    free(fx->inputs);
    free(fx->targets);
    free(fx->params);
    free(fx->logits);
    free(fx->grads);
    free(fx->losses);
    free(fx->fp8_state);
    memset(fx, 0, sizeof(*fx));
}

// Releases what was loaded and records why; returns 0 for fixture_load to return.
static int fixture_fail(Fixture *fx, FILE *fp, const char *fmt, ...) {
    if (fp != NULL) fclose(fp);
    fixture_free(fx);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fx->error, sizeof(fx->error), fmt, ap);
    va_end(ap);
    return 0;
}

// Loads path into fx. Returns 1, or 0 with fx emptied and the reason in fx->error.
static int fixture_load(Fixture *fx, const char *path) {
    memset(fx, 0, sizeof(*fx));
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return fixture_fail(fx, NULL, "cannot open fixture '%s': %s", path, strerror(errno));
    int32_t h[FIXTURE_HEADER_INTS];
    float fh[FIXTURE_FHEADER_FLOATS];
    if (fread(h, sizeof(int32_t), FIXTURE_HEADER_INTS, fp) != FIXTURE_HEADER_INTS ||
        fread(fh, sizeof(float), FIXTURE_FHEADER_FLOATS, fp) != FIXTURE_FHEADER_FLOATS)
        return fixture_fail(fx, fp, "%s: shorter than its %d-byte header", path,
                            (int)(sizeof(h) + sizeof(fh)));
    if (h[0] != FIXTURE_MAGIC)
        return fixture_fail(fx, fp, "%s: bad magic %d (want %d): not a fixture file", path, h[0], FIXTURE_MAGIC);
    if (h[1] != FIXTURE_VERSION)
        return fixture_fail(fx, fp, "%s: version %d, this reader knows %d: re-make the fixtures", path, h[1], FIXTURE_VERSION);
    for (int i = 16; i < FIXTURE_HEADER_INTS; i++) {
        if (h[i] != 0) return fixture_fail(fx, fp, "%s: reserved header int %d is %d, not 0 (newer format?)", path, i, h[i]);
    }
    for (int i = 8; i < FIXTURE_FHEADER_FLOATS; i++) {
        if (fh[i] != 0.0f) return fixture_fail(fx, fp, "%s: reserved float header %d is %g, not 0 (newer format?)", path, i, fh[i]);
    }
    LlamaConfig c = {h[2], h[3], h[4], h[5], h[6], h[7], h[9], fh[0], fh[1]};
    fx->cfg = c;
    fx->B = h[8];
    fx->T = h[9];
    fx->nsteps = h[10];
    fx->fp8 = h[11];
    fx->fp8_history = h[12];
    fx->fp8_margin = h[13];
    fx->grad_accum = h[14];
    fx->lr = fh[2];
    fx->beta1 = fh[3];
    fx->beta2 = fh[4];
    fx->adam_eps = fh[5];
    fx->weight_decay = fh[6];
    fx->grad_clip = fh[7];
    const char *bad = config_check(&fx->cfg);
    if (bad != NULL) return fixture_fail(fx, fp, "%s: bad model config in the header: %s", path, bad);
    if (fx->B <= 0 || fx->nsteps <= 0 || fx->grad_accum <= 0)
        return fixture_fail(fx, fp, "%s: B %d, nsteps %d, grad_accum %d: all must be positive", path, fx->B, fx->nsteps, fx->grad_accum);
    if (fx->fp8 != 0 && fx->fp8 != 1) return fixture_fail(fx, fp, "%s: fp8 flag %d is not 0 or 1", path, fx->fp8);
    if (fx->fp8 && fx->fp8_history < 1) return fixture_fail(fx, fp, "%s: fp8 history length %d < 1", path, fx->fp8_history);
    size_t sizes[NUM_PARAM_TENSORS];
    fx->num_params = param_sizes(&fx->cfg, sizes);
    if ((size_t)(uint32_t)h[15] != fx->num_params)
        return fixture_fail(fx, fp, "%s: header says %d parameters, the config has %zu", path, h[15], fx->num_params);
    if (fx->fp8) fx->fp8_layout = fp8_state_layout(fp8_num_tensors(&fx->cfg, 0), fx->fp8_history);

    // The size must match exactly: a mismatch is a truncated file or a different layout.
    size_t ntok = (size_t)fx->grad_accum * fx->B * fx->T, nlogits = (size_t)fx->B * fx->T * fx->cfg.V;
    size_t nstate = fx->fp8 ? fx->fp8_layout.total : 0;
    int64_t want = (int64_t)(sizeof(h) + sizeof(fh)) + 4 * (int64_t)(2 * ntok + 2 * fx->num_params + nlogits + 1 + fx->nsteps + nstate);
    if (fseeko(fp, 0, SEEK_END) != 0) return fixture_fail(fx, fp, "%s: seek failed: %s", path, strerror(errno));
    int64_t have = (int64_t)ftello(fp);
    if (have != want)
        return fixture_fail(fx, fp, "%s: %lld bytes, its header implies %lld (truncated, or written for another format)",
                            path, (long long)have, (long long)want);
    if (fseeko(fp, (off_t)(sizeof(h) + sizeof(fh)), SEEK_SET) != 0)
        return fixture_fail(fx, fp, "%s: seek failed: %s", path, strerror(errno));

    fx->inputs = (int *)mallocCheck(ntok * sizeof(int));
    fx->targets = (int *)mallocCheck(ntok * sizeof(int));
    fx->params = (float *)mallocCheck(fx->num_params * sizeof(float));
    fx->logits = (float *)mallocCheck(nlogits * sizeof(float));
    fx->grads = (float *)mallocCheck(fx->num_params * sizeof(float));
    fx->losses = (float *)mallocCheck(fx->nsteps * sizeof(float));
    fx->fp8_state = fx->fp8 ? (float *)mallocCheck(nstate * sizeof(float)) : NULL;
    // int is 32 bits on every platform this builds on, as the file's int32
    if (fread(fx->inputs, 4, ntok, fp) != ntok || fread(fx->targets, 4, ntok, fp) != ntok ||
        fread(fx->params, 4, fx->num_params, fp) != fx->num_params || fread(fx->logits, 4, nlogits, fp) != nlogits ||
        fread(&fx->loss, 4, 1, fp) != 1 || fread(fx->grads, 4, fx->num_params, fp) != fx->num_params ||
        fread(fx->losses, 4, fx->nsteps, fp) != (size_t)fx->nsteps ||
        (fx->fp8 && fread(fx->fp8_state, 4, nstate, fp) != nstate))
        return fixture_fail(fx, fp, "%s: read failed: %s", path, ferror(fp) ? strerror(errno) : "unexpected end of file");
    fclose(fp);
    for (size_t i = 0; i < 2 * ntok; i++) {
        int tok = i < ntok ? fx->inputs[i] : fx->targets[i - ntok];
        if (tok < 0 || tok >= fx->cfg.V)
            return fixture_fail(fx, NULL, "%s: %s token %d is outside the vocabulary [0, %d)", path,
                                i < ntok ? "input" : "target", tok, fx->cfg.V);
    }
    return 1;
}

#endif
