/*
Host-only tests of trainer code that needs no GPU (CI runs them): the checkpoint file format (a file
written and read back; every kind of bad file refused with a message, a state file of another run
naming the flag that resumes it, and a refused write never replacing the good file; the model
file's checksum covering every header word, version 2 still loading, zlib's CRC-32 fed in pieces,
a section streamed to a reader that keeps only part of it), the option
parser (its errors, that every documented flag parses, the AdamW moments' default), the
learning-rate schedule and the MFU text.
Build and run: make dev/test/test_trainer_host && ./dev/test/test_trainer_host
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
    ReadArgs r = {good, 5, 3.0f};
    CHECK(run_expect_fatal(read_sample, &r, err, sizeof(err)) == 0, "the good file no longer reads as written: %s", err);
}

static void parse_in_child(void *arg) {
    char **argv = (char **)arg;
    int argc = 0;
    while (argv[argc]) argc++;
    if (!freopen("/dev/null", "w", stdout)) return; // the usage text an unknown option prints
    Options o = parse_options(argc, argv);
    (void)o;
}

static void expect_option_error(const char *a1, const char *a2, const char *want) {
    const char *argv[] = {"train_llama_fp8", a1, a2, NULL};
    if (a2 == NULL) argv[2] = NULL;
    char err[4096];
    int status = run_expect_fatal(parse_in_child, (void *)argv, err, sizeof(err));
    CHECK(status != 0, "'%s %s' accepted", a1, a2 ? a2 : "");
    CHECK(strstr(err, want) != NULL, "'%s %s': message lacks '%s': %s", a1, a2 ? a2 : "", want, err);
}

static void test_options(void) {
    expect_option_error("-bogus", "1", "unknown option '-bogus'");
    expect_option_error("-b", "x", "wants an integer");
    expect_option_error("-l", "fast", "wants a number");
    expect_option_error("-b", NULL, "needs a value");
    // every flag of the table parses a value of its type, and lands in its own field
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *s = &OPTION_SPECS[i];
        const char *val = s->type == OPT_INT ? "3" : s->type == OPT_FLOAT ? "0.25" : "x";
        char *argv[] = {(char *)"train_llama_fp8", (char *)s->flag, (char *)val, NULL};
        Options o = parse_options(3, argv);
        const char *p = (const char *)&o + s->offset;
        int ok = s->type == OPT_INT ? *(const int *)p == 3 : s->type == OPT_FLOAT ? *(const float *)p == 0.25f : strcmp(p, "x") == 0;
        CHECK(ok, "option %s did not set its field", s->flag);
    }
}

// The state file's header of a run (state_header, as save_checkpoint writes it) and the refusal of
// one written by another run (state_expect, as load_checkpoint reads it): a mismatch in a word set
// by a flag names the flag that resumes the file. Only the fields set here differ from zero.
typedef struct { int moments_bf16, precision, B; } StateRun;
typedef struct { const char *path; StateRun run; } StateReadArgs;

static void state_run(Model *m, TrainState *ts, StateRun r) {
    memset(m, 0, sizeof(*m));
    memset(ts, 0, sizeof(*ts));
    m->opt.moments_bf16 = r.moments_bf16; m->opt.precision = r.precision; m->opt.B = r.B;
}

static void write_state_header(const char *path, StateRun r) {
    static Model m;
    TrainState ts;
    state_run(&m, &ts, r);
    int h[256];
    state_header(&m, &ts, h);
    write_sections(path, h, NULL, 0);
}

static void read_state_header(void *arg) {
    const StateReadArgs *a = (const StateReadArgs *)arg;
    static Model m;
    TrainState ts;
    state_run(&m, &ts, a->run);
    HeaderExpect ex[NUM_STATE_FIELDS];
    int n = state_expect(&m, &ts, ex);
    read_sections(a->path, STATE_MAGIC, ex, n, NULL, 0, NULL);
}

static void test_checkpoint_other_run(void) {
    char path[128], err[2048];
    path_in_dir(path, sizeof(path), "state.bin");
    StateRun fp32m = {0, PREC_FP8, 4}, bf16m = {1, PREC_FP8, 4};
    // a checkpoint with fp32 moments (every one from before bf16 became the default; a trainer before
    // -adam_moments wrote 0 there too) and a run with the default bf16 moments, then the other way round
    struct { StateRun file, run; const char *want, *what; } cases[] = {
        {fp32m, bf16m, "-adam_moments (0 fp32, 1 bf16) is 0 in the file, 1 here; to resume it, pass -adam_moments fp32 (the file's moments are fp32",
         "fp32 moments in the file, bf16 (the default) here"},
        {bf16m, fp32m, "-adam_moments (0 fp32, 1 bf16) is 1 in the file, 0 here; to resume it, pass -adam_moments bf16\n",
         "bf16 moments in the file, fp32 here"},
        {{1, PREC_FP8, 4}, {1, PREC_BF16, 4}, "precision (0 bf16, 1 fp8) is 1 in the file, 0 here; to resume it, pass -precision fp8\n",
         "fp8 in the file, bf16 here"},
        {{1, PREC_FP8, 4}, {1, PREC_FP8, 8}, "micro-batch B is 4 in the file, 8 here\n", "another B (no flag to name)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_state_header(path, cases[i].file);
        StateReadArgs a = {path, cases[i].run};
        int status = run_expect_fatal(read_state_header, &a, err, sizeof(err));
        CHECK(status != 0 && strstr(err, cases[i].want) != NULL, "%s: exit %d, message lacks '%s': %s", cases[i].what, status, cases[i].want, err);
        StateReadArgs same = {path, cases[i].file};
        CHECK(run_expect_fatal(read_state_header, &same, err, sizeof(err)) == 0, "%s: the writing run's own header refused: %s", cases[i].what, err);
    }
}

static void options_in_child(void *arg) {
    char **argv = (char **)arg;
    int argc = 0, grad_accum;
    while (argv[argc]) argc++;
    Options o = parse_options(argc, argv);
    ModelOptions mo = checked_options(&o, &grad_accum);
    fprintf(stderr, "moments_bf16 %d\n", mo.moments_bf16);
}

// bf16 AdamW moments by default (the usage text says so), fp32 by -adam_moments fp32, anything else refused.
static void test_adam_moments_option(void) {
    const char *none[] = {"train_llama_fp8", NULL}, *fp32[] = {"train_llama_fp8", "-adam_moments", "fp32", NULL},
               *bf16[] = {"train_llama_fp8", "-adam_moments", "bf16", NULL}, *fp16[] = {"train_llama_fp8", "-adam_moments", "fp16", NULL};
    char err[2048];
    CHECK(run_expect_fatal(options_in_child, (void *)none, err, sizeof(err)) == 0 && strstr(err, "moments_bf16 1\n"), "the default: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)fp32, err, sizeof(err)) == 0 && strstr(err, "moments_bf16 0\n"), "-adam_moments fp32: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)bf16, err, sizeof(err)) == 0 && strstr(err, "moments_bf16 1\n"), "-adam_moments bf16: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)fp16, err, sizeof(err)) != 0 && strstr(err, "-adam_moments must be fp32 or bf16, got 'fp16'"),
          "-adam_moments fp16: %s", err);
    Options d = default_options();
    CHECK(strcmp(d.adam_moments, "bf16") == 0, "default_options: -adam_moments '%s'", d.adam_moments);
    const char *help = NULL;
    for (int i = 0; i < NUM_OPTIONS; i++) if (strcmp(OPTION_SPECS[i].flag, "-adam_moments") == 0) help = OPTION_SPECS[i].help;
    CHECK(help && strncmp(help, "AdamW m and v in bf16", 21) == 0 && strstr(help, "or fp32"), "the usage text: '%s'", help ? help : "(none)");
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

typedef struct { const char *path; const float *want; size_t n; } ModelReadArgs;

// Reads a model file as -init_from does on the host (read_model_config, then read_sections of the
// weights); what it read must be `want`, else the child exits 3.
static void read_model_in_child(void *arg) {
    const ModelReadArgs *r = (const ModelReadArgs *)arg;
    LlamaConfig c = read_model_config(r->path);
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(&c, sizes);
    float *w = (float *)mallocCheck(n * sizeof(float));
    Section ms[] = {{w, n * sizeof(float), 0}};
    read_sections(r->path, MODEL_MAGIC, NULL, 0, ms, 1, NULL);
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
// without the trainer's writer, still loads, with a notice; a changed weight in it is still refused.
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

typedef struct { const char *init_from, *flag, *value, *tok; } ConfigArgs;

static void config_in_child(void *arg) {
    const ConfigArgs *a = (const ConfigArgs *)arg;
    char *argv[] = {(char *)"train_llama_fp8", (char *)"-init_from", (char *)a->init_from, (char *)a->flag, (char *)a->value, NULL};
    Options o = parse_options(a->flag ? 5 : 3, argv);
    Tokenizer tok;
    int have = a->tok && tokenizer_init_optional(&tok, a->tok);
    if (a->tok) strcpy(o.tokenizer_path, a->tok);
    run_model_config(&o, have ? &tok : NULL);
}

// -init_from takes the shape from the file: a shape flag beside it is refused, as is a decode table
// of another vocabulary; with neither the file's config comes back.
static void test_init_from_config(void) {
    char model[128];
    path_in_dir(model, sizeof(model), "init.bin");
    LlamaConfig c;
    config_from_preset("tiny", &c);
    int h[256];
    model_header_put(h, &c, 0);
    FILE *f = fopen(model, "wb");
    fwrite(h, sizeof(int), 256, f);
    fclose(f);
    size_t sizes[NUM_PARAM_TENSORS];
    CHECK(truncate(model, (off_t)(sizeof(h) + param_sizes(&c, sizes) * sizeof(float))) == 0, "truncate"); // the weights' size, sparse
    const char *flags[][2] = {{"-e", "125m"}, {"-L", "2"}, {"-V", "100"}, {"-rope_theta", "500000"}};
    for (int i = 0; i < 4; i++) {
        ConfigArgs a = {model, flags[i][0], flags[i][1], NULL};
        char err[2048], want[64];
        snprintf(want, sizeof(want), "%s conflicts with -init_from", flags[i][0]);
        CHECK(run_expect_fatal(config_in_child, &a, err, sizeof(err)) != 0 && strstr(err, want), "%s beside -init_from: %s", flags[i][0], err);
    }
    ConfigArgs a = {model, NULL, NULL, "dev/data/tinyshakespeare/llama3_tokenizer.bin"}; // 128256 tokens, tiny has 32000
    char err[2048];
    CHECK(run_expect_fatal(config_in_child, &a, err, sizeof(err)) != 0 && strstr(err, "has 128256 tokens but the model's vocabulary is 32000"),
          "a decode table of another vocabulary: %s", err);
    ConfigArgs ok = {model, NULL, NULL, "dev/data/tinyshakespeare/llama2_tokenizer.bin"};
    CHECK(run_expect_fatal(config_in_child, &ok, err, sizeof(err)) == 0, "the file's own config refused: %s", err);
}

static void test_lr_schedule(void) {
    float lr = 6e-4f;
    CHECK(fabsf(lr_at_step(0, 1500, lr, 100, 0.1f) - lr / 100) < 1e-9f, "first warmup step");
    CHECK(fabsf(lr_at_step(99, 1500, lr, 100, 0.1f) - lr) < 1e-9f, "end of warmup");
    CHECK(fabsf(lr_at_step(1499, 1500, lr, 100, 0.1f) - 0.1f * lr) < 1e-8f, "last step: final fraction");
    float mid = lr_at_step(100 + 1399 / 2, 1500, lr, 100, 0.1f);
    CHECK(fabsf(mid - 0.55f * lr) < 1e-6f, "cosine midpoint %g", mid);
    for (int s = 100; s < 1499; s++) CHECK(lr_at_step(s + 1, 1500, lr, 100, 0.1f) <= lr_at_step(s, 1500, lr, 100, 0.1f), "decay not monotone at %d", s);
}

static void test_mfu_text(void) {
    char buf[32];
    format_mfu(buf, sizeof(buf), 494.7e12, 989.4);
    CHECK(strcmp(buf, "50.0%") == 0, "MFU text '%s'", buf);
    format_mfu(buf, sizeof(buf), 494.7e12, gpu_bf16_peak_tflops("Some Future GPU"));
    CHECK(strcmp(buf, "n/a") == 0, "an unknown GPU's MFU must read n/a, got '%s'", buf);
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_host_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    run_test("checkpoint: written to a temporary name, renamed, read back", test_checkpoint_round_trip);
    run_test("checkpoint: mismatched, corrupt, truncated, other version or kind, missing: refused", test_checkpoint_refusals);
    run_test("checkpoint: a write that fails midway leaves the previous file intact", test_checkpoint_crash_keeps_old);
    run_test("checkpoint: a version-1 file (FNV-1a) still reads", test_checkpoint_version1);
    run_test("checkpoint: a state file of other AdamW moments or precision refused, naming the flag that resumes it", test_checkpoint_other_run);
    run_test("model file header: config round trip, version 1 as untied and unscaled", test_model_header);
    run_test("model file: the checksum covers the header; a byte changed in any header word is refused", test_model_file_header_checksum);
    run_test("model file: version 2 (header not under the checksum) loads with a notice, a changed weight refused", test_model_file_version2);
    run_test("CRC-32: zlib fed in pieces gives the whole buffer's CRC (Python's zlib.crc32 values)", test_crc32_pieces);
    run_test("checkpoint: a section streamed to a sink that keeps a slice; a change outside it refused", test_section_sink);
    run_test("-init_from: shape flags and a decode table of another vocabulary refused", test_init_from_config);
    run_test("options: errors name the problem; every documented flag parses", test_options);
    run_test("options: bf16 AdamW moments by default, fp32 with -adam_moments fp32, others refused", test_adam_moments_option);
    run_test("learning-rate schedule: warmup, cosine, final fraction", test_lr_schedule);
    run_test("MFU: percent for a known GPU, n/a for an unknown one", test_mfu_text);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
