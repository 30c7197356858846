/*
The CPU test suite (no GPU needed; CI runs it): fp8 codecs and the delayed-scaling state machine,
the fp8 fallback's rule (llmc/fp8_fallback.h) against the reference's, the C reference model's
gradients against finite differences and against the PyTorch fixtures, the data loader and tokenizer
on good and bad files, the bf16 moments' stochastic rounding, and the checkpoint files' layout as
plain C.
Build and run from the repository root: make test
*/
#define _GNU_SOURCE // sync_file_range (llmc/checkpoint_file.h), declared only so; before any #include
#include "harness.h"
#include "test_fp8.h"     // run_fp8_tests: codecs, scale formula, history state machine
#include "test_fp8_grain.h" // run_fp8_grain_tests: the reference's fp8 block scaling
#include "test_fp8_fallback.h" // run_fp8_fallback_tests: llmc/fp8_fallback.h against the reference's fallback
#include "test_ref.h"     // run_ref_tests: gradient checks, PyTorch fixture comparisons
#include "test_data.h"    // run_data_tests: shard loader and tokenizer, every bad-input case
#include "test_bf16_round.h" // run_bf16_round_tests: the bf16 AdamW moments' stochastic rounding
#include "test_doc_mask.h" // run_doc_mask_tests: document masking in the reference and llmc/doc_mask.h
#include "test_checkpoint_file.h" // run_checkpoint_file_tests: llmc/checkpoint_file.h without the trainer

int main(void) {
    run_fp8_tests();
    run_fp8_grain_tests();
    run_fp8_fallback_tests();
    run_ref_tests();
    run_data_tests();
    run_bf16_round_tests();
    run_doc_mask_tests();
    run_checkpoint_file_tests();
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
