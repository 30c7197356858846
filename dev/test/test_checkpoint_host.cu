/*
Host-only tests of the checkpoints (CI runs them; no GPU): the files as write_sections writes them (a
file written and read back; every kind of bad file refused with a message; a write that fails midway
never replacing the good file and leaving nothing behind; the model file's checksum covering every
header word, versions 1 and 2 still loading; zlib's CRC-32 fed in pieces; a section streamed to a
reader that keeps only part of it), a model file of another config word refused naming it, the
free-space check; and llmc/checkpoint.h, the code the trainer runs, on 1, 3 and 8 stand-in ranks (this
program's processes, meeting through it) in a directory named with glob characters: -keep, a rank
failing or killed by SIGKILL at each point of a save and what the next start-up removes, run ids and
-overwrite, two processes racing for the lock, -y 1 passing over a damaged newest checkpoint; and the
main loop's rule for a stop notice during a checkpoint. (The state header's fields:
dev/test/test_trainer_host.cu.)
Build and run: make dev/test/test_checkpoint_host && ./dev/test/test_checkpoint_host
*/
#define TESTING
#define CKPT_CHUNK ((size_t)1024) // small: the test files cross chunk edges
#include "train_llama_fp8.cu"
#include <signal.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <pthread.h>
#include "dev/test/harness.h" // CHECK, run_test, run_expect_fatal, copy_file, write_sparse_model_file

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

