/*
Bits per byte of the val set: the val loss in bits spread over the UTF-8 bytes of the text the
target tokens stand for, so runs with different vocabularies compare (a larger vocabulary has fewer,
harder tokens per byte):
  bpb = (sum of the targets' losses in nats / ln 2) / (the targets' text bytes)
A target's bytes are its piece's in the decode table (llmc/tokenizer.h), except that the document
start (BOS) is no text (0 bytes, although Llama 3's and SmolLM2's tables spell their specials out),
and the token right after it drops one leading space: SentencePiece (Llama 2) adds that space to a
document's first word (add_dummy_prefix), and a byte-level vocabulary's text rarely starts with one.
Plain C, header-only; also compiles as C++.
*/
#ifndef LLMC_BPB_H
#define LLMC_BPB_H

#include "tokenizer.h" // Tokenizer: piece_len, doc_start_id

// The text bytes of n targets, each predicted after its input token (inputs[i] precedes targets[i]).
static double target_text_bytes(const Tokenizer *t, const int *inputs, const int *targets, size_t n) {
    double bytes = 0.0;
    for (size_t i = 0; i < n; i++) {
        int id = targets[i];
        if (id == t->doc_start_id || id < 0 || id >= t->vocab_size) continue;
        int len = t->piece_len[id];
        if (inputs[i] == t->doc_start_id && len > 0 && t->pieces[id][0] == ' ') len--;
        bytes += len;
    }
    return bytes;
}

#endif
