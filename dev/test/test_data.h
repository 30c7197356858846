/*
Tests of the shard loader (llmc/dataloader.h) and the tokenizer (llmc/tokenizer.h): exact batches
from small synthetic shards written to a temporary directory, rank disjointness, shuffling, resume
state, glob ordering, the synthetic corpus; shards too small for one step left out with a warning;
the evaluation loader's positions and their sharing over the ranks; the vocabulary's edge (V-1, V);
every bad input (each must exit non-zero with a message naming the file and the problem); and the
real TinyShakespeare files shipped in dev/data/tinyshakespeare. Then the loss masks (which targets
a mask byte flags, refusals) and the weighted mixtures (realized proportions within a binomial
bound, determinism, every rank drawing from the same set, resume mid-mixture, bad specs, a ':' in a
pattern, each set's own shuffle, a file in two sets). Then the resume record (issue 40.4, 40.8): every
change of the data refused naming the file or, with continue, the set's next epoch; data moved to
another folder; a state from before the record; a corrupt record; saved on 1, 3 or 8 ranks and
resumed on 1, 3 or 8. Then the shard records (issue 40.10-13): the tokenizer fingerprint of
llama_fp8/formats.py's fixture (dev/test/fixtures/data) against llmc/tokenizer.h's, the run's checks
between shards, the decode table and the model, and -tok.
*/
#ifndef DEV_TEST_TEST_DATA_H
#define DEV_TEST_TEST_DATA_H

#include <fcntl.h>
#include <sys/socket.h> // test_fatal_one_write: SOCK_SEQPACKET keeps each write a record
#include "harness.h"
#include "llmc/dataloader.h" // DataLoader, dataloader_*
#include "llmc/tokenizer.h"  // Tokenizer, tokenizer_*

#define TD_MAX_FILES 160
static char g_td_dir[256];                    // the mkdtemp directory every test file goes in
static char g_td_files[TD_MAX_FILES][512];    // what was written there, removed at the end
static int g_td_num_files = 0;

static const char *td_path(char *buf, const char *name) {
    snprintf(buf, 512, "%s/%s", g_td_dir, name);
    return buf;
}

// Remembers a file made in g_td_dir, for the cleanup at the end.
static void td_register(const char *path) {
    for (int i = 0; i < g_td_num_files; i++) if (strcmp(g_td_files[i], path) == 0) return;
    if (g_td_num_files == TD_MAX_FILES) FATAL("test_data.h: raise TD_MAX_FILES");
    strcpy(g_td_files[g_td_num_files++], path);
}

static void td_write_file(const char *name, const int32_t *header, const void *body, size_t body_bytes) {
    char path[512];
    td_path(path, name);
    FILE *fp = fopenCheck(path, "wb");
    if (header != NULL) fwriteCheck(header, sizeof(int32_t), 256, fp);
    if (body_bytes > 0) fwriteCheck(body, 1, body_bytes, fp);
    fcloseCheck(fp);
    td_register(path);
}

// A shard of n tokens, token i = base + i; header fields as given (so bad headers can be made).
static void td_write_shard_raw(const char *name, int magic, int version, uint32_t header_count, int width,
                               uint32_t base, int64_t n) {
    int32_t header[256] = {0};
    header[0] = magic; header[1] = version; header[2] = (int32_t)header_count;
    unsigned char *body = (unsigned char *)mallocCheck((size_t)n * width);
    for (int64_t i = 0; i < n; i++) {
        uint32_t tok = base + (uint32_t)i;
        if (width == 2) { uint16_t t16 = (uint16_t)tok; memcpy(body + 2 * i, &t16, 2); }
        else memcpy(body + 4 * i, &tok, 4);
    }
    td_write_file(name, header, body, (size_t)n * width);
    free(body);
}

static void td_write_shard(const char *name, int width, uint32_t base, int64_t n) {
    td_write_shard_raw(name, width == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32,
                       width == 2 ? SHARD_VERSION_U16 : SHARD_VERSION_U32, (uint32_t)n, width, base, n);
}

// Overwrites token `index` of a shard written by td_write_shard.
static void td_poke_token(const char *name, int width, int64_t index, uint32_t value) {
    char path[512];
    FILE *fp = fopenCheck(td_path(path, name), "r+b");
    fseekCheck(fp, 1024 + index * width, SEEK_SET);
    if (width == 2) { uint16_t v = (uint16_t)value; fwriteCheck(&v, 2, 1, fp); }
    else fwriteCheck(&value, 4, 1, fp);
    fcloseCheck(fp);
}

// Checks the batch is the run of B*T + 1 tokens base + start, base + start + 1, ...
static int td_batch_is_run(const DataLoader *dl, int64_t first) {
    int BT = dl->B * dl->T;
    for (int i = 0; i < BT; i++) {
        if (dl->inputs[i] != first + i || dl->targets[i] != first + i + 1) return 0;
    }
    return 1;
}

static void test_shard_16bit_exact_batches(void) {
    char path[512];
    td_write_shard("u16.bin", 2, 0, 105); // B*T = 10: positions (105 - 1) / 10 = 10
    DataLoader dl;
    dataloader_init(&dl, td_path(path, "u16.bin"), 2, 5, 0, 1, 0, 0, 1000);
    CHECK(dataloader_num_tokens(&dl) == 105, "num_tokens %lld", (long long)dataloader_num_tokens(&dl));
    CHECK(dl.batches_per_epoch == 10, "batches_per_epoch %lld", (long long)dl.batches_per_epoch);
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int s = 0; s < 10; s++) {
            dataloader_next_batch(&dl);
            CHECK(td_batch_is_run(&dl, 10 * s), "epoch %d batch %d: inputs[0]=%d targets[0]=%d", epoch, s,
                  dl.inputs[0], dl.targets[0]);
        }
        CHECK(dl.epoch == epoch + 1, "epoch counter after epoch %d", epoch);
    }
    dataloader_free(&dl);
}

static void test_shard_32bit_exact_batches(void) {
    char path[512];
    const uint32_t base = 100000; // beyond 16 bits
    td_write_shard("u32.bin", 4, base, 61); // B*T = 12: 5 positions
    DataLoader dl;
    dataloader_init(&dl, td_path(path, "u32.bin"), 3, 4, 0, 1, 0, 0, 128256);
    CHECK(dl.batches_per_epoch == 5, "batches_per_epoch %lld", (long long)dl.batches_per_epoch);
    for (int s = 0; s < 6; s++) {
        dataloader_next_batch(&dl);
        CHECK(td_batch_is_run(&dl, base + 12 * (s % 5)), "batch %d: inputs[0]=%d", s, dl.inputs[0]);
    }
    dataloader_free(&dl);
}

// One epoch of every rank: positions disjoint and, unshuffled, exactly the first S*world.
static void td_check_ranks(int shuffle) {
    char path[512];
    const int B = 2, T = 3, world = 4, BT = 6;
    const int P = (237 - 1) / BT, S = P / world; // 39 positions, 9 steps, 3 left out
    int seen[39] = {0};
    for (int r = 0; r < world; r++) {
        DataLoader dl;
        dataloader_init(&dl, td_path(path, "ranks.bin"), B, T, r, world, shuffle, 7, 1000);
        CHECK(dl.batches_per_epoch == S, "rank %d: batches_per_epoch %lld", r, (long long)dl.batches_per_epoch);
        for (int s = 0; s < S; s++) {
            dataloader_next_batch(&dl);
            int p = dl.inputs[0] / BT;
            CHECK(dl.inputs[0] % BT == 0 && p < P && td_batch_is_run(&dl, p * BT), "rank %d step %d: bad run", r, s);
            if (!shuffle) CHECK(p == s * world + r, "rank %d step %d read position %d", r, s, p);
            if (p >= 0 && p < P) seen[p]++;
        }
        dataloader_free(&dl);
    }
    int distinct = 0;
    for (int p = 0; p < P; p++) {
        CHECK(seen[p] <= 1, "position %d read %d times", p, seen[p]);
        if (!shuffle) CHECK(seen[p] == (p < S * world), "position %d read %d times", p, seen[p]);
        distinct += seen[p] > 0;
    }
    CHECK(distinct == S * world, "%d distinct positions, expected %d", distinct, S * world);
}

static void test_ranks_disjoint(void) {
    td_write_shard("ranks.bin", 2, 0, 237);
    td_check_ranks(0);
    td_check_ranks(1);
}

// Three shards of different sizes, token values telling shard and position apart.
static const char *td_multi_pattern(char *buf) {
    td_write_shard("multi_0.bin", 2, 0, 81);     // B*T = 8: 10 positions
    td_write_shard("multi_1.bin", 2, 1000, 121); // 15
    td_write_shard("multi_2.bin", 2, 2000, 57);  // 7
    return td_path(buf, "multi_*.bin");
}

// The first input token of each of n batches.
static void td_read_firsts(DataLoader *dl, int *out, int n) {
    for (int i = 0; i < n; i++) { dataloader_next_batch(dl); out[i] = dl->inputs[0]; }
}

static void test_shuffle_deterministic(void) {
    char pattern[512];
    td_multi_pattern(pattern);
    enum { EPOCH = 10 + 15 + 7, N = 3 * EPOCH };
    int a[N], b[N], c[N], plain[N];
    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 1, 42, 4000);
    CHECK(dl.batches_per_epoch == EPOCH, "batches_per_epoch %lld", (long long)dl.batches_per_epoch);
    td_read_firsts(&dl, a, N);
    dataloader_free(&dl);
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 1, 42, 4000);
    td_read_firsts(&dl, b, N);
    dataloader_free(&dl);
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 1, 43, 4000);
    td_read_firsts(&dl, c, N);
    dataloader_free(&dl);
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 0, 42, 4000);
    td_read_firsts(&dl, plain, N);
    dataloader_free(&dl);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "same seed gave different sequences");
    CHECK(memcmp(a, c, sizeof(a)) != 0, "seeds 42 and 43 gave the same sequence");
    CHECK(memcmp(a, plain, sizeof(a)) != 0, "shuffled sequence equals the unshuffled one");
    CHECK(memcmp(a, a + EPOCH, EPOCH * sizeof(int)) != 0, "epochs 0 and 1 came in the same order");
    // the seed also permutes positions within a shard, not only the shard order
    char path[512];
    int d[10], e[10];
    dataloader_init(&dl, td_path(path, "multi_0.bin"), 2, 4, 0, 1, 1, 42, 4000);
    td_read_firsts(&dl, d, 10);
    dataloader_free(&dl);
    dataloader_init(&dl, path, 2, 4, 0, 1, 1, 43, 4000);
    td_read_firsts(&dl, e, 10);
    dataloader_free(&dl);
    CHECK(memcmp(d, e, sizeof(d)) != 0, "one shard: seeds 42 and 43 gave the same position order");
    // every epoch still reads each position of each shard exactly once (no shard has a tail: world 1)
    for (int e = 0; e < 3; e++) {
        int count[3000] = {0};
        for (int i = 0; i < EPOCH; i++) {
            int v = a[e * EPOCH + i];
            CHECK(v % 8 == 0 && v >= 0 && v < 3000, "epoch %d: first token %d is not a position start", e, v);
            if (v >= 0 && v < 3000) count[v]++;
        }
        const int positions[3] = {10, 15, 7};
        for (int v = 0; v < 3000; v += 8) {
            int expect = v % 1000 < 8 * positions[v / 1000];
            CHECK(count[v] == expect, "epoch %d: position token %d read %d times", e, v, count[v]);
        }
    }
    // unshuffled: name order, positions in order
    for (int i = 0; i < EPOCH; i++) {
        int expect = i < 10 ? 8 * i : i < 25 ? 1000 + 8 * (i - 10) : 2000 + 8 * (i - 25);
        CHECK(plain[i] == expect, "unshuffled batch %d starts at %d, expected %d", i, plain[i], expect);
    }
}

