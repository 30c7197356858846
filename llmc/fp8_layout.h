/*
The layout of the fp8 scaling state: which fp8 tensors a model has, the index of each, and where its
amax slot, amax history, scale and scale_inv sit in the one float buffer that holds them all. Shared
by the GPU trainer (llmc/fp8_state.cuh), the CPU reference (dev/test), the PyTorch reference
(dev/reference, which mirrors it) and the checkpoint format, so every one of them agrees on which
float is which. Plain C.

Every block linear of layer i has index lin = 4*i + {0 qkv, 1 wo, 2 w13, 3 w2}; with -fp8_lm_head 1
the lm_head is linear 4*L. Each linear has a grain (FP8_GRAIN_*: per-tensor, block, bf16 or row) and
three tensors, kind {0 X, 1 W, 2 dY}, and tensor index t = 3*lin + kind. The buffer (ONE, so one
NCCL call reduces every amax slot and one kernel updates every scale), in floats:
   amax_slot    [NT]      max |value| seen since the last update (atomic max, all micro-steps)
   amax_history [NT][H]   entry 0 is the newest
   scale        [NT]      multiply by this before casting to fp8
   scale_inv    [NT]      1/scale, handed to the GEMM to undo the scaling
*/
#ifndef LLMC_FP8_LAYOUT_H
#define LLMC_FP8_LAYOUT_H

#include <stddef.h>
#include "llama_config.h" // LlamaConfig, LINS_PER_LAYER

enum { FP8_X, FP8_W, FP8_DY, FP8_KINDS };
static const char *const FP8_KIND_NAMES[FP8_KINDS] = {"x", "w", "dy"};

// With -fp8_lm_head 1 the lm_head is an fp8 linear too: "linear" LIN_LM_HEAD of a single layer 0
// (LINEAR_NAMES[LIN_LM_HEAD] is "lm_head"), whose tensors come after every block's.
#define LIN_LM_HEAD LINS_PER_LAYER

// Number of fp8 linears and fp8 tensors.
static inline int fp8_num_linears(const LlamaConfig *c, int fp8_lm_head) { return LINS_PER_LAYER * c->L + (fp8_lm_head ? 1 : 0); }
static inline int fp8_num_tensors(const LlamaConfig *c, int fp8_lm_head) { return FP8_KINDS * fp8_num_linears(c, fp8_lm_head); }
static inline int fp8_tensor_index(int layer, int lin, int kind) { return FP8_KINDS * (LINS_PER_LAYER * layer + lin) + kind; }
// The index of tensor `kind` of linear `lin` of layer l, the lm_head's included.
static inline int fp8_tensor(const LlamaConfig *c, int l, int lin, int kind) {
    return lin == LIN_LM_HEAD ? fp8_tensor_index(c->L, 0, kind) : fp8_tensor_index(l, lin, kind);
}
// The index of linear `lin` of layer l among the fp8 linears (the lm_head's last): its tensors' t / 3.
static inline int fp8_linear(const LlamaConfig *c, int l, int lin) { return fp8_tensor(c, l, lin, FP8_X) / FP8_KINDS; }

// A linear's fp8 grain: one scale per tensor (the recipe's, delayed or current), one per block (1x128
// along the reduction dimension for X and dY, 128x128 for W, each from its own values: llmc/fp8_block.cuh),
// none: the linear has fallen back to bf16 GEMMs (-fp8_fallback bf16), or one per row along each GEMM's
// reduction dimension (llmc/fp8_row.cuh). The checkpoint's word.
enum { FP8_GRAIN_TENSOR = 0, FP8_GRAIN_BLOCK = 1, FP8_GRAIN_BF16 = 2, FP8_GRAIN_ROW = 3, FP8_GRAINS };
static const char *const FP8_GRAIN_NAMES[FP8_GRAINS] = {"tensor", "block", "bf16", "row"};

// Offsets (in floats) of the parts of the fp8 state buffer; total is its length.
typedef struct {
    size_t amax_slot, amax_history, scale, scale_inv, total;
    int num_tensors, history_len;
} Fp8StateLayout;

static inline Fp8StateLayout fp8_state_layout(int num_tensors, int history_len) {
    Fp8StateLayout s;
    s.num_tensors = num_tensors;
    s.history_len = history_len;
    s.amax_slot = 0;
    s.amax_history = (size_t)num_tensors;
    s.scale = s.amax_history + (size_t)num_tensors * history_len;
    s.scale_inv = s.scale + num_tensors;
    s.total = s.scale_inv + num_tensors;
    return s;
}

#endif
