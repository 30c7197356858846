/*
Model FLOPs and MFU. FLOPs per token follow docs/baselines.md: 6 * (params - embedding)
plus causal attention counted half (QK^T and PV: 6 * L * T * C per token for forward + backward).
MFU is reported against the GPU's dense bf16 peak for both precisions, so fp8 and bf16 runs compare
on one scale; an unknown GPU reports "n/a" rather than a made-up number.
*/
#ifndef LLMC_MFU_H
#define LLMC_MFU_H
#include <string.h>
#include "llama_config.h"

static double model_flops_per_token(const LlamaConfig *c, int T) {
    size_t sizes[NUM_PARAM_TENSORS];
    size_t params = param_sizes(c, sizes);
    double non_embedding = (double)(params - sizes[P_WTE]);
    return 6.0 * non_embedding + 6.0 * (double)c->L * (double)T * (double)c->C;
}

// Dense bf16 tensor-core peak in TFLOP/s for known GPUs (SXM boards); 0 if unknown.
static double gpu_bf16_peak_tflops(const char *device_name) {
    if (strstr(device_name, "H100") && strstr(device_name, "PCIe")) return 756.0;
    if (strstr(device_name, "H100") || strstr(device_name, "H200") || strstr(device_name, "GH200")) return 989.4;
    if (strstr(device_name, "A100")) return 312.0;
    return 0.0;
}
#endif
