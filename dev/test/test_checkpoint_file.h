/*
Tests of llmc/checkpoint_file.h, the checkpoint files' layout, built here as plain C without the
trainer (dev/test/test_checkpoint_host.cu runs the same code inside it, with the checkpoint sequence):
sections across chunk edges written and read back, the file's size and header; every refusal of
read_sections, read_model_config and check_model_file naming the file (cut anywhere, a byte
appended, a byte changed in any section or in an unchecked header word, another magic or version, a
checked word of another run with and without the flag that resumes it); a GPU section in a build
without CUDA refused, the old file kept and no temporary file left.
*/
#ifndef DEV_TEST_TEST_CHECKPOINT_FILE_H
#define DEV_TEST_TEST_CHECKPOINT_FILE_H

#define CKPT_CHUNK ((size_t)1024) // small: the sections below cross chunk edges
#include "harness.h" // CHECK, run_test, run_expect_fatal, file_size, copy_file
#include "llmc/checkpoint_file.h"

static char g_cf_dir[64];

static const char *cf_path(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_cf_dir, name);
    return out;
}

// The sample file: header words 2 (7) and 3 (`word3`), then three sections: 3000 floats from `first`
// (several chunks, the last one partial), an empty one, and 5 bytes.
#define CF_FLOATS 3000
typedef struct { float a[CF_FLOATS]; unsigned char b[5]; } CfBody;

static void cf_body(CfBody *body, float first) {
    for (int i = 0; i < CF_FLOATS; i++) body->a[i] = first + 0.5f * i;
    memcpy(body->b, "\x01\x02\x03\x04\x05", 5);
}

static void cf_sections(CfBody *body, Section sec[3]) {
    Section all[3] = {{body->a, sizeof(body->a), 0}, {NULL, 0, 0}, {body->b, sizeof(body->b), 0}};
    memcpy(sec, all, sizeof(all));
}

static void cf_header(int h[256], int word3) {
    memset(h, 0, 256 * sizeof(int));
    h[0] = STATE_MAGIC; h[1] = CKPT_VERSION; h[2] = 7; h[3] = word3;
}

static void cf_write(const char *path, int word3, float first) {
    static CfBody body;
    cf_body(&body, first);
    Section sec[3];
    cf_sections(&body, sec);
    int h[256];
    cf_header(h, word3);
    write_sections(path, h, sec, 3);
}

// How a file is read in a child: word 3 expected `expect3` (with the flags that resume a 0 and a 1 when
// `flags`), the sections compared with cf_write(path, ., first)'s; a difference exits 3.
typedef struct { const char *path; int expect3, flags; float first; } CfRead;

static void cf_read_child(void *arg) {
    const CfRead *r = (const CfRead *)arg;
    static CfBody body, want;
    cf_body(&want, r->first);
    Section sec[3];
    cf_sections(&body, sec);
    HeaderExpect ex[] = {{2, 7, "step"}, {3, r->expect3, "word 3", {NULL, NULL}}};
    if (r->flags) { ex[1].pass[0] = "-word3 off"; ex[1].pass[1] = "-word3 on"; }
    int h[256];
    int version = read_sections(r->path, STATE_MAGIC, ex, 2, sec, 3, h);
    if (version != CKPT_VERSION || h[2] != 7 || h[3] != r->expect3) {
        fprintf(stderr, "header read back: version %d, words %d %d\n", version, h[2], h[3]);
        exit(3);
    }
    if (memcmp(&body, &want, sizeof(body)) != 0) { fprintf(stderr, "the sections read back differ\n"); exit(3); }
}

// Copies `from` to `to` with byte `at` XORed with 0x40 (at -1: a byte appended; cut >= 0: cut to that size).
static void cf_damaged(const char *from, const char *to, long at, long cut) {
    copy_file(from, to);
    FILE *f = fopen(to, "r+b");
    if (f == NULL) return; // the check that follows fails
    if (at == -1) { fseek(f, 0, SEEK_END); fputc(0, f); }
    else if (at >= 0) {
        fseek(f, at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x40, f);
    }
    fclose(f);
    if (cut >= 0 && truncate(to, cut) != 0) fprintf(stderr, "truncate %s failed\n", to);
}

static void cf_expect_refused(const CfRead *r, const char *want, const char *what) {
    char err[2048];
    int status = run_expect_fatal(cf_read_child, (void *)r, err, sizeof(err));
    CHECK(status != 0, "%s: accepted", what);
    CHECK(status == 1, "%s: exit %d, want 1 (a refusal, not a crash or a wrong read)", what, status);
    CHECK(strstr(err, r->path) != NULL, "%s: the message does not name '%s': %s", what, r->path, err);
    CHECK(strstr(err, want) != NULL, "%s: the message lacks '%s': %s", what, want, err);
}

