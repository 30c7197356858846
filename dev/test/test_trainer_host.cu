/*
Host-only tests of trainer code that needs no GPU (CI runs them): the checkpoint file format (a file
written and read back; every kind of bad file refused with a message, a state file of another run
naming the flag that resumes it, and a refused write never replacing the good file), the option
parser (its errors, that every documented flag parses, the AdamW moments' default), the
learning-rate schedule, the MFU text, and the data loaders as open_data makes them on 1-8 stand-in
ranks (the shipped shards at the README's B x T: val positions shared once, the val loss the same);
a -i mixture's position through the state file (resumed mid-mixture, the next batches the same; a
plain glob's file as before; one of the other kind refused), and the loss scale with and without masks.
Build and run: make dev/test/test_trainer_host && ./dev/test/test_trainer_host
*/
#define TESTING
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
    h[1] = 3;
    CHECK(model_header_get(h, &back) != NULL, "version 3 accepted");
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

// ---- the data at every world size: the loaders as open_data makes them on each rank (stand-in
// ranks: a MultiGpu with only rank and world set), on the shipped TinyShakespeare

// The README's geometries: the Quick start (B 16, T 1024, -ngpu N), the -x 0 check (B 4), 7B
// (B 2, T 4096) and 8B (B 1, T 8192). Positions counted by hand: the val shard's 32,768 tokens hold
// (32768 - 1) / (B*T), the train shard's 329,450 tokens (329450 - 1) / (B*T).
static const struct { int B, T, val_positions, train_positions; } DATA_GEOMETRIES[] = {
    {16, 1024, 1, 20}, {4, 1024, 7, 80}, {2, 4096, 3, 40}, {1, 8192, 3, 40}};
static const char *const VAL_SHARDS[2] = {"dev/data/tinyshakespeare/tinyshakespeare_llama2_val.bin",
                                          "dev/data/tinyshakespeare/tinyshakespeare_llama3_val.bin"};
static const int VAL_VOCABS[2] = {32000, 128256};

typedef struct { int geometry, shard, rank, world; const char *train_pattern; int64_t train_steps; } DataRankArgs;

// A stand-in for the model's per-token losses of the batch in the loader: a function of its tokens.
static void standin_losses(const DataLoader *dl, float *losses) {
    for (int k = 0; k < dl->B * dl->T; k++) losses[k] = logf(2.0f + (float)((dl->inputs[k] * 7 + dl->targets[k]) % 1009));
}

// One rank: open_data, the train loader's steps, then the val positions evaluate() would read, its
// entries of the per-position vector written to val_<world>_<rank>.bin (zero where not its own).
// Any mismatch exits 3 with a message.
static void data_rank(void *arg) {
    const DataRankArgs *a = (const DataRankArgs *)arg;
    if (!freopen("/dev/null", "w", stdout)) exit(4); // open_data's "val data holds ..." line
    Options o = default_options();
    o.B = DATA_GEOMETRIES[a->geometry].B; o.T = DATA_GEOMETRIES[a->geometry].T;
    strcpy(o.val_pattern, VAL_SHARDS[a->shard]);
    if (a->train_pattern) strcpy(o.train_pattern, a->train_pattern);
    LlamaConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.V = VAL_VOCABS[a->shard];
    MultiGpu mg;
    memset(&mg, 0, sizeof(mg));
    mg.rank = a->rank; mg.world = a->world;
    DataLoader train, val;
    int positions = open_data(&o, &cfg, &mg, &train, &val);
    int want = DATA_GEOMETRIES[a->geometry].val_positions;
    if (positions != want) { fprintf(stderr, "%d val positions, expected %d\n", positions, want); exit(3); }
    if (train.batches_per_epoch != a->train_steps) {
        fprintf(stderr, "%lld train steps an epoch, expected %lld\n", (long long)train.batches_per_epoch, (long long)a->train_steps);
        exit(3);
    }
    int N = o.B * o.T;
    float *losses = (float *)mallocCheck(N * sizeof(float)), *position_loss = (float *)callocCheck(positions, sizeof(float));
    for (int64_t s = 0; s < dataloader_eval_steps(positions, a->world); s++) {
        int own;
        int64_t p = dataloader_eval_position(positions, a->world, a->rank, s, &own);
        dataloader_read_position(&val, p);
        standin_losses(&val, losses);
        if (own) position_loss[p] = batch_mean_loss(losses, N);
    }
    char path[128], name[64];
    snprintf(name, sizeof(name), "val_%d_%d.bin", a->world, a->rank);
    path_in_dir(path, sizeof(path), name);
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(position_loss, sizeof(float), positions, f);
    fcloseCheck(f);
    free(losses);
    free(position_loss);
    dataloader_free(&train);
    dataloader_free(&val);
}