// The loader's resume record, written to a file and read back as a checkpoint carries it (caller frees).
static unsigned char *td_record_through_file(const DataLoader *dl, size_t *bytes) {
    *bytes = dataloader_state_bytes(dl);
    unsigned char *buf = (unsigned char *)mallocCheck(*bytes), *back = (unsigned char *)mallocCheck(*bytes);
    dataloader_save_state(dl, buf);
    char path[512];
    FILE *fp = fopenCheck(td_path(path, "state.bin"), "wb");
    fwriteCheck(buf, 1, *bytes, fp);
    fcloseCheck(fp);
    td_register(path);
    fp = fopenCheck(path, "rb");
    freadCheck(back, 1, *bytes, fp, path);
    fcloseCheck(fp);
    free(buf);
    return back;
}

static void test_state_resume(void) {
    char pattern[512];
    td_multi_pattern(pattern);
    // world 2, rank 1, shuffled: the resume point crosses shards and, later, epochs
    const int B = 2, T = 4, K = 40;
    const int skips[4] = {0, 7, 16, 38}; // 15 batches an epoch: resume points in epochs 0, 1 and 2
    for (int k = 0; k < 4; k++) {
        int skip = skips[k];
        DataLoader a, b;
        dataloader_init(&a, pattern, B, T, 1, 2, 1, 9, 4000);
        for (int i = 0; i < skip; i++) dataloader_next_batch(&a);
        // through a file, as a checkpoint would carry it
        size_t bytes;
        unsigned char *r = td_record_through_file(&a, &bytes);
        dataloader_init(&b, pattern, B, T, 1, 2, 1, 9, 4000);
        dataloader_next_batch(&b); // somewhere else first: the load must fully reposition
        dataloader_load_state(&b, r, bytes, "state.bin", 0);
        free(r);
        int same = 1;
        for (int i = 0; i < K; i++) {
            dataloader_next_batch(&a);
            dataloader_next_batch(&b);
            same &= memcmp(a.inputs, b.inputs, B * T * sizeof(int)) == 0;
            same &= memcmp(a.targets, b.targets, B * T * sizeof(int)) == 0;
        }
        CHECK(same, "resuming after %d batches did not replay the same %d batches", skip, K);
        CHECK(b.epoch >= 1, "the replay never crossed an epoch");
        dataloader_free(&a);
        dataloader_free(&b);
    }
}

static void test_glob_order(void) {
    char pattern[512];
    // written out of order; the loader must sort by name; non-matching files are ignored
    td_write_shard("glob_002.bin", 2, 2000, 17);
    td_write_shard("glob_000.bin", 4, 0, 17);
    td_write_shard("glob_010.bin", 2, 3000, 17);
    td_write_shard("glob_001.bin", 2, 1000, 17);
    td_write_shard("globX.bin", 2, 9000, 17);
    DataLoader dl;
    dataloader_init(&dl, td_path(pattern, "glob_*.bin"), 2, 4, 0, 1, 0, 0, 4000);
    CHECK(dl.num_shards == 4, "%d shards matched, expected 4", dl.num_shards);
    CHECK(dataloader_num_tokens(&dl) == 4 * 17, "num_tokens %lld", (long long)dataloader_num_tokens(&dl));
    const int expect[8] = {0, 8, 1000, 1008, 2000, 2008, 3000, 3008};
    for (int i = 0; i < 8; i++) {
        dataloader_next_batch(&dl);
        CHECK(td_batch_is_run(&dl, expect[i]), "batch %d starts at %d, expected %d", i, dl.inputs[0], expect[i]);
    }
    dataloader_free(&dl);
}

static void test_synthetic(void) {
    const int B = 4, T = 64, V = 1000, BT = 256, N = 40;
    DataLoader a, b, c, r1;
    dataloader_init_synthetic(&a, B, T, 0, 2, V, 1234);
    dataloader_init_synthetic(&b, B, T, 0, 2, V, 1234);
    dataloader_init_synthetic(&c, B, T, 0, 2, V, 999);
    dataloader_init_synthetic(&r1, B, T, 1, 2, V, 1234);
    static unsigned char bigram[1000 * 1000];
    memset(bigram, 0, sizeof(bigram));
    int distinct = 0, same_b = 1, same_c = 1, same_r1 = 1, in_range = 1, shifted = 1;
    for (int n = 0; n < N; n++) {
        dataloader_next_batch(&a);
        dataloader_next_batch(&b);
        dataloader_next_batch(&c);
        dataloader_next_batch(&r1);
        same_b &= memcmp(a.inputs, b.inputs, BT * sizeof(int)) == 0;
        same_c &= memcmp(a.inputs, c.inputs, BT * sizeof(int)) == 0;
        same_r1 &= memcmp(a.inputs, r1.inputs, BT * sizeof(int)) == 0;
        for (int i = 0; i < BT; i++) {
            in_range &= a.inputs[i] >= 0 && a.inputs[i] < V && a.targets[i] >= 0 && a.targets[i] < V;
            if (i + 1 < BT) shifted &= a.targets[i] == a.inputs[i + 1];
            int k = a.inputs[i] * V + a.targets[i];
            if (k >= 0 && k < V * V && !bigram[k]) { bigram[k] = 1; distinct++; }
        }
    }
    CHECK(same_b, "same seed gave different synthetic batches");
    CHECK(!same_c, "seeds 1234 and 999 gave the same synthetic batches");
    CHECK(!same_r1, "ranks 0 and 1 read the same synthetic batches");
    CHECK(in_range, "a synthetic token is outside [0, %d)", V);
    CHECK(shifted, "synthetic targets are not the inputs shifted by one");
    // learnable: only within-sentence transitions and sentence-to-sentence joins ever occur
    int limit = SYNTH_SENTENCES * (SYNTH_LEN - 1) + SYNTH_SENTENCES * SYNTH_SENTENCES;
    CHECK(distinct <= limit, "%d distinct bigrams in %d tokens, expected at most %d", distinct, N * BT, limit);
    // resume works the same way
    size_t bytes;
    unsigned char *s = td_record_through_file(&a, &bytes);
    dataloader_next_batch(&a);
    dataloader_load_state(&b, s, bytes, "state.bin", 0);
    free(s);
    dataloader_next_batch(&b);
    CHECK(memcmp(a.inputs, b.inputs, BT * sizeof(int)) == 0, "synthetic resume differs");
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
    dataloader_free(&r1);
}

// ---- bad inputs: each runs in a child, which must exit non-zero naming the file and the problem

typedef struct {
    const char *pattern;
    int B, T, rank, world, vocab, batches, eval;
} TdLoaderArgs;

// A loader made in a child (its warnings go to the parent's err; eval: an evaluation loader, warning)
// that reads `batches` batches.
static void td_loader_child(void *arg) {
    const TdLoaderArgs *a = (const TdLoaderArgs *)arg;
    DataLoader dl;
    if (a->eval) dataloader_init_eval(&dl, a->pattern, a->B, a->T, a->vocab, 1);
    else dataloader_init(&dl, a->pattern, a->B, a->T, a->rank, a->world, 0, 0, a->vocab);
    for (int i = 0; i < a->batches; i++) dataloader_next_batch(&dl);
    dataloader_free(&dl);
}

// Runs fn(arg) in a child; checks it failed and that stderr holds `file` and both phrases.
static void td_expect_fatal(const char *label, void (*fn)(void *), void *arg, const char *file,
                            const char *phrase1, const char *phrase2) {
    char err[4096];
    int status = run_expect_fatal(fn, arg, err, sizeof(err));
    CHECK(status != 0, "%s: exited 0, expected an error", label);
    CHECK(file == NULL || strstr(err, file) != NULL, "%s: message does not name '%s': %s", label, file, err);
    CHECK(strstr(err, phrase1) != NULL, "%s: message lacks '%s': %s", label, phrase1, err);
    CHECK(phrase2 == NULL || strstr(err, phrase2) != NULL, "%s: message lacks '%s': %s", label, phrase2, err);
}

static void td_expect_load_fatal(const char *label, const char *name, int B, int T, int world, int vocab,
                                 int batches, const char *phrase1, const char *phrase2) {
    char path[512];
    TdLoaderArgs a = {.pattern = td_path(path, name), .B = B, .T = T, .world = world, .vocab = vocab,
                      .batches = batches};
    td_expect_fatal(label, td_loader_child, &a, path, phrase1, phrase2);
}

static void test_bad_shards(void) {
    td_expect_load_fatal("missing file", "nope.bin", 2, 4, 1, 1000, 0, "not found", NULL);
    td_expect_load_fatal("empty glob", "nomatch_*.bin", 2, 4, 1, 1000, 0, "no data files match the pattern", NULL);

    td_write_shard_raw("bad_magic.bin", 12345, 1, 100, 2, 0, 100);
    td_expect_load_fatal("wrong magic", "bad_magic.bin", 2, 4, 1, 1000, 0, "bad magic 12345", "expected 20240520");
    td_write_shard_raw("bad_version16.bin", SHARD_MAGIC_U16, 7, 100, 2, 0, 100);
    td_expect_load_fatal("wrong 16-bit version", "bad_version16.bin", 2, 4, 1, 1000, 0, "version 7", "expected 1");
    td_write_shard_raw("bad_version32.bin", SHARD_MAGIC_U32, 1, 100, 4, 0, 100);
    td_expect_load_fatal("wrong 32-bit version", "bad_version32.bin", 2, 4, 1, 1000, 0, "version 1", "expected 7");

    td_write_file("short_header.bin", NULL, "abc", 3);
    td_expect_load_fatal("file shorter than its header", "short_header.bin", 2, 4, 1, 1000, 0, "truncated", "header");
    td_write_shard_raw("truncated.bin", SHARD_MAGIC_U16, 1, 1000, 2, 0, 500);
    td_expect_load_fatal("truncated body", "truncated.bin", 2, 4, 1, 1000, 0, "truncated", "1000 tokens");
    td_write_shard_raw("count_small.bin", SHARD_MAGIC_U32, 7, 100, 4, 0, 200);
    td_expect_load_fatal("header count below file size", "count_small.bin", 2, 4, 1, 1000, 0,
                         "header token count 100 disagrees with the file size", NULL);

    td_write_shard("tiny.bin", 2, 0, 20);
    td_expect_load_fatal("fewer tokens than one step", "tiny.bin", 2, 5, 2, 1000, 0, "has 20 tokens",
                         "B*T*world + 1 = 2*5*2 + 1 = 21");

    // token 57 is out of range; B*T = 10, so the 6th batch (tokens 50..60) reads it
    td_write_shard("bad_token16.bin", 2, 0, 101);
    td_poke_token("bad_token16.bin", 2, 57, 5000);
    td_expect_load_fatal("token >= vocab, 16-bit", "bad_token16.bin", 2, 5, 1, 1000, 10, "token id 5000 at token 57",
                         "vocabulary size 1000");
    td_write_shard("bad_token32.bin", 4, 0, 101);
    td_poke_token("bad_token32.bin", 4, 100, 0xFFFFFFFFu); // the last target; negative as an int
    td_expect_load_fatal("token >= vocab, 32-bit", "bad_token32.bin", 2, 5, 1, 1000, 10,
                         "token id 4294967295 at token 100", NULL);

    // a bad shard among good ones is named
    td_write_shard("mix_a.bin", 2, 0, 50);
    td_write_shard_raw("mix_b.bin", SHARD_MAGIC_U16, 1, 50, 2, 0, 49);
    char path[512], bad[512];
    TdLoaderArgs a = {.pattern = td_path(path, "mix_*.bin"), .B = 2, .T = 4, .world = 1, .vocab = 1000};
    td_expect_fatal("one bad shard of two", td_loader_child, &a, td_path(bad, "mix_b.bin"), "truncated", NULL);
}

// ---- shards too small for one step; evaluation positions; the vocabulary's edge

