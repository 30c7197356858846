/*
Host-only tests of the checkpoints (CI runs them; no GPU): the files as write_sections writes them (a
file written and read back; every kind of bad file refused with a message; a write that fails midway
never replacing the good file and leaving nothing behind; the model file's checksum covering every
header word, versions 1 and 2 still loading; zlib's CRC-32 fed in pieces; a section streamed to a
reader that keeps only part of it), the free-space check, a failing rank's unfinished files removed,
and -keep's pruning. (The state header's fields: dev/test/test_trainer_host.cu.)
Build and run: make dev/test/test_checkpoint_host && ./dev/test/test_checkpoint_host
*/
#define TESTING
#define CKPT_CHUNK ((size_t)1024) // small: the test files cross chunk edges
#include "train_llama_fp8.cu"
#include <signal.h>
#include <sys/resource.h>
#include "dev/test/harness.h" // CHECK, run_test, run_expect_fatal

static char g_dir[64];

static void path_in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

// A small checkpoint-like file: header words 2..4 set, two host sections.
static void write_sample(const char *path, int word3, float first) {
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = STATE_MAGIC; h[1] = CKPT_VERSION; h[2] = 7; h[3] = word3; h[4] = 11;
    static float a[1000];
    uint64_t b = 0x1234;
    for (int i = 0; i < 1000; i++) a[i] = first + i;
    Section sec[] = {{a, sizeof(a), 0}, {&b, sizeof(b), 0}};
    write_sections(path, h, sec, 2);
}

typedef struct { const char *path; int expect3; float first; } ReadArgs;