// Every world size 1-8 starts (the val shard holds fewer positions than some of them have ranks),
// every val position is evaluated by exactly one rank, and the val loss is the same bit for bit:
// the ranks' vectors are summed here as NCCL would, entry by entry, in an order of our choosing.
static void test_data_every_world(void) {
    char err[4096];
    int ngeom = (int)(sizeof(DATA_GEOMETRIES) / sizeof(DATA_GEOMETRIES[0]));
    for (int g = 0; g < ngeom; g++) {
        for (int shard = 0; shard < 2; shard++) {
            int P = DATA_GEOMETRIES[g].val_positions;
            float loss_one_gpu = 0.0f;
            for (int W = 1; W <= 8; W++) {
                float total[8] = {0};
                int owners[8] = {0}, started = 1;
                for (int r = W - 1; r >= 0; r--) {
                    DataRankArgs a = {g, shard, r, W, NULL, DATA_GEOMETRIES[g].train_positions / W};
                    int status = run_expect_fatal(data_rank, &a, err, sizeof(err));
                    CHECK(status == 0, "B %d T %d, %s, world %d rank %d: exit %d: %s", DATA_GEOMETRIES[g].B, DATA_GEOMETRIES[g].T,
                          VAL_SHARDS[shard], W, r, status, err);
                    if (status != 0) { started = 0; continue; }
                    char path[128], name[64];
                    snprintf(name, sizeof(name), "val_%d_%d.bin", W, r);
                    path_in_dir(path, sizeof(path), name);
                    float v[8];
                    FILE *f = fopenCheck(path, "rb");
                    freadCheck(v, sizeof(float), P, f, path);
                    fcloseCheck(f);
                    remove(path);
                    for (int p = 0; p < P; p++) { total[p] += v[p]; owners[p] += v[p] != 0.0f; }
                }
                if (!started) continue;
                for (int p = 0; p < P; p++)
                    CHECK(owners[p] == 1, "B %d T %d world %d: val position %d evaluated by %d ranks", DATA_GEOMETRIES[g].B,
                          DATA_GEOMETRIES[g].T, W, p, owners[p]);
                float loss = val_loss_mean(total, P);
                if (W == 1) loss_one_gpu = loss;
                CHECK(loss == loss_one_gpu, "B %d T %d, %s: val loss %.9g on %d ranks, %.9g on one", DATA_GEOMETRIES[g].B,
                      DATA_GEOMETRIES[g].T, VAL_SHARDS[shard], loss, W, loss_one_gpu);
            }
        }
    }
}

// A train glob that also matches the val shard (32,768 tokens): at B 16 x T 1024 one GPU takes a step
// from it, 2-8 GPUs cannot (32,769 tokens needed on 2): it is left out with a warning naming it,
// printed by rank 0 only, and the train shard's 20 positions are dealt out as before.
static void test_data_small_shard_every_world(void) {
    const char *val = VAL_SHARDS[0];
    char err[4096], want[256];
    for (int W = 1; W <= 8; W++) {
        snprintf(want, sizeof(want), "warning: data shard '%s' has 32768 tokens, fewer than one step needs"
                 ": B*T*world + 1 = 16*1024*%d + 1 = %d tokens", val, W, 16384 * W + 1);
        for (int r = 0; r < W; r++) {
            DataRankArgs a = {0, 0, r, W, "dev/data/tinyshakespeare/tinyshakespeare_llama2_*.bin", W == 1 ? 21 : 20 / W};
            int status = run_expect_fatal(data_rank, &a, err, sizeof(err));
            CHECK(status == 0, "world %d rank %d: exit %d: %s", W, r, status, err);
            if (W > 1 && r == 0) CHECK(strstr(err, want) != NULL, "world %d: rank 0's stderr lacks '%s': '%s'", W, want, err);
            else CHECK(err[0] == '\0', "world %d rank %d printed '%s'", W, r, err);
        }
    }
}

// ---- mixtures through the state file, the loss scale

