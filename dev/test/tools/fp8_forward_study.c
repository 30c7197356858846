/*
What fp8's forward alone costs a pretrained model's loss, linear kind by linear kind (issue 34,
dev/results/fp8_outliers/measurements_h200.md "What these val losses hold"): the C reference
(dev/test/llama_ref.h) evaluates the same batches once per configuration, every cast scaled from its
own amax (the current recipe, as -x 0's first forward scales):
  bf16        every linear unquantized (each one's fp8 grain FP8_GRAIN_BF16: the trainer's bf16 GEMM)
  fp8         every block linear per-tensor fp8 (the lm_head stays bf16, as the trainer's default)
  fp8, K bf16 the same with every linear of kind K (qkv, wo, w13, w2) unquantized
  fp8 block   every block linear block-scaled (1x128 X, 128x128 W)
and prints each one's mean loss and its difference from bf16's. With --grads it also runs the
backward (one step of BATCHES micro-batches, ref_compute_grads) and prints, per parameter group
(wte, each linear kind over every layer), the relative error of the gradient against bf16's:
||g - g_bf16|| / ||g_bf16||. The bf16 configuration then runs first whether named or not.

Build and run from the repository root:
  make dev/test/tools/fp8_forward_study
  ./dev/test/tools/fp8_forward_study MODEL.bin SHARD.bin B T BATCHES [--grads] [CONFIG ...]
SHARD.bin is a token shard in the model's vocabulary, read from its start without shuffling; CONFIG
names the configurations to run (bf16, fp8, no-qkv, no-wo, no-w13, no-w2, block; default all).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmc/model_file.h"    // model_file_open, model_file_read_weights
#include "llmc/dataloader.h"    // DataLoader
#include "dev/test/llama_ref.h" // RefModel, ref_forward, ref_set_fp8_grain

// kind: the linear kind left unquantized (LIN_*), or -1; grain: the grain of the others
typedef struct {
    const char *name, *what;
    int kind, grain;
} Config;
static const Config CONFIGS[] = {
    {"bf16", "bf16 (no linear in fp8)", -2, FP8_GRAIN_BF16},
    {"fp8", "fp8 per-tensor", -1, FP8_GRAIN_TENSOR},
    {"no-qkv", "fp8, qkv in bf16", LIN_QKV, FP8_GRAIN_TENSOR},
    {"no-wo", "fp8, wo in bf16", LIN_WO, FP8_GRAIN_TENSOR},
    {"no-w13", "fp8, w13 in bf16", LIN_W13, FP8_GRAIN_TENSOR},
    {"no-w2", "fp8, w2 in bf16", LIN_W2, FP8_GRAIN_TENSOR},
    {"block", "fp8 block-scaled", -1, FP8_GRAIN_BLOCK},
};
#define NUM_CONFIGS ((int)(sizeof(CONFIGS) / sizeof(CONFIGS[0])))
// the parameter groups whose gradient error --grads prints
enum { NUM_GROUPS = 5 };
static const int GROUP_PARAMS[NUM_GROUPS] = {P_WTE, P_WQKV, P_WO, P_W13, P_W2};
static const char *const GROUP_NAMES[NUM_GROUPS] = {"wte", "qkv", "wo", "w13", "w2"};

// The mean loss of `batches` batches from the shard's start under configuration c. With grads
// (NULL: forward only) the batches are one step's micro-batches, and the step's gradient is copied
// there (num_params values).
static double config_loss(const Config *c, const char *model_path, const char *shard_path, int B, int T, int batches, ref_real *grads) {
    int32_t header[MODEL_HEADER_INTS];
    LlamaConfig cfg;
    FILE *f = model_file_open(model_path, header, &cfg);
    RefModel model;
    ref_init(&model, &cfg, B, T, 1, 1, 0, 1, 0); // fp8 emulation, current scaling, lm_head in bf16
    model_file_read_weights(f, model_path, header, model.params, model.num_params);
    for (int lin = 0; lin < LINS_PER_LAYER * cfg.L; lin++) {
        int kind = lin % LINS_PER_LAYER; // the layout's linear order (llmc/fp8_layout.h): layer by layer, LIN_* within
        ref_set_fp8_grain(&model, lin, kind == c->kind ? FP8_GRAIN_BF16 : c->grain, 0);
    }
    DataLoader dl;
    dataloader_init(&dl, shard_path, B, T, 0, 1, 0, 0, cfg.V);
    double loss = 0.0;
    if (grads != NULL) {
        size_t N = (size_t)B * T;
        int *inputs = (int *)mallocCheck(batches * N * sizeof(int)), *targets = (int *)mallocCheck(batches * N * sizeof(int));
        for (int b = 0; b < batches; b++) {
            dataloader_next_batch(&dl);
            memcpy(inputs + b * N, dl.inputs, N * sizeof(int));
            memcpy(targets + b * N, dl.targets, N * sizeof(int));
        }
        loss = ref_compute_grads(&model, inputs, targets, batches);
        memcpy(grads, model.grads, model.num_params * sizeof(ref_real));
        free(inputs);
        free(targets);
    } else {
        for (int b = 0; b < batches; b++) {
            dataloader_next_batch(&dl);
            loss += ref_forward(&model, dl.inputs, dl.targets);
        }
        loss /= batches;
    }
    dataloader_free(&dl);
    ref_free(&model);
    return loss;
}

// ||g - g0|| / ||g0|| over parameter tensor `param` (every layer's), its offset and size from the config
static double group_error(const LlamaConfig *cfg, int param, const ref_real *g, const ref_real *g0) {
    size_t sizes[NUM_PARAM_TENSORS], off = 0;
    param_sizes(cfg, sizes);
    for (int i = 0; i < param; i++) off += sizes[i];
    double d = 0.0, n = 0.0;
    for (size_t i = off; i < off + sizes[param]; i++) {
        d += ((double)g[i] - g0[i]) * ((double)g[i] - g0[i]);
        n += (double)g0[i] * g0[i];
    }
    return n > 0.0 ? sqrt(d / n) : 0.0;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL.bin SHARD.bin B T BATCHES [CONFIG ...]  (CONFIG: bf16 fp8 no-qkv no-wo no-w13 no-w2 block)\n", argv[0]);
        return 1;
    }
    const char *model_path = argv[1], *shard_path = argv[2];
    int B = atoi(argv[3]), T = atoi(argv[4]), batches = atoi(argv[5]);
    if (B <= 0 || T <= 0 || batches <= 0) FATAL("B, T and BATCHES must be positive, got '%s' '%s' '%s'", argv[3], argv[4], argv[5]);
    int run[NUM_CONFIGS] = {0}, first = 6, want_grads = argc > 6 && strcmp(argv[6], "--grads") == 0;
    if (want_grads) first = 7;
    for (int i = first; i < argc; i++) {
        int k = 0;
        while (k < NUM_CONFIGS && strcmp(argv[i], CONFIGS[k].name) != 0) k++;
        if (k == NUM_CONFIGS) FATAL("unknown configuration '%s' (bf16 fp8 no-qkv no-wo no-w13 no-w2 block)", argv[i]);
        run[k] = 1;
    }
    if (argc == first) for (int k = 0; k < NUM_CONFIGS; k++) run[k] = 1;
    if (want_grads) run[0] = 1; // the gradients' reference
    int32_t header[MODEL_HEADER_INTS];
    LlamaConfig cfg;
    fclose(model_file_open(model_path, header, &cfg));
    size_t sizes[NUM_PARAM_TENSORS], num_params = param_sizes(&cfg, sizes);
    ref_real *g0 = want_grads ? (ref_real *)mallocCheck(num_params * sizeof(ref_real)) : NULL;
    ref_real *g = want_grads ? (ref_real *)mallocCheck(num_params * sizeof(ref_real)) : NULL;
    printf("%s on %s: %d batches of %d x %d tokens from the shard's start, fp32 reference %s, every cast scaled live\n\n",
           model_path, shard_path, batches, B, T, want_grads ? "forward and backward (one step)" : "forward");
    printf("| configuration | mean loss | vs bf16 |");
    for (int i = 0; want_grads && i < NUM_GROUPS; i++) printf(" %s grad error |", GROUP_NAMES[i]);
    printf(" seconds |\n|---|---|---|%s---|\n", want_grads ? "---|---|---|---|---|" : "");
    double bf16 = 0.0;
    for (int k = 0; k < NUM_CONFIGS; k++) {
        if (!run[k]) continue;
        double t0 = monotonic_seconds(), loss = config_loss(&CONFIGS[k], model_path, shard_path, B, T, batches, k == 0 ? g0 : g);
        if (CONFIGS[k].kind == -2) bf16 = loss;
        if (bf16 > 0.0) printf("| %s | %.6f | %+.3f%% |", CONFIGS[k].what, loss, 100.0 * (loss - bf16) / bf16);
        else printf("| %s | %.6f | (no bf16 run) |", CONFIGS[k].what, loss);
        for (int i = 0; want_grads && i < NUM_GROUPS; i++) printf(" %.2e |", k == 0 ? 0.0 : group_error(&cfg, GROUP_PARAMS[i], g, g0));
        printf(" %.0f |\n", monotonic_seconds() - t0);
        fflush(stdout);
    }
    free(g0);
    free(g);
    return 0;
}