static void test_checkpoint_file_round_trip(void) {
    char path[128], tmp[140], err[2048];
    cf_write(cf_path(path, sizeof(path), "good.bin"), 5, 1.0f);
    static CfBody body;
    Section sec[3];
    cf_sections(&body, sec);
    long want = 256 * 4 + CF_FLOATS * 4 + 5;
    long long bytes = (long long)sections_file_bytes(sec, 3);
    CHECK(bytes == want, "sections_file_bytes %lld, want %ld", bytes, want);
    CHECK(file_size(path) == want, "the file has %ld bytes, want %ld", file_size(path), want);
    int h[256];
    CHECK(read_header(path, h) == want && h[0] == STATE_MAGIC && h[3] == 5, "read_header: %d %d", h[0], h[3]);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "the temporary file was left behind");
    CfRead r = {path, 5, 0, 1.0f};
    int status = run_expect_fatal(cf_read_child, &r, err, sizeof(err));
    CHECK(status == 0, "the file as written was refused (exit %d): %s", status, err);
    // a file shorter than a header reads as a header of zeros (read_sections refuses it)
    cf_damaged(path, cf_path(tmp, sizeof(tmp), "short.bin"), -2, 100);
    h[0] = STATE_MAGIC;
    long long got = (long long)read_header(tmp, h);
    CHECK(got == 100 && h[0] == 0, "read_header of 100 bytes: size %lld, word 0 %d", got, h[0]);
}

