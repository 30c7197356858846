/*
The one entry point of dev/test/gradcheck.c, which compiles the reference model (llama_ref.h) a
second time in double precision: finite differences in float are too noisy to catch a 1% error in a
small gradient, in double they are accurate to ~1e-8.
*/
#ifndef DEV_TEST_GRADCHECK_H
#define DEV_TEST_GRADCHECK_H

#include "llmc/llama_config.h" // LlamaConfig

// For the mean loss over grad_accum micro-batches of the model cfg (no fp8) with weights params
// (num_params floats) and inputs/targets (grad_accum * B * T tokens), with document masking on
// (llama_ref.h's ref_set_doc_mask), documents starting at doc_start_id, or off if doc_start_id < 0,
// computes in double the gradient by the model's backward (grads) and by a central finite difference
// of every parameter (fd_grads); both are num_params long.
void ref_gradcheck_double(const LlamaConfig *cfg, int B, int T, int grad_accum, int doc_start_id, const float *params,
                          const int *inputs, const int *targets, double *grads, double *fd_grads);

#endif
