/*
Document masking's host side: from a batch of B rows of T input tokens, where each document starts at
the document-start id (the tokenizer's BOS, which the shards carry) and a row's first token always
starts one, the layout an attention kernel needs so that a token attends only to its own document
(causally) and RoPE counts from 0 at each document start. Plain C, header-only; also compiles as C++
under nvcc. The trainer's -doc_mask 1 makes pos on the GPU (llmc/attention.cuh, doc_positions), held
to this by the GPU test; doc_offsets is what a cuDNN ragged path would take (dev/results/doc_mask/design.md).

Two views of the same boundaries:
- pos (B, T): each token's position in its document, its RoPE position. It also says everything a
  per-token kernel needs: query t of a row sees the keys t - pos[t] .. t.
- doc_offsets (num_docs + 1): the first token of each document in the flattened B*T batch, then B*T,
  documents in row order (a row boundary always ends a document, so none spans two rows). This is the
  cumulative-sequence-length layout of a packed (THD) batch: cuDNN SDPA's ragged offsets (each times
  the token stride of q, k, v, in elements) with seq_len_q = seq_len_kv = the differences and the
  documents as its batch, or flash-attention's cu_seqlens. max_doc_len is their longest.
*/
#ifndef LLMC_DOC_MASK_H
#define LLMC_DOC_MASK_H

#include <stdlib.h>
#include "llmc/utils.h" // FATAL, mallocCheck

typedef struct {
    int B, T, doc_start_id;
    int *pos;         // (B, T) each token's position in its document
    int *doc_offsets; // (B*T + 1) allocated; the first num_docs + 1 hold the documents' first tokens, then B*T
    int num_docs;     // documents in the last batch (B <= num_docs <= B*T)
    int max_doc_len;  // the longest of them
} DocMask;

// vocab_size bounds the id: an id no token can take would silently turn the option into "one document
// per row".
static void doc_mask_init(DocMask *dm, int B, int T, int doc_start_id, int vocab_size) {
    if (B <= 0 || T <= 0) FATAL("document masking: need B > 0 and T > 0, got B %d T %d", B, T);
    if (doc_start_id < 0 || doc_start_id >= vocab_size)
        FATAL("document masking: document-start id %d is outside the vocabulary [0, %d)", doc_start_id, vocab_size);
    dm->B = B;
    dm->T = T;
    dm->doc_start_id = doc_start_id;
    dm->pos = (int *)mallocCheck((size_t)B * T * sizeof(int));
    dm->doc_offsets = (int *)mallocCheck(((size_t)B * T + 1) * sizeof(int));
    dm->num_docs = 0;
    dm->max_doc_len = 0;
}

// Fills pos, doc_offsets, num_docs and max_doc_len from inputs (B, T).
static void doc_mask_compute(DocMask *dm, const int *inputs) {
    int B = dm->B, T = dm->T, n = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            if (t == 0 || inputs[i] == dm->doc_start_id) {
                dm->doc_offsets[n++] = i;
                dm->pos[i] = 0;
            } else {
                dm->pos[i] = dm->pos[i - 1] + 1;
            }
        }
    }
    dm->doc_offsets[n] = B * T;
    dm->num_docs = n;
    dm->max_doc_len = 0;
    for (int d = 0; d < n; d++) {
        int len = dm->doc_offsets[d + 1] - dm->doc_offsets[d];
        if (len > dm->max_doc_len) dm->max_doc_len = len;
    }
}

static void doc_mask_free(DocMask *dm) {
    free(dm->pos);
    free(dm->doc_offsets);
    dm->pos = NULL;
    dm->doc_offsets = NULL;
}

#endif