static void test_checkpoint_file_refusals(void) {
    char good[128], bad[128];
    cf_path(good, sizeof(good), "good.bin");
    cf_path(bad, sizeof(bad), "bad.bin");
    cf_write(good, 5, 1.0f);
    long size = file_size(good), body = 1024;
    CfRead r = {bad, 5, 0, 1.0f};
    const struct { long at, cut; const char *want, *what; } cases[] = {
        {-2, 0, "truncated", "an empty file"},
        {-2, 1000, "truncated", "a file shorter than its header"},
        {-2, size - 1, "truncated or from another configuration", "the last byte cut"},
        {-2, body + 2048, "truncated or from another configuration", "cut at a chunk edge"},
        {-1, -1, "truncated or from another configuration", "a byte appended"},
        {body, -1, "corrupt (checksum mismatch)", "the first byte of the first section changed"},
        {body + 1500, -1, "corrupt (checksum mismatch)", "a byte of its second chunk changed"},
        {size - 1, -1, "corrupt (checksum mismatch)", "the last byte of the last section changed"},
        {4 * 100, -1, "corrupt (checksum mismatch)", "header word 100 (checked by no one) changed"},
        {4 * 253, -1, "corrupt (checksum mismatch)", "the run id's high word changed"},
        {4 * 254, -1, "corrupt (checksum mismatch)", "the checksum changed"},
        {3, -1, "not a train_llama_fp8 checkpoint of this kind", "the magic changed"},
        {4, -1, "has version", "the version changed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_damaged(good, bad, cases[i].at, cases[i].cut);
        cf_expect_refused(&r, cases[i].want, cases[i].what);
    }
    copy_file(good, bad);
    CfRead other = {bad, 6, 0, 1.0f};
    cf_expect_refused(&other, "word 3 is 5 in the file, 6 here", "a checked word of another run");
    // a flag's word names the flag that resumes the file, for the file's 0 or 1; another value none
    for (int v = 0; v <= 2; v++) {
        cf_write(bad, v, 1.0f);
        CfRead flag = {bad, 3, 1, 1.0f};
        char want[128];
        snprintf(want, sizeof(want), "word 3 is %d in the file, 3 here%s", v, v == 0 ? "; to resume it, pass -word3 off"
                 : v == 1 ? "; to resume it, pass -word3 on" : "");
        cf_expect_refused(&flag, want, "a flag's word of another run");
        char err[2048];
        run_expect_fatal(cf_read_child, &flag, err, sizeof(err));
        CHECK(v < 2 || strstr(err, "to resume it") == NULL, "word 3 is 2 in the file: a flag named: %s", err);
    }
    CfRead missing = {cf_path(bad, sizeof(bad), "missing.bin"), 5, 0, 1.0f};
    cf_expect_refused(&missing, "cannot open", "a missing file");
}

// A model file's config as read_model_config reads it, in a child (a refusal exits there).
static void cf_model_config_child(void *arg) {
    LlamaConfig c = read_model_config((const char *)arg);
    (void)c;
}

static void cf_check_model_child(void *arg) { check_model_file((const char *)arg); }

static void test_checkpoint_file_model_config(void) {
    char good[128], bad[128], err[2048];
    cf_path(good, sizeof(good), "model.bin");
    cf_path(bad, sizeof(bad), "model_bad.bin");
    LlamaConfig c = {64, 2, 16, 2, 1, 32, 32, 10000.0f, 1e-5f};
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(&c, sizes);
    float *w = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = 0.001f * (float)(i % 101);
    int h[256];
    model_header_put(h, &c, 3);
    Section ms[] = {{w, n * sizeof(float), 0}};
    write_sections(good, h, ms, 1);
    int status = run_expect_fatal(cf_model_config_child, good, err, sizeof(err));
    CHECK(status == 0, "the model file as written was refused (exit %d): %s", status, err);
    LlamaConfig back = status == 0 ? read_model_config(good) : c;
    CHECK(model_config_mismatch(&c, &back) == NULL, "the config read back differs");
    long size = file_size(good);
    const struct { long at, cut; const char *want, *what; } cases[] = {
        {-2, 1023, "is truncated: shorter than its header", "a model file shorter than its header"},
        {-2, size - 4, "the config in its header needs", "a model file missing its last weight"},
        {-1, -1, "the config in its header needs", "a model file with a byte appended"},
        {4 * 3, -1, "the config in its header needs", "a model file whose L changed"},
        {0, -1, "not a train_llama_fp8 model file", "a model file whose magic changed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cf_damaged(good, bad, cases[i].at, cases[i].cut);
        status = run_expect_fatal(cf_model_config_child, bad, err, sizeof(err));
        CHECK(status == 1 && strstr(err, bad) && strstr(err, cases[i].want), "%s: exit %d, want 1 naming the file and"
              " '%s': %s", cases[i].what, status, cases[i].want, err);
    }
    // check_model_file (-init_from before the GPU) reads the weights through: a changed one is refused
    status = run_expect_fatal(cf_check_model_child, good, err, sizeof(err));
    CHECK(status == 0, "check_model_file refused the model file as written (exit %d): %s", status, err);
    cf_damaged(good, bad, size - 1, -1);
    status = run_expect_fatal(cf_check_model_child, bad, err, sizeof(err));
    CHECK(status == 1 && strstr(err, bad) && strstr(err, "corrupt (checksum mismatch)"),
          "check_model_file, the last weight changed: exit %d: %s", status, err);
    free(w);
}

// A section on the GPU cannot be copied by a build without CUDA: the write is refused, the file that
// was there stays as it was and its temporary file goes.
static void cf_gpu_section_child(void *arg) {
    static float a[300];
    int h[256];
    cf_header(h, 9);
    Section sec[] = {{a, sizeof(a), 1}};
    write_sections((const char *)arg, h, sec, 1);
}

static void test_checkpoint_file_gpu_section(void) {
    char path[128], tmp[140], err[2048];
    cf_write(cf_path(path, sizeof(path), "kept.bin"), 5, 2.0f);
    int status = run_expect_fatal(cf_gpu_section_child, path, err, sizeof(err));
    CHECK(status == 1 && strstr(err, "on the GPU in a build without CUDA"), "a GPU section: exit %d: %s", status, err);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "the refused write left '%s'", tmp);
    CfRead r = {path, 5, 0, 2.0f};
    status = run_expect_fatal(cf_read_child, &r, err, sizeof(err));
    CHECK(status == 0, "the file there before no longer reads as written (exit %d): %s", status, err);
}

static void run_checkpoint_file_tests(void) {
    strcpy(g_cf_dir, "/tmp/test_ckpt_file_XXXXXX");
    if (mkdtemp(g_cf_dir) == NULL) FATAL("mkdtemp failed: %s", strerror(errno));
    run_test("checkpoint file: sections across chunk edges written and read back, its size and header",
             test_checkpoint_file_round_trip);
    run_test("checkpoint file: cut, grown, changed in any section or header word, of another run: refused naming it",
             test_checkpoint_file_refusals);
    run_test("checkpoint file: a model file's config and checksum, refused naming the file when cut, grown or changed",
             test_checkpoint_file_model_config);
    run_test("checkpoint file: a GPU section without CUDA refused, the old file kept, no .tmp",
             test_checkpoint_file_gpu_section);
    const char *names[] = {"good.bin", "short.bin", "bad.bin", "kept.bin", "model.bin", "model_bad.bin"};
    char path[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) remove(cf_path(path, sizeof(path), names[i]));
    rmdir(g_cf_dir);
}

#endif
