/*
The trainer's model FLOPs per token (llmc/mfu.h's model_flops_per_token) for a preset or a shape, so
dev/test/test_model_flops.py can check llama_fp8/model_flops.py against it. Prints one line per
argument: V L C NH NKV FF tied T params flops_per_token rope_theta max_T rope_scaling (params:
param_sizes' total; the FLOPs with %.17g, every digit of the double; the last three so the test can
compare dev/reference/bench_torch.py's preset table with llama_config.h's).

Build and run from the repository root (outside dev/test/ because the .c files there are linked into
the CPU test binary):
  gcc -O2 -Wall -Wno-unused-function -I. dev/test/tools/model_flops.c -o model_flops
  ./model_flops T CONFIG...      CONFIG: a preset name (tiny, 125m, llama3.2-1b, ...) or V,L,C,NH,NKV,FF,tied
*/
#include <stdio.h>
#include <stdlib.h>
#include "llmc/mfu.h" // model_flops_per_token (and through it llama_config.h: presets, param_sizes)

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s T CONFIG...   (CONFIG: a preset name or V,L,C,NH,NKV,FF,tied)\n", argv[0]);
        return 1;
    }
    int T = atoi(argv[1]);
    for (int i = 2; i < argc; i++) {
        LlamaConfig c;
        memset(&c, 0, sizeof(c));
        if (!config_from_preset(argv[i], &c) &&
            sscanf(argv[i], "%d,%d,%d,%d,%d,%d,%d", &c.V, &c.L, &c.C, &c.NH, &c.NKV, &c.FF, &c.tied_embeddings) != 7) {
            fprintf(stderr, "%s: not a preset and not V,L,C,NH,NKV,FF,tied\n", argv[i]);
            return 1;
        }
        size_t sizes[NUM_PARAM_TENSORS];
        printf("%d %d %d %d %d %d %d %d %zu %.17g %.9g %d %d\n", c.V, c.L, c.C, c.NH, c.NKV, c.FF, c.tied_embeddings, T,
               param_sizes(&c, sizes), model_flops_per_token(&c, T), c.rope_theta, c.max_T, c.rope_scaling);
    }
    return 0;
}