static void patch_file(const char *path, long offset, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    if (f == NULL) return; // a missing file: the check that follows fails
    fseek(f, offset, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
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
    CHECK(header_checksum_word(back) == want, "a version-1 file carries no FNV-1a checksum");
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

// The small model's model-file header at `step` (h) and its weights (*n floats, a fixed pattern).
static float *small_model(int h[256], int step, size_t *n) {
    LlamaConfig c = small_config();
    model_header_put(h, &c, step);
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
    int h[256];
    size_t n;
    float *w = small_model(h, 1234, &n);
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
    CHECK(header_checksum_word(back) == (uint64_t)want, "stored checksum %#llx, zlib's CRC-32 of header and weights %#lx",
          (unsigned long long)header_checksum_word(back), want);

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
    int h[256];
    size_t n;
    float *w = small_model(h, 7, &n);
    h[1] = 2;
    header_set_checksum_word(h, crc32(0, (const Bytef *)w, (uInt)(n * sizeof(float))));
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

// ---- the free-space check
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

// ---- the checkpoint sequence on stand-in ranks (issues 40 and 41): `world` processes of this program
// run the real code of llmc/checkpoint.h (checkpoint_sequence, checkpoint_pick) with small files of
// their own, and meet through this process, which plays the collectives: each rank sends its value
// down a pipe and every rank gets back the largest. When a rank ends (it failed, or was killed) the
// others' collective fails as a real one would: MG_FAIL, which removes their unfinished files.
static void touch(const char *path) {
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
}

// A rank's job: what it does (save steps first..last with -keep keep, `need` bytes each (0: 1); or pick
// and expect `want`), and
// where rank fail_rank stops: "fatal_state" (FATAL before its state file), "fatal_model" (rank 0:
// FATAL with the state files written, as a full disk would), or killed by SIGKILL (no clean-up at all)
// at "kill_state_tmp" (a partial state file), "kill_state" (its state file renamed), "kill_model_tmp",
// "kill_model" (the model file renamed), "kill_done" (the marker written).
typedef struct { const char *dir; uint64_t run; int first, last, keep, pick_want, fail_rank; const char *fail; unsigned long long need; } RankJob;
typedef struct { int to_parent, from_parent, world, step, barriers; const RankJob *job; MultiGpu mg; } StandIn;
static StandIn g_rank;

// Whether this rank fails at `point` here: in the job's last step only, so the ones before complete.
static int failing_here(const char *point) {
    const RankJob *j = g_rank.job;
    return j->fail && g_rank.mg.rank == j->fail_rank && g_rank.step == j->last && strcmp(j->fail, point) == 0;
}

static void kill_with_partial(const char *point, const char *path) {
    if (!failing_here(point)) return;
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f) { fwrite("partial", 1, 7, f); fclose(f); }
    raise(SIGKILL);
}

// A small checkpoint file as write_sections writes it: the header (magic, version, step, rank, run
// id) and floats that differ by file.
static void write_standin_file(const char *path, int magic, int rank) {
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = magic; h[1] = CKPT_VERSION; h[2] = rank;
    header_set_run_id(h, g_rank.job->run);
    static float body[700];
    for (int i = 0; i < 700; i++) body[i] = (float)(magic % 97 + rank * 1000 + i);
    Section sec[] = {{body, sizeof(body), 0}};
    write_sections(path, h, sec, 1);
}

static void standin_write_state(void *ctx, const char *path) {
    (void)ctx;
    if (failing_here("fatal_state")) FATAL("stand-in rank %d: cannot write its state file", g_rank.mg.rank);
    kill_with_partial("kill_state_tmp", path);
    write_standin_file(path, STATE_MAGIC, g_rank.mg.rank);
}

static void standin_write_model(void *ctx, const char *path) {
    (void)ctx;
    if (failing_here("kill_state")) raise(SIGKILL);
    if (g_rank.mg.rank != 0) return;
    if (failing_here("fatal_model")) FATAL("stand-in rank 0: writing the model file failed (disk full)");
    kill_with_partial("kill_model_tmp", path);
    write_standin_file(path, MODEL_MAGIC, 0);
}

static long long standin_max(void *ctx, long long v) {
    (void)ctx;
    g_rank.barriers++;
    if (failing_here("kill_model") && g_rank.barriers == 2) raise(SIGKILL); // the free-space check is the first
    if (failing_here("kill_done") && g_rank.barriers == 3) raise(SIGKILL);
    long long hi;
    if (write(g_rank.to_parent, &v, sizeof(v)) != (ssize_t)sizeof(v) || read(g_rank.from_parent, &hi, sizeof(hi)) != (ssize_t)sizeof(hi))
        MG_FAIL(&g_rank.mg, "a collective failed: another rank ended");
    return hi;
}

static void rank_main(const RankJob *job) {
    CheckpointRanks r = {NULL, g_rank.mg.rank, g_rank.world, standin_write_state, standin_write_model, standin_max};
    if (job->pick_want != -2) {
        int picked = checkpoint_pick(&r, job->dir, job->run);
        if (picked != job->pick_want) { fprintf(stderr, "rank %d picked step %d, want %d\n", r.rank, picked, job->pick_want); exit(3); }
        return;
    }
    for (g_rank.step = job->first; g_rank.step <= job->last; g_rank.step++) {
        g_rank.barriers = 0;
        checkpoint_sequence(&r, job->dir, g_rank.step, job->run, job->keep, job->need ? job->need : 1);
    }
}

// Runs job on `world` stand-in ranks; returns how many exited non-zero; their stdout and stderr in out.
static int run_ranks(const RankJob *job, int world, char *out, size_t outlen) {
    int up[8][2], down[8][2];
    pid_t pids[8];
    char log[200];
    snprintf(log, sizeof(log), "%s/ranks.log", g_dir);
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        if (pipe(up[r]) != 0 || pipe(down[r]) != 0) { perror("pipe"); exit(1); }
        pids[r] = fork();
        if (pids[r] == 0) {
            int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, 1);
            dup2(fd, 2);
            for (int k = 0; k <= r; k++) { close(up[k][0]); close(down[k][1]); }
            memset(&g_rank, 0, sizeof(g_rank));
            g_rank.to_parent = up[r][1]; g_rank.from_parent = down[r][0]; g_rank.world = world; g_rank.job = job;
            g_rank.mg.rank = r; g_rank.mg.world = world;
            rank_main(job);
            exit(0);
        }
        close(up[r][1]);
        close(down[r][0]);
    }
    for (int ended = 0; !ended;) { // one collective a round, until a rank ends
        long long hi = LLONG_MIN, v;
        for (int r = 0; r < world; r++) {
            if (read(up[r][0], &v, sizeof(v)) != (ssize_t)sizeof(v)) ended = 1;
            else if (v > hi) hi = v;
        }
        for (int r = 0; r < world && !ended; r++) if (write(down[r][1], &hi, sizeof(hi)) != (ssize_t)sizeof(hi)) ended = 1;
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        close(up[r][0]);
        close(down[r][1]);
        int st;
        waitpid(pids[r], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    FILE *f = fopen(log, "rb");
    size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    unlink(log);
    return failed;
}

static int save_on_ranks(const char *dir, uint64_t run, int world, int first, int last, int keep, const char *fail, int fail_rank, char *out, size_t n) {
    RankJob job = {dir, run, first, last, keep, -2, fail_rank, fail};
    return run_ranks(&job, world, out, n);
}

static int pick_on_ranks(const char *dir, uint64_t run, int world, int want, char *out, size_t n) {
    RankJob job = {dir, run, 0, 0, 0, want, -1, NULL};
    return run_ranks(&job, world, out, n);
}

// A fresh directory whose name holds glob characters (item 7: -o 'runs/lr[3e-4]').
static void fresh_dir(char *dir, size_t n, const char *tag) {
    snprintf(dir, n, "%s/lr[3e-4]*?_%s", g_dir, tag);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0 || mkdir(dir, 0755) != 0) { perror(dir); exit(1); }
}

// Whether step's checkpoint of run is complete on every one of `world` ranks: its marker names the run
// and the rank count, and the model and every state file verify (run id, checksum).
static int complete_everywhere(const char *dir, int step, uint64_t run, int world) {
    uint64_t id;
    int ranks;
    char path[1100], msg[1400];
    if (!checkpoint_done_read(dir, step, &id, &ranks) || id != run || ranks != world) return 0;
    checkpoint_path(path, sizeof(path), dir, CKPT_MODEL, step, 0);
    if (checkpoint_file_problem(path, MODEL_MAGIC, run, msg, sizeof(msg))) return 0;
    for (int r = 0; r < world; r++) {
        checkpoint_path(path, sizeof(path), dir, CKPT_STATE, step, r);
        if (checkpoint_file_problem(path, STATE_MAGIC, run, msg, sizeof(msg))) return 0;
    }
    return 1;
}

// The names in dir (sorted, space-separated) other than those in `except` (a space-separated list).
static void dir_names(const char *dir, const char *except, char *out, size_t n) {
    static char names[64][260], list[8192];
    int k = 0;
    snprintf(list, sizeof(list), " . .. %s ", except);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL && k < 64;) {
        char padded[260];
        snprintf(padded, sizeof(padded), " %s ", e->d_name);
        if (!strstr(list, padded)) snprintf(names[k++], sizeof(names[0]), "%s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, k, sizeof(names[0]), (int (*)(const void *, const void *))strcmp);
    out[0] = '\0';
    for (int i = 0; i < k; i++) { strncat(out, names[i], n - strlen(out) - 2); strncat(out, " ", n - strlen(out) - 1); }
}

static const int WORLDS[3] = {1, 3, 8};

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

// The real sequence on 1, 3 and 8 ranks, step after step with -keep 2: after each checkpoint the two
// newest of this run are complete on every rank, nothing else of it is left, and what is not the
// run's (another run's checkpoints, a later checkpoint -y 1 passed over, model_best.bin) stays.
static void test_keep_sequence(void) {
    static char out[65536];
    for (int w = 0; w < 3; w++) {
        int world = WORLDS[w];
        char dir[300], path[1100], tag[16];
        snprintf(tag, sizeof(tag), "keep%d", world);
        fresh_dir(dir, sizeof(dir), tag);
        const uint64_t run = 0x1111222233334444ull, other = 0x5555666677778888ull;
        // another run's, in the same directory (-overwrite 1), at steps this run does not write (a step both
        // write is the newer run's: the names hold no run id)
        int failed = save_on_ranks(dir, other, world, 0, 0, 0, NULL, -1, out, sizeof(out));
        failed += save_on_ranks(dir, other, world, 12, 12, 0, NULL, -1, out, sizeof(out));
        CHECK(failed == 0, "world %d: the other run's checkpoints: %d ranks failed:\n%s", world, failed, out);
        failed = save_on_ranks(dir, run, world, 9, 9, 0, NULL, -1, out, sizeof(out)); // this run's later one (passed over by -y 1)
        snprintf(path, sizeof(path), "%s/model_best.bin", dir);
        touch(path);
        for (int step = 1; step <= 5; step++) {
            failed = save_on_ranks(dir, run, world, step, step, 2, NULL, -1, out, sizeof(out));
            CHECK(failed == 0, "world %d, step %d: %d ranks failed:\n%s", world, step, failed, out);
            for (int s = 1; s <= 5; s++) {
                int want = s == step || s == step - 1;
                CHECK(complete_everywhere(dir, s, run, world) == want, "world %d, -keep 2 after step %d: step %d %s", world, step, s,
                      want ? "is not complete on every rank" : "is still there");
            }
        }
        CHECK(complete_everywhere(dir, 9, run, world), "world %d: -keep removed the run's later checkpoint (step 9)", world);
        for (int s = 0; s <= 12; s += 12) CHECK(complete_everywhere(dir, s, other, world), "world %d: -keep removed another run's step %d", world, s);
        // every file left is accounted for: steps 4, 5 and 9 of the run, 0 and 12 of the other, model_best.bin
        char names[4096], want[4096] = "model_best.bin";
        int steps[5] = {0, 4, 5, 9, 12};
        for (int i = 0; i < 5; i++) {
            char name[64];
            checkpoint_name(name, sizeof(name), CKPT_DONE, steps[i], 0); strcat(want, " "); strcat(want, name);
            checkpoint_name(name, sizeof(name), CKPT_MODEL, steps[i], 0); strcat(want, " "); strcat(want, name);
            for (int r = 0; r < world; r++) { checkpoint_name(name, sizeof(name), CKPT_STATE, steps[i], r); strcat(want, " "); strcat(want, name); }
        }
        dir_names(dir, want, names, sizeof(names));
        CHECK(names[0] == '\0', "world %d: files left beside the kept checkpoints: %s", world, names);
        // nothing goes while the newest named is not complete
        checkpoint_prune(dir, run, 1, 7);
        CHECK(complete_everywhere(dir, 4, run, world) && complete_everywhere(dir, 5, run, world), "world %d: -keep pruned for an incomplete step 7", world);
    }
}

// A rank that fails while the checkpoint is being written: every rank ends, and nothing of the
// unfinished checkpoint is left (each rank removes its unfinished files: the failing one on its way
// out, the others when their collective fails), while the checkpoints before it, written by the same
// processes, stay complete.
static void test_failure_removes_unfinished(void) {
    static char out[65536];
    const char *fails[] = {"fatal_state", "fatal_model"};
    for (int w = 0; w < 3; w++) {
        for (int f = 0; f < 2; f++) {
            int world = WORLDS[w], fail_rank = f == 0 ? world - 1 : 0;
            char dir[300], tag[32];
            snprintf(tag, sizeof(tag), "fail%d_%d", world, f);
            fresh_dir(dir, sizeof(dir), tag);
            const uint64_t run = 0x0123456789abcdefull;
            int failed = save_on_ranks(dir, run, world, 1, 3, 0, fails[f], fail_rank, out, sizeof(out));
            CHECK(failed == world, "world %d, %s on rank %d: %d of %d ranks failed:\n%s", world, fails[f], fail_rank, failed, world, out);
            CHECK(complete_everywhere(dir, 1, run, world) && complete_everywhere(dir, 2, run, world),
                  "world %d, %s in step 3: the complete checkpoints of steps 1 and 2 were damaged:\n%s", world, fails[f], out);
            char names[4096], want[4096] = "";
            for (int s = 1; s <= 2; s++) {
                char name[64];
                checkpoint_name(name, sizeof(name), CKPT_DONE, s, 0); strcat(want, " "); strcat(want, name);
                checkpoint_name(name, sizeof(name), CKPT_MODEL, s, 0); strcat(want, " "); strcat(want, name);
                for (int r = 0; r < world; r++) { checkpoint_name(name, sizeof(name), CKPT_STATE, s, r); strcat(want, " "); strcat(want, name); }
            }
            dir_names(dir, want, names, sizeof(names));
            CHECK(names[0] == '\0', "world %d, %s on rank %d: left of the unfinished checkpoint of step 3: %s", world, fails[f], fail_rank, names);
        }
        // no room for the checkpoint (4.6 EB): every rank refuses before writing anything
        int world = WORLDS[w];
        char dir[300], tag[32], names[4096];
        snprintf(tag, sizeof(tag), "full%d", world);
        fresh_dir(dir, sizeof(dir), tag);
        RankJob job = {dir, 1, 1, 1, 0, -2, -1, NULL, 1ull << 62};
        int failed = run_ranks(&job, world, out, sizeof(out));
        dir_names(dir, "", names, sizeof(names));
        CHECK(failed == world && count_of(out, "the checkpoint needs 4611686018427387904") == world && names[0] == '\0',
              "world %d, no room: %d ranks failed, the refusal said %d times, files written: '%s':\n%s", world, failed,
              count_of(out, "the checkpoint needs 4611686018427387904"), names, out);
    }
}

typedef struct { const char *dir; int resume, overwrite, may_start_fresh; uint64_t *run; } StartArgs;

// checkpoint_dir_start in a child: its lines reach the parent on stderr; the run id in a shared word.
static void start_in_child(void *arg) {
    const StartArgs *a = (const StartArgs *)arg;
    dup2(2, 1);
    *a->run = checkpoint_dir_start(a->dir, a->resume, a->overwrite, a->may_start_fresh);
    fflush(stdout);
}

static uint64_t *g_shared_run; // a page both a child and this process see

static int start_dir(const char *dir, int resume, int overwrite, char *err, size_t n) {
    StartArgs a = {dir, resume, overwrite, 0, g_shared_run};
    *g_shared_run = 0;
    return run_expect_fatal(start_in_child, &a, err, n);
}

// SIGKILL at each point of a save (Slurm's KillWait after its notice): before the marker the
// checkpoint is incomplete, -y 1 takes the one before, and the next start-up removes every file of it
// (naming each); from the marker on it is complete and kept. Then -keep 2 leaves two complete
// checkpoints and nothing else. World 1, and rank 0 of 3 (the others fail in their collective).
static void test_kill_during_save(void) {
    static char out[65536], err[16384];
    const char *points[] = {"kill_state_tmp", "kill_state", "kill_model_tmp", "kill_model", "kill_done"};
    for (int w = 0; w < 2; w++) {
        int world = w == 0 ? 1 : 3;
        for (int p = 0; p < 5; p++) {
            char dir[300], tag[32];
            snprintf(tag, sizeof(tag), "kill%d_%d", world, p);
            fresh_dir(dir, sizeof(dir), tag);
            CHECK(start_dir(dir, 0, 0, err, sizeof(err)) == 0, "fresh start: %s", err);
            uint64_t run = *g_shared_run;
            int failed = save_on_ranks(dir, run, world, 1, 2, 2, NULL, -1, out, sizeof(out));
            failed = save_on_ranks(dir, run, world, 3, 3, 2, points[p], 0, out, sizeof(out));
            CHECK(failed == world, "%s, world %d: %d ranks failed:\n%s", points[p], world, failed, out);
            int complete = p == 4, want = complete ? 3 : 2;
            CHECK(pick_on_ranks(dir, run, world, want, out, sizeof(out)) == 0, "%s, world %d: before the start-up, -y 1 did not pick step %d:\n%s",
                  points[p], world, want, out);
            CHECK(start_dir(dir, 1, 0, err, sizeof(err)) == 0 && *g_shared_run == run, "%s, world %d: the resumed start-up (run %llx, want %llx): %s",
                  points[p], world, (unsigned long long)*g_shared_run, (unsigned long long)run, err);
            char model[1100], state[1100];
            checkpoint_paths(dir, 3, 0, model, state);
            if (!complete) {
                CHECK(strstr(err, "removed '") && strstr(err, p % 2 == 0 ? ".tmp': the temporary file" : "bin': part of this run's incomplete checkpoint"),
                      "%s, world %d: the start-up did not say what it removed: '%s'", points[p], world, err);
                char names[4096];
                dir_names(dir, "", names, sizeof(names));
                CHECK(!strstr(names, "00000003"), "%s, world %d: left of the killed checkpoint after the start-up: %s", points[p], world, names);
            } else {
                CHECK(!strstr(err, "removed") && complete_everywhere(dir, 3, run, world), "%s, world %d: the complete step 3 was touched: %s", points[p], world, err);
            }
            failed = save_on_ranks(dir, run, world, 4, 4, 2, NULL, -1, out, sizeof(out));
            char names[4096], keep[1024] = "run_id";
            int kept[2] = {4, want};
            for (int i = 0; i < 2; i++) {
                char name[64];
                CHECK(complete_everywhere(dir, kept[i], run, world), "%s, world %d: -keep 2 after step 4: step %d not complete", points[p], world, kept[i]);
                checkpoint_name(name, sizeof(name), CKPT_DONE, kept[i], 0); strcat(keep, " "); strcat(keep, name);
                checkpoint_name(name, sizeof(name), CKPT_MODEL, kept[i], 0); strcat(keep, " "); strcat(keep, name);
                for (int r = 0; r < world; r++) { checkpoint_name(name, sizeof(name), CKPT_STATE, kept[i], r); strcat(keep, " "); strcat(keep, name); }
            }
            dir_names(dir, keep, names, sizeof(names));
            CHECK(names[0] == '\0', "%s, world %d: -keep 2 left more than two complete checkpoints: %s", points[p], world, names);
        }
    }
}

// Run identity (item 2): a fresh start makes an id and writes it; -y 1 keeps it; a fresh start into a
// directory that holds checkpoints is refused unless -overwrite 1, which starts another run whose
// start-up, -y 1 and -keep leave the old run's files alone; a state file of another run beside a
// model file of this one is passed over, naming both runs; a damaged run_id file is refused.
static void test_run_identity(void) {
    static char out[65536], err[16384];
    char dir[300], path[1100], names[4096], before[4096];
    fresh_dir(dir, sizeof(dir), "runid");
    // -y 1 into a directory no run started in: refused, unless -init_from gives the weights
    int status = start_dir(dir, 1, 0, err, sizeof(err));
    CHECK(status != 0 && strstr(err, dir) && strstr(err, "holds no run to resume"), "-y 1 into an empty directory: exit %d: %s", status, err);
    StartArgs fine_tune = {dir, 1, 0, 1, g_shared_run};
    status = run_expect_fatal(start_in_child, &fine_tune, err, sizeof(err));
    CHECK(status == 0 && *g_shared_run != 0, "-y 1 -init_from into an empty directory (a fine-tune before its first checkpoint): %s", err);
    CHECK(start_dir(dir, 0, 0, err, sizeof(err)) == 0 && *g_shared_run != 0, "a fresh start in a directory without checkpoints: %s", err);
    uint64_t first = *g_shared_run;
    CHECK(start_dir(dir, 1, 0, err, sizeof(err)) == 0 && *g_shared_run == first, "-y 1: run %llx, the directory's %llx: %s",
          (unsigned long long)*g_shared_run, (unsigned long long)first, err);
    save_on_ranks(dir, first, 3, 1, 2, 0, NULL, -1, out, sizeof(out));
    dir_names(dir, "", before, sizeof(before));
    status = start_dir(dir, 0, 0, err, sizeof(err));
    dir_names(dir, "", names, sizeof(names));
    CHECK(status != 0 && strstr(err, dir) && strstr(err, "holds 10 checkpoint files of another run") && strstr(err, "pass -y 1") &&
          strstr(err, "pass -overwrite 1"), "a fresh start into a directory with checkpoints: exit %d: %s", status, err);
    uint64_t id;
    CHECK(checkpoint_run_id_read(dir, &id) && id == first && strcmp(names, before) == 0, "the refused start changed the directory: %s", names);
    // -overwrite 1: a new run; the old one's files stay, its incomplete one too
    checkpoint_path(path, sizeof(path), dir, CKPT_STATE, 7, 0);
    g_rank.job = NULL;
    { RankJob job = {dir, first, 0, 0, 0, 0, -1, NULL}; g_rank.job = &job; write_standin_file(path, STATE_MAGIC, 0); g_rank.job = NULL; }
    CHECK(start_dir(dir, 0, 1, err, sizeof(err)) == 0 && *g_shared_run != first && *g_shared_run != 0, "-overwrite 1: %s", err);
    uint64_t second = *g_shared_run;
    CHECK(!strstr(err, "removed") && access(path, F_OK) == 0, "the new run's start-up removed the old run's files: %s", err);
    CHECK(pick_on_ranks(dir, second, 3, -1, out, sizeof(out)) == 0, "-y 1 of the new run picked the old run's checkpoint:\n%s", out);
    save_on_ranks(dir, second, 3, 1, 1, 1, NULL, -1, out, sizeof(out)); // step 1 again, of the new run: the old run's step 1 goes
    save_on_ranks(dir, second, 3, 3, 3, 1, NULL, -1, out, sizeof(out));
    CHECK(complete_everywhere(dir, 2, first, 3) && access(path, F_OK) == 0, "-keep 1 of the new run removed the old run's step 2 or 7");
    CHECK(complete_everywhere(dir, 3, second, 3) && !complete_everywhere(dir, 1, second, 3), "-keep 1 of the new run: its own steps");
    CHECK(start_dir(dir, 1, 0, err, sizeof(err)) == 0 && *g_shared_run == second, "-y 1 after -overwrite 1 resumes run %llx, want the new %llx",
          (unsigned long long)*g_shared_run, (unsigned long long)second);
    // a state file of another run beside this run's model file: that checkpoint is passed over
    save_on_ranks(dir, second, 3, 4, 4, 0, NULL, -1, out, sizeof(out));
    char other[1100];
    checkpoint_path(other, sizeof(other), dir, CKPT_STATE, 2, 1);
    checkpoint_path(path, sizeof(path), dir, CKPT_STATE, 4, 1);
    copy_file(other, path); // run `first`'s state file of rank 1
    CHECK(pick_on_ranks(dir, second, 3, 3, out, sizeof(out)) == 0, "a mixed pair was not passed over:\n%s", out);
    char want[200];
    snprintf(want, sizeof(want), "belongs to run %016llx, not to this run %016llx", (unsigned long long)first, (unsigned long long)second);
    CHECK(strstr(out, want) && strstr(out, path), "the mixed pair's message lacks '%s' and the file:\n%s", want, out);
    // a damaged run_id
    snprintf(path, sizeof(path), "%s/run_id", dir);
    FILE *f = fopen(path, "w");
    fputs("not an id\n", f);
    fclose(f);
    status = start_dir(dir, 1, 0, err, sizeof(err));
    CHECK(status != 0 && strstr(err, path) && strstr(err, "does not hold a run id"), "a damaged run_id: exit %d: %s", status, err);
}

// Takes the lock of the directory (arg), says so on the pipe and holds it for a while.
typedef struct { const char *dir; int go, said; int hold_ms; } LockArgs;
static void lock_in_child(void *arg) {
    const LockArgs *a = (const LockArgs *)arg;
    char c;
    if (read(a->go, &c, 1) != 1) exit(4);
    checkpoint_lock(a->dir);
    pid_t me = getpid();
    if (write(a->said, &me, sizeof(me)) != (ssize_t)sizeof(me)) exit(4);
    usleep(a->hold_ms * 1000);
}

typedef struct { LockArgs args; int status; char err[2048]; } LockRacer;
static void *race_thread(void *arg) {
    LockRacer *r = (LockRacer *)arg;
    r->status = run_expect_fatal(lock_in_child, &r->args, r->err, sizeof(r->err));
    return NULL;
}

// Two runs racing for one directory (item 3): exactly one gets it; the other is refused naming its
// host and pid (not those of a gone holder the file still names); once the holder ends (SIGKILL
// included) the lock is free again.
static void test_lock_race(void) {
    char dir[300], host[256] = "";
    fresh_dir(dir, sizeof(dir), "lock");
    gethostname(host, sizeof(host) - 1);
    for (int trial = 0; trial < 5; trial++) {
        // the file names a holder of this host that is gone (as after the trial before): never the one reported
        pid_t gone = fork();
        if (gone == 0) _exit(0);
        waitpid(gone, NULL, 0);
        char path[400];
        snprintf(path, sizeof(path), "%s/train.lock", dir);
        FILE *f = fopen(path, "w");
        if (f) { fprintf(f, "host %s pid %d\n", host, (int)gone); fclose(f); }
        int go[2], said[2];
        if (pipe(go) != 0 || pipe(said) != 0) { perror("pipe"); return; }
        LockRacer racers[2];
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            racers[i].args = (LockArgs){dir, go[0], said[1], 500};
            pthread_create(&t[i], NULL, race_thread, &racers[i]);
        }
        usleep(50000);
        if (write(go[1], "gg", 2) != 2) perror("write");
        pid_t holder = 0;
        if (read(said[0], &holder, sizeof(holder)) != (ssize_t)sizeof(holder)) holder = -1;
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        int won = (racers[0].status == 0) + (racers[1].status == 0);
        const char *loser = racers[0].status != 0 ? racers[0].err : racers[1].err;
        char want[400];
        snprintf(want, sizeof(want), "is in use by another run (host %s pid %d holds", host, (int)holder);
        CHECK(won == 1 && strstr(loser, want) && strstr(loser, dir), "trial %d: %d of 2 took the lock; the other said: %s (want '%s')", trial, won, loser, want);
        close(go[0]); close(go[1]); close(said[0]); close(said[1]);
    }
    // a holder killed by SIGKILL leaves no lock behind
    pid_t pid = fork();
    if (pid == 0) { checkpoint_lock(dir); raise(SIGKILL); }
    int st;
    waitpid(pid, &st, 0);
    int go[2], said[2];
    if (pipe(go) != 0 || pipe(said) != 0) return;
    LockArgs a = {dir, go[0], said[1], 0};
    if (write(go[1], "g", 1) != 1) perror("write");
    char err[2048];
    CHECK(WIFSIGNALED(st) && run_expect_fatal(lock_in_child, &a, err, sizeof(err)) == 0, "after its holder was killed the lock was refused: %s", err);
    close(go[0]); close(go[1]); close(said[0]); close(said[1]);
}

// A damaged newest checkpoint (item 5; issue 41: a state file without its model file): -y 1 takes the
// newest one that verifies on every rank, the rank that found the problem naming the file and why;
// with the one before damaged too, every rank refuses (a run started over would overwrite its logs).
static void test_pick_falls_back(void) {
    static char out[65536];
    for (int w = 0; w < 3; w++) {
        int world = WORLDS[w];
        struct { const char *what; int kind, rank; const char *want; } damage[] = {
            {"a byte of the model file changed", CKPT_MODEL, 0, "is corrupt (checksum mismatch)"},
            {"the model file missing", CKPT_MODEL, 0, "No such file or directory"},
            {"the last rank's state file changed", CKPT_STATE, world - 1, "is corrupt (checksum mismatch)"},
            {"the last rank's state file truncated", CKPT_STATE, world - 1, "is corrupt (checksum mismatch)"},
            {"the last rank's state file missing", CKPT_STATE, world - 1, "No such file or directory"},
        };
        for (int d = 0; d < 5; d++) {
            char dir[300], tag[32], path[1100];
            snprintf(tag, sizeof(tag), "pick%d_%d", world, d);
            fresh_dir(dir, sizeof(dir), tag);
            const uint64_t run = 0xfeedfacecafebeefull;
            save_on_ranks(dir, run, world, 1, 3, 2, NULL, -1, out, sizeof(out));
            CHECK(pick_on_ranks(dir, run, world, 3, out, sizeof(out)) == 0, "world %d: the newest not picked:\n%s", world, out);
            checkpoint_path(path, sizeof(path), dir, damage[d].kind, 3, damage[d].rank);
            if (d == 1 || d == 4) unlink(path);
            else if (d == 3) CHECK(truncate(path, file_size(path) - 4) == 0, "truncate");
            else { unsigned char x = 0x5a; patch_file(path, 1024 + 17, &x, 1); }
            int failed = pick_on_ranks(dir, run, world, 2, out, sizeof(out));
            CHECK(failed == 0 && strstr(out, path) && strstr(out, damage[d].want) && strstr(out, "passing over the checkpoint of step 3"),
                  "world %d, %s: %d ranks did not pick step 2, or the message lacks the file and '%s':\n%s", world, damage[d].what, failed, damage[d].want, out);
            // the one before damaged too: refused, never a start from the beginning
            checkpoint_path(path, sizeof(path), dir, CKPT_MODEL, 2, 0);
            unlink(path);
            failed = pick_on_ranks(dir, run, world, -1, out, sizeof(out));
            CHECK(failed == world && count_of(out, "none of the 2 complete checkpoints of this run") == world,
                  "world %d, %s and step 2's model file missing: %d of %d ranks refused:\n%s", world, damage[d].what, failed, world, out);
        }
    }
}

// A stop notice during a periodic checkpoint (item 6): the main loop's own after_step and
// stop_after_checkpoint, stepped as main steps them: the checkpoint just written holds the step, so
// the run stops after it with no second checkpoint. A notice between steps costs one checkpoint as
// before, and one during the last step's checkpoint ends the run as planned.
static void test_stop_during_checkpoint(void) {
    Options o = default_options();
    o.max_steps = 10; o.ckpt_every = 2;
    struct { int notice_after, during; int checkpoints, stopped_after; } cases[] = {
        {4, 1, 1, 4},   // during step 4's checkpoint: that one, no other
        {5, 0, 1, 5},   // between steps: the stop's checkpoint
        {10, 1, 1, 10}, // during the last step's: the run's end
        {0, 0, 0, 10},  // no notice
    };
    for (int i = 0; i < 4; i++) {
        long long pending = 0;
        int written = 0, stopped_after = o.max_steps, bad = 0;
        for (int step = 0; step < o.max_steps; step++) {
            if (!cases[i].during && step + 1 == cases[i].notice_after) pending = SIGTERM;
            long long stop = pending;
            int work = after_step(&o, step, 1, stop, 0, 0, 1, &bad);
            if (work & AFTER_CHECKPOINT) {
                if (pending) written++;
                if (cases[i].during && step + 1 == cases[i].notice_after) pending = SIGTERM; // it arrives while the checkpoint is written
                if (stop_after_checkpoint(work, pending, step + 1, o.max_steps)) work |= AFTER_STOP;
            }
            if (work & AFTER_STOP) { stopped_after = step + 1; break; }
        }
        if (cases[i].during) written += stopped_after == cases[i].notice_after; // the checkpoint the notice came during
        CHECK(written == cases[i].checkpoints && stopped_after == cases[i].stopped_after,
              "a notice %s step %d: %d checkpoints written after it, stopped after step %d (want %d, after step %d)",
              cases[i].during ? "during the checkpoint of" : "after", cases[i].notice_after, written, stopped_after, cases[i].checkpoints,
              cases[i].stopped_after);
    }
}

typedef struct { const char *path; LlamaConfig run; } LoadArgs;

// load_model_file (resume and -init_from) of a model file into a model of the run's config: a config
// mismatch is refused before anything reaches a GPU.
static void load_in_child(void *arg) {
    const LoadArgs *a = (const LoadArgs *)arg;
    static Model m;
    memset(&m, 0, sizeof(m));
    m.cfg = a->run;
    load_model_file(&m, a->path);
}

// A model file that differs from the run in any one config word is refused naming it (issue 41: only
// the six shape words were compared, so another rope_theta loaded). The words and their names are
// written out here, as README.md gives them, not taken from MODEL_HEADER_FIELDS.
static void test_model_config_every_word(void) {
    LlamaConfig run = small_config();
    run.rope_scaling = ROPE_LLAMA3; run.rope_factor = 8.0f; run.rope_low_freq_factor = 1.0f; run.rope_high_freq_factor = 4.0f; run.rope_original_T = 16;
    struct { const char *want; void (*change)(LlamaConfig *); } words[] = {
        {"vocab size V is 66 in the file, 64 here", [](LlamaConfig *c) { c->V = 66; }},
        {"layers L is 3 in the file, 2 here", [](LlamaConfig *c) { c->L = 3; }},
        {"width C is 32 in the file, 16 here", [](LlamaConfig *c) { c->C = 32; }},
        {"heads NH is 4 in the file, 2 here", [](LlamaConfig *c) { c->NH = 4; }},
        {"kv heads NKV is 2 in the file, 1 here", [](LlamaConfig *c) { c->NKV = 2; }},
        {"MLP width FF is 34 in the file, 32 here", [](LlamaConfig *c) { c->FF = 34; }},
        {"rope_theta is 500000 in the file, 10000 here", [](LlamaConfig *c) { c->rope_theta = 500000.0f; }},
        {"norm eps is 1e-06 in the file, 1e-05 here", [](LlamaConfig *c) { c->norm_eps = 1e-6f; }},
        {"tied embeddings is 1 in the file, 0 here", [](LlamaConfig *c) { c->tied_embeddings = 1; }},
        {"RoPE scaling (0 none, 1 llama3) is 0 in the file, 1 here", [](LlamaConfig *c) { c->rope_scaling = ROPE_DEFAULT; }},
        {"RoPE scaling factor is 16 in the file, 8 here", [](LlamaConfig *c) { c->rope_factor = 16.0f; }},
        {"RoPE low_freq_factor is 2 in the file, 1 here", [](LlamaConfig *c) { c->rope_low_freq_factor = 2.0f; }},
        {"RoPE high_freq_factor is 5 in the file, 4 here", [](LlamaConfig *c) { c->rope_high_freq_factor = 5.0f; }},
        {"RoPE original context is 8 in the file, 16 here", [](LlamaConfig *c) { c->rope_original_T = 8; }},
    };
    char path[128], err[2048];
    path_in_dir(path, sizeof(path), "other_config.bin");
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        LlamaConfig file = run;
        words[i].change(&file);
        write_sparse_model_file(path, &file);
        LoadArgs a = {path, run};
        int status = run_expect_fatal(load_in_child, &a, err, sizeof(err));
        CHECK(status != 0 && strstr(err, path) && strstr(err, words[i].want), "a model file whose %s: exit %d: %s", words[i].want, status, err);
    }
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_ckpt_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    g_shared_run = (uint64_t *)mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    run_test("checkpoint: written to a temporary name, renamed, read back", test_checkpoint_round_trip);
    run_test("checkpoint: mismatched, corrupt, truncated, other version or kind, missing: refused", test_checkpoint_refusals);
    run_test("checkpoint: a write that fails midway leaves the previous file intact and no temporary file", test_checkpoint_crash_keeps_old);
    run_test("checkpoint: no room on the disk refused before writing, naming the directory and the bytes", test_checkpoint_space);
    run_test("checkpoint: a version-1 file (FNV-1a) still reads", test_checkpoint_version1);
    run_test("model file header: config round trip, version 1 as untied and unscaled", test_model_header);
    run_test("model file: the checksum covers the header; a byte changed in any header word is refused", test_model_file_header_checksum);
    run_test("model file: version 2 (header not under the checksum) loads with a notice from rank 0 only, a changed weight refused",
             test_model_file_version2);
    run_test("CRC-32: zlib fed in pieces gives the whole buffer's CRC (Python's zlib.crc32 values)", test_crc32_pieces);
    run_test("checkpoint: a section streamed to a sink that keeps a slice; a change outside it refused", test_section_sink);
    run_test("model file: one differing in any config word (rope_theta, eps, RoPE scaling, tied, a shape) refused naming it", test_model_config_every_word);
    run_test("checkpoint sequence on 1, 3, 8 stand-in ranks: -keep 2 leaves the run's two newest, complete on every rank; other runs' and later ones stay",
             test_keep_sequence);
    run_test("checkpoint sequence on 1, 3, 8 stand-in ranks: a rank failing mid-checkpoint, or no room, leaves nothing of it; the earlier ones complete",
             test_failure_removes_unfinished);
    run_test("checkpoint: SIGKILL at each point of a save: -y 1 takes the one before, the start-up removes the rest (saying so), -keep counts complete ones",
             test_kill_during_save);
    run_test("run identity: a fresh start into a used directory refused without -overwrite 1; runs' files kept apart; a mixed pair passed over",
             test_run_identity);
    run_test("lock: two runs racing for one directory: one runs, the other is refused naming host and pid; a killed holder frees it", test_lock_race);
    run_test("-y 1 on 1, 3, 8 stand-in ranks: a damaged or missing file of the newest checkpoint: the one before is resumed, the file named", test_pick_falls_back);
    run_test("main loop: a stop notice during a periodic checkpoint stops after it, without a second checkpoint", test_stop_during_checkpoint);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
