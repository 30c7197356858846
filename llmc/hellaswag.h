/*
HellaSwag in the training loop, host side: reads the eval file of dev/data/prepare_hellaswag.py
(layout: write_hellaswag in llama_fp8/formats.py; int32 ids, so any vocabulary), lays each (item,
ending) out as one row of T positions for an ordinary forward pass, and scores the items from that
pass's per-position losses as lm-evaluation-harness scores a multiple-choice task:
  logprob(ending) = sum over the ending's tokens of log p(token | context, the ending's earlier tokens)
                  = -(the losses at the positions whose targets are the ending's tokens)
  acc:      the ending with the largest logprob is the label
  acc_norm: the ending with the largest logprob / (its length in characters) is the label
(lm-eval's acc_norm divides by len(choice), the ending's characters, not its tokens, so the score
does not depend on how a vocabulary splits the text.) The other positions of a row get target 0 and
their losses are ignored: the forward needs no mask. Plain C, header-only; also compiles as C++.
*/
#ifndef LLMC_HELLASWAG_H
#define LLMC_HELLASWAG_H

#include "utils.h" // FATAL, fopenCheck, freadCheck, fileSizeCheck, mallocCheck, fcloseCheck

#define HELLASWAG_MAGIC 20261205
#define HELLASWAG_VERSION 1
#define HELLASWAG_ENDINGS 4
#define HELLASWAG_HEADER_INTS 256
#define HELLASWAG_ITEM_INTS (2 + 2 * HELLASWAG_ENDINGS) // label, context length, ending lengths, ending characters
#define HELLASWAG_PRED_FLOATS 6 // an item's predictions (hellaswag_score): its 4 log-probabilities, pred, pred_norm

typedef struct {
    int num_items;   // read (at most max_items)
    int vocab_size;  // of the tokenizer that made the file: every id is below it
    int *label;      // (num_items) 0..3
    int *ctx_len;    // (num_items) tokens
    int *end_len;    // (num_items, 4) tokens
    int *end_chars;  // (num_items, 4) characters
    int **ctx;       // (num_items) the item's context tokens; its endings follow them in order
    int *tokens;     // every item's record, as read
} HellaSwag;