static void test_small_train_shard_left_out(void) {
    char pattern[512], small[512], err[4096];
    // B*T = 8, world 2: one step needs 2*8 + 1 = 17 tokens
    td_write_shard("small_0.bin", 2, 0, 41);    // 5 positions: 2 steps
    td_write_shard("small_1.bin", 2, 1000, 16); // 1 position: fewer than the ranks, no step
    td_write_shard("small_2.bin", 2, 2000, 33); // 4 positions: 2 steps
    td_path(pattern, "small_*.bin");
    td_path(small, "small_1.bin");
    TdLoaderArgs a = {.pattern = pattern, .B = 2, .T = 4, .world = 2, .vocab = 4000};
    int status = run_expect_fatal(td_loader_child, &a, err, sizeof(err));
    CHECK(status == 0, "a run with a too-small shard among good ones refused: %s", err);
    if (status != 0) return; // the loaders below would exit this process
    CHECK(strstr(err, "warning: data shard") && strstr(err, small) && strstr(err, "has 16 tokens") &&
          strstr(err, "B*T*world + 1 = 2*4*2 + 1 = 17") && strstr(err, "left out"), "rank 0's warning: '%s'", err);
    CHECK(strstr(err, "small_0.bin") == NULL && strstr(err, "small_2.bin") == NULL, "a good shard named: '%s'", err);
    a.rank = 1;
    CHECK(run_expect_fatal(td_loader_child, &a, err, sizeof(err)) == 0 && err[0] == '\0',
          "rank 1 must warn about nothing: '%s'", err);
    // rank 1 reads positions 1 and 3 of small_0, then of small_2, then epoch 1 again
    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 1, 2, 0, 0, 4000);
    // small_1 keeps its place in the shard order (the same at any world size) but gives world 2 no step
    CHECK(dl.num_shards == 3 && dl.batches_per_epoch == 4, "%d shards, %lld batches an epoch; expected 3, 4", dl.num_shards,
          (long long)dl.batches_per_epoch);
    CHECK(dataloader_num_tokens(&dl) == 41 + 33, "num_tokens %lld counts the shard left out", (long long)dataloader_num_tokens(&dl));
    const int expect[5] = {8, 24, 2008, 2024, 8};
    for (int i = 0; i < 5; i++) {
        dataloader_next_batch(&dl);
        CHECK(td_batch_is_run(&dl, expect[i]), "rank 1 batch %d starts at %d, expected %d", i, dl.inputs[0], expect[i]);
    }
    dataloader_free(&dl);
    // one GPU: 16 tokens hold a batch (9 needed), nothing is left out
    a.rank = 0; a.world = 1;
    CHECK(run_expect_fatal(td_loader_child, &a, err, sizeof(err)) == 0 && err[0] == '\0', "world 1 warned: '%s'", err);
    // 8 GPUs need 65 tokens: no shard gives a step, refused naming the data, the largest shard and the need
    char largest[512];
    a.world = 8;
    td_expect_fatal("no shard gives a step", td_loader_child, &a, pattern, "none of the 3 data shards matching",
                    "B*T*world + 1 = 2*4*8 + 1 = 65");
    td_expect_fatal("no shard gives a step: the largest named", td_loader_child, &a, td_path(largest, "small_0.bin"),
                    "has 41", NULL);
}

// The rule the ranks share the first P val positions by, stated here: at step s rank r evaluates
// s*world + r; past P it re-reads (s*world + r) mod P and does not count it.
static void test_eval_positions(void) {
    // the shipped val shard at B*T = 8192 (the 7B and 8B commands) holds 3 positions; on 8 GPUs:
    int own;
    for (int r = 0; r < 8; r++) {
        int64_t p = dataloader_eval_position(3, 8, r, 0, &own);
        CHECK(p == r % 3 && own == (r < 3), "P 3 world 8 rank %d: position %lld own %d", r, (long long)p, own);
    }
    CHECK(dataloader_eval_steps(3, 8) == 1, "P 3 world 8: %lld steps", (long long)dataloader_eval_steps(3, 8));
    // 7 positions on 3 GPUs: rank 0 evaluates 0 3 6, rank 1 1 4 and re-reads 0, rank 2 2 5 and re-reads 1
    const int pos7[3][3] = {{0, 3, 6}, {1, 4, 0}, {2, 5, 1}}, own7[3][3] = {{1, 1, 1}, {1, 1, 0}, {1, 1, 0}};
    CHECK(dataloader_eval_steps(7, 3) == 3, "P 7 world 3: %lld steps", (long long)dataloader_eval_steps(7, 3));
    for (int r = 0; r < 3; r++) {
        for (int s = 0; s < 3; s++) {
            int64_t p = dataloader_eval_position(7, 3, r, s, &own);
            CHECK(p == pos7[r][s] && own == own7[r][s], "P 7 world 3 rank %d step %d: position %lld own %d", r, s, (long long)p, own);
        }
    }
    // every P and world: each position evaluated by exactly one rank; every read is a position that exists;
    // every rank takes the same number of steps, the fewest that reach P
    for (int P = 1; P <= 40; P++) {
        for (int world = 1; world <= 8; world++) {
            int64_t steps = dataloader_eval_steps(P, world);
            CHECK(steps * world >= P && (steps - 1) * world < P, "P %d world %d: %lld steps", P, world, (long long)steps);
            int count[40] = {0}, bad = 0;
            for (int r = 0; r < world; r++) {
                for (int64_t s = 0; s < steps; s++) {
                    int64_t p = dataloader_eval_position(P, world, r, s, &own);
                    if (p < 0 || p >= P) { bad++; continue; }
                    count[p] += own;
                }
            }
            CHECK(bad == 0, "P %d world %d: %d reads outside the positions", P, world, bad);
            for (int p = 0; p < P; p++) CHECK(count[p] == 1, "P %d world %d: position %d counted %d times", P, world, p, count[p]);
        }
    }
}

static void test_eval_read_position(void) {
    char pattern[512], small[512], err[4096];
    td_write_shard("eval_0.bin", 2, 0, 41);    // B*T = 8: positions 0-4
    td_write_shard("eval_1.bin", 2, 1000, 8);  // shorter than one batch (9 tokens): left out
    td_write_shard("eval_2.bin", 4, 2000, 25); // positions 5-7
    td_path(pattern, "eval_*.bin");
    TdLoaderArgs a = {.pattern = pattern, .B = 2, .T = 4, .world = 1, .vocab = 4000, .eval = 1};
    int status = run_expect_fatal(td_loader_child, &a, err, sizeof(err));
    CHECK(status == 0, "evaluation loader refused: %s", err);
    if (status != 0) return; // the loader below would exit this process
    CHECK(strstr(err, td_path(small, "eval_1.bin")) && strstr(err, "has 8 tokens, fewer than one batch needs: B*T + 1 = 2*4 + 1 = 9 tokens; left out"),
          "the evaluation loader's warning: '%s'", err);
    DataLoader dl;
    dataloader_init_eval(&dl, pattern, 2, 4, 4000, 0);
    CHECK(dataloader_positions(&dl) == 8, "%lld positions, expected 8", (long long)dataloader_positions(&dl));
    const int order[7] = {7, 0, 5, 4, 6, 1, 7};
    for (int i = 0; i < 7; i++) {
        int k = order[i], first = k < 5 ? 8 * k : 2000 + 8 * (k - 5);
        dataloader_read_position(&dl, k);
        CHECK(td_batch_is_run(&dl, first), "position %d starts at %d, expected %d", k, dl.inputs[0], first);
    }
    dataloader_free(&dl);
}

typedef struct { const char *path; int vocab; int64_t index; } TdReadArgs;

// Reads one position of an evaluation loader in a child.
static void td_read_position_child(void *arg) {
    const TdReadArgs *a = (const TdReadArgs *)arg;
    DataLoader dl;
    dataloader_init_eval(&dl, a->path, 2, 5, a->vocab, 1);
    dataloader_read_position(&dl, a->index);
    dataloader_free(&dl);
}

// V - 1 is the last id of the vocabulary; V is one embedding row past the end.
static void test_token_at_vocab_edge(void) {
    char path[512], err[4096];
    td_write_shard("edge16.bin", 2, 0, 101); // B*T = 10: 10 batches
    td_poke_token("edge16.bin", 2, 57, 999);
    td_poke_token("edge16.bin", 2, 100, 999); // the last target
    TdLoaderArgs a = {.pattern = td_path(path, "edge16.bin"), .B = 2, .T = 5, .world = 1, .vocab = 1000, .batches = 10};
    CHECK(run_expect_fatal(td_loader_child, &a, err, sizeof(err)) == 0, "id V-1 = 999 refused: %s", err);
    td_write_shard("edge16_v.bin", 2, 0, 101);
    td_poke_token("edge16_v.bin", 2, 57, 1000);
    td_expect_load_fatal("token id V, 16-bit", "edge16_v.bin", 2, 5, 1, 1000, 10, "token id 1000 at token 57",
                         "vocabulary size 1000");
    TdReadArgs r = {td_path(path, "edge16_v.bin"), 1000, 5}; // position 5: tokens 50..60
    td_expect_fatal("token id V, evaluation loader", td_read_position_child, &r, path, "token id 1000 at token 57", NULL);
    // 32-bit, the Llama 3 vocabulary: the shard's last token is 128155 + 100
    td_write_shard("edge32.bin", 4, 128155, 101);
    a.pattern = td_path(path, "edge32.bin");
    a.vocab = 128256;
    CHECK(run_expect_fatal(td_loader_child, &a, err, sizeof(err)) == 0, "id V-1 = 128255 refused: %s", err);
    td_write_shard("edge32_v.bin", 4, 128156, 101);
    td_expect_load_fatal("token id V, 32-bit", "edge32_v.bin", 2, 5, 1, 128256, 10, "token id 128256 at token 100",
                         "vocabulary size 128256");
}

typedef struct {
    const char *pattern; // the resuming run's -i: a glob or a mixture spec
    int B, shuffle, continue_changed;
    uint64_t seed;
    const unsigned char *record;
    size_t bytes;
} TdStateArgs;

static void td_load_state_child(void *arg) {
    const TdStateArgs *a = (const TdStateArgs *)arg;
    DataLoader dl;
    dataloader_init(&dl, a->pattern, a->B, 4, 0, 1, a->shuffle, a->seed, 4000);
    dataloader_load_state(&dl, a->record, a->bytes, "ckpt/state.bin", a->continue_changed);
    dataloader_free(&dl);
}

// The resume record of a loader of `pattern` (B 2, T 4, rank 0 of world 1, shuffled, seed 5) after
// `batches` batches (caller frees).
static unsigned char *td_record_of(const char *pattern, int batches, size_t *bytes) {
    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 1, 5, 4000);
    for (int i = 0; i < batches; i++) dataloader_next_batch(&dl);
    *bytes = dataloader_state_bytes(&dl);
    unsigned char *buf = (unsigned char *)mallocCheck(*bytes);
    dataloader_save_state(&dl, buf);
    dataloader_free(&dl);
    return buf;
}

static void test_bad_state(void) {
    char pattern[512], err[4096];
    td_multi_pattern(pattern);
    size_t bytes;
    unsigned char *rec = td_record_of(pattern, 12, &bytes);
    TdStateArgs a = {pattern, 2, 1, 0, 5, rec, bytes};
    CHECK(run_expect_fatal(td_load_state_child, &a, err, sizeof(err)) == 0, "a matching record was refused: %s", err);
    a.B = 4;
    td_expect_fatal("other geometry", td_load_state_child, &a, "ckpt/state.bin", "batches of B*T = 8 tokens, this run's are 16", NULL);
    a.B = 2; a.seed = 6;
    td_expect_fatal("other seed", td_load_state_child, &a, "ckpt/state.bin", "seed=5", "seed=6");
    a.seed = 5; a.shuffle = 0;
    td_expect_fatal("other shuffle", td_load_state_child, &a, "ckpt/state.bin", "shuffle=1", "shuffle=0");
    a.shuffle = 1; a.bytes = bytes - 8;
    td_expect_fatal("a truncated record", td_load_state_child, &a, "ckpt/state.bin", "corrupt", NULL);
    a.bytes = bytes;
    // words: 7 of the head, then the set's weight, drawn, epoch, shard index (byte 80), offset (byte 88)
    int64_t bad_index = 3, bad_offset = 16; // the shards have 10, 15 and 7 positions
    memcpy(rec + 80, &bad_index, 8);
    td_expect_fatal("a shard index past the shards", td_load_state_child, &a, "ckpt/state.bin", "is corrupt", "shard 3 of 3");
    int64_t index = 0;
    memcpy(rec + 80, &index, 8);
    memcpy(rec + 88, &bad_offset, 8);
    td_expect_fatal("an offset past the shard's positions", td_load_state_child, &a, "ckpt/state.bin", "is corrupt", "offset 16");
    unsigned char junk[40] = {1, 2, 3};
    TdStateArgs j = {pattern, 2, 1, 0, 5, junk, sizeof(junk)};
    td_expect_fatal("not a record", td_load_state_child, &j, "ckpt/state.bin", "not one this build reads", NULL);
    free(rec);
}