// Reads a sample file in a child (a bad file is fatal there); what it read must be what
// write_sample(path, expect3, first) wrote, else the child exits 3.
static void read_sample(void *arg) {
    const ReadArgs *r = (const ReadArgs *)arg;
    static float a[1000];
    uint64_t b;
    HeaderExpect ex[] = {{2, 7, "step"}, {3, r->expect3, "layers L"}};
    Section sec[] = {{a, sizeof(a), 0}, {&b, sizeof(b), 0}};
    read_sections(r->path, STATE_MAGIC, ex, 2, sec, 2, NULL);
    for (int i = 0; i < 1000; i++) {
        if (a[i] != r->first + i) { fprintf(stderr, "read back a[%d] = %g, wrote %g\n", i, a[i], r->first + i); exit(3); }
    }
    if (b != 0x1234) { fprintf(stderr, "read back b = %#llx, wrote 0x1234\n", (unsigned long long)b); exit(3); }
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void patch_file(const char *path, long offset, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    fseek(f, offset, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    fclose(b);
}

// Runs read_sample on path in a child; the read must fail with a message containing `want`.
static void expect_refused(const char *path, int expect3, const char *want, const char *what) {
    ReadArgs r = {path, expect3, 0.0f};
    char err[2048];
    int status = run_expect_fatal(read_sample, &r, err, sizeof(err));
    CHECK(status != 0, "%s: accepted (exit 0)", what);
    CHECK(strstr(err, want) != NULL, "%s: message lacks '%s': %s", what, want, err);
}

static void test_checkpoint_round_trip(void) {
    char good[128];
    path_in_dir(good, sizeof(good), "good.bin");
    write_sample(good, 5, 1.0f);
    ReadArgs r = {good, 5, 1.0f};
    char err[2048];
    CHECK(run_expect_fatal(read_sample, &r, err, sizeof(err)) == 0, "a good file was refused: %s", err);
    char tmp[140];
    snprintf(tmp, sizeof(tmp), "%s.tmp", good);
    CHECK(access(tmp, F_OK) != 0, "the temporary file was left behind");
}

static void test_checkpoint_refusals(void) {
    char good[128], bad[128];
    path_in_dir(good, sizeof(good), "good.bin");
    path_in_dir(bad, sizeof(bad), "bad.bin");
    write_sample(good, 5, 1.0f);
    long size = file_size(good);

    expect_refused(good, 6, "layers L is 5 in the file, 6 here", "mismatched configuration");

    copy_file(good, bad);
    float x = 99.0f;
    patch_file(bad, 1024 + 40, &x, sizeof(x));
    expect_refused(bad, 5, "corrupt", "a flipped body value");

    copy_file(good, bad);
    CHECK(truncate(bad, size - 100) == 0, "truncate");
    expect_refused(bad, 5, "truncated", "a truncated file");

    copy_file(good, bad);
    int v = CKPT_VERSION + 1;
    patch_file(bad, 4, &v, sizeof(v));
    expect_refused(bad, 5, "version", "another version");

    copy_file(good, bad);
    int magic = MODEL_MAGIC;
    patch_file(bad, 0, &magic, sizeof(magic));
    expect_refused(bad, 5, "magic", "a model file read as a state file");

    path_in_dir(bad, sizeof(bad), "missing.bin");
    expect_refused(bad, 5, "cannot open", "a missing file");
}

// A write that fails midway (here: a file-size limit, as a full disk would) must leave the previous
// file as it was: the new one goes to a temporary name and only a complete one is renamed over it.
static void write_past_limit(void *arg) {
    const char *path = (const char *)arg;
    struct rlimit lim = {4096, 4096};
    signal(SIGXFSZ, SIG_IGN); // so the write fails with EFBIG instead of killing the process
    setrlimit(RLIMIT_FSIZE, &lim);
    write_sample(path, 5, 4.0f);
}

static void test_checkpoint_crash_keeps_old(void) {
    char good[128];
    path_in_dir(good, sizeof(good), "keep.bin");
    write_sample(good, 5, 3.0f);
    long before = file_size(good);
    char err[512];
    int status = run_expect_fatal(write_past_limit, good, err, sizeof(err));
    CHECK(status != 0 && strstr(err, "failed") != NULL, "the failing write was not reported: %s", err);
    CHECK(file_size(good) == before, "the good file changed size after a failed write");
    char tmp[140];
    snprintf(tmp, sizeof(tmp), "%s.tmp", good);
    CHECK(access(tmp, F_OK) != 0, "the failed write left its temporary file %s", tmp);
    ReadArgs r = {good, 5, 3.0f};
    CHECK(run_expect_fatal(read_sample, &r, err, sizeof(err)) == 0, "the good file no longer reads as written: %s", err);
}

// A version-1 file (FNV-1a checksum, written before CRC-32) still reads.
static void test_checkpoint_version1(void) {
    char path[128];
    path_in_dir(path, sizeof(path), "v1.bin");
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = STATE_MAGIC; h[1] = 1; h[2] = 7; h[3] = 5;
    static float a[1000];
    uint64_t b = 0x1234;
    for (int i = 0; i < 1000; i++) a[i] = 2.0f + i;
    Section sec[] = {{a, sizeof(a), 0}, {&b, sizeof(b), 0}};
    write_sections(path, h, sec, 2);
    FILE *f = fopen(path, "rb");
    int back[256];
    CHECK(f && fread(back, sizeof(int), 256, f) == 256, "cannot read back %s", path);
    if (f) fclose(f);
    uint64_t want = checksum_fnv1a(checksum_fnv1a(0, a, sizeof(a)), &b, sizeof(b));
    CHECK(get64(back, MODEL_HDR_CHECKSUM) == want, "a version-1 file carries no FNV-1a checksum");
    ReadArgs r = {path, 5, 2.0f};
    char err[2048];
    CHECK(run_expect_fatal(read_sample, &r, err, sizeof(err)) == 0, "a version-1 file was refused: %s", err);
}

// The model file's header: every field of a config survives put/get, version 1 reads as untied and
// unscaled, and loading a file into a model of another shape names the field.
static void test_model_header(void) {
    LlamaConfig c;
    CHECK(config_from_preset("llama3.2-1b", &c), "no llama3.2-1b preset");
    int h[256];
    model_header_put(h, &c, 42);
    LlamaConfig back;
    const char *bad = model_header_get(h, &back);
    CHECK(bad == NULL, "header refused: %s", bad ? bad : "");
    CHECK(model_config_mismatch(&c, &back) == NULL && back.max_T == c.max_T && h[MODEL_HDR_STEP] == 42, "config changed by put/get");
    CHECK(back.tied_embeddings == 1 && back.rope_scaling == ROPE_LLAMA3 && back.rope_factor == 32.0f && back.rope_original_T == 8192,
          "tied embeddings or RoPE scaling lost");
    h[1] = 1;
    for (int w = 11; w <= 17; w++) h[w] = 0; // what version 1 wrote there
    bad = model_header_get(h, &back);
    CHECK(bad == NULL && back.tied_embeddings == 0 && back.rope_scaling == ROPE_DEFAULT && back.max_T == 0, "version-1 header: %s", bad ? bad : "");
    h[1] = MODEL_VERSION + 1;
    CHECK(model_header_get(h, &back) != NULL, "version %d accepted", MODEL_VERSION + 1);
}

// A small model (a few thousand weights) for the model-file tests.
static LlamaConfig small_config(void) {
    LlamaConfig c = {64, 2, 16, 2, 1, 32, 32, 10000.0f, 1e-5f};
    return c;
}

typedef struct { const char *path; const float *want; size_t n; int rank; } ModelReadArgs;

// Reads a model file as -init_from does on the host of rank `rank` (read_model_config, then
// read_sections of the weights and the version-2 notice); what it read must be `want`, else the child
// exits 3.
static void read_model_in_child(void *arg) {
    const ModelReadArgs *r = (const ModelReadArgs *)arg;
    LlamaConfig c = read_model_config(r->path);
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(&c, sizes);
    float *w = (float *)mallocCheck(n * sizeof(float));
    Section ms[] = {{w, n * sizeof(float), 0}};
    version2_notice(r->path, read_sections(r->path, MODEL_MAGIC, NULL, 0, ms, 1, NULL), r->rank == 0);
    if (n != r->n || memcmp(w, r->want, n * sizeof(float)) != 0) { fprintf(stderr, "read back other weights\n"); exit(3); }
    free(w);
}

static float *small_weights(size_t *n) {
    LlamaConfig c = small_config();
    size_t sizes[NUM_PARAM_TENSORS];
    *n = param_sizes(&c, sizes);
    float *w = (float *)mallocCheck(*n * sizeof(float));
    for (size_t i = 0; i < *n; i++) w[i] = 0.01f * (float)(i % 97) - 0.3f;
    return w;
}

// The model file as save_checkpoint writes it: its checksum is zlib's CRC-32 of the header (checksum
// words 0) and then the weights, so a byte changed anywhere in the header (rope_theta, a shape, the
// step, an unused word) is refused by the reader -init_from and resume use.
static void test_model_file_header_checksum(void) {
    char good[128], bad[128];
    path_in_dir(good, sizeof(good), "model_v3.bin");
    path_in_dir(bad, sizeof(bad), "model_v3_bad.bin");
    LlamaConfig c = small_config();
    size_t n;
    float *w = small_weights(&n);
    int h[256];
    model_header_put(h, &c, 1234);
    Section ms[] = {{w, n * sizeof(float), 0}};
    write_sections(good, h, ms, 1);

    FILE *f = fopen(good, "rb");
    int back[256];
    CHECK(f && fread(back, sizeof(int), 256, f) == 256, "cannot read back %s", good);
    if (f) fclose(f);
    CHECK(back[1] == 3, "written as version %d, not 3", back[1]);
    int zeroed[256];
    memcpy(zeroed, back, sizeof(zeroed));
    zeroed[254] = zeroed[255] = 0;
    uLong want = crc32(crc32(0, (const Bytef *)zeroed, sizeof(zeroed)), (const Bytef *)w, (uInt)(n * sizeof(float)));
    CHECK(get64(back, MODEL_HDR_CHECKSUM) == (uint64_t)want, "stored checksum %#llx, zlib's CRC-32 of header and weights %#lx",
          (unsigned long long)get64(back, MODEL_HDR_CHECKSUM), want);

    ModelReadArgs r = {good, w, n};
    char err[2048];
    CHECK(run_expect_fatal(read_model_in_child, &r, err, sizeof(err)) == 0, "the good file was refused: %s", err);
    ModelReadArgs rb = {bad, w, n};
    // every word with a meaning (magic, version, the config, the step, max_T) and unused ones
    const int words[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 100, 253};
    const int num_words = (int)(sizeof(words) / sizeof(words[0]));
    int accepted = 0;
    for (int i = 0; i < num_words; i++) {
        int word = words[i];
        for (int byte = 0; byte < 4; byte += 3) { // the lowest byte (a small change) and the highest
            copy_file(good, bad);
            unsigned char x = ((const unsigned char *)&back[word])[byte] ^ 0x01;
            patch_file(bad, 4L * word + byte, &x, 1);
            int status = run_expect_fatal(read_model_in_child, &rb, err, sizeof(err));
            int named = strstr(err, bad) != NULL;
            if (status == 0 || !named) {
                accepted++;
                CHECK(0, "header word %d, byte %d changed: %s (exit %d): %s", word, byte, status == 0 ? "accepted" : "message lacks the file", status, err);
            }
        }
    }
    // the words the config check cannot judge: only the checksum refuses them
    const int only_checksum[] = {9, 10, MODEL_HDR_STEP, MODEL_HDR_MAX_T, 100};
    for (int i = 0; i < 5; i++) {
        copy_file(good, bad);
        int v = back[only_checksum[i]] ^ 0x01;
        patch_file(bad, 4L * only_checksum[i], &v, sizeof(v));
        int status = run_expect_fatal(read_model_in_child, &rb, err, sizeof(err));
        CHECK(status != 0 && strstr(err, "corrupt (checksum mismatch)"), "word %d changed: exit %d: %s", only_checksum[i], status, err);
    }
    CHECK(accepted == 0, "%d of %d header changes accepted", accepted, 2 * num_words);
    free(w);
}

// A version-2 file (the header not under the checksum: zlib's CRC-32 of the weights alone), made here
// without the trainer's writer, still loads, with one notice from rank 0 and none from another rank
// (every rank reads the model file); a changed weight in it is still refused.
static void test_model_file_version2(void) {
    char path[128];
    path_in_dir(path, sizeof(path), "model_v2.bin");
    LlamaConfig c = small_config();
    size_t n;
    float *w = small_weights(&n);
    int h[256];
    model_header_put(h, &c, 7);
    h[1] = 2;
    put64(h, MODEL_HDR_CHECKSUM, crc32(0, (const Bytef *)w, (uInt)(n * sizeof(float))));
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(h, sizeof(int), 256, f) == 256 && fwrite(w, sizeof(float), n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
    ModelReadArgs r = {path, w, n};
    char err[2048];
    int status = run_expect_fatal(read_model_in_child, &r, err, sizeof(err));
    CHECK(status == 0, "a version-2 file was refused (exit %d): %s", status, err);
    CHECK(strstr(err, "is a version-2 file: its checksum covers the body, not the header") && strstr(err, path),
          "no notice naming the file and what its checksum leaves out: '%s'", err);
    ModelReadArgs r1 = {path, w, n, 1};
    status = run_expect_fatal(read_model_in_child, &r1, err, sizeof(err));
    CHECK(status == 0 && err[0] == '\0', "rank 1: exit %d, printed '%s' (want nothing: rank 0 gives the notice)", status, err);
    float x = 5.0f;
    patch_file(path, 1024 + 4 * 100, &x, sizeof(x));
    status = run_expect_fatal(read_model_in_child, &r, err, sizeof(err));
    CHECK(status != 0 && strstr(err, "corrupt (checksum mismatch)"), "a version-2 file with a changed weight: exit %d: %s", status, err);
    free(w);
}

// zlib's crc32 takes 32-bit lengths, so checksum_crc32 feeds it at most 1 GiB per call: the same loop
// with small pieces gives the CRC-32 of the whole, as Python's zlib.crc32 computes it (the catalogue
// check value of "123456789", and a 1 MiB pattern's value from Python).
static void test_crc32_pieces(void) {
    const size_t pieces[] = {1, 2, 7, 9, 4096, (size_t)1 << 30};
    for (int i = 0; i < 6; i++) {
        uint64_t v = checksum_crc32_calls(0, "123456789", 9, pieces[i]);
        CHECK(v == 0xCBF43926u, "CRC-32 of '123456789' in pieces of %zu: %#llx, want 0xcbf43926", pieces[i], (unsigned long long)v);
    }
    size_t n = (size_t)1 << 20;
    unsigned char *b = (unsigned char *)mallocCheck(n);
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * i + 7 * i) % 251);
    for (int i = 0; i < 6; i++) {
        uint64_t v = checksum_crc32_calls(0, b, n, pieces[i]);
        CHECK(v == 0xe8118708u, "CRC-32 of the 1 MiB pattern in pieces of %zu: %#llx, want Python's 0xe8118708", pieces[i], (unsigned long long)v);
    }
    CHECK(checksum_crc32(0, b, n) == 0xe8118708u, "checksum_crc32 of the 1 MiB pattern");
    CHECK(checksum_crc32(0x1234, b, 0) == 0x1234, "an empty piece changes the CRC");
    free(b);
}

// A section read with a sink (how several GPUs load a model file: each rank keeps its shard) goes to
// the sink a chunk at a time, in order, at its offset; a reader that keeps only a slice gets that
// slice, and a changed byte outside it is still refused: the checksum covers the whole file.
typedef struct { float *slice; size_t first, count, next, chunks, biggest; } SliceSink;
static void slice_sink(void *ctx, const void *chunk, size_t offset, size_t n) {
    SliceSink *s = (SliceSink *)ctx;
    if (offset != s->next) { fprintf(stderr, "chunk at offset %zu, expected %zu\n", offset, s->next); exit(3); }
    s->next += n;
    s->chunks++;
    if (n > s->biggest) s->biggest = n;
    for (size_t i = offset / 4; i < (offset + n) / 4; i++)
        if (i >= s->first && i < s->first + s->count) s->slice[i - s->first] = ((const float *)chunk)[i - offset / 4];
}

#define SINK_FLOATS 3000
static void write_sink_sample(const char *path) {
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = STATE_MAGIC; h[1] = CKPT_VERSION;
    static float a[100], w[SINK_FLOATS];
    for (int i = 0; i < SINK_FLOATS; i++) w[i] = 0.5f * i;
    Section sec[] = {{a, sizeof(a), 0}, {w, sizeof(w), 0}};
    write_sections(path, h, sec, 2);
}

static void read_slice_in_child(void *arg) {
    static float a[100], slice[500];
    SliceSink s = {slice, 1100, 500, 0, 0, 0};
    Section sec[] = {{a, sizeof(a), 0}, {NULL, SINK_FLOATS * sizeof(float), 0, slice_sink, &s}};
    read_sections((const char *)arg, STATE_MAGIC, NULL, 0, sec, 2, NULL);
    if (s.next != SINK_FLOATS * sizeof(float) || s.biggest > CKPT_CHUNK || s.chunks < 2) {
        fprintf(stderr, "the sink saw %zu bytes in %zu chunks (largest %zu)\n", s.next, s.chunks, s.biggest);
        exit(3);
    }
    for (int i = 0; i < 500; i++)
        if (slice[i] != 0.5f * (1100 + i)) { fprintf(stderr, "slice[%d] = %g, wrote %g\n", i, slice[i], 0.5f * (1100 + i)); exit(3); }
}

static void test_section_sink(void) {
    char path[128], err[2048];
    path_in_dir(path, sizeof(path), "sink.bin");
    write_sink_sample(path);
    int status = run_expect_fatal(read_slice_in_child, path, err, sizeof(err));
    CHECK(status == 0, "the slice read through a sink (exit %d): %s", status, err);
    float x = -1.0f;
    patch_file(path, 1024 + 400 + 4 * 2900, &x, sizeof(x)); // weight 2900: past the slice
    status = run_expect_fatal(read_slice_in_child, path, err, sizeof(err));
    CHECK(status != 0 && strstr(err, "corrupt (checksum mismatch)"), "a changed weight outside the slice: exit %d: %s", status, err);
}

// ---- checkpoint lifecycle (issue 30.6): what a failing process began is removed; the free-space
// check; -keep
static void touch(const char *path) {
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
}

typedef struct { const char *path; int how; } UnfinishedArgs;

// A rank that has written its state file of a checkpoint other ranks have not finished, then ends:
// 0 by FATAL (exit), 1 by a failed collective (mg_fail_at's _exit), 2 after the checkpoint completed.
static void unfinished_then(void *arg) {
    const UnfinishedArgs *a = (const UnfinishedArgs *)arg;
    touch(a->path);
    stop_signal_unfinished(a->path);
    if (a->how == 0) FATAL("writing the model file failed");
    if (a->how == 1) MG_FAIL(mg_single_gpu(), "the gather timed out");
    stop_signal_unfinished(NULL);
}

static void test_checkpoint_failure_removes_unfinished(void) {
    char path[128], err[1024];
    path_in_dir(path, sizeof(path), "state_00000004_00001.bin");
    const char *what[] = {"an error exit (FATAL)", "a failed collective (MG_FAIL)", "a completed checkpoint"};
    for (int how = 0; how < 3; how++) {
        UnfinishedArgs a = {path, how};
        int status = run_expect_fatal(unfinished_then, &a, err, sizeof(err));
        int left = access(path, F_OK) == 0;
        if (how < 2) CHECK(status != 0 && !left, "%s: exit %d, the unfinished checkpoint's state file %s", what[how], status, left ? "left behind" : "removed");
        else CHECK(status == 0 && left, "%s: exit %d, its state file %s", what[how], status, left ? "kept" : "removed");
        unlink(path);
    }
}

static void test_checkpoint_space(void) {
    char msg[512];
    CHECK(checkpoint_space_problem(g_dir, 1, msg, sizeof(msg)) == NULL, "one byte does not fit in %s: %s", g_dir, msg);
    unsigned long long need = 1ull << 62; // 4.6 EB: no disk has it
    const char *p = checkpoint_space_problem(g_dir, need, msg, sizeof(msg));
    char bytes[32];
    snprintf(bytes, sizeof(bytes), "needs %llu", need);
    CHECK(p && strstr(p, g_dir) && strstr(p, bytes) && strstr(p, "previous checkpoint is kept"), "4.6 EB: %s", p ? p : "(accepted)");
    CHECK(checkpoint_space_problem("/nonexistent/dir", 1, msg, sizeof(msg)) != NULL && strstr(msg, "/nonexistent/dir"), "a missing directory: %s", msg);
}

static void make_checkpoint_files(const char *dir, int step, int world, int with_model) {
    char model[1024], state[1024];
    for (int r = 0; r < world; r++) {
        checkpoint_paths(dir, step, r, model, state);
        touch(state);
    }
    if (with_model) touch(model);
}

static void test_keep(void) {
    char dir[128];
    path_in_dir(dir, sizeof(dir), "keep");
    mkdir(dir, 0755);
    // complete checkpoints of steps 2, 4, 6, 8 and 10 (2 ranks), an unfinished one (state files only) at
    // 5, another run's complete one at 12, and a user's file that looks like a checkpoint
    for (int s = 2; s <= 10; s += 2) make_checkpoint_files(dir, s, 2, 1);
    make_checkpoint_files(dir, 5, 2, 0);
    make_checkpoint_files(dir, 12, 2, 1);
    char other[1100];
    snprintf(other, sizeof(other), "%s/model_best.bin", dir);
    touch(other);
    prune_checkpoints(dir, 0, 0, 10);
    prune_checkpoints(dir, 0, 1, 10);
    int steps[64];
    CHECK(checkpoint_steps(dir, steps, 64) == 6, "-keep 0 removed checkpoints");
    // -keep 2 after step 10's checkpoint: 8 and 10 stay (and 12, a later step); 2, 4, 5 and 6 go
    prune_checkpoints(dir, 2, 1, 10);
    prune_checkpoints(dir, 2, 0, 10);
    for (int s = 2; s <= 12; s++) {
        char model[1024], s0[1024], s1[1024];
        checkpoint_paths(dir, s, 0, model, s0);
        checkpoint_paths(dir, s, 1, model, s1);
        int stays = s == 8 || s == 10 || s == 12, existed = s % 2 == 0 || s == 5;
        int m = access(model, F_OK) == 0, a = access(s0, F_OK) == 0, b = access(s1, F_OK) == 0;
        if (stays) CHECK(m && a && b, "-keep 2: step %d's checkpoint was removed (model %d, states %d %d)", s, m, a, b);
        else if (existed) CHECK(!m && !a && !b, "-keep 2: step %d's files left (model %d, states %d %d)", s, m, a, b);
    }
    CHECK(access(other, F_OK) == 0, "-keep removed a file that is no checkpoint of the run (model_best.bin)");
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_ckpt_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    run_test("checkpoint: written to a temporary name, renamed, read back", test_checkpoint_round_trip);
    run_test("checkpoint: mismatched, corrupt, truncated, other version or kind, missing: refused", test_checkpoint_refusals);
    run_test("checkpoint: a write that fails midway leaves the previous file intact and no temporary file", test_checkpoint_crash_keeps_old);
    run_test("checkpoint: a rank that fails before the checkpoint is complete removes its state file", test_checkpoint_failure_removes_unfinished);
    run_test("checkpoint: no room on the disk refused before writing, naming the directory and the bytes", test_checkpoint_space);
    run_test("checkpoint: -keep K removes only checkpoints older than the K newest", test_keep);
    run_test("checkpoint: a version-1 file (FNV-1a) still reads", test_checkpoint_version1);
    run_test("model file header: config round trip, version 1 as untied and unscaled", test_model_header);
    run_test("model file: the checksum covers the header; a byte changed in any header word is refused", test_model_file_header_checksum);
    run_test("model file: version 2 (header not under the checksum) loads with a notice from rank 0 only, a changed weight refused",
             test_model_file_version2);
    run_test("CRC-32: zlib fed in pieces gives the whole buffer's CRC (Python's zlib.crc32 values)", test_crc32_pieces);
    run_test("checkpoint: a section streamed to a sink that keeps a slice; a change outside it refused", test_section_sink);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