// Reads the first max_items items (0: all) of `path`, refusing (naming the file and item) a bad
// header, a truncated or overlong file, a label outside 0..3, an empty context or ending, an id
// outside [0, V) of the model's vocabulary, and an ending longer than T (a row has T targets).
static void hellaswag_init(HellaSwag *hs, const char *path, int max_items, int V, int T) {
    memset(hs, 0, sizeof(*hs));
    FILE *f = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(f);
    int32_t h[HELLASWAG_HEADER_INTS];
    if (size < (int64_t)sizeof(h)) FATAL("HellaSwag file '%s' is truncated: %lld bytes, shorter than its header", path, (long long)size);
    freadCheck(h, sizeof(int32_t), HELLASWAG_HEADER_INTS, f, path);
    if (h[0] != HELLASWAG_MAGIC) FATAL("HellaSwag file '%s' has bad magic %d, expected %d: make it with dev/data/prepare_hellaswag.py", path, h[0], HELLASWAG_MAGIC);
    if (h[1] != HELLASWAG_VERSION || h[4] != HELLASWAG_ENDINGS)
        FATAL("HellaSwag file '%s' is version %d with %d endings, expected version %d with %d", path, h[1], h[4], HELLASWAG_VERSION, HELLASWAG_ENDINGS);
    if (h[2] <= 0) FATAL("HellaSwag file '%s' holds no items", path);
    if ((size - (int64_t)sizeof(h)) % 4) FATAL("HellaSwag file '%s' is not a whole number of int32 values", path);
    size_t n = (size_t)(size - (int64_t)sizeof(h)) / 4;
    int *d = (int *)mallocCheck(n * sizeof(int) + 1);
    freadCheck(d, sizeof(int), n, f, path);
    fcloseCheck(f);
    int items = max_items > 0 && max_items < h[2] ? max_items : h[2];
    hs->vocab_size = h[3];
    hs->tokens = d;
    hs->label = (int *)mallocCheck((size_t)items * sizeof(int));
    hs->ctx_len = (int *)mallocCheck((size_t)items * sizeof(int));
    hs->end_len = (int *)mallocCheck((size_t)items * HELLASWAG_ENDINGS * sizeof(int));
    hs->end_chars = (int *)mallocCheck((size_t)items * HELLASWAG_ENDINGS * sizeof(int));
    hs->ctx = (int **)mallocCheck((size_t)items * sizeof(int *));
    size_t at = 0;
    for (int i = 0; i < h[2]; i++) {
        if (at + HELLASWAG_ITEM_INTS > n) FATAL("HellaSwag file '%s' is truncated: it ends inside item %d of the %d its header says", path, i, h[2]);
        const int *r = d + at;
        int64_t len = r[1];
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
            if (r[2 + k] <= 0) FATAL("HellaSwag file '%s': item %d's ending %d has %d tokens", path, i, k, r[2 + k]);
            len += r[2 + k];
        }
        if (r[1] <= 0) FATAL("HellaSwag file '%s': item %d's context has %d tokens", path, i, r[1]);
        if (len > (int64_t)(n - at - HELLASWAG_ITEM_INTS))
            FATAL("HellaSwag file '%s' is truncated: it ends inside item %d of the %d its header says", path, i, h[2]);
        if (i < items) {
            if (r[0] < 0 || r[0] >= HELLASWAG_ENDINGS) FATAL("HellaSwag file '%s': item %d has label %d, not 0..3", path, i, r[0]);
            hs->label[i] = r[0];
            hs->ctx_len[i] = r[1];
            hs->ctx[i] = d + at + HELLASWAG_ITEM_INTS;
            for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
                int e = r[2 + k], c = r[2 + HELLASWAG_ENDINGS + k];
                if (c <= 0) FATAL("HellaSwag file '%s': item %d's ending %d has %d characters", path, i, k, c);
                if (e > T) FATAL("HellaSwag file '%s': item %d's ending %d has %d tokens, more than the sequence length -t %d", path, i, k, e, T);
                hs->end_len[i * HELLASWAG_ENDINGS + k] = e;
                hs->end_chars[i * HELLASWAG_ENDINGS + k] = c;
            }
            for (int64_t t = 0; t < len; t++) {
                int id = hs->ctx[i][t];
                if (id < 0 || id >= V) FATAL("HellaSwag file '%s': item %d holds token %d, outside the model's vocabulary of %d", path, i, id, V);
            }
        }
        at += HELLASWAG_ITEM_INTS + (size_t)len;
    }
    if (at != n) FATAL("HellaSwag file '%s' has %zu bytes after its %d items", path, (n - at) * 4, h[2]);
    hs->num_items = items;
}

static void hellaswag_free(HellaSwag *hs) {
    free(hs->label); free(hs->ctx_len); free(hs->end_len); free(hs->end_chars); free(hs->ctx); free(hs->tokens);
    memset(hs, 0, sizeof(*hs));
}

// Where row `row` (item row / 4, ending row % 4) lives in its item's record: the ending's tokens
// follow the context and the endings before it.
static const int *hellaswag_ending(const HellaSwag *hs, int row, int *len) {
    int i = row / HELLASWAG_ENDINGS, k = row % HELLASWAG_ENDINGS;
    const int *e = hs->ctx[i] + hs->ctx_len[i];
    for (int j = 0; j < k; j++) e += hs->end_len[i * HELLASWAG_ENDINGS + j];
    *len = hs->end_len[row];
    return e;
}