// ---- the resume record's shards (issue 40.4): every change of the data refused naming the file,
// or with -data_changed continue the set's next epoch; data moved to another folder resumes

// A loader of `pattern` (as td_record_of's) with the record loaded, continue_changed as given.
static void td_resume(DataLoader *dl, const char *pattern, const unsigned char *rec, size_t bytes, int continue_changed) {
    dataloader_init(dl, pattern, 2, 4, 0, 1, 1, 5, 4000);
    dl->warn = 0; // td_load_state_child's tests read the warnings
    dataloader_load_state(dl, rec, bytes, "ckpt/state.bin", continue_changed);
}

static void td_expect_resume_fatal(const char *label, const char *pattern, const unsigned char *rec, size_t bytes, const char *file,
                                   const char *phrase) {
    TdStateArgs a = {pattern, 2, 1, 0, 5, rec, bytes};
    td_expect_fatal(label, td_load_state_child, &a, file, phrase, "-data_changed continue");
}

static void test_record_changed_data(void) {
    char pattern[512], moved[512], file[512], err[4096];
    td_write_shard("rec_0.bin", 2, 0, 81);    // B*T = 8: 10 positions
    td_write_shard("rec_1.bin", 2, 1000, 121); // 15
    td_write_shard("rec_2.bin", 2, 2000, 57);  // 7
    td_path(pattern, "rec_*.bin");
    size_t bytes;
    unsigned char *rec = td_record_of(pattern, 40, &bytes); // epoch 1
    TdStateArgs same = {pattern, 2, 1, 0, 5, rec, bytes};
    CHECK(run_expect_fatal(td_load_state_child, &same, err, sizeof(err)) == 0 && err[0] == '\0', "the same data refused: %s", err);
    // appended, inserted (between rec_1 and rec_2 in name order), removed, re-cut, changed in place
    td_write_shard("rec_3.bin", 2, 3000, 57);
    td_expect_resume_fatal("a shard appended", pattern, rec, bytes, td_path(file, "rec_3.bin"), "that the checkpoint's data did not (added");
    remove(file);
    td_write_shard("rec_1a.bin", 2, 3000, 57);
    td_expect_resume_fatal("a shard inserted", pattern, rec, bytes, td_path(file, "rec_1a.bin"), "that the checkpoint's data did not (added");
    // continue: the set starts its next epoch (the record's is 1) at its first shard, saying so
    DataLoader dl;
    TdStateArgs cont = same;
    cont.continue_changed = 1;
    CHECK(run_expect_fatal(td_load_state_child, &cont, err, sizeof(err)) == 0 && strstr(err, "warning: -data_changed continue") &&
          strstr(err, file) && strstr(err, "starts its epoch 2 at its first shard"), "-data_changed continue's warning: %s", err);
    td_resume(&dl, pattern, rec, bytes, 1);
    CHECK(dl.epoch == 2 && dl.shard_index == 0 && dl.offset == 0, "-data_changed continue: epoch %lld shard %d offset %lld, want 2 0 0",
          (long long)dl.epoch, dl.shard_index, (long long)dl.offset);
    dataloader_free(&dl);
    remove(file);
    td_path(file, "rec_1.bin");
    rename(file, td_path(moved, "rec_1.off"));
    td_expect_resume_fatal("a shard removed", pattern, rec, bytes, file, "lacks shard");
    rename(moved, file);
    td_write_shard("rec_2.bin", 2, 2000, 65);
    td_expect_resume_fatal("a shard re-cut", pattern, rec, bytes, td_path(file, "rec_2.bin"), "of 1154 bytes, 1138 when the checkpoint");
    td_write_shard("rec_2.bin", 2, 2000, 57);
    td_poke_token("rec_2.bin", 2, 30, 7);
    td_expect_resume_fatal("a shard changed in place", pattern, rec, bytes, file, "changed since the checkpoint was written");
    td_write_shard("rec_2.bin", 2, 2000, 57);
    // the same files in another folder: resumed, the next batches those of the run that saved
    char dir[512], src[512], dst[600], moved_pattern[600];
    CHECK(mkdir(td_path(dir, "moved"), 0700) == 0, "mkdir %s", dir);
    for (int i = 0; i < 3; i++) {
        char name[64], cmd[1200];
        snprintf(name, sizeof(name), "rec_%d.bin", i);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s/%s'", td_path(src, name), dir, name);
        CHECK(system(cmd) == 0, "%s", cmd);
        snprintf(dst, sizeof(dst), "%s/%s", dir, name);
        td_register(dst);
    }
    snprintf(moved_pattern, sizeof(moved_pattern), "%s/rec_*.bin", dir);
    DataLoader straight;
    dataloader_init(&straight, pattern, 2, 4, 0, 1, 1, 5, 4000);
    for (int i = 0; i < 40; i++) dataloader_next_batch(&straight);
    td_resume(&dl, moved_pattern, rec, bytes, 0);
    int same_batches = 1;
    for (int i = 0; i < 30; i++) {
        dataloader_next_batch(&straight);
        dataloader_next_batch(&dl);
        same_batches &= memcmp(straight.inputs, dl.inputs, 8 * sizeof(int)) == 0;
    }
    CHECK(same_batches, "the data moved to another folder: the resumed batches differ");
    dataloader_free(&dl);
    dataloader_free(&straight);
    for (int i = 0; i < 3; i++) { snprintf(dst, sizeof(dst), "%s/rec_%d.bin", dir, i); remove(dst); }
    rmdir(dir);
    free(rec);
    // a checkpoint from before the record (its 48-byte DataLoaderState): refused, saying how to continue
    int64_t old[6] = {3, 1, 2, 5, 8, 1}; // epoch 3, shard 1, step 2, seed 5, B*T*world 8, shuffled
    td_expect_resume_fatal("a state from before the record", pattern, (const unsigned char *)old, sizeof(old), "ckpt/state.bin",
                           "did not record the data's files");
    td_resume(&dl, pattern, (const unsigned char *)old, sizeof(old), 1);
    CHECK(dl.epoch == 4 && dl.shard_index == 0 && dl.offset == 0, "an old state with -data_changed continue: epoch %lld, want 4",
          (long long)dl.epoch);
    dataloader_free(&dl);
}

// A run saved on N GPUs resumed on M (1, 3, 8 each): the record is the same on every rank, and over
// the epoch every position is read at most once; unshuffled, the positions left unread are exactly
// the tails the rule leaves out (the file comment, "Resume"), computed here from the rule.
static void test_resume_other_world(void) {
    char pattern[512];
    td_write_shard("wc_0.bin", 2, 0, 29 * 8 + 1);     // B*T = 8: 29 positions
    td_write_shard("wc_1.bin", 2, 1000, 17 * 8 + 1);  // 17
    td_write_shard("wc_2.bin", 2, 2000, 40 * 8 + 1);  // 40
    td_path(pattern, "wc_*.bin");
    const int P[3] = {29, 17, 40}, worlds[3] = {1, 3, 8};
    for (int shuffle = 0; shuffle <= 1; shuffle++)
    for (int wn = 0; wn < 3; wn++)
    for (int wm = 0; wm < 3; wm++) {
        int N = worlds[wn], M = worlds[wm];
        // save points: inside shard 0, at its end, inside shard 1 (steps of world N)
        const int saves[3] = {1, P[0] / N, P[0] / N + 1};
        for (int sp = 0; sp < 3; sp++) {
            int k = saves[sp], read[3][40] = {{0}}, twice = 0;
            DataLoader ranks[8];
            for (int r = 0; r < N; r++) dataloader_init(&ranks[r], pattern, 2, 4, r, N, shuffle, 5, 4000);
            int order[3]; // epoch 0's shard order
            memcpy(order, ranks[0].shard_order, sizeof(order));
            for (int s = 0; s < k; s++)
                for (int r = 0; r < N; r++) {
                    dataloader_next_batch(&ranks[r]);
                    int sh = ranks[r].inputs[0] / 1000, p = ranks[r].inputs[0] % 1000 / 8;
                    twice += read[sh][p]++ > 0;
                }
            size_t bytes = dataloader_state_bytes(&ranks[0]);
            unsigned char *rec = (unsigned char *)mallocCheck(bytes), *other = (unsigned char *)mallocCheck(bytes);
            dataloader_save_state(&ranks[0], rec);
            int same_record = 1;
            for (int r = 1; r < N; r++) {
                dataloader_save_state(&ranks[r], other);
                same_record &= dataloader_state_bytes(&ranks[r]) == bytes && memcmp(rec, other, bytes) == 0;
            }
            CHECK(same_record, "world %d: the ranks' records differ", N);
            for (int r = 0; r < N; r++) dataloader_free(&ranks[r]);
            for (int r = 0; r < M; r++) {
                dataloader_init(&ranks[r], pattern, 2, 4, r, M, shuffle, 5, 4000);
                dataloader_load_state(&ranks[r], rec, bytes, "ckpt/state.bin", 0);
            }
            while (ranks[0].epoch == 0)
                for (int r = 0; r < M; r++) {
                    dataloader_next_batch(&ranks[r]);
                    int sh = ranks[r].inputs[0] / 1000, p = ranks[r].inputs[0] % 1000 / 8;
                    twice += read[sh][p]++ > 0;
                }
            for (int r = 0; r < M; r++) dataloader_free(&ranks[r]);
            CHECK(twice == 0, "shuffle %d, %d GPUs saved after %d steps, resumed on %d: %d positions read twice in the epoch", shuffle, N, k, M, twice);
            // unread: the shards (in epoch 0's order) finished on N leave P mod N; the one of the save point,
            // from its offset o, (P - o) mod M; the later ones P mod M
            int unread = 0, want = 0, steps = k, i = 0;
            for (int sh = 0; sh < 3; sh++) for (int p = 0; p < P[sh]; p++) unread += read[sh][p] == 0;
            for (; i < 3 && steps >= P[order[i]] / N; i++) { want += P[order[i]] % N; steps -= P[order[i]] / N; }
            if (i < 3) want += (P[order[i]] - steps * N) % M;
            for (i++; i < 3; i++) want += P[order[i]] % M;
            CHECK(unread == want, "shuffle %d, %d GPUs saved after %d steps, resumed on %d: %d positions of the epoch unread, the rule leaves %d",
                  shuffle, N, k, M, unread, want);
            free(rec);
            free(other);
        }
    }
}

// ---- tokenizer

// A table of the given pieces; header_vocab may lie about their number.
static void td_write_tokenizer(const char *name, int magic, int version, int header_vocab, const char *const *pieces,
                               int n) {
    int32_t header[256] = {0};
    header[0] = magic; header[1] = version; header[2] = header_vocab; header[3] = 1;
    unsigned char body[4096];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(pieces[i]);
        body[len++] = (unsigned char)l;
        memcpy(body + len, pieces[i], l);
        len += l;
    }
    td_write_file(name, header, body, len);
}

static const char *const td_pieces[6] = {"", "<s>", "hello", " world", "\n", "\x1b[2Jx\r"};

