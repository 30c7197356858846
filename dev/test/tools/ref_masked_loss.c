/*
The C reference model's masked loss and gradient for a model file: one optimizer step's gradient
(llama_ref.h's ref_compute_grads) over K micro-batches whose targets are token ids or -1 (not
learned), and each micro-batch's own mean loss. dev/test/test_masked_loss.py compares them with
transformers' (dev/test/fixtures/masked_loss, made by dev/reference/make_masked_loss_fixture.py).

  INPUTS, TARGETS: K*B*T int32 each (little-endian, raw), micro-batch k at [k*B*T, (k+1)*B*T)
  OUT: float32 (raw): the step's loss, the K micro-batches' mean losses, then the gradient
       (num_params, the tensor order of llmc/llama_config.h)

Build and run from the repository root (outside dev/test/: its .c files are linked into test_cpu):
  gcc -O2 -Wall -Wno-unused-function -I. dev/test/tools/ref_masked_loss.c -lm -o ref_masked_loss
  ./ref_masked_loss model.bin inputs.i32 targets.i32 K B out.f32
*/
#include <stdio.h>
#include <stdlib.h>
#include "llmc/model_file.h"   // model_header_get
#include "dev/test/llama_ref.h" // RefModel, ref_init, ref_forward, ref_compute_grads

static int *read_ints(const char *path, int64_t n) {
    FILE *f = fopenCheck(path, "rb");
    if (fileSizeCheck(f) != n * (int64_t)sizeof(int)) FATAL("%s: expected %lld int32 values", path, (long long)n);
    int *v = (int *)mallocCheck((size_t)n * sizeof(int));
    freadCheck(v, sizeof(int), (size_t)n, f, path);
    fcloseCheck(f);
    return v;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s MODEL.bin INPUTS.i32 TARGETS.i32 K B OUT.f32\n", argv[0]);
        return 1;
    }
    int K = atoi(argv[4]), B = atoi(argv[5]);
    if (K <= 0 || B <= 0) FATAL("K and B must be positive, got '%s' and '%s'", argv[4], argv[5]);
    FILE *f = fopenCheck(argv[2], "rb");
    int64_t n = fileSizeCheck(f) / (int64_t)sizeof(int);
    fcloseCheck(f);
    if (n == 0 || n % ((int64_t)K * B) != 0) FATAL("%s: %lld tokens do not make %d x %d equal rows", argv[2], (long long)n, K, B);
    int T = (int)(n / ((int64_t)K * B));
    int *inputs = read_ints(argv[2], n), *targets = read_ints(argv[3], n);

    f = fopenCheck(argv[1], "rb");
    int32_t header[MODEL_HEADER_INTS];
    freadCheck(header, sizeof(int32_t), MODEL_HEADER_INTS, f, argv[1]);
    LlamaConfig cfg;
    const char *bad = model_header_get(header, &cfg);
    if (bad != NULL) FATAL("%s: %s", argv[1], bad);
    cfg.max_T = T;
    RefModel model;
    ref_init(&model, &cfg, B, T, 0, 0, 0, 0, 0);
    freadCheck(model.params, sizeof(float), model.num_params, f, argv[1]);
    fcloseCheck(f);

    float *out = (float *)mallocCheck((1 + K + model.num_params) * sizeof(float));
    size_t BT = (size_t)B * T;
    for (int k = 0; k < K; k++) {
        model.micro_step = -1;
        out[1 + k] = ref_forward(&model, inputs + k * BT, targets + k * BT);
    }
    out[0] = ref_compute_grads(&model, inputs, targets, K);
    memcpy(out + 1 + K, model.grads, model.num_params * sizeof(float));
    f = fopenCheck(argv[6], "wb");
    fwriteCheck(out, sizeof(float), 1 + K + model.num_params, f);
    fcloseCheck(f);
    printf("%s: loss %.6f over %d micro-batches of %d x %d -> %s\n", argv[1], out[0], K, B, T, argv[6]);
    ref_free(&model);
    free(out);
    free(inputs);
    free(targets);
    return 0;
}
