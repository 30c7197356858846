/*
The C reference model's logits for a model file: reads our model file (llmc/model_file.h: header,
size and checksum checked), runs the fp32 reference forward (dev/test/llama_ref.h) on B sequences of
tokens, and writes the logits. dev/test/test_hf.py compares them with transformers' logits for the
Hugging Face fixtures that scripts/hf_import.py converted.

  TOKENS: B*T int32 (little-endian, raw); LOGITS: B*T*V float32 (raw), token-major.

Build and run from the repository root (it lives outside dev/test/ because the .c files of dev/test are
linked into the CPU test binary):
  gcc -O2 -Wall -Wno-unused-function -I. dev/test/tools/ref_logits.c -lz -lm -o ref_logits
  ./ref_logits model.bin tokens.i32 logits.f32 [B]
*/
#include <stdio.h>
#include <stdlib.h>
#include "llmc/model_file.h"   // model_file_open, model_file_read_weights
#include "dev/test/llama_ref.h" // RefModel, ref_init, ref_forward

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s MODEL.bin TOKENS.i32 LOGITS.f32 [B (default 1)]\n", argv[0]);
        return 1;
    }
    const char *model_path = argv[1], *tokens_path = argv[2], *logits_path = argv[3];
    int B = argc == 5 ? atoi(argv[4]) : 1;
    if (B <= 0) FATAL("B must be positive, got '%s'", argv[4]);

    FILE *f = fopenCheck(tokens_path, "rb");
    int64_t n_tokens = fileSizeCheck(f) / (int64_t)sizeof(int);
    if (n_tokens == 0 || n_tokens % B != 0) FATAL("%s: %lld tokens do not make %d equal sequences", tokens_path, (long long)n_tokens, B);
    int *tokens = (int *)mallocCheck((size_t)n_tokens * sizeof(int));
    freadCheck(tokens, sizeof(int), (size_t)n_tokens, f, tokens_path);
    fcloseCheck(f);
    int T = (int)(n_tokens / B);

    int32_t header[MODEL_HEADER_INTS];
    LlamaConfig cfg;
    f = model_file_open(model_path, header, &cfg);
    cfg.max_T = T; // the file's context is no limit for the reference's RoPE
    RefModel model;
    ref_init(&model, &cfg, B, T, 0, 0, 0, 0, 0);
    model_file_read_weights(f, model_path, header, model.params, model.num_params);

    ref_forward(&model, tokens, tokens); // the targets only feed the loss, which is not used here
    f = fopenCheck(logits_path, "wb");
    fwriteCheck(model.logits, sizeof(float), (size_t)n_tokens * cfg.V, f);
    fcloseCheck(f);
    printf("%s: V %d L %d C %d NH %d NKV %d FF %d tied %d rope_scaling %d; logits of %d x %d tokens -> %s\n", model_path,
           cfg.V, cfg.L, cfg.C, cfg.NH, cfg.NKV, cfg.FF, cfg.tied_embeddings, cfg.rope_scaling, B, T, logits_path);
    ref_free(&model);
    free(tokens);
    return 0;
}