// stdout of tokenizer_safe_print(piece), captured through a temporary file.
static void td_capture_safe_print(const char *piece, char *out, size_t outlen) {
    char path[512];
    td_path(path, "stdout.txt");
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 1);
    close(fd);
    tokenizer_safe_print(piece);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *fp = fopenCheck(path, "rb");
    size_t n = fread(out, 1, outlen - 1, fp);
    out[n] = '\0';
    fcloseCheck(fp);
    remove(path);
}

static void test_tokenizer_good(void) {
    char path[512];
    td_write_tokenizer("tok.bin", TOKENIZER_MAGIC, TOKENIZER_VERSION, 6, td_pieces, 6);
    Tokenizer t;
    tokenizer_init(&t, td_path(path, "tok.bin"));
    CHECK(t.vocab_size == 6 && t.doc_start_id == 1, "header fields: vocab %d, doc start %d", t.vocab_size, t.doc_start_id);
    for (int i = 0; i < 6; i++) {
        CHECK(strcmp(tokenizer_decode(&t, i), td_pieces[i]) == 0, "token %d decodes to '%s'", i, tokenizer_decode(&t, i));
    }
    CHECK(strcmp(tokenizer_decode(&t, 6), "<bad id 6>") == 0, "id 6 decodes to '%s'", tokenizer_decode(&t, 6));
    CHECK(strcmp(tokenizer_decode(&t, -1), "<bad id -1>") == 0, "id -1 decodes to '%s'", tokenizer_decode(&t, -1));
    char out[64];
    td_capture_safe_print(tokenizer_decode(&t, 5), out, sizeof(out));
    CHECK(strcmp(out, "[2Jx") == 0, "safe print of escape/CR piece gave '%s'", out);
    td_capture_safe_print(" caf\xc3\xa9\n\t!", out, sizeof(out));
    CHECK(strcmp(out, " caf\xc3\xa9\n\t!") == 0, "safe print dropped text, UTF-8 or whitespace: '%s'", out);
    tokenizer_free(&t);
    Tokenizer opt;
    CHECK(tokenizer_init_optional(&opt, td_path(path, "no_tokenizer.bin")) == 0, "missing tokenizer not reported as 0");
    CHECK(strcmp(tokenizer_decode(&opt, 3), "<bad id 3>") == 0, "an absent tokenizer must decode to placeholders");
    tokenizer_free(&opt);
    CHECK(tokenizer_init_optional(&opt, td_path(path, "tok.bin")) == 1 && opt.vocab_size == 6, "optional init of a good table");
    tokenizer_free(&opt);
}

static void td_tokenizer_child(void *arg) {
    Tokenizer t;
    tokenizer_init(&t, (const char *)arg);
    tokenizer_free(&t);
}

static void td_tokenizer_optional_child(void *arg) {
    Tokenizer t;
    tokenizer_init_optional(&t, (const char *)arg);
    tokenizer_free(&t);
}

static void test_tokenizer_bad(void) {
    char path[512];
    td_expect_fatal("missing tokenizer", td_tokenizer_child, (void *)td_path(path, "no_tokenizer.bin"), path,
                    "cannot open", NULL);
    td_write_tokenizer("tok_magic.bin", 20240520, TOKENIZER_VERSION, 6, td_pieces, 6);
    td_expect_fatal("tokenizer magic", td_tokenizer_child, (void *)td_path(path, "tok_magic.bin"), path,
                    "bad magic 20240520", "expected 20240328");
    td_write_tokenizer("tok_version.bin", TOKENIZER_MAGIC, 1, 6, td_pieces, 6);
    td_expect_fatal("tokenizer version", td_tokenizer_child, (void *)td_path(path, "tok_version.bin"), path,
                    "version 1, expected 2", NULL);
    td_write_tokenizer("tok_trunc.bin", TOKENIZER_MAGIC, TOKENIZER_VERSION, 10, td_pieces, 6);
    td_expect_fatal("tokenizer truncated", td_tokenizer_child, (void *)td_path(path, "tok_trunc.bin"), path,
                    "truncated", "token 6 of the 10");
    td_write_file("tok_short.bin", NULL, "xyz", 3);
    td_expect_fatal("tokenizer shorter than its header", td_tokenizer_child, (void *)td_path(path, "tok_short.bin"),
                    path, "truncated", "header");
    td_write_tokenizer("tok_extra.bin", TOKENIZER_MAGIC, TOKENIZER_VERSION, 4, td_pieces, 6);
    td_expect_fatal("tokenizer with bytes past its vocabulary", td_tokenizer_child,
                    (void *)td_path(path, "tok_extra.bin"), path, "bytes after its 4 tokens", NULL);
    // optional means optional only when absent: a broken file is still an error
    td_expect_fatal("optional tokenizer, bad file", td_tokenizer_optional_child, (void *)td_path(path, "tok_magic.bin"),
                    path, "bad magic", NULL);
}

// ---- the real data shipped in dev/data/tinyshakespeare (copies of ../shared/data; tests run from the repository root)

// Reads a whole real shard; checks the header; returns the tokens (caller frees) or NULL if absent.
static uint32_t *td_read_real_shard(const char *path, int magic, int version, int width, int64_t *n) {
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL, "'%s' not found: run the tests from the repository root, which ships it", path);
    if (fp == NULL) return NULL;
    int64_t size = fileSizeCheck(fp);
    int32_t header[256];
    freadCheck(header, sizeof(int32_t), 256, fp, path);
    CHECK(header[0] == magic && header[1] == version, "'%s': magic %d version %d, expected %d %d", path,
          header[0], header[1], magic, version);
    *n = (uint32_t)header[2];
    CHECK(*n > 0 && size == 1024 + *n * width, "'%s': header says %lld tokens, file has %lld bytes", path,
          (long long)*n, (long long)size);
    if (*n <= 0 || size != 1024 + *n * width) { fcloseCheck(fp); return NULL; }
    uint32_t *tokens = (uint32_t *)mallocCheck((size_t)*n * sizeof(uint32_t));
    for (int64_t i = 0; i < *n; i++) {
        tokens[i] = 0;
        freadCheck(&tokens[i], width, 1, fp, path); // little-endian host: the low bytes come first
    }
    fcloseCheck(fp);
    return tokens;
}

static void td_check_real(const char *shard, int magic, int version, int width, const char *tok_path, int V,
                          int doc_start) {
    int64_t n = 0;
    uint32_t *tokens = td_read_real_shard(shard, magic, version, width, &n);
    if (tokens == NULL) return;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += tokens[i] >= (uint32_t)V;
    CHECK(bad == 0, "'%s': %lld tokens >= %d", shard, (long long)bad, V);
    // the loader reads it the same way, every position (a val shard: the evaluation loader, as -j's)
    DataLoader dl;
    dataloader_init_eval(&dl, shard, 4, 64, V, 0);
    int same = 1;
    CHECK(dataloader_positions(&dl) == (n - 1) / 256, "'%s': %lld positions, want %lld", shard, (long long)dataloader_positions(&dl),
          (long long)((n - 1) / 256));
    for (int64_t s = 0; s < dataloader_positions(&dl); s++) {
        dataloader_read_position(&dl, s);
        for (int i = 0; i < 256; i++) {
            same &= dl.inputs[i] == (int)tokens[s * 256 + i] && dl.targets[i] == (int)tokens[s * 256 + i + 1];
        }
    }
    CHECK(same, "'%s': the loader's batches differ from the file's tokens", shard);
    dataloader_free(&dl);
    FILE *fp = fopen(tok_path, "rb");
    CHECK(fp != NULL, "'%s' not found: the tests expect ../shared beside the repository", tok_path);
    if (fp != NULL) {
        fcloseCheck(fp);
        Tokenizer t;
        tokenizer_init(&t, tok_path);
        CHECK(t.vocab_size == V && t.doc_start_id == doc_start, "'%s': vocab %d doc start %d, expected %d %d",
              tok_path, t.vocab_size, t.doc_start_id, V, doc_start);
        char text[8192] = {0};
        for (int i = 0; i < 100 && i < n; i++) strncat(text, tokenizer_decode(&t, (int)tokens[i]), sizeof(text) - strlen(text) - 1);
        size_t len = strlen(text), printable = 0, letters = 0;
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)text[i];
            printable += (ch >= 0x20 && ch != 0x7F) || ch == '\n' || ch == '\t';
            letters += (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == ' ';
        }
        CHECK(len >= 200 && printable >= len * 98 / 100 && letters >= len / 2,
              "'%s' decodes to %zu chars, %zu printable, %zu letters/spaces: %.200s", shard, len, printable, letters, text);
        tokenizer_free(&t);
    }
    free(tokens);
}

static void test_real_llama2(void) {
    td_check_real("dev/data/tinyshakespeare/tinyshakespeare_llama2_val.bin", SHARD_MAGIC_U16, SHARD_VERSION_U16, 2,
                  "dev/data/tinyshakespeare/llama2_tokenizer.bin", 32000, 1);
}

static void test_real_llama3(void) {
    td_check_real("dev/data/tinyshakespeare/tinyshakespeare_llama3_val.bin", SHARD_MAGIC_U32, SHARD_VERSION_U32, 4,
                  "dev/data/tinyshakespeare/llama3_tokenizer.bin", 128256, 128000);
}

// ---- loss masks and mixtures

// The loss mask of a shard of n tokens: byte i = (i * 7 + salt) % 3 != 0 (a pattern no shift of
// itself matches), header fields as given so bad masks can be made.
static unsigned char td_mask_byte(int64_t i, int salt) { return (unsigned char)((i * 7 + salt) % 3 != 0); }

static void td_write_mask_raw(const char *shard_name, int magic, int version, uint32_t header_count, int64_t n, int salt) {
    char name[512];
    snprintf(name, sizeof(name), "%s" MASK_SUFFIX, shard_name);
    int32_t header[256] = {0};
    header[0] = magic; header[1] = version; header[2] = (int32_t)header_count;
    unsigned char *body = (unsigned char *)mallocCheck((size_t)n);
    for (int64_t i = 0; i < n; i++) body[i] = td_mask_byte(i, salt);
    td_write_file(name, header, body, (size_t)n);
    free(body);
}

static void td_write_mask(const char *shard_name, int64_t n, int salt) {
    td_write_mask_raw(shard_name, MASK_MAGIC, MASK_VERSION, (uint32_t)n, n, salt);
}

// Target t of a batch starting at shard token `start` is token start + t + 1; it must be -1 exactly
// where that token's mask byte is 0 (the -1s are all the trainer counts learned targets by).
static int td_batch_mask_ok(const DataLoader *dl, int64_t start, uint32_t base, int salt) {
    int BT = dl->B * dl->T;
    for (int t = 0; t < BT; t++) {
        int want = td_mask_byte(start + t + 1, salt) ? (int)(base + start + t + 1) : -1;
        if (dl->targets[t] != want || dl->inputs[t] != (int)(base + start + t)) return 0;
    }
    return 1;
}

static void test_masks_read(void) {
    char path[512];
    td_write_shard("mask_a.bin", 2, 0, 105);    // B*T = 10: 10 positions
    td_write_mask("mask_a.bin", 105, 1);
    td_write_shard("mask_b.bin", 4, 500, 61);   // 6 positions
    td_write_mask("mask_b.bin", 61, 2);
    DataLoader dl;
    dataloader_init(&dl, td_path(path, "mask_*.bin"), 2, 5, 0, 1, 0, 0, 1000);
    CHECK(dl.masked == 1 && dl.num_shards == 2, "masked %d, %d shards (the .mask files are not shards)", dl.masked, dl.num_shards);
    for (int i = 0; i < 16; i++) {
        dataloader_next_batch(&dl);
        int64_t start = i < 10 ? 10 * i : 10 * (i - 10);
        CHECK(td_batch_mask_ok(&dl, start, i < 10 ? 0 : 500, i < 10 ? 1 : 2), "batch %d: targets do not follow mask byte"
              " start + t + 1 (target[0] %d)", i, dl.targets[0]);
    }
    dataloader_free(&dl);
    // without masks every target is learned
    dataloader_init(&dl, td_path(path, "u16.bin"), 2, 5, 0, 1, 0, 0, 1000);
    dataloader_next_batch(&dl);
    int learned = 0;
    for (int t = 0; t < 10; t++) learned += dl.targets[t] >= 0;
    CHECK(dl.masked == 0 && learned == 10, "no masks: masked %d, %d of 10 targets learned", dl.masked, learned);
    dataloader_free(&dl);
}

