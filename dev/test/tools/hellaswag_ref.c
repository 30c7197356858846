/*
HellaSwag scores of a model file, two ways, on the CPU: the C reference scorer (ref_ending_logprob
in dev/test/llama_ref.h: one forward of context + ending per ending) and the trainer's host side
(llmc/hellaswag.h: the rows laid out B x T as the trainer's forward gets them, losses per position,
summed per ending, hellaswag_score's predictions and acc counts), with the C reference model standing
in for the GPU forward.
dev/test/test_hellaswag.py compares both with transformers' log-probabilities.

Build and run from the repository root:
  gcc -O2 -Wall -Wno-unused-function -I. dev/test/tools/hellaswag_ref.c -lm -o hellaswag_ref
  ./hellaswag_ref MODEL.bin EVAL.bin B T [MAX_ITEMS]
prints per item "item I label L ref R0 R1 R2 R3 host H0 H1 H2 H3 pred P pred_norm Q" (R: the
reference's log-probabilities, H: the host side's with rows of T positions, truncated from the left
as lm-eval truncates, P and Q its acc and acc_norm predictions), then "acc A acc_norm N items K".
*/
#include <stdio.h>
#include <stdlib.h>
#include "llmc/model_file.h"    // model_file_open, model_file_read_weights
#include "llmc/hellaswag.h"     // HellaSwag, hellaswag_batch, hellaswag_logprob, hellaswag_score
#include "dev/test/llama_ref.h" // RefModel, ref_init, ref_forward, ref_ending_logprob

static void load_model(RefModel *model, const char *path, int B, int T) {
    int32_t header[MODEL_HEADER_INTS];
    LlamaConfig cfg;
    FILE *f = model_file_open(path, header, &cfg);
    cfg.max_T = T; // the file's context is no limit for the reference's RoPE
    ref_init(model, &cfg, B, T, 0, 0, 0, 0, 0);
    model_file_read_weights(f, path, header, model->params, model->num_params);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s MODEL.bin EVAL.bin B T [MAX_ITEMS (default 0: all)]\n", argv[0]);
        return 1;
    }
    int B = atoi(argv[3]), T = atoi(argv[4]), max_items = argc == 6 ? atoi(argv[5]) : 0;
    if (B <= 0 || T <= 1) FATAL("B must be positive and T above 1, got B '%s' T '%s'", argv[3], argv[4]);
    RefModel host;
    load_model(&host, argv[1], B, T);
    HellaSwag hs;
    hellaswag_init(&hs, argv[2], max_items, host.cfg.V, T);
    int longest = 0; // the reference scores every row whole
    for (int i = 0; i < hs.num_items; i++)
        for (int k = 0; k < HELLASWAG_ENDINGS; k++)
            if (hs.ctx_len[i] + hs.end_len[i * HELLASWAG_ENDINGS + k] - 1 > longest) longest = hs.ctx_len[i] + hs.end_len[i * HELLASWAG_ENDINGS + k] - 1;
    RefModel ref;
    load_model(&ref, argv[1], 1, longest);

    int rows = HELLASWAG_ENDINGS * hs.num_items, V = host.cfg.V;
    size_t N = (size_t)B * T;
    int *inputs = (int *)mallocCheck(N * sizeof(int)), *targets = (int *)mallocCheck(N * sizeof(int));
    int *first = (int *)mallocCheck((size_t)B * sizeof(int)), *count = (int *)mallocCheck((size_t)B * sizeof(int));
    float *losses = (float *)mallocCheck(N * sizeof(float));
    double *host_lp = (double *)mallocCheck((size_t)rows * sizeof(double));
    for (int r0 = 0; r0 < rows; r0 += B) {
        hellaswag_batch(&hs, r0, rows, B, T, inputs, targets, first, count);
        ref_forward(&host, inputs, targets);
        for (size_t p = 0; p < N; p++) losses[p] = (float)((double)host.acts.lse[p] - (double)host.acts.logits[p * V + targets[p]]);
        for (int b = 0; b < B && r0 + b < rows; b++) host_lp[r0 + b] = hellaswag_logprob(losses + (size_t)b * T, first[b], count[b]);
    }
    float *preds = (float *)mallocCheck((size_t)hs.num_items * HELLASWAG_PRED_FLOATS * sizeof(float));
    int acc, acc_norm;
    hellaswag_score(&hs, 0, hs.num_items, host_lp, preds, &acc, &acc_norm); // the trainer's scoring
    for (int i = 0; i < hs.num_items; i++) {
        printf("item %d label %d ref", i, hs.label[i]);
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
            int n;
            const int *ending = hellaswag_ending(&hs, HELLASWAG_ENDINGS * i + k, &n);
            printf(" %.9g", ref_ending_logprob(&ref, hs.ctx[i], hs.ctx_len[i], ending, n));
        }
        printf(" host");
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) printf(" %.9g", host_lp[HELLASWAG_ENDINGS * i + k]);
        const float *p = preds + HELLASWAG_PRED_FLOATS * i;
        printf(" pred %d pred_norm %d\n", (int)p[4], (int)p[5]);
    }
    printf("acc %.6f acc_norm %.6f items %d\n", (double)acc / hs.num_items, (double)acc_norm / hs.num_items, hs.num_items);
    hellaswag_free(&hs);
    ref_free(&host);
    ref_free(&ref);
    free(inputs); free(targets); free(first); free(count); free(losses); free(host_lp); free(preds);
    return 0;
}
