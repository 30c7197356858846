/*
How the model trains, besides its shape: the trainer's command-line choices that model_init, the memory
plan, the checkpoint header and the tests read (the option table's rows point into it). Plain C.
*/
#ifndef LLMC_MODEL_OPTIONS_H
#define LLMC_MODEL_OPTIONS_H

enum { PREC_BF16, PREC_FP8 };

typedef struct {
    int B, T;              // micro-batch (sequences per GPU), sequence length
    int precision;         // PREC_BF16 or PREC_FP8
    int recompute;         // -r: 1 recomputes SwiGLU in backward
    int moments_bf16;      // -adam_moments bf16: m and v stored in bf16 (stochastic rounding, llmc/adamw.cuh)
    int fp8_current;       // -fp8_recipe current
    int fp8_history, fp8_margin; // -fp8_history, -fp8_margin
    int fp8_weight_cache, fp8_lm_head; // -fp8_weight_cache, -fp8_lm_head
    int cuda_graph;        // -cuda_graph: forward and backward replayed as a CUDA graph (StepGraph)
    int doc_mask;          // -doc_mask 1: attention within documents, RoPE positions from each document's start
    int doc_start_id;      // with doc_mask: the token that starts a document (the decode table's; checked_options)
    int fp8_grain;         // -fp8_grain: FP8_GRAIN_TENSOR, or FP8_GRAIN_BLOCK (block-scaled linears from step 0)
    int fp8_fallback;      // -fp8_fallback: 0 off, else the grain a linear over the threshold takes (FP8_GRAIN_*)
    // the fallback's threshold (millionths of the values cast) and patience; both 0 when it is off (model_options_of)
    int fp8_fallback_millionths, fp8_fallback_patience;
    int master_bf16;       // -master_weights bf16: no fp32 master, AdamW updates the bf16 weights (llmc/adamw.cuh)
    int adam_offload;      // -adam_offload 1: AdamW's m and v in pinned host memory, which AdamW reads and writes over PCIe
} ModelOptions;

#endif // LLMC_MODEL_OPTIONS_H