// A shard of n 16-bit tokens base, base + 1, ... in g_dir.
static void write_token_shard(const char *name, int base, int n) {
    char path[128];
    path_in_dir(path, sizeof(path), name);
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = SHARD_MAGIC_U16; h[1] = SHARD_VERSION_U16; h[2] = n;
    uint16_t *body = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
    for (int i = 0; i < n; i++) body[i] = (uint16_t)(base + i);
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(h, sizeof(int), 256, f);
    fwriteCheck(body, sizeof(uint16_t), n, f);
    fcloseCheck(f);
    free(body);
}

typedef struct { const char *spec, *path; int draws; } MixStateArgs;

// The train loader's state as main puts it in a checkpoint (state_header, state_sections, after
// dataloader_state_bytes has set the section's size), written with write_sections.
static void write_data_state(const char *path, DataLoader *dl, TrainState *ts) {
    static Model m;
    memset(&m, 0, sizeof(m));
    g_data_state_bytes = (int)dataloader_state_bytes(dl);
    g_data_sets = dl->num_sets;
    ts->data_mixture = dl->num_sets ? (unsigned char *)mallocCheck(g_data_state_bytes) : NULL;
    if (ts->data_mixture) dataloader_save_state(dl, ts->data_mixture);
    else ts->data = dataloader_get_state(dl);
    int h[256];
    state_header(&m, ts, h);
    Section sec[NUM_STATE_SECTIONS];
    state_sections(&m, ts, sec);
    write_sections(path, h, sec, NUM_STATE_SECTIONS);
    free(ts->data_mixture);
    ts->data_mixture = NULL;
}

// Reads a state file as load_checkpoint does into a new loader for a->spec; exits 3 unless its next
// 50 batches are those of a loader that drew a->draws batches and went on.
static void resume_data_state(void *arg) {
    const MixStateArgs *a = (const MixStateArgs *)arg;
    static Model m;
    memset(&m, 0, sizeof(m));
    DataLoader resumed, straight;
    dataloader_init(&resumed, a->spec, 2, 4, 1, 2, 1, 3, 4000);
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    g_data_state_bytes = (int)dataloader_state_bytes(&resumed);
    g_data_sets = resumed.num_sets;
    ts.data_mixture = resumed.num_sets ? (unsigned char *)mallocCheck(g_data_state_bytes) : NULL;
    HeaderExpect ex[NUM_STATE_FIELDS];
    int n = state_expect(&m, &ts, ex);
    Section sec[NUM_STATE_SECTIONS];
    state_sections(&m, &ts, sec);
    read_sections(a->path, STATE_MAGIC, ex, n, sec, NUM_STATE_SECTIONS, NULL);
    dataloader_load_state(&resumed, ts.data_mixture ? (const void *)ts.data_mixture : (const void *)&ts.data);
    dataloader_init(&straight, a->spec, 2, 4, 1, 2, 1, 3, 4000);
    for (int i = 0; i < a->draws; i++) dataloader_next_batch(&straight);
    for (int i = 0; i < 50; i++) {
        dataloader_next_batch(&straight);
        dataloader_next_batch(&resumed);
        if (memcmp(straight.inputs, resumed.inputs, 8 * sizeof(int)) || memcmp(straight.targets, resumed.targets, 8 * sizeof(int))) {
            fprintf(stderr, "batch %d after the resume differs: first input %d, the uninterrupted run's %d\n", i,
                    resumed.inputs[0], straight.inputs[0]);
            exit(3);
        }
    }
    free(ts.data_mixture);
    dataloader_free(&resumed);
    dataloader_free(&straight);
}