typedef struct { const char *pattern; int eval; } TdMaskArgs;

static void td_mask_child(void *arg) {
    const TdMaskArgs *a = (const TdMaskArgs *)arg;
    DataLoader dl;
    if (a->eval) dataloader_init_eval(&dl, a->pattern, 2, 5, 1000, 0);
    else dataloader_init(&dl, a->pattern, 2, 5, 0, 1, 0, 0, 1000);
    for (int i = 0; i < 10; i++) dataloader_next_batch(&dl);
    dataloader_free(&dl);
}

static void td_expect_mask_fatal(const char *label, const char *pattern_name, int eval, const char *file_name,
                                 const char *phrase1, const char *phrase2) {
    char pattern[512], file[512];
    TdMaskArgs a = {td_path(pattern, pattern_name), eval};
    td_expect_fatal(label, td_mask_child, &a, td_path(file, file_name), phrase1, phrase2);
}

static void test_bad_masks(void) {
    // one shard of a set with its mask, one without: refused naming the one without
    td_write_shard("mmix_0.bin", 2, 0, 105);
    td_write_mask("mmix_0.bin", 105, 0);
    td_write_shard("mmix_1.bin", 2, 0, 105);
    td_expect_mask_fatal("a set with and without masks", "mmix_*.bin", 0, "mmix_1.bin.mask", "has no loss mask",
                         "1 of the 2 shards");
    td_write_shard("mcount.bin", 2, 0, 105);
    td_write_mask_raw("mcount.bin", MASK_MAGIC, MASK_VERSION, 104, 104, 0);
    td_expect_mask_fatal("a mask of another token count", "mcount.bin", 0, "mcount.bin.mask", "is for 104 tokens",
                         "has 105");
    td_write_shard("mmagic.bin", 2, 0, 105);
    td_write_mask_raw("mmagic.bin", SHARD_MAGIC_U16, MASK_VERSION, 105, 105, 0);
    td_expect_mask_fatal("a token shard as a mask", "mmagic.bin", 0, "mmagic.bin.mask", "bad magic 20240520", "20261206");
    td_write_shard("mver.bin", 2, 0, 105);
    td_write_mask_raw("mver.bin", MASK_MAGIC, 2, 105, 105, 0);
    td_expect_mask_fatal("another mask version", "mver.bin", 0, "mver.bin.mask", "version 2", NULL);
    td_write_shard("mshort.bin", 2, 0, 105);
    td_write_mask_raw("mshort.bin", MASK_MAGIC, MASK_VERSION, 105, 100, 0);
    td_expect_mask_fatal("a truncated mask", "mshort.bin", 0, "mshort.bin.mask", "disagrees with the file size", NULL);
    td_write_shard("mbyte.bin", 2, 0, 105);
    td_write_mask("mbyte.bin", 105, 0);
    char path[512];
    FILE *fp = fopenCheck(td_path(path, "mbyte.bin.mask"), "r+b");
    fseekCheck(fp, 1024 + 37, SEEK_SET);
    unsigned char two = 2;
    fwriteCheck(&two, 1, 1, fp);
    fcloseCheck(fp);
    td_expect_mask_fatal("a mask byte 2", "mbyte.bin", 0, "mbyte.bin.mask", "byte 2 at token 37", "neither 0 nor 1");
}

// The evaluation loader reads masks as the training loader does: at every position the targets are
// -1 exactly where their mask bytes are 0 (the trainer's val loss is then over the learned ones).
static void test_eval_masks_read(void) {
    char path[512];
    td_write_shard("emask.bin", 2, 0, 105); // B*T = 10: 10 positions
    td_write_mask("emask.bin", 105, 1);
    DataLoader dl;
    dataloader_init_eval(&dl, td_path(path, "emask.bin"), 2, 5, 1000, 0);
    CHECK(dl.masked == 1, "the evaluation loader of a masked shard: masked %d", dl.masked);
    for (int p = 9; p >= 0; p--) { // out of order, as ranks read their positions
        dataloader_read_position(&dl, p);
        CHECK(td_batch_mask_ok(&dl, 10 * p, 0, 1), "position %d: targets do not follow mask byte start + t + 1 (target[0] %d)", p,
              dl.targets[0]);
    }
    dataloader_free(&dl);
}

// Mixture sets: A = two shards (tokens 0.. and 1000..), B = one (2000..), C = one (3000..), B*T = 8.
// A batch's set is its first token / 1000 (0 and 1 are A). td_mixture writes the shards, the sets'
// patterns and the spec with weights wa, wb, wc, which it returns.
typedef struct { char a[512], b[512], c[512], spec[2048]; } TdMixture;

static const char *td_mixture(TdMixture *m, double wa, double wb, double wc) {
    td_write_shard("mixa_0.bin", 2, 0, 161);    // 20 positions
    td_write_shard("mixa_1.bin", 2, 1000, 81);  // 10
    td_write_shard("mixb_0.bin", 2, 2000, 121); // 15
    td_write_shard("mixc_0.bin", 2, 3000, 57);  // 7
    td_path(m->a, "mixa_*.bin");
    td_path(m->b, "mixb_*.bin");
    td_path(m->c, "mixc_*.bin");
    snprintf(m->spec, sizeof(m->spec), "%s:%g,%s:%g,%s:%g", m->a, wa, m->b, wb, m->c, wc);
    return m->spec;
}

static int td_set_of(const DataLoader *dl) {
    int k = dl->inputs[0] / 1000;
    return k <= 1 ? 0 : k - 1;
}

// Over n draws a set of weight w is drawn Binomial(n, w) times: the test accepts |count - n w| up to
// 5 standard deviations, sqrt(n w (1 - w)) (a fair sampler fails it with probability below 6e-7).
static void test_mixture_proportions(void) {
    TdMixture mix;
    const double w[3] = {0.5, 0.3, 0.2};
    const char *spec = td_mixture(&mix, 5, 3, 2); // weights need not sum to 1
    const int n = 20000;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        DataLoader dl;
        dataloader_init(&dl, spec, 2, 4, 0, 1, 1, seed, 4000);
        int count[3] = {0};
        for (int i = 0; i < n; i++) {
            dataloader_next_batch(&dl);
            int k = td_set_of(&dl);
            if (k >= 0 && k < 3) count[k]++;
        }
        for (int k = 0; k < 3; k++) {
            double sd = sqrt(n * w[k] * (1 - w[k]));
            CHECK(fabs(count[k] - n * w[k]) <= 5 * sd, "seed %llu: set %d drawn %d of %d times, weight %.2f wants %.0f +- %.0f",
                  (unsigned long long)seed, k, count[k], n, w[k], n * w[k], 5 * sd);
            CHECK(dl.drawn[k] == count[k], "seed %llu: the loader counts %lld draws of set %d, its batches say %d",
                  (unsigned long long)seed, (long long)dl.drawn[k], k, count[k]);
        }
        CHECK(dl.draws == n, "draws %lld", (long long)dl.draws);
        char report[1024];
        dataloader_mixture_report(&dl, report, sizeof(report));
        char want[64];
        snprintf(want, sizeof(want), "%d of %d batches (%.4f, weight 0.5000)", count[0], n, (double)count[0] / n);
        CHECK(strstr(report, want) != NULL, "the report '%s' lacks '%s'", report, want);
        dataloader_free(&dl);
    }
    // a weight of 0: never drawn
    spec = td_mixture(&mix, 1, 0, 1);
    DataLoader dl;
    dataloader_init(&dl, spec, 2, 4, 0, 1, 0, 4, 4000);
    int drawn_b = 0;
    for (int i = 0; i < 2000; i++) { dataloader_next_batch(&dl); drawn_b += td_set_of(&dl) == 1; }
    CHECK(drawn_b == 0, "a set of weight 0 was drawn %d times", drawn_b);
    dataloader_free(&dl);
}

// The same seed gives the same batches; another seed other picks; every rank picks the same set at
// every draw and the ranks' batches within a set are disjoint.
static void test_mixture_deterministic(void) {
    TdMixture mix;
    const char *spec = td_mixture(&mix, 0.6, 0.25, 0.15);
    const int n = 400, world = 2;
    int first[2][400], other[400], ranks[2][400];
    for (int run = 0; run < 2; run++) {
        DataLoader dl;
        dataloader_init(&dl, spec, 2, 4, 0, 1, 1, 11, 4000);
        td_read_firsts(&dl, first[run], n);
        dataloader_free(&dl);
    }
    CHECK(memcmp(first[0], first[1], sizeof(first[0])) == 0, "two loaders of one seed read different batches");
    DataLoader dl;
    dataloader_init(&dl, spec, 2, 4, 0, 1, 1, 12, 4000);
    td_read_firsts(&dl, other, n);
    dataloader_free(&dl);
    int differ = 0;
    for (int i = 0; i < n; i++) differ += (first[0][i] / 1000 > 1 ? first[0][i] / 1000 : 0) != (other[i] / 1000 > 1 ? other[i] / 1000 : 0);
    CHECK(differ > n / 4, "seeds 11 and 12 picked the same sets at %d of %d draws", n - differ, n);
    for (int r = 0; r < world; r++) {
        dataloader_init(&dl, spec, 2, 4, r, world, 1, 11, 4000);
        td_read_firsts(&dl, ranks[r], n);
        dataloader_free(&dl);
    }
    int same_set = 1, same_batch = 0;
    for (int i = 0; i < n; i++) {
        int k0 = ranks[0][i] / 1000, k1 = ranks[1][i] / 1000;
        same_set &= (k0 <= 1 ? 0 : k0) == (k1 <= 1 ? 0 : k1);
        same_batch += ranks[0][i] == ranks[1][i];
    }
    CHECK(same_set, "the ranks drew from different sets at one draw");
    CHECK(same_batch == 0, "the ranks read the same batch %d times", same_batch);
}

// State saved after k draws (through a file, as a checkpoint carries it), restored into a new
// loader: the next batches (targets with their masks included) equal the uninterrupted run's.
static void test_mixture_resume(void) {
    TdMixture mix;
    const char *spec = td_mixture(&mix, 0.5, 0.3, 0.2);
    td_write_mask("mixb_0.bin", 121, 1); // one set with masks, the others without
    const int B = 2, T = 4, K = 60;
    const int skips[4] = {0, 5, 37, 150}; // the last crosses every set's epoch
    for (int i = 0; i < 4; i++) {
        DataLoader a, b;
        dataloader_init(&a, spec, B, T, 1, 2, 1, 21, 4000);
        CHECK(a.masked && a.sets[1].masked && !a.sets[0].masked, "the mixture's masks: %d %d %d", a.masked, a.sets[1].masked,
              a.sets[0].masked);
        for (int s = 0; s < skips[i]; s++) dataloader_next_batch(&a);
        size_t bytes;
        unsigned char *back = td_record_through_file(&a, &bytes);
        // docs/formats.md: 7 words, then per set 6 words and per shard 3 words and its name (NUL-padded to 8)
        size_t want = 7 * 8;
        for (int k = 0; k < 3; k++) {
            want += 6 * 8;
            for (int i = 0; i < a.sets[k].num_shards; i++) want += 3 * 8 + (strlen(a.sets[k].shards[i].path) + 8) / 8 * 8;
        }
        CHECK(bytes == want, "record bytes %zu, the format gives %zu", bytes, want);
        dataloader_init(&b, spec, B, T, 1, 2, 1, 21, 4000);
        for (int s = 0; s < 3; s++) dataloader_next_batch(&b); // elsewhere first: the load must reposition fully
        dataloader_load_state(&b, back, bytes, "mixstate.bin", 0);
        int same = 1;
        for (int s = 0; s < K; s++) {
            dataloader_next_batch(&a);
            dataloader_next_batch(&b);
            same &= memcmp(a.inputs, b.inputs, B * T * sizeof(int)) == 0 && memcmp(a.targets, b.targets, B * T * sizeof(int)) == 0;
        }
        CHECK(same, "resuming after %d draws did not replay the same %d batches", skips[i], K);
        for (int k = 0; k < 3; k++) CHECK(a.drawn[k] == b.drawn[k], "resumed after %d: set %d drawn %lld vs %lld", skips[i], k,
                                          (long long)b.drawn[k], (long long)a.drawn[k]);
        free(back);
        dataloader_free(&a);
        dataloader_free(&b);
    }
    char path[512];
    remove(td_path(path, "mixb_0.bin.mask"));
}