// Fills inputs and targets (B, T) with rows row0 .. row0 + B - 1, those at or past row_end as padding
// (token 0, never scored). A row is context + ending shifted by one: inputs the tokens, targets the
// next ones. One longer than T + 1 tokens keeps its last T + 1, dropping context from the front, as
// lm-eval truncates. first[b], count[b]: the positions of row b whose targets are its ending's tokens.
static void hellaswag_batch(const HellaSwag *hs, int row0, int row_end, int B, int T, int *inputs, int *targets,
                            int *first, int *count) {
    memset(inputs, 0, (size_t)B * T * sizeof(int));
    memset(targets, 0, (size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++) {
        first[b] = count[b] = 0;
        int row = row0 + b;
        if (row >= row_end) continue;
        int i = row / HELLASWAG_ENDINGS, c = hs->ctx_len[i], e;
        const int *ending = hellaswag_ending(hs, row, &e);
        int n = c + e, drop = n > T + 1 ? n - (T + 1) : 0;
        int *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t + 1 < n - drop; t++) {
            int p = drop + t; // position in context + ending of the input token
            in[t] = p < c ? hs->ctx[i][p] : ending[p - c];
            tg[t] = p + 1 < c ? hs->ctx[i][p + 1] : ending[p + 1 - c];
        }
        first[b] = c - 1 - drop; // the target of position c - 1 - drop is the ending's first token
        count[b] = e;
    }
}

// The ending's log-probability from one row's T per-position losses (-log p(target)).
static double hellaswag_logprob(const float *row_losses, int first, int count) {
    double sum = 0.0;
    for (int t = first; t < first + count; t++) sum -= row_losses[t];
    return sum;
}

// Item i's predictions from its endings' log-probabilities: the largest logprob (acc) and the
// largest logprob per character (acc_norm); a tie goes to the first, as numpy's argmax does.
static void hellaswag_predict(const HellaSwag *hs, int i, const double logprob[HELLASWAG_ENDINGS], int *pred, int *pred_norm) {
    *pred = *pred_norm = 0;
    for (int k = 1; k < HELLASWAG_ENDINGS; k++) {
        if (logprob[k] > logprob[*pred]) *pred = k;
        if (logprob[k] / hs->end_chars[i * HELLASWAG_ENDINGS + k] >
            logprob[*pred_norm] / hs->end_chars[i * HELLASWAG_ENDINGS + *pred_norm]) *pred_norm = k;
    }
}

// Scores items [item0, item1) from their endings' log-probabilities (logprob: 4 per item, item0's
// first): *acc and *acc_norm count the items whose prediction is the label. preds, if not NULL, gets
// item i's HELLASWAG_PRED_FLOATS at preds + HELLASWAG_PRED_FLOATS * i (the other items' untouched).
static void hellaswag_score(const HellaSwag *hs, int item0, int item1, const double *logprob, float *preds, int *acc,
                            int *acc_norm) {
    *acc = *acc_norm = 0;
    for (int i = item0; i < item1; i++) {
        const double *lp = logprob + HELLASWAG_ENDINGS * (i - item0);
        int pred, pred_norm;
        hellaswag_predict(hs, i, lp, &pred, &pred_norm);
        *acc += pred == hs->label[i];
        *acc_norm += pred_norm == hs->label[i];
        if (!preds) continue;
        float *p = preds + HELLASWAG_PRED_FLOATS * i;
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) p[k] = (float)lp[k];
        p[4] = (float)pred;
        p[5] = (float)pred_norm;
    }
}

// The items [*item0, *item1) of rank `rank` of `world`: contiguous ranges, in rank order, that cover
// all num_items items once, their sizes within one of each other (a rank may have none).
static void hellaswag_rank_items(int num_items, int rank, int world, int *item0, int *item1) {
    *item0 = (int)((long long)num_items * rank / world);
    *item1 = (int)((long long)num_items * (rank + 1) / world);
}

// Writes every item's predictions of hellaswag_score (a temporary name, then renamed): per item its
// index, label, pred, pred_norm and the 4 log-probabilities.
static void hellaswag_write_preds(const HellaSwag *hs, const float *preds, const char *path) {
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopenCheck(tmp, "w");
    fprintf(f, "# item label pred pred_norm logprob0 logprob1 logprob2 logprob3\n");
    for (int i = 0; i < hs->num_items; i++) {
        const float *p = preds + HELLASWAG_PRED_FLOATS * i;
        fprintf(f, "%d %d %d %d %.6f %.6f %.6f %.6f\n", i, hs->label[i], (int)p[4], (int)p[5], p[0], p[1], p[2], p[3]);
    }
    fcloseCheck(f);
    if (rename(tmp, path) != 0) FATAL("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
}

#endif