static void test_mixture_state_file(void) {
    write_token_shard("mixa_0.bin", 0, 161);
    write_token_shard("mixa_1.bin", 1000, 81);
    write_token_shard("mixb_0.bin", 2000, 121);
    char a[128], b[128], spec[300], path[128], plain_path[128], err[4096];
    path_in_dir(a, sizeof(a), "mixa_*.bin");
    path_in_dir(b, sizeof(b), "mixb_*.bin");
    snprintf(spec, sizeof(spec), "%s:0.7,%s:0.3", a, b);
    path_in_dir(path, sizeof(path), "mix_state.bin");
    path_in_dir(plain_path, sizeof(plain_path), "plain_state.bin");
    const int draws[3] = {1, 23, 90}; // 90 crosses both sets' epochs
    for (int i = 0; i < 3; i++) {
        DataLoader dl;
        dataloader_init(&dl, spec, 2, 4, 1, 2, 1, 3, 4000);
        for (int k = 0; k < draws[i]; k++) dataloader_next_batch(&dl);
        TrainState ts;
        memset(&ts, 0, sizeof(ts));
        write_data_state(path, &dl, &ts);
        dataloader_free(&dl);
        MixStateArgs args = {spec, path, draws[i]};
        int status = run_expect_fatal(resume_data_state, &args, err, sizeof(err));
        CHECK(status == 0, "resumed after %d draws: exit %d: %s", draws[i], status, err);
    }
    // a plain glob: the state section is the DataLoaderState, as before mixtures; word 22 is 0
    DataLoader dl;
    dataloader_init(&dl, a, 2, 4, 1, 2, 1, 3, 4000);
    for (int k = 0; k < 7; k++) dataloader_next_batch(&dl);
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    write_data_state(plain_path, &dl, &ts);
    dataloader_free(&dl);
    CHECK(file_size(plain_path) == 1024 + (long)sizeof(uint64_t) + (long)sizeof(DataLoaderState),
          "a plain glob's state file has %ld bytes", file_size(plain_path));
    MixStateArgs plain = {a, plain_path, 7};
    CHECK(run_expect_fatal(resume_data_state, &plain, err, sizeof(err)) == 0, "a plain glob's resume: %s", err);
    // one kind of file, the other kind of run: refused, naming the field
    MixStateArgs cross = {spec, plain_path, 7};
    CHECK(run_expect_fatal(resume_data_state, &cross, err, sizeof(err)) != 0 &&
          strstr(err, "data sets of the -i mixture (0: one glob) is 0 in the file, 2 here"),
          "a plain glob's state resumed by a mixture: %s", err);
    MixStateArgs cross2 = {a, path, 7};
    CHECK(run_expect_fatal(resume_data_state, &cross2, err, sizeof(err)) != 0 &&
          strstr(err, "data sets of the -i mixture (0: one glob) is 2 in the file, 0 here"),
          "a mixture's state resumed by a plain glob: %s", err);
    g_data_state_bytes = (int)sizeof(DataLoaderState);
    g_data_sets = 0;
}

// Without masks the scale is today's expression, bit for bit; with them 1 / (learned targets of the
// step on every rank), so a target weighs the same in every micro-step whatever its micro-step's count.
static void test_loss_scale(void) {
    const int shapes[][3] = {{8, 1, 1}, {16384, 4, 1}, {1024, 3, 8}, {8192, 64, 8}}; // N, grad_accum, world
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        int N = shapes[i][0], ga = shapes[i][1], world = shapes[i][2];
        float today = 1.0f / ((float)N * ga * world), got = step_loss_scale((long long)N * ga * world, N, ga, world);
        CHECK(memcmp(&today, &got, sizeof(float)) == 0, "N %d ga %d world %d: scale %.9g, without masks it was %.9g", N, ga, world,
              got, today);
    }
    CHECK(step_loss_scale(5, 8, 2, 1) == 0.2f, "5 learned targets of 16: scale %.9g, expected 0.2", step_loss_scale(5, 8, 2, 1));
    CHECK(step_loss_scale(3, 4, 1, 2) == (float)(1.0 / 3.0), "3 learned targets of 8 on 2 ranks: %.9g", step_loss_scale(3, 4, 1, 2));
    CHECK(step_loss_scale(0, 8, 2, 1) == 0.0f, "no learned target: scale %.9g, expected 0 (no gradient)", step_loss_scale(0, 8, 2, 1));
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
    run_test("-init_from: shape flags and a decode table of another vocabulary refused", test_init_from_config);
    run_test("options: errors name the problem; every documented flag parses", test_options);
    run_test("options: bf16 AdamW moments by default, fp32 with -adam_moments fp32, others refused", test_adam_moments_option);
    run_test("learning-rate schedule: warmup, cosine, final fraction", test_lr_schedule);
    run_test("MFU: percent for a known GPU, n/a for an unknown one", test_mfu_text);
    run_test("data: the README's B x T on 1-8 GPUs start; each val position evaluated once; the val loss the same", test_data_every_world);
    run_test("data: a train shard too small for one step on N GPUs is left out, named by rank 0", test_data_small_shard_every_world);
    run_test("mixture: its state through the state file resumes mid-mixture; a plain glob's file as before; the other kind refused", test_mixture_state_file);
    run_test("loss scale: today's without masks, 1 / the step's learned targets with them", test_loss_scale);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