typedef struct { const char *spec, *saved_spec; } TdSpecArgs;

static void td_spec_child(void *arg) {
    const TdSpecArgs *a = (const TdSpecArgs *)arg;
    DataLoader dl;
    if (a->saved_spec) { // a state saved under one spec, resumed under another
        DataLoader saved;
        dataloader_init(&saved, a->saved_spec, 2, 4, 0, 1, 0, 0, 4000);
        unsigned char buf[4096];
        size_t bytes = dataloader_state_bytes(&saved);
        if (bytes > sizeof(buf)) FATAL("raise td_spec_child's buffer to %zu bytes", bytes);
        dataloader_save_state(&saved, buf);
        dataloader_init(&dl, a->spec, 2, 4, 0, 1, 0, 0, 4000);
        dataloader_load_state(&dl, buf, bytes, "ckpt/state.bin", 0);
        return;
    }
    dataloader_init(&dl, a->spec, 2, 4, 0, 1, 0, 0, 4000);
    dataloader_free(&dl);
}

static void test_mixture_bad_specs(void) {
    TdMixture mix, other_mix;
    char spec[2200];
    const char *good = td_mixture(&mix, 1, 1, 1);
    struct { const char *fmt, *phrase; } cases[] = {
        {"%s:0.7x,%s:0.3", "the weight '0.7x' of set"},
        {"%s:,%s:0.3", "the weight '' of set"},
        {"%s: 1,%s:0.3", "is not a number"},
        {"%s:-0.5,%s:1", "the weight '-0.5' of set"},
        {"%s:nan,%s:1", "is not finite"},
        {"%s:0,%s:0", "the weights sum to 0"},
        {"%s,%s:1", "has no weight"},
        {"%s:1,,%s:1", "set 2 is empty"},
        {"%s:1,%s_nomatch:1", "no data files match set 2's pattern"},
    };
    char err[4096];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(spec, sizeof(spec), cases[i].fmt, mix.a, mix.b);
        TdSpecArgs args = {spec, NULL};
        int status = run_expect_fatal(td_spec_child, &args, err, sizeof(err));
        CHECK(status != 0, "'%s': accepted", spec);
        CHECK(strstr(err, "-i mixture '") && strstr(err, spec), "'%s': the message does not name the spec: %s", spec, err);
        CHECK(strstr(err, cases[i].phrase) != NULL, "'%s': the message lacks '%s': %s", spec, cases[i].phrase, err);
    }
    TdSpecArgs ok = {good, NULL};
    CHECK(run_expect_fatal(td_spec_child, &ok, err, sizeof(err)) == 0, "a good spec refused: %s", err);
    char two[2200];
    const char *other = td_mixture(&other_mix, 1, 2, 1);
    TdSpecArgs reweighted = {other, good};
    td_expect_fatal("state of other weights", td_spec_child, &reweighted, NULL, "weight 1 for mixture set 2", "weight 2");
    snprintf(two, sizeof(two), "%s:1,%s:1", mix.a, mix.b);
    TdSpecArgs fewer = {two, good};
    td_expect_fatal("state of another number of sets", td_spec_child, &fewer, NULL, "a mixture of 3 sets", "a mixture of 2");
}

// Mixture records: swapped sets refused naming a file; a corrupt pick counter refused; another
// number of sets refused, or with continue resumed (a new set from its start).
static void test_record_mixture(void) {
    TdMixture mix;
    char swapped[2200], err[4096];
    const char *spec = td_mixture(&mix, 1, 1, 1);
    size_t bytes;
    unsigned char *rec = td_record_of(spec, 30, &bytes);
    snprintf(swapped, sizeof(swapped), "%s:1,%s:1,%s:1", mix.b, mix.a, mix.c);
    char file[512];
    td_expect_resume_fatal("mixture sets swapped", swapped, rec, bytes, td_path(file, "mixb_0.bin"), "mixture set 1");
    // the pick counter (word 6) no longer the sum of the sets' draws
    unsigned char *bad = (unsigned char *)mallocCheck(bytes);
    memcpy(bad, rec, bytes);
    int64_t draws;
    memcpy(&draws, bad + 48, 8);
    draws++;
    memcpy(bad + 48, &draws, 8);
    TdStateArgs corrupt = {spec, 2, 1, 1, 5, bad, bytes}; // not even -data_changed continue takes it
    td_expect_fatal("a mixture's draws not its sets' sum", td_load_state_child, &corrupt, "ckpt/state.bin", "the mixture drew 31 batches",
                    "its sets 30");
    free(bad);
    char two[2200];
    snprintf(two, sizeof(two), "%s:1,%s:1", mix.a, mix.b);
    TdStateArgs fewer = {two, 2, 1, 0, 5, rec, bytes};
    td_expect_fatal("another number of sets", td_load_state_child, &fewer, "ckpt/state.bin", "a mixture of 3 sets", "a mixture of 2");
    fewer.continue_changed = 1;
    CHECK(run_expect_fatal(td_load_state_child, &fewer, err, sizeof(err)) == 0, "another number of sets with continue: %s", err);
    free(rec);
}

typedef struct { const char *spec, *first_pattern; } TdColonArgs;

// A loader of a->spec in a child: exits 3 unless its first set is a->first_pattern of weight 3 and the
// second of weight 1.
static void td_colon_child(void *arg) {
    const TdColonArgs *a = (const TdColonArgs *)arg;
    DataLoader dl;
    dataloader_init(&dl, a->spec, 2, 4, 0, 1, 0, 0, 4000);
    if (dl.num_sets != 2 || strcmp(dl.set_patterns[0], a->first_pattern) != 0 || dl.weights[0] != 3.0 || dl.weights[1] != 1.0) {
        fprintf(stderr, "%d sets, the first '%s' of weight %g\n", dl.num_sets, dl.set_patterns[0], dl.weights[0]);
        exit(3);
    }
    dataloader_free(&dl);
}

// A pattern may hold a ':' (a folder's name here): the weight is after a set's last ':'.
static void test_mixture_colon_in_pattern(void) {
    char dir[512], a[600], b[512], spec[1300], err[4096];
    CHECK(mkdir(td_path(dir, "col:dir"), 0700) == 0, "mkdir %s", dir);
    td_write_shard("col:dir/ca_0.bin", 2, 0, 81);
    td_write_shard("cb_0.bin", 2, 2000, 81);
    snprintf(a, sizeof(a), "%s/ca_*.bin", dir);
    snprintf(spec, sizeof(spec), "%s:3,%s:1", a, td_path(b, "cb_*.bin"));
    TdColonArgs args = {spec, a};
    int status = run_expect_fatal(td_colon_child, &args, err, sizeof(err));
    CHECK(status == 0, "'%s': exit %d: %s", spec, status, err);
    char path[512];
    remove(td_path(path, "col:dir/ca_0.bin"));
    rmdir(dir);
}

// Each set is shuffled with its own seed (seed + its index): two sets of the same shape read their
// positions in different orders.
static void test_mixture_sets_own_order(void) {
    char spec[1200], a[512], b[512];
    td_write_shard("oa_0.bin", 2, 0, 161);    // B*T = 8: 20 positions each
    td_write_shard("ob_0.bin", 2, 1000, 161);
    snprintf(spec, sizeof(spec), "%s:1,%s:1", td_path(a, "oa_*.bin"), td_path(b, "ob_*.bin"));
    DataLoader dl;
    dataloader_init(&dl, spec, 2, 4, 0, 1, 1, 7, 4000);
    int order[2][20];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 20; i++) { dataloader_next_batch(&dl.sets[k]); order[k][i] = dl.sets[k].inputs[0] % 1000 / 8; }
    CHECK(memcmp(order[0], order[1], sizeof(order[0])) != 0, "two sets of the same shape read their 20 positions in the same order");
    dataloader_free(&dl);
}

// A file in two sets (overlapping patterns, the same pattern twice, one file under two names) is
// refused naming the shards.
static void test_mixture_overlap(void) {
    TdMixture mix;
    char a1[512], link_path[512], spec[2200];
    td_mixture(&mix, 1, 1, 1);
    td_path(a1, "mixa_1.bin");
    snprintf(spec, sizeof(spec), "%s:1,%s:1", mix.a, a1);
    TdSpecArgs overlap = {spec, NULL};
    td_expect_fatal("overlapping sets", td_spec_child, &overlap, a1, "1 shard is in two sets", "(set 1) is");
    char twice[2200];
    snprintf(twice, sizeof(twice), "%s:1,%s:2", mix.b, mix.b);
    TdSpecArgs dup = {twice, NULL};
    char b0[512];
    td_expect_fatal("one set twice", td_spec_child, &dup, td_path(b0, "mixb_0.bin"), "1 shard is in two sets", "(set 2)");
    td_path(link_path, "mixlink.bin");
    remove(link_path);
    CHECK(link(b0, link_path) == 0, "link %s", link_path);
    td_register(link_path);
    char linked[2200];
    snprintf(linked, sizeof(linked), "%s:1,%s:1", mix.b, link_path);
    TdSpecArgs same_file = {linked, NULL};
    td_expect_fatal("one file under two names", td_spec_child, &same_file, link_path, "1 shard is in two sets", b0);
}

// ---- shard records (issue 40.10, 40.13): the tokenizer fingerprint of llama_fp8/formats.py's files
// (dev/test/fixtures/data, made by dev/reference/make_data_fixture.py) is llmc/tokenizer.h's

#define TD_FIXTURE "dev/test/fixtures/data/"

typedef struct { const char *train, *val, *table; int V; } TdRunArgs;

// dataloader_check_run on loaders of a->train (a glob or a mixture) and a->val (NULL: none), with
// a->table's fingerprint (NULL: none), warning.
static void td_check_run_child(void *arg) {
    const TdRunArgs *a = (const TdRunArgs *)arg;
    DataLoader train, val;
    dataloader_init(&train, a->train, 2, 4, 0, 1, 0, 0, 4000);
    if (a->val) dataloader_init_eval(&val, a->val, 2, 4, 4000, 0);
    uint32_t fingerprint = 0;
    if (a->table) {
        Tokenizer t;
        tokenizer_init(&t, a->table);
        fingerprint = tokenizer_fingerprint(&t, a->table);
        tokenizer_free(&t);
    }
    dataloader_check_run(&train, a->val ? &val : NULL, a->table, fingerprint, a->V, 1);
}

// tokenizer_fingerprint of the table at `arg`, which exits if the table's recorded one differs.
static void td_fingerprint_child(void *arg) {
    Tokenizer t;
    tokenizer_init(&t, (const char *)arg);
    tokenizer_fingerprint(&t, (const char *)arg);
    tokenizer_free(&t);
}

static void test_shard_records(void) {
    const char *tables[3] = {TD_FIXTURE "tok.bin", TD_FIXTURE "tok_padded.bin", TD_FIXTURE "other_tok.bin"};
    char err[4096];
    for (int i = 0; i < 3; i++) {
        int status = run_expect_fatal(td_fingerprint_child, (void *)tables[i], err, sizeof(err));
        CHECK(status == 0, "%s: the C fingerprint is not the one formats.py recorded: %s", tables[i], err);
        if (status != 0) return; // the calls below would exit this process
    }
    Tokenizer t;
    tokenizer_init(&t, TD_FIXTURE "tok.bin"); // tokenizer_fingerprint exits if the Python-recorded one differs
    uint32_t fp = tokenizer_fingerprint(&t, TD_FIXTURE "tok.bin");
    CHECK(t.recorded && fp == t.fingerprint_recorded, "tok.bin: recorded %d, fingerprint %08x, Python's %08x", t.recorded, fp, t.fingerprint_recorded);
    tokenizer_free(&t);
    tokenizer_init(&t, TD_FIXTURE "tok_padded.bin");
    CHECK(t.vocab_size == 320 && tokenizer_fingerprint(&t, TD_FIXTURE "tok_padded.bin") == fp, "the table padded with 20 empty pieces:"
          " fingerprint %08x, unpadded %08x", tokenizer_fingerprint(&t, TD_FIXTURE "tok_padded.bin"), fp);
    tokenizer_free(&t);
    tokenizer_init(&t, TD_FIXTURE "other_tok.bin");
    CHECK(tokenizer_fingerprint(&t, TD_FIXTURE "other_tok.bin") != fp, "one byte of piece 150 changed: the same fingerprint %08x", fp);
    tokenizer_free(&t);
    DataLoader dl;
    dataloader_init(&dl, TD_FIXTURE "train_000.bin", 2, 4, 0, 1, 0, 0, 300);
    CHECK(dl.shards[0].role == SHARD_ROLE_TRAIN && dl.shards[0].tok_vocab == 300 && dl.shards[0].tokenizer == fp,
          "train_000.bin's record: role %d, %d tokens, fingerprint %08x (the table's %08x)", dl.shards[0].role, dl.shards[0].tok_vocab,
          dl.shards[0].tokenizer, fp);
    dataloader_free(&dl);
    // a table changed after it was written: refused naming it
    char path[512], cmd[1200];
    snprintf(cmd, sizeof(cmd), "cp " TD_FIXTURE "tok.bin '%s'", td_path(path, "edited_tok.bin"));
    CHECK(system(cmd) == 0, "%s", cmd);
    td_register(path);
    FILE *f = fopenCheck(path, "r+b");
    fseekCheck(f, 1024 + 2, SEEK_SET); // piece 1's byte (' '), after the lengths of piece 0 (empty) and piece 1
    fputc('!', f);
    fcloseCheck(f);
    TdRunArgs edited = {TD_FIXTURE "train_000.bin", NULL, path, 300};
    td_expect_fatal("an edited decode table", td_check_run_child, &edited, path, "records tokenizer fingerprint", "changed after it was written");
}

static void test_run_checks(void) {
    char err[4096];
    TdRunArgs good = {TD_FIXTURE "train_000.bin", TD_FIXTURE "val.bin", TD_FIXTURE "tok.bin", 300};
    CHECK(run_expect_fatal(td_check_run_child, &good, err, sizeof(err)) == 0 && err[0] == '\0', "the fixture's run: %s", err);
    good.table = TD_FIXTURE "tok_padded.bin";
    good.V = 320;
    CHECK(run_expect_fatal(td_check_run_child, &good, err, sizeof(err)) == 0, "with the padded table and V 320: %s", err);
    TdRunArgs other_table = {TD_FIXTURE "train_000.bin", NULL, TD_FIXTURE "other_tok.bin", 300};
    td_expect_fatal("shards of another tokenizer than -tok", td_check_run_child, &other_table, TD_FIXTURE "train_000.bin", "another tokenizer",
                    TD_FIXTURE "other_tok.bin");
    TdRunArgs other_val = {TD_FIXTURE "train_000.bin", TD_FIXTURE "other_000.bin", NULL, 300};
    td_expect_fatal("val data of another tokenizer (no table)", td_check_run_child, &other_val, TD_FIXTURE "other_000.bin", "another tokenizer",
                    TD_FIXTURE "train_000.bin");
    TdRunArgs mixed = {TD_FIXTURE "train_000.bin:1," TD_FIXTURE "other_000.bin:1", NULL, NULL, 300};
    td_expect_fatal("mixture sets of two tokenizers", td_check_run_child, &mixed, TD_FIXTURE "other_000.bin", "another tokenizer", NULL);
    TdRunArgs small_model = {TD_FIXTURE "train_000.bin", NULL, NULL, 299};
    td_expect_fatal("a tokenizer larger than the model", td_check_run_child, &small_model, TD_FIXTURE "train_000.bin", "tokenizer of 300 tokens",
                    "vocabulary of 299");
    // a val shard or a decode table in the training data
    TdRunArgs val_in_train = {TD_FIXTURE "[tv][ra]*.bin", NULL, NULL, 300}; // train_000.bin and val.bin
    td_expect_fatal("a val shard in the training data", td_check_run_child, &val_in_train, TD_FIXTURE "val.bin", "is a val shard", NULL);
    TdRunArgs table_in_train = {TD_FIXTURE "t*.bin", NULL, NULL, 300};
    td_expect_fatal("a decode table in the training data", td_check_run_child, &table_in_train, TD_FIXTURE "tok.bin", "is a tokenizer decode table", NULL);
    // llm.c's shards (no record): the -j file among the training data refused; one warning for them all
    char train[512], val[512];
    td_write_shard("jv_0.bin", 2, 0, 81);
    td_write_shard("jv_1.bin", 2, 1000, 81);
    td_write_shard("jw_0.bin", 2, 2000, 81);
    TdRunArgs j_in_i = {td_path(train, "jv_*.bin"), td_path(val, "jv_1.bin"), NULL, 4000};
    td_expect_fatal("the -j shard in -i", td_check_run_child, &j_in_i, val, "the training data (-i) holds the val shard", NULL);
    TdRunArgs plain = {train, td_path(val, "jw_0.bin"), NULL, 4000};
    CHECK(run_expect_fatal(td_check_run_child, &plain, err, sizeof(err)) == 0, "llm.c's shards refused: %s", err);
    int lines = 0;
    for (const char *c = err; *c; c++) lines += *c == '\n';
    CHECK(lines == 1 && strstr(err, "warning: 3 data shards record no tokenizer"), "llm.c's shards: want one warning for the 3, got: %s", err);
}

static void td_tokenizer_flag_child(void *arg) {
    Tokenizer t;
    if (tokenizer_init_flag(&t, (const char *)arg, "dev/data/no_such_default.bin")) tokenizer_free(&t);
}

// -tok: a missing default table is no table (samples print ids); '' is none; any other missing path is refused.
static void test_tokenizer_flag(void) {
    char path[512], err[4096];
    Tokenizer t;
    CHECK(tokenizer_init_flag(&t, "dev/data/no_such_default.bin", "dev/data/no_such_default.bin") == 0, "the default table, missing: read");
    CHECK(tokenizer_init_flag(&t, "", "dev/data/no_such_default.bin") == 0, "-tok '': a table read");
    CHECK(run_expect_fatal(td_tokenizer_flag_child, (void *)TD_FIXTURE "tok.bin", err, sizeof(err)) == 0, "an existing -tok refused: %s", err);
    td_expect_fatal("-tok naming a missing file", td_tokenizer_flag_child, (void *)td_path(path, "no_table.bin"), path, "-tok",
                    "no such decode table");
}

// FATAL's line in one write (ranks failing together must not interleave mid-line): the child's stderr is a
// SOCK_SEQPACKET socket, which keeps each write a record of its own, so the first record must be the line.
static void fatal_in_child(const char *path) {
    FATAL("the disk of '%s' has %d bytes free, the checkpoint needs %s: not writing it", path, 12, "4.6 EB");
}
static void test_fatal_one_write(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0, "socketpair: %s", strerror(errno));
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        dup2(sv[1], 2);
        fatal_in_child("/data/run");
    }
    close(sv[1]);
    char rec[1024];
    ssize_t n = recv(sv[0], rec, sizeof(rec) - 1, 0);
    rec[n > 0 ? n : 0] = '\0';
    close(sv[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const char *want = "the disk of '/data/run' has 12 bytes free, the checkpoint needs 4.6 EB: not writing it\n";
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "FATAL's exit status: %d", status);
    CHECK(strncmp(rec, "error (", 7) == 0 && strstr(rec, "): ") && strlen(rec) > strlen(want) &&
          strcmp(rec + strlen(rec) - strlen(want), want) == 0,
          "FATAL's first write is not the whole line: '%s'", rec);
}

static void run_data_tests(void) {
    strcpy(g_td_dir, "/tmp/test_data_XXXXXX");
    if (mkdtemp(g_td_dir) == NULL) FATAL("mkdtemp failed: %s", strerror(errno));
    run_test("data: 16-bit shard, exact batches and epochs", test_shard_16bit_exact_batches);
    run_test("data: 32-bit shard, exact batches", test_shard_32bit_exact_batches);
    run_test("data: ranks read disjoint positions covering the shard", test_ranks_disjoint);
    run_test("data: shuffle is deterministic per seed, a permutation per epoch", test_shuffle_deterministic);
    run_test("data: state save/restore replays the same batches", test_state_resume);
    run_test("data: glob matches are read in name order", test_glob_order);
    run_test("data: synthetic corpus is deterministic and learnable", test_synthetic);
    run_test("data: bad shards exit naming the file and the problem", test_bad_shards);
    run_test("data: mismatched resume state is refused", test_bad_state);
    run_test("data: a shard too small for one step is left out with a warning; none left is refused", test_small_train_shard_left_out);
    run_test("data: val positions shared by the ranks, each evaluated once, every rank the same steps", test_eval_positions);
    run_test("data: evaluation loader numbers positions across shards, reads any", test_eval_read_position);
    run_test("data: token id V-1 accepted, V refused naming the shard and position", test_token_at_vocab_edge);
    run_test("tokenizer: decode table, placeholders, safe print, optional", test_tokenizer_good);
    run_test("tokenizer: bad tables exit naming the file and the problem", test_tokenizer_bad);
    run_test("errors: FATAL writes its whole line at once (ranks failing together do not interleave)", test_fatal_one_write);
    run_test("data: real TinyShakespeare, Llama 2 (16-bit)", test_real_llama2);
    run_test("data: real TinyShakespeare, Llama 3 (32-bit)", test_real_llama3);
    run_test("masks: target t learned (not -1) iff mask byte start + t + 1 is 1", test_masks_read);
    run_test("masks: a set with and without, other token count, bad header or byte: refused naming the file", test_bad_masks);
    run_test("masks: the evaluation loader reads them too, at every position", test_eval_masks_read);
    run_test("mixture: realized proportions within 5 binomial sd over 20000 draws; weight 0 never drawn", test_mixture_proportions);
    run_test("mixture: deterministic per seed; every rank the same set, disjoint batches", test_mixture_deterministic);
    run_test("mixture: state saved mid-mixture and restored replays the same batches", test_mixture_resume);
    run_test("mixture: bad specs and another run's state refused, naming the spec", test_mixture_bad_specs);
    run_test("mixture: a pattern holding ':' (a folder's name) takes the weight after the last ':'", test_mixture_colon_in_pattern);
    run_test("mixture: two sets of one shape are shuffled in different orders (seed + set)", test_mixture_sets_own_order);
    run_test("mixture: a file in two sets (overlap, a set twice, a hard link) refused naming the shards", test_mixture_overlap);
    run_test("record: shards appended, inserted, removed, re-cut, changed refused naming the file; continue; moved folder; old state", test_record_changed_data);
    run_test("record: mixture sets swapped, corrupt draws, another number of sets", test_record_mixture);
    run_test("record: saved on 1, 3, 8 GPUs, resumed on 1, 3, 8: no position twice, only the rule's tails unread", test_resume_other_world);
    run_test("records: tokenizer fingerprints of formats.py's table and shards, padded, edited", test_shard_records);
    run_test("records: tokenizer, role and -j checks of a run, one warning for llm.c's shards", test_run_checks);
    run_test("tokenizer: -tok missing refused, the default missing optional, '' none", test_tokenizer_flag);
    for (int i = 0; i < g_td_num_files; i++) remove(g_td_files[i]);
    rmdir(g_td_dir);
}

#endif
