/*
Host-only tests of trainer code that needs no GPU (CI runs them): every state-header field of another
run refused naming it (and the flag that resumes it; the checkpoint files themselves, their names,
completion and pruning are dev/test/test_checkpoint_host.cu's), the options, table-driven
over OPTION_SPECS (its errors; every row parsed into its own field and every field in a row; each
row's ends accepted, a value below and above them or another choice refused naming the flag, the
default inside; the usage line of every row; main.log's options line with every row's value; the rules
between options in checked_options; the README's commands parsed and checked to the Options and
ModelOptions written out, model_options the defaults; the AdamW moments' and master weights' defaults), the main
loop's work after a
step (a non-finite step included) (the launch decision and the stop signals: test_launcher_host.cu),
the learning-rate schedule, the MFU text, and the data loaders as open_data makes them on 1-8
stand-in ranks (the shipped shards at the README's B x T: val positions shared once, the val loss
the same; the line saying the val data holds fewer batches than -m; -x 0's, which read no -i, check its
val data and leave a resumed checkpoint's data record unread);
a -i mixture's position through the state file (resumed mid-mixture, the next batches the same; a
plain glob's file as before; one of the other kind refused), and the loss scale with and without masks.
Build and run: make dev/test/test_trainer_host && ./dev/test/test_trainer_host
*/
#define TESTING
#define CKPT_CHUNK ((size_t)1024) // small: the test files cross chunk edges
#include "train_llama_fp8.cu"
#include <signal.h>
#include <pthread.h>
#include <sys/resource.h>
#include "dev/test/harness.h" // CHECK, run_test, run_expect_fatal, write_sparse_model_file

static char g_dir[64];

static void path_in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

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

// The state file's header of a run (state_header, as save_checkpoint writes it) and the refusal of
// one written by another run (state_expect, as load_checkpoint reads it): a mismatch in a word set
// by a flag names the flag that resumes the file. Only the fields set here differ from zero.
typedef struct { int moments_bf16, precision, B, fp8_fallback, master_bf16; } StateRun;
typedef struct { const char *path; StateRun run; } StateReadArgs;

static void state_run(Model *m, TrainState *ts, StateRun r) {
    memset(m, 0, sizeof(*m));
    memset(ts, 0, sizeof(*ts));
    m->opt.moments_bf16 = r.moments_bf16; m->opt.precision = r.precision; m->opt.B = r.B; m->opt.fp8_fallback = r.fp8_fallback;
    m->opt.master_bf16 = r.master_bf16;
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
        {{1, PREC_FP8, 4, FP8_GRAIN_BLOCK}, {1, PREC_FP8, 4, 0},
         "-fp8_fallback (0 off, 1 block, 2 bf16, 3 row) is 1 in the file, 0 here; to resume it, pass -fp8_fallback block\n",
         "a run of -fp8_fallback block resumed without it"},
        {{1, PREC_FP8, 4, 0}, {1, PREC_FP8, 4, FP8_GRAIN_BF16}, "-fp8_fallback (0 off, 1 block, 2 bf16, 3 row) is 0 in the file, 2 here; to resume it, pass -fp8_fallback off\n",
         "a run without the fallback resumed with -fp8_fallback bf16"},
        {{1, PREC_FP8, 4, FP8_GRAIN_BF16}, {1, PREC_FP8, 4, FP8_GRAIN_BLOCK}, "-fp8_fallback (0 off, 1 block, 2 bf16, 3 row) is 2 in the file, 1 here\n",
         "a run of -fp8_fallback bf16 resumed with -fp8_fallback block"},
        // fp32 master weights (every checkpoint from before the flag) resumed with bf16 ones, and the other way round
        {{1, PREC_FP8, 4, 0, 0}, {1, PREC_FP8, 4, 0, 1},
         "-master_weights (0 fp32, 1 bf16) is 0 in the file, 1 here; to resume it, pass -master_weights fp32\n",
         "fp32 master weights in the file, bf16 here"},
        {{1, PREC_FP8, 4, 0, 1}, {1, PREC_FP8, 4, 0, 0},
         "-master_weights (0 fp32, 1 bf16) is 1 in the file, 0 here; to resume it, pass -master_weights bf16\n",
         "bf16 master weights in the file, fp32 (the default) here"},
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

// checked_options as main calls it: with the decode table of -tok if there is one (the default,
// TinyShakespeare's Llama 2 table, is in the repository).
static ModelOptions checked_options_of(Options *o, int *grad_accum) {
    Tokenizer tok;
    int have_tok = tokenizer_init_optional(&tok, o->tokenizer_path);
    LlamaConfig cfg; // main's shape (run_model_config), but -init_from's file is not read here: its preset stands in
    if (o->init_from[0] == '\0') cfg = run_model_config(o, have_tok ? &tok : NULL);
    else if (!config_from_preset(run_preset(o), &cfg)) { fprintf(stderr, "no preset '%s'\n", run_preset(o)); exit(4); }
    ModelOptions mo = checked_options(o, &cfg, have_tok ? &tok : NULL, grad_accum);
    if (have_tok) tokenizer_free(&tok);
    return mo;
}

static void options_in_child(void *arg) {
    char **argv = (char **)arg;
    int argc = 0, grad_accum;
    while (argv[argc]) argc++;
    Options o = parse_options(argc, argv);
    ModelOptions mo = checked_options_of(&o, &grad_accum);
    fprintf(stderr, "moments_bf16 %d master_bf16 %d doc_mask %d doc_start_id %d\n", mo.moments_bf16, mo.master_bf16,
            mo.doc_mask, mo.doc_start_id);
}

// bf16 AdamW moments by default (the usage text says so), fp32 by -adam_moments fp32, anything else refused.
static void test_adam_moments_option(void) {
    const char *none[] = {"train_llama_fp8", NULL}, *fp32[] = {"train_llama_fp8", "-adam_moments", "fp32", NULL},
               *bf16[] = {"train_llama_fp8", "-adam_moments", "bf16", NULL}, *fp16[] = {"train_llama_fp8", "-adam_moments", "fp16", NULL};
    char err[2048];
    CHECK(run_expect_fatal(options_in_child, (void *)none, err, sizeof(err)) == 0 && strstr(err, "moments_bf16 1 "), "the default: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)fp32, err, sizeof(err)) == 0 && strstr(err, "moments_bf16 0 "), "-adam_moments fp32: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)bf16, err, sizeof(err)) == 0 && strstr(err, "moments_bf16 1 "), "-adam_moments bf16: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)fp16, err, sizeof(err)) != 0 && strstr(err, "-adam_moments must be fp32 or bf16, got 'fp16'"),
          "-adam_moments fp16: %s", err);
    Options d = default_options();
    CHECK(d.model.moments_bf16 == 1, "default_options: moments_bf16 %d", d.model.moments_bf16);
    const char *help = NULL;
    for (int i = 0; i < NUM_OPTIONS; i++) if (strcmp(OPTION_SPECS[i].flag, "-adam_moments") == 0) help = OPTION_SPECS[i].help;
    CHECK(help && strncmp(help, "AdamW m and v in bf16", 21) == 0 && strstr(help, "or fp32"), "the usage text: '%s'", help ? help : "(none)");
}

// fp32 master weights by default (the most accurate recipe), bf16 by -master_weights bf16, anything else
// refused naming the choices.
static void test_master_weights_option(void) {
    const char *none[] = {"train_llama_fp8", NULL}, *fp32[] = {"train_llama_fp8", "-master_weights", "fp32", NULL},
               *bf16[] = {"train_llama_fp8", "-master_weights", "bf16", NULL},
               *fp16[] = {"train_llama_fp8", "-master_weights", "fp16", NULL};
    char err[2048];
    CHECK(run_expect_fatal(options_in_child, (void *)none, err, sizeof(err)) == 0 && strstr(err, "master_bf16 0 "),
          "the default: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)fp32, err, sizeof(err)) == 0 && strstr(err, "master_bf16 0 "),
          "-master_weights fp32: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)bf16, err, sizeof(err)) == 0 && strstr(err, "master_bf16 1 "),
          "-master_weights bf16: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)fp16, err, sizeof(err)) != 0 &&
          strstr(err, "-master_weights must be fp32 or bf16, got 'fp16'"), "-master_weights fp16: %s", err);
    Options d = default_options();
    CHECK(d.model.master_bf16 == 0, "default_options: master_bf16 %d", d.model.master_bf16);
    const char *help = NULL;
    for (int i = 0; i < NUM_OPTIONS; i++)
        if (strcmp(OPTION_SPECS[i].flag, "-master_weights") == 0) help = OPTION_SPECS[i].help;
    CHECK(help && strstr(help, "fp32 (the most accurate) or bf16"), "the usage text: '%s'", help ? help : "(none)");
}

// The value a choice row's word stores (-1: no such word).
static int word_value(const OptWord *words, const char *word) {
    for (; words->word; words++) if (strcmp(words->word, word) == 0) return words->value;
    return -1;
}

// A text or choice row's value goes into main.log and the usage text in quotes.
static int option_quoted(const OptSpec *s) { return s->type == OPT_STR || s->type == OPT_CHOICE; }

// Every choice row's words and the values they store, written out here (what model_options_of made of
// the words before the rows stored values): each word parses to its value, format_option (main.log)
// gives the word back, and every word of every row is in this table.
static void test_option_words(void) {
    const struct { const char *flag, *word; int value; } WORDS[] = {
        {"-precision", "fp8", PREC_FP8}, {"-precision", "bf16", PREC_BF16},
        {"-adam_moments", "fp32", 0}, {"-adam_moments", "bf16", 1},
        {"-master_weights", "fp32", 0}, {"-master_weights", "bf16", 1},
        {"-data_changed", "refuse", 0}, {"-data_changed", "continue", 1},
        {"-fp8_recipe", "delayed", 0}, {"-fp8_recipe", "current", 1},
        {"-fp8_grain", "tensor", FP8_GRAIN_TENSOR}, {"-fp8_grain", "block", FP8_GRAIN_BLOCK}, {"-fp8_grain", "row", FP8_GRAIN_ROW},
        {"-fp8_fallback", "off", 0}, {"-fp8_fallback", "block", FP8_GRAIN_BLOCK}, {"-fp8_fallback", "bf16", FP8_GRAIN_BF16},
        {"-fp8_fallback", "row", FP8_GRAIN_ROW},
    };
    const int n = (int)(sizeof(WORDS) / sizeof(WORDS[0]));
    int words_in_rows = 0;
    for (int i = 0; i < NUM_OPTIONS; i++)
        for (const OptWord *w = OPTION_SPECS[i].words; OPTION_SPECS[i].type == OPT_CHOICE && w->word; w++) words_in_rows++;
    CHECK(words_in_rows == n, "the choice rows have %d words, this test %d", words_in_rows, n);
    for (int k = 0; k < n; k++) {
        const OptSpec *s = NULL;
        for (int i = 0; i < NUM_OPTIONS; i++) if (strcmp(OPTION_SPECS[i].flag, WORDS[k].flag) == 0) s = &OPTION_SPECS[i];
        CHECK(s && s->type == OPT_CHOICE, "%s is no choice row", WORDS[k].flag);
        if (!s || s->type != OPT_CHOICE) continue;
        char *argv[] = {(char *)"train_llama_fp8", (char *)WORDS[k].flag, (char *)WORDS[k].word, NULL};
        Options o = parse_options(3, argv);
        int got = *(const int *)((const char *)&o + s->offset);
        char text[64], want[64];
        format_option(text, sizeof(text), s, &o);
        snprintf(want, sizeof(want), "'%s'", WORDS[k].word);
        CHECK(got == WORDS[k].value, "%s %s stores %d, want %d", WORDS[k].flag, WORDS[k].word, got, WORDS[k].value);
        CHECK(strcmp(text, want) == 0, "%s %s: main.log says %s", WORDS[k].flag, WORDS[k].word, text);
    }
}

// A value of the row's type inside its range or choices, other than its default: what the parse
// must put into the row's own field.
static void other_value(const OptSpec *s, char *out, size_t n) {
    if (s->type == OPT_INT) {
        long d = strtol(s->def, NULL, 10);
        snprintf(out, n, "%ld", d == (long)s->min ? (long)s->min + 1 : (long)s->min);
    } else if (s->type == OPT_FLOAT) {
        snprintf(out, n, "%g", s->min + 0.25); // every float row's default is another value
    } else if (s->type == OPT_CHOICE) {
        int first_is_default = strcmp(s->words[0].word, s->def) == 0;
        snprintf(out, n, "%s", s->words[first_is_default].word);
    } else {
        snprintf(out, n, "x");
    }
}

static void test_options(void) {
    expect_option_error("-bogus", "1", "unknown option '-bogus'");
    expect_option_error("-b", "x", "wants an integer");
    expect_option_error("-l", "fast", "wants a number");
    expect_option_error("-b", NULL, "needs a value");
    // every row parses a value of its type, and lands in its own field
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *s = &OPTION_SPECS[i];
        char val[64];
        other_value(s, val, sizeof(val));
        char *argv[] = {(char *)"train_llama_fp8", (char *)s->flag, val, NULL};
        Options o = parse_options(3, argv), d = default_options();
        const char *p = (const char *)&o + s->offset;
        int ok = s->type == OPT_INT      ? *(const int *)p == atoi(val)
                 : s->type == OPT_FLOAT  ? *(const float *)p == strtof(val, NULL)
                 : s->type == OPT_CHOICE ? *(const int *)p == word_value(s->words, val)
                                         : strcmp(p, val) == 0;
        CHECK(ok, "option %s %s did not set its field", s->flag, val);
        memcpy((char *)&d + s->offset, p, s->size);
        CHECK(memcmp(&d, &o, sizeof(o)) == 0, "option %s %s changed another field", s->flag, val);
    }
    // every field of Options has its row (the rows cover every byte but the struct's end padding), but
    // the model's fields derived from several options (checked_options)
    static unsigned char covered[sizeof(Options)];
    memset(covered, 0, sizeof(covered));
    for (int i = 0; i < NUM_OPTIONS; i++) memset(covered + OPTION_SPECS[i].offset, 1, OPTION_SPECS[i].size);
    memset(covered + offsetof(Options, model.doc_start_id), 1, sizeof(int));
    memset(covered + offsetof(Options, model.fp8_fallback_millionths), 1, sizeof(int));
    size_t last = 0;
    for (size_t b = 0; b < sizeof(Options); b++) if (covered[b]) last = b + 1;
    for (size_t b = 0; b < last; b++) CHECK(covered[b], "byte %zu of Options is in no row's field", b);
    CHECK(sizeof(Options) - last < 4, "the last %zu bytes of Options are in no row's field", sizeof(Options) - last);
}

typedef struct { const char *flag, *value; } OptionArg;

static void one_option_in_child(void *arg) {
    const OptionArg *a = (const OptionArg *)arg;
    char *argv[] = {(char *)"train_llama_fp8", (char *)a->flag, (char *)a->value, NULL};
    Options o = parse_options(3, argv);
    (void)o;
}

static int option_refused(const char *flag, const char *value, char *err, size_t n) {
    OptionArg a = {flag, value};
    return run_expect_fatal(one_option_in_child, &a, err, n) != 0;
}

// Every row: its ends accepted, a value just below and just above refused with a message naming the
// flag (beyond the type's own end: a number that does not fit); a choice row: each choice accepted,
// another refused; the default inside the range.
static void test_option_ranges(void) {
    char err[2048], named[64], v[64];
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *s = &OPTION_SPECS[i];
        snprintf(named, sizeof(named), "option %s ", s->flag);
        if (s->type == OPT_STR) continue; // any text (its length: test_options' errors)
        if (s->type == OPT_CHOICE) {
            for (const OptWord *w = s->words; w->word; w++)
                CHECK(!option_refused(s->flag, w->word, err, sizeof(err)), "%s %s (a choice) refused: %s", s->flag, w->word,
                      err);
            CHECK(option_refused(s->flag, "nope", err, sizeof(err)) && strstr(err, named) && strstr(err, "'nope'"),
                  "%s nope: not refused naming the flag: %s", s->flag, err);
            OptionArg a = {s->flag, s->def};
            CHECK(run_expect_fatal(one_option_in_child, &a, err, sizeof(err)) == 0, "%s's default '%s' is no choice: %s", s->flag, s->def, err);
            continue;
        }
        double d = strtod(s->def, NULL);
        CHECK(d >= s->min && d <= s->max, "%s's default %s is outside [%g, %g]", s->flag, s->def, s->min, s->max);
        const char *fmt = s->type == OPT_INT ? "%.0f" : "%.9g";
        double top = s->type == OPT_INT ? (double)INT_MAX : (double)FLT_MAX;
        snprintf(v, sizeof(v), fmt, s->min);
        CHECK(!option_refused(s->flag, v, err, sizeof(err)), "%s %s (its lowest) refused: %s", s->flag, v, err);
        snprintf(v, sizeof(v), fmt, s->max);
        CHECK(!option_refused(s->flag, v, err, sizeof(err)), "%s %s (its highest) refused: %s", s->flag, v, err);
        double below = s->type == OPT_INT ? s->min - 1 : s->min - 0.5, above = s->type == OPT_INT ? s->max + 1 : s->max + 1e-6;
        snprintf(v, sizeof(v), fmt, below);
        CHECK(option_refused(s->flag, v, err, sizeof(err)) && strstr(err, named), "%s %s (below its range) not refused naming the flag: %s", s->flag, v, err);
        if (s->max == top) snprintf(v, sizeof(v), s->type == OPT_INT ? "2147483648" : "1e39");
        else snprintf(v, sizeof(v), fmt, above);
        CHECK(option_refused(s->flag, v, err, sizeof(err)) && strstr(err, named), "%s %s (above its range) not refused naming the flag: %s", s->flag, v, err);
    }
    // the margin's end is within fp8_scaling.cuh's (the later check there names a function, not the flag)
    for (int i = 0; i < NUM_OPTIONS; i++) {
        if (strcmp(OPTION_SPECS[i].flag, "-fp8_margin") != 0) continue;
        CHECK(OPTION_SPECS[i].min == 0 && OPTION_SPECS[i].max == 100, "-fp8_margin's range [%g, %g], fp8_check_margin's [0, 100]",
              OPTION_SPECS[i].min, OPTION_SPECS[i].max);
    }
    CHECK(option_refused("-fp8_margin", "-1", err, sizeof(err)) && strstr(err, "option -fp8_margin must be in [0, 100], got -1"), "-fp8_margin -1: %s", err);
    CHECK(option_refused("-fp8_margin", "500", err, sizeof(err)) && strstr(err, "option -fp8_margin must be in [0, 100], got 500"), "-fp8_margin 500: %s", err);
}

static void usage_in_child(void *arg) {
    if (!freopen((const char *)arg, "w", stdout)) exit(4);
    options_usage("train_llama_fp8", OPTIONS_ABOUT, OPTION_SPECS, NUM_OPTIONS);
    fflush(stdout); // the child leaves by _exit
}

// The usage text: a line per row with its help, its default and its range or choices.
static void test_usage(void) {
    char path[128], err[1024];
    path_in_dir(path, sizeof(path), "usage.txt");
    CHECK(run_expect_fatal(usage_in_child, path, err, sizeof(err)) == 0, "options_usage: %s", err);
    FILE *f = fopen(path, "r");
    static char text[65536];
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *s = &OPTION_SPECS[i];
        char head[64], want[600];
        snprintf(head, sizeof(head), "\n  %-13s %s (default ", s->flag, "");
        head[strlen(head) - strlen(" (default ")] = '\0';
        const char *line = strstr(text, head);
        CHECK(line != NULL, "usage: no line for %s", s->flag);
        if (!line) continue;
        const char *eol = strchr(line + 1, '\n');
        char row[4096];
        snprintf(row, sizeof(row), "%.*s", (int)(eol ? eol - line : (long)strlen(line)), line);
        CHECK(strstr(row, s->help) != NULL, "usage: %s's line lacks its help: %s", s->flag, row);
        snprintf(want, sizeof(want), option_quoted(s) ? "(default '%s'" : "(default %s", s->def);
        CHECK(strstr(row, want) != NULL, "usage: %s's line lacks '%s': %s", s->flag, want, row);
        if (s->type == OPT_CHOICE) {
            for (const OptWord *w = s->words; w->word; w++)
                CHECK(strstr(strstr(row, "(default"), w->word) != NULL, "usage: %s's line lacks the choice %s: %s", s->flag,
                      w->word, row);
        } else if (s->type != OPT_STR) {
            double top = s->type == OPT_INT ? (double)INT_MAX : (double)FLT_MAX;
            if (s->type == OPT_INT && s->min == 0 && s->max == 1) snprintf(want, sizeof(want), "; 0 or 1)");
            else if (s->max == top) snprintf(want, sizeof(want), "; >= %g)", s->min);
            else snprintf(want, sizeof(want), "; in [%g, %g])", s->min, s->max);
            CHECK(strstr(row, want) != NULL, "usage: %s's line lacks its range '%s': %s", s->flag, want, row);
        }
    }
}

// main.log's options line: every row's flag with the run's value, -fp8_margin's too (the '#' line before
// it: test_step_host's run log tests).
static void test_log_header(void) {
    Options o = default_options();
    char typed[NUM_OPTIONS][64];
    for (int i = 0; i < NUM_OPTIONS; i++) {
        other_value(&OPTION_SPECS[i], typed[i], sizeof(typed[i]));
        set_option(&o, &OPTION_SPECS[i], typed[i]);
    }
    char *line = options_line(OPTION_SPECS, NUM_OPTIONS, &o);
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *s = &OPTION_SPECS[i];
        char want[128];
        snprintf(want, sizeof(want), option_quoted(s) ? " %s '%s'" : " %s %s", s->flag, typed[i]);
        const char *at = strstr(line, want);
        char next = at ? at[strlen(want)] : '\0';
        CHECK(at && (next == ' ' || next == '\0'), "main.log's options line lacks '%s': %s", want, line);
    }
    CHECK(line[0] == ' ' && strstr(line, " -fp8_margin 1 "), "main.log does not say margin 1: %s", line);
    free(line);
}

// The rules between options (and with the model's shape), refused by checked_options naming them.
static void test_option_rules(void) {
    const char *cases[][12] = {
        {"-fp8_lm_head 1 needs -precision fp8", "-fp8_lm_head", "1", "-precision", "bf16"},
        {"-fp8_lm_head 1 cannot be used with tied embeddings", "-fp8_lm_head", "1", "-e", "smollm2-135m"},
        {"-fp8_dump 1 needs -precision fp8 and a log directory (-o)", "-fp8_dump", "1", "-o", ""},
        {"-fp8_dump 1 needs -precision fp8 and a log directory (-o)", "-fp8_dump", "1", "-precision", "bf16"},
        {"-y 1 needs a log directory (-o)", "-y", "1", "-o", ""},
        {"-hs_preds 'p.txt' needs a HellaSwag file (-hs)", "-hs_preds", "p.txt"},
        {"-d 1000 (total batch tokens) must be a multiple of B*T*ngpu = 16*1024*1", "-d", "1000"},
        {"-d 16384 (total batch tokens) must be a multiple of B*T*ngpu = 16*1024*2", "-ngpu", "2", "-d", "16384"},
        {"fp8 GEMMs need C, FF and B*T to be multiples of 16", "-b", "1", "-t", "8"},
        {"-b 65536 times -t 65536 is more than 2^31 - 1 tokens", "-b", "65536", "-t", "65536"},
        {"-doc_mask 1 needs the decode table's document-start id: no decode table at -tok ''", "-doc_mask", "1", "-tok", ""},
        {"-doc_mask 1 needs the decode table's document-start id: no decode table at -tok 'none.bin'", "-doc_mask", "1", "-tok", "none.bin"},
        {"-fp8_grain block needs -precision fp8", "-fp8_grain", "block", "-precision", "bf16"},
        {"-fp8_fallback block needs -precision fp8", "-fp8_fallback", "block", "-precision", "bf16"},
        {"-fp8_fallback bf16 needs -precision fp8", "-fp8_fallback", "bf16", "-precision", "bf16"},
        {"-fp8_fallback bf16 moves per-tensor linears, and -fp8_grain block leaves none", "-fp8_fallback", "bf16", "-fp8_grain", "block"},
        {"-fp8_fallback_threshold 0.05 needs -fp8_fallback block, bf16 or row", "-fp8_fallback_threshold", "0.05"},
        {"-fp8_fallback_patience 5 needs -fp8_fallback block, bf16 or row", "-fp8_fallback_patience", "5"},
        {"-fp8_fallback block moves per-tensor linears, and -fp8_grain row leaves none", "-fp8_fallback", "block", "-fp8_grain", "row"},
        {"-fp8_grain row needs -precision fp8", "-fp8_grain", "row", "-precision", "bf16"},
    };
    char err[2048];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[12] = {"train_llama_fp8"};
        for (int k = 1; k < 12 && cases[i][k]; k++) argv[k] = cases[i][k];
        CHECK(run_expect_fatal(options_in_child, (void *)argv, err, sizeof(err)) != 0 && strstr(err, cases[i][0]), "'%s %s ...' not refused with '%s': %s", argv[1], argv[2], cases[i][0], err);
    }
    const char *fine[][8] = {
        {"-fp8_lm_head", "1"}, {"-fp8_dump", "1"}, {"-precision", "bf16", "-b", "1", "-t", "8"},
        {"-e", "smollm2-135m", "-precision", "bf16", "-fp8_lm_head", "0"}, {"-hs_preds", "p.txt", "-hs", "h.bin"}, {"-ngpu", "2", "-d", "65536"},
        {"-fp8_grain", "block", "-fp8_lm_head", "1"}, {"-fp8_fallback", "bf16", "-fp8_fallback_threshold", "0.05", "-fp8_fallback_patience", "5"},
        {"-precision", "bf16", "-fp8_grain", "tensor", "-fp8_fallback", "off"},
    };
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        const char *argv[10] = {"train_llama_fp8"};
        for (int k = 0; k < 8 && fine[i][k]; k++) argv[k + 1] = fine[i][k];
        CHECK(run_expect_fatal(options_in_child, (void *)argv, err, sizeof(err)) == 0, "'%s %s' refused: %s", argv[1], argv[2], err);
    }
    // -doc_mask 1 with the default decode table: its document-start id, Llama 2's BOS
    const char *doc_mask[] = {"train_llama_fp8", "-doc_mask", "1", NULL};
    CHECK(run_expect_fatal(options_in_child, (void *)doc_mask, err, sizeof(err)) == 0 && strstr(err, "doc_mask 1 doc_start_id 1\n"),
          "-doc_mask 1 with the default decode table: %s", err);
}

// ---- fp8 grains (issue 34): what the options make of them, the grains through the state file

static void grain_options_in_child(void *arg) {
    char **argv = (char **)arg;
    int argc = 0, grad_accum;
    while (argv[argc]) argc++;
    Options o = parse_options(argc, argv);
    ModelOptions mo = checked_options_of(&o, &grad_accum);
    char block[32], row[32];
    const char *b = fp8_grain_flag(&mo, FP8_GRAIN_BLOCK, block), *r = fp8_grain_flag(&mo, FP8_GRAIN_ROW, row);
    fprintf(stderr, "grain %d fallback %d millionths %d patience %d block check %s row check %s\n", mo.fp8_grain,
            mo.fp8_fallback, mo.fp8_fallback_millionths, mo.fp8_fallback_patience, b ? b : "none", r ? r : "none");
}

// The model's options of the grain flags (0 where no fallback runs, as the state file's words are), and
// the flags that main's block and row GEMM checks name: the one that asks for that grain, none for bf16.
static void test_fp8_grain_options(void) {
    struct { const char *argv[10]; const char *want; } cases[] = {
        {{"train_llama_fp8"}, "grain 0 fallback 0 millionths 0 patience 0 block check none row check none\n"},
        {{"train_llama_fp8", "-fp8_grain", "block"},
         "grain 1 fallback 0 millionths 0 patience 0 block check -fp8_grain block row check none\n"},
        {{"train_llama_fp8", "-fp8_fallback", "block"},
         "grain 0 fallback 1 millionths 10000 patience 3 block check -fp8_fallback block row check none\n"},
        {{"train_llama_fp8", "-fp8_fallback", "bf16", "-fp8_fallback_threshold", "0.0025", "-fp8_fallback_patience", "1"},
         "grain 0 fallback 2 millionths 2500 patience 1 block check none row check none\n"},
        {{"train_llama_fp8", "-precision", "bf16"}, "grain 0 fallback 0 millionths 0 patience 0 block check none row check none\n"},
        {{"train_llama_fp8", "-fp8_grain", "row"}, "grain 3 fallback 0 millionths 0 patience 0 block check none row check -fp8_grain row\n"},
        {{"train_llama_fp8", "-fp8_fallback", "row"},
         "grain 0 fallback 3 millionths 10000 patience 3 block check none row check -fp8_fallback row\n"},
    };
    char err[2048];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int status = run_expect_fatal(grain_options_in_child, (void *)cases[i].argv, err, sizeof(err));
        CHECK(status == 0 && strstr(err, cases[i].want), "'%s %s ...': exit %d, printed '%s' (want '%s')", cases[i].argv[1] ? cases[i].argv[1] : "",
              cases[i].argv[2] ? cases[i].argv[2] : "", status, err, cases[i].want);
    }
}

// A state file's grains and steps over the threshold as a fallback run of the tiny shape writes them
// (layer 0's wo fallen back to bf16 after 3 steps over, layer 1's w13 2 steps over), read back by a
// run of the same flags into a new model: the same bytes, one grain change (the switched wo, which
// needs no buffer of its own), the file's size. A file whose grain this run cannot have (block
// under -fp8_fallback bf16, a byte past the grains) refused naming the file and the linear.
typedef struct { const char *path; int expect_change; } GrainReadArgs;

static void grain_model(Model *m, TrainState *ts) {
    memset(m, 0, sizeof(*m));
    memset(ts, 0, sizeof(*ts));
    config_from_preset("tiny", &m->cfg);
    m->opt.B = 2; m->opt.T = 32; m->opt.precision = PREC_FP8;
    m->opt.fp8_fallback = FP8_GRAIN_BF16; m->opt.fp8_fallback_millionths = 10000; m->opt.fp8_fallback_patience = 3;
    m->fp8.on = 1; m->fp8.w_cache = 1;
    Linears *L = &m->linears; // the host part linears_resumed reads: shapes, grains, no device buffers
    L->cfg = m->cfg;
    L->sh.o = linear_options(&m->opt, m->fp8, 1);
    L->count = fp8_num_linears(&m->cfg, 0);
    L->grain = (unsigned char *)callocCheck(L->count, 1);
    L->over_steps = (int *)callocCheck(L->count, sizeof(int));
    L->all = (Linear *)callocCheck(L->count, sizeof(Linear));
    for (int i = 0; i < L->count; i++) L->all[i] = linear_shape(&m->cfg, &L->sh.o, i / LINS_PER_LAYER, i % LINS_PER_LAYER);
}

static void read_grains(void *arg) {
    const GrainReadArgs *a = (const GrainReadArgs *)arg;
    static Model m;
    TrainState ts;
    grain_model(&m, &ts);
    HeaderExpect ex[NUM_STATE_FIELDS];
    int n = state_expect(&m, &ts, ex);
    Section sec[NUM_STATE_SECTIONS];
    state_sections(&m, &ts, sec);
    read_sections(a->path, STATE_MAGIC, ex, n, sec, NUM_STATE_SECTIONS, NULL);
    linears_resumed(&m.linears, a->path);
    int nlin = fp8_num_linears(&m.cfg, 0), bad = 0;
    for (int i = 0; i < nlin; i++) {
        int want_grain = i == fp8_linear(&m.cfg, 0, LIN_WO) ? FP8_GRAIN_BF16 : FP8_GRAIN_TENSOR;
        int want_over = i == fp8_linear(&m.cfg, 0, LIN_WO) ? 3 : i == fp8_linear(&m.cfg, 1, LIN_W13) ? 2 : 0;
        if (m.linears.grain[i] != want_grain || m.linears.over_steps[i] != want_over) {
            fprintf(stderr, "linear %d read back as grain %d after %d steps over, want %d after %d\n", i, m.linears.grain[i], m.linears.over_steps[i],
                    want_grain, want_over);
            bad = 1;
        }
    }
    if (m.linears.grain_changes != a->expect_change) { fprintf(stderr, "%d grain changes, want %d\n", m.linears.grain_changes, a->expect_change); bad = 1; }
    if (bad) exit(3);
}

static void test_fp8_grain_state_file(void) {
    char path[128], err[2048];
    path_in_dir(path, sizeof(path), "grain_state.bin");
    static Model m;
    TrainState ts;
    grain_model(&m, &ts);
    int nlin = fp8_num_linears(&m.cfg, 0), wo = fp8_linear(&m.cfg, 0, LIN_WO), w13 = fp8_linear(&m.cfg, 1, LIN_W13);
    m.linears.grain[wo] = FP8_GRAIN_BF16;
    m.linears.over_steps[wo] = 3;
    m.linears.over_steps[w13] = 2;
    int h[256];
    Section sec[NUM_STATE_SECTIONS];
    state_header(&m, &ts, h);
    state_sections(&m, &ts, sec);
    write_sections(path, h, sec, NUM_STATE_SECTIONS);
    long want_size = 1024 + nlin * (1 + (long)sizeof(int)) + (long)sizeof(uint64_t); // no loader here: its record is empty
    CHECK(file_size(path) == want_size, "the state file has %ld bytes, want %ld (header, %d grains, %d int32 counts, rng)",
          file_size(path), want_size, nlin, nlin);
    GrainReadArgs same = {path, 1};
    int status = run_expect_fatal(read_grains, &same, err, sizeof(err));
    CHECK(status == 0, "the grains read back: exit %d: %s", status, err);
    const struct { int linear, grain; const char *want; } bad[] = {
        {fp8_linear(&m.cfg, 1, LIN_W2), FP8_GRAIN_BLOCK, "fp8 linear 7 (layer 1 w2) has grain 1, which a run of -fp8_grain tensor -fp8_fallback bf16 cannot have"},
        {fp8_linear(&m.cfg, 0, LIN_QKV), 7, "fp8 linear 0 (layer 0 qkv) has grain 7, which a run of -fp8_grain tensor -fp8_fallback bf16 cannot have"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m.linears.grain[bad[i].linear] = (unsigned char)bad[i].grain;
        write_sections(path, h, sec, NUM_STATE_SECTIONS);
        m.linears.grain[bad[i].linear] = FP8_GRAIN_TENSOR;
        status = run_expect_fatal(read_grains, &same, err, sizeof(err));
        CHECK(status != 0 && strstr(err, path) && strstr(err, bad[i].want), "grain %d of linear %d: exit %d, message lacks '%s': %s", bad[i].grain,
              bad[i].linear, status, bad[i].want, err);
    }
    free(m.linears.grain); free(m.linears.over_steps); free(m.linears.all);
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
    write_sparse_model_file(model, &c);
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
    o.model.B = DATA_GEOMETRIES[a->geometry].B; o.model.T = DATA_GEOMETRIES[a->geometry].T;
    strcpy(o.val_pattern, VAL_SHARDS[a->shard]);
    if (a->train_pattern) strcpy(o.train_pattern, a->train_pattern);
    if (a->shard == 1) { // no Llama 3 train shard ships, and a run's data is of one tokenizer: its val shard as a train shard
        path_in_dir(o.train_pattern, sizeof(o.train_pattern), "llama3_train.bin");
        strcpy(o.tokenizer_path, "dev/data/tinyshakespeare/llama3_tokenizer.bin");
    }
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
    if (a->shard == 0 && train.batches_per_epoch != a->train_steps) {
        fprintf(stderr, "%lld train steps an epoch, expected %lld\n", (long long)train.batches_per_epoch, (long long)a->train_steps);
        exit(3);
    }
    int N = o.model.B * o.model.T;
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

// A train shard at dst of the val shard src's tokens `repeat` times: its header's count (word 2)
// multiplied, its role (word 4: val's 2) made train's (1).
static void train_copy_of_val_shard(const char *src, const char *dst, int repeat) {
    FILE *f = fopenCheck(src, "rb");
    int64_t bytes = fileSizeCheck(f);
    char *shard = (char *)mallocCheck(bytes);
    freadCheck(shard, 1, bytes, f, src);
    fcloseCheck(f);
    int32_t *h = (int32_t *)shard;
    CHECK(h[4] == 2, "'%s' does not record the val role in header word 4", src);
    h[2] *= repeat;
    h[4] = 1;
    f = fopenCheck(dst, "wb");
    fwriteCheck(shard, 1, 1024, f);
    for (int k = 0; k < repeat; k++) fwriteCheck(shard + 1024, 1, bytes - 1024, f);
    fcloseCheck(f);
    free(shard);
}

// Every world size 1-8 starts (the val shard holds fewer positions than some of them have ranks),
// every val position is evaluated by exactly one rank, and the val loss is the same bit for bit:
// the ranks' vectors are summed here as NCCL would, entry by entry, in an order of our choosing.
static void test_data_every_world(void) {
    char err[4096], path[128];
    path_in_dir(path, sizeof(path), "llama3_train.bin"); // data_rank's: 9 times its tokens give a step on 8 GPUs
    train_copy_of_val_shard(VAL_SHARDS[1], path, 9);
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
                float loss = val_loss_mean(total, NULL, P);
                if (W == 1) loss_one_gpu = loss;
                CHECK(loss == loss_one_gpu, "B %d T %d, %s: val loss %.9g on %d ranks, %.9g on one", DATA_GEOMETRIES[g].B,
                      DATA_GEOMETRIES[g].T, VAL_SHARDS[shard], loss, W, loss_one_gpu);
            }
        }
    }
}

// A train glob of the train shard and a train copy of the val shard (32,768 tokens; the -j file itself,
// or any val shard, in -i is refused): at B 16 x T 1024 one GPU takes a step from the copy, 2-8 GPUs
// cannot (32,769 tokens needed on 2): it gives them no step, with a warning naming it, printed by
// rank 0 only, and the train shard's 20 positions are dealt out as before.
static void test_data_small_shard_every_world(void) {
    char err[4096], want[256], small[128], pattern[128], cmd[400];
    path_in_dir(small, sizeof(small), "ts_val_copy.bin");
    path_in_dir(pattern, sizeof(pattern), "ts_*.bin");
    train_copy_of_val_shard(VAL_SHARDS[0], small, 1);
    snprintf(cmd, sizeof(cmd), "cp dev/data/tinyshakespeare/tinyshakespeare_llama2_train.bin %s/ts_train.bin", g_dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    for (int W = 1; W <= 8; W++) {
        snprintf(want, sizeof(want), "warning: data shard '%s' has 32768 tokens, fewer than one step needs"
                 ": B*T*world + 1 = 16*1024*%d + 1 = %d tokens", small, W, 16384 * W + 1);
        for (int r = 0; r < W; r++) {
            DataRankArgs a = {0, 0, r, W, pattern, W == 1 ? 21 : 20 / W};
            int status = run_expect_fatal(data_rank, &a, err, sizeof(err));
            CHECK(status == 0, "world %d rank %d: exit %d: %s", W, r, status, err);
            int lines = 0;
            for (const char *c = err; *c; c++) lines += *c == '\n';
            if (r == 0) CHECK((W == 1 || strstr(err, want)) && lines == (W > 1), "world %d: rank 0's stderr is not '%s': '%s'", W,
                              W > 1 ? want : "", err);
            else CHECK(err[0] == '\0', "world %d rank %d printed '%s'", W, r, err);
        }
    }
    remove(small);
    snprintf(cmd, sizeof(cmd), "%s/ts_train.bin", g_dir);
    remove(cmd);
}

// open_data with -m 20 on the shipped val shard at the geometry DATA_GEOMETRIES[*arg], its stdout
// (the "val data holds ..." line) sent to stderr for run_expect_fatal to read.
static void val_notice(void *arg) {
    int g = *(const int *)arg;
    if (dup2(2, 1) < 0) exit(4);
    Options o = default_options();
    o.model.B = DATA_GEOMETRIES[g].B; o.model.T = DATA_GEOMETRIES[g].T;
    strcpy(o.val_pattern, VAL_SHARDS[0]);
    LlamaConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.V = VAL_VOCABS[0];
    MultiGpu mg;
    memset(&mg, 0, sizeof(mg));
    mg.world = 1;
    DataLoader train, val;
    open_data(&o, &cfg, &mg, &train, &val);
    fflush(stdout);
}

// Fewer val batches than -m asks: the line says how many, in the singular for one (the README's
// Quick start, B 16 x T 1024, prints it) and the plural for more.
static void test_val_batches_notice(void) {
    const struct { int geometry; const char *want; } cases[] = {
        {0, "holds 1 batch of 16 x 1024 tokens: evaluating on it, not 20\n"},
        {1, "holds 7 batches of 4 x 1024 tokens: evaluating on those, not 20\n"},
    };
    for (int i = 0; i < 2; i++) {
        char err[4096];
        int status = run_expect_fatal(val_notice, (void *)&cases[i].geometry, err, sizeof(err));
        CHECK(status == 0 && strstr(err, cases[i].want), "B %d T %d: exit %d, printed '%s' (want '...%s')",
              DATA_GEOMETRIES[cases[i].geometry].B, DATA_GEOMETRIES[cases[i].geometry].T, status, err, cases[i].want);
    }
}

// -x 0 draws no training batch, so its -i is neither opened nor checked: the README's SmolLM2 evaluation
// keeps the default -i (the shipped Llama 2 shards) beside another tokenizer's model, table and val
// data (here the 300-token fixture's). Its val data is checked still; a run that trains refuses the -i.
typedef struct { int max_steps; const char *table; } EvalDataArgs;

// open_data as one GPU opens it for a model of the data fixture's 300-token vocabulary, B 2 x T 4.
static void open_fixture_data(Options *o, DataLoader *train, DataLoader *val) {
    o->model.B = 2; o->model.T = 4;
    LlamaConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.V = 300;
    MultiGpu mg;
    memset(&mg, 0, sizeof(mg));
    mg.world = 1;
    open_data(o, &cfg, &mg, train, val);
}

static void eval_data(void *arg) {
    const EvalDataArgs *a = (const EvalDataArgs *)arg;
    if (!freopen("/dev/null", "w", stdout)) exit(4); // open_data's "val data holds ..." line
    Options o = default_options();
    o.max_steps = a->max_steps;
    strcpy(o.val_pattern, "dev/test/fixtures/data/val.bin");
    strcpy(o.tokenizer_path, a->table);
    DataLoader train, val;
    open_fixture_data(&o, &train, &val);
}

// -x 0 -y 1 of a run that trained on the fixture's shard (its record after 3 batches): resume_data
// leaves the record unread, where applying it to -x 0's loader would refuse the resume.
static void eval_resume(void *arg) {
    (void)arg;
    DataLoader trained;
    dataloader_init(&trained, "dev/test/fixtures/data/train_000.bin", 2, 4, 0, 1, 0, 0, 300);
    for (int k = 0; k < 3; k++) dataloader_next_batch(&trained);
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    data_state_save(&ts, &trained);
    Options o = default_options();
    o.max_steps = 0; o.val_pattern[0] = '\0';
    strcpy(o.train_pattern, "dev/test/fixtures/data/train_000.bin");
    DataLoader train, val;
    open_fixture_data(&o, &train, &val);
    resume_data(&train, &ts, &o, "state_00000003_00000.bin");
}

static void test_eval_only_data(void) {
    const char *train = default_options().train_pattern, *table = "dev/test/fixtures/data/tok.bin";
    char err[4096];
    EvalDataArgs eval = {0, table}, trains = {1, table}, other_val = {0, "dev/test/fixtures/data/other_tok.bin"};
    int status = run_expect_fatal(eval_data, &eval, err, sizeof(err));
    CHECK(status == 0 && err[0] == '\0', "-x 0 beside -i '%s' of another tokenizer: exit %d, '%s'", train, status, err);
    status = run_expect_fatal(eval_data, &trains, err, sizeof(err));
    CHECK(status != 0 && strstr(err, train) && strstr(err, "another tokenizer"), "-x 1: '%s' not refused: exit %d, '%s'", train,
          status, err);
    status = run_expect_fatal(eval_data, &other_val, err, sizeof(err));
    CHECK(status != 0 && strstr(err, "fixtures/data/val.bin") && strstr(err, "another tokenizer"),
          "-x 0: val data of another tokenizer than -tok not refused: exit %d, '%s'", status, err);
    status = run_expect_fatal(eval_resume, NULL, err, sizeof(err));
    CHECK(status == 0 && err[0] == '\0', "-x 0 -y 1 of a run on real data: exit %d, '%s'", status, err);
}


// ---- every field of the state file's header (issue 29.7): each one, changed in the run or in the
// file, refuses the resume naming it; the one that is read back (AdamW updates applied) is read back.
typedef int *(*FieldOf)(Model *, TrainState *);
typedef struct { int word; const char *name; FieldOf field; int flag; } HeaderField;
// README.md's table of the state header, written out here (not taken from STATE_FIELDS).
static const HeaderField HEADER_FIELDS[] = {
    {2, "step", +[](Model *m, TrainState *) { return &m->step; }, 0},
    {3, "V", +[](Model *m, TrainState *) { return &m->cfg.V; }, 0},
    {4, "L", +[](Model *m, TrainState *) { return &m->cfg.L; }, 0},
    {5, "C", +[](Model *m, TrainState *) { return &m->cfg.C; }, 0},
    {6, "NH", +[](Model *m, TrainState *) { return &m->cfg.NH; }, 0},
    {7, "NKV", +[](Model *m, TrainState *) { return &m->cfg.NKV; }, 0},
    {8, "FF", +[](Model *m, TrainState *) { return &m->cfg.FF; }, 0},
    {9, "micro-batch B", +[](Model *m, TrainState *) { return &m->opt.B; }, 0},
    {10, "sequence length T", +[](Model *m, TrainState *) { return &m->opt.T; }, 0},
    {11, "gradient accumulation steps", +[](Model *, TrainState *t) { return &t->grad_accum; }, 0},
    {12, "number of GPUs", +[](Model *, TrainState *t) { return &t->world; }, 0},
    {13, "rank", +[](Model *, TrainState *t) { return &t->rank; }, 0},
    {14, "precision (0 bf16, 1 fp8)", +[](Model *m, TrainState *) { return &m->opt.precision; }, 1},
    {15, "fp8 recipe (1 current)", +[](Model *m, TrainState *) { return &m->opt.fp8_current; }, 1},
    {16, "fp8 history length", +[](Model *m, TrainState *) { return &m->opt.fp8_history; }, 0},
    {17, "fp8 margin", +[](Model *m, TrainState *) { return &m->opt.fp8_margin; }, 0},
    {18, "data loader state size", +[](Model *, TrainState *t) { return &t->data_bytes; }, 0}, // read back
    {19, "AdamW updates applied", +[](Model *m, TrainState *) { return &m->adam_t; }, 0}, // read back, not checked
    {20, "-fp8_lm_head", +[](Model *m, TrainState *) { return &m->fp8.lm_head; }, 1},
    {21, "-adam_moments (0 fp32, 1 bf16)", +[](Model *m, TrainState *) { return &m->opt.moments_bf16; }, 1},
    {22, "data sets of the -i mixture (0: one glob)", +[](Model *, TrainState *t) { return &t->data_sets; }, 0}, // read back
    {23, "-fp8_grain (0 tensor, 1 block, 3 row)", +[](Model *m, TrainState *) { return &m->opt.fp8_grain; }, 1},
    {24, "-fp8_fallback (0 off, 1 block, 2 bf16, 3 row)", +[](Model *m, TrainState *) { return &m->opt.fp8_fallback; }, 1},
    {25, "-fp8_fallback_threshold in millionths (0 without -fp8_fallback)", +[](Model *m, TrainState *) { return &m->opt.fp8_fallback_millionths; }, 0},
    {26, "-fp8_fallback_patience (0 without -fp8_fallback)", +[](Model *m, TrainState *) { return &m->opt.fp8_fallback_patience; }, 0},
    {27, "-master_weights (0 fp32, 1 bf16)", +[](Model *m, TrainState *) { return &m->opt.master_bf16; }, 1},
};
#define NUM_HEADER_FIELDS ((int)(sizeof(HEADER_FIELDS) / sizeof(HEADER_FIELDS[0])))
// The words read back, not checked: AdamW updates applied, and the data loader record's size and sets
// (the loader compares the record itself and names what differs: issue 40.4)
static int header_read_back(int word) { return word == 18 || word == 19 || word == 22; }

static int header_base_value(int i) { return HEADER_FIELDS[i].flag ? 1 : 10 + HEADER_FIELDS[i].word; }
static int header_changed_value(int i) { return HEADER_FIELDS[i].flag ? 0 : 11 + HEADER_FIELDS[i].word; }

// The base run (every field its base value) with field `changed` (-1: none) at its changed value.
static void header_run(Model *m, TrainState *ts, int changed) {
    memset(m, 0, sizeof(*m));
    memset(ts, 0, sizeof(*ts));
    for (int i = 0; i < NUM_HEADER_FIELDS; i++) *HEADER_FIELDS[i].field(m, ts) = i == changed ? header_changed_value(i) : header_base_value(i);
}

typedef struct { const char *path; int changed; } HeaderReadArgs;

// Resumes the header at path as the run header_run(changed) would; the read-back word must then
// hold the file's value (else exit 5).
static void resume_header(void *arg) {
    const HeaderReadArgs *a = (const HeaderReadArgs *)arg;
    static Model m;
    TrainState ts;
    header_run(&m, &ts, a->changed);
    HeaderExpect ex[NUM_STATE_FIELDS];
    int n = state_expect(&m, &ts, ex);
    int h[256];
    read_sections(a->path, STATE_MAGIC, ex, n, NULL, 0, h);
    state_read_back(&m, &ts, h);
    if (m.adam_t != h[19] || ts.data_bytes != h[18] || ts.data_sets != h[22]) {
        fprintf(stderr, "read back: AdamW updates applied %d, data loader state size %d, data sets %d; the file has %d, %d, %d\n", m.adam_t,
                ts.data_bytes, ts.data_sets, h[19], h[18], h[22]);
        exit(5);
    }
}

static void test_state_header_every_field(void) {
    CHECK(NUM_HEADER_FIELDS == NUM_STATE_FIELDS, "README's state header has %d fields, STATE_FIELDS %d", NUM_HEADER_FIELDS,
          NUM_STATE_FIELDS);
    char path[128], err[2048];
    path_in_dir(path, sizeof(path), "header.bin");
    static Model m;
    TrainState ts;
    for (int i = 0; i < NUM_HEADER_FIELDS; i++) {
        const HeaderField *f = &HEADER_FIELDS[i];
        int base = header_base_value(i), other = header_changed_value(i);
        header_run(&m, &ts, -1);
        int h[256];
        state_header(&m, &ts, h);
        CHECK(h[f->word] == base, "%s: word %d of the header is %d, the run's value is %d", f->name, f->word, h[f->word], base);
        write_sections(path, h, NULL, 0);
        HeaderReadArgs same = {path, -1}, changed_run = {path, i};
        int status = run_expect_fatal(resume_header, &same, err, sizeof(err));
        CHECK(status == 0, "%s: the writing run's own header refused: %s", f->name, err);
        // the run differs in this field
        status = run_expect_fatal(resume_header, &changed_run, err, sizeof(err));
        char want[256];
        snprintf(want, sizeof(want), "%s is %d in the file, %d here", f->name, base, other);
        if (header_read_back(f->word)) CHECK(status == 0, "%s: a run at another value refused (it is read back): %s", f->name, err);
        else CHECK(status != 0 && strstr(err, want), "%s, %d here: exit %d, message lacks '%s': %s", f->name, other, status, want, err);
        // the file differs in this word (the word the README gives it)
        h[f->word] = other;
        write_sections(path, h, NULL, 0);
        status = run_expect_fatal(resume_header, &same, err, sizeof(err));
        snprintf(want, sizeof(want), "%s is %d in the file, %d here", f->name, other, base);
        if (header_read_back(f->word)) CHECK(status == 0, "%s: a file at another value refused or not read back: %s", f->name, err);
        else CHECK(status != 0 && strstr(err, want), "%s: word %d changed in the file: exit %d, message lacks '%s': %s", f->name, f->word, status, want, err);
    }
}

// ---- the main loop's work after a step (issue 30.3)
static void test_after_step(void) {
    Options o = default_options();
    o.max_steps = 7; o.val_every = 2; o.sample_every = 3; o.ckpt_every = 2; o.fp8_log = 4; o.gen_tokens = 8;
    // steps 1..7 (after the step): val at 2, 4, 6 and the last; samples at 3, 6, 7; checkpoints at 2, 4, 6, 7; fp8 log at 4, 7
    const int want[8] = {0, 0,
        AFTER_VAL | AFTER_CHECKPOINT, AFTER_SAMPLE, AFTER_VAL | AFTER_CHECKPOINT | AFTER_FP8_LOG, 0,
        AFTER_VAL | AFTER_SAMPLE | AFTER_CHECKPOINT, AFTER_VAL | AFTER_SAMPLE | AFTER_CHECKPOINT | AFTER_FP8_LOG};
    for (int finite = 1; finite >= 0; finite--) {
        for (int done = 1; done <= 7; done++) {
            int bad = 0;
            int work = after_step(&o, done - 1, finite, 0, 1, 1, 1, &bad);
            CHECK(work == want[done], "%s step %d of 7: work %#x, want %#x", finite ? "a" : "a non-finite", done, work, want[done]);
        }
    }
    int bad = 0;
    CHECK(after_step(&o, 2, 0, SIGTERM, 1, 1, 1, &bad) == (AFTER_SAMPLE | AFTER_CHECKPOINT | AFTER_STOP), "a stop after a non-finite step 3");
    CHECK(after_step(&o, 0, 1, SIGTERM, 1, 1, 0, &bad) == AFTER_STOP, "a stop without a log directory: nothing to write");
    CHECK(after_step(&o, 6, 0, SIGTERM, 1, 1, 1, &bad) == want[7], "a stop after the last step: the end of the run, no stop");
    CHECK(after_step(&o, 6, 1, 0, 0, 0, 0, &bad) == AFTER_SAMPLE, "no fp8 log, val data or log directory: only the sample");
    bad = 0;
    for (int k = 0; k < 4; k++) after_step(&o, k, 0, 0, 1, 1, 1, &bad);
    after_step(&o, 4, 1, 0, 1, 1, 1, &bad);
    CHECK(bad == 0, "a good step does not reset the count of bad steps in a row");
}

static void five_bad_steps(void *arg) {
    const Options *o = (const Options *)arg;
    int bad = 0;
    for (int k = 0; k < 5; k++) after_step(o, k, 0, 0, 1, 1, 1, &bad);
}

static void test_five_bad_steps(void) {
    Options o = default_options();
    char err[1024];
    int status = run_expect_fatal(five_bad_steps, &o, err, sizeof(err));
    CHECK(status != 0 && strstr(err, "5 consecutive steps with a non-finite loss or gradient"), "five non-finite steps in a row: exit %d: %s", status, err);
}

// ---- options (issue 30.7) and the launch decision (30.8)
static void test_resume_options(void) {
    char dir[128];
    path_in_dir(dir, sizeof(dir), "resume_dir");
    const char *eval_resume[] = {"train_llama_fp8", "-x", "0", "-y", "1", "-o", dir, NULL},
               *no_dir[] = {"train_llama_fp8", "-y", "1", "-o", "", NULL}, *keep_neg[] = {"train_llama_fp8", "-keep", "-1", NULL};
    char err[2048];
    CHECK(run_expect_fatal(options_in_child, (void *)eval_resume, err, sizeof(err)) == 0, "-x 0 -y 1 -o DIR refused: %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)no_dir, err, sizeof(err)) != 0 && strstr(err, "-y 1 needs a log directory (-o)"),
          "-y 1 -o '': %s", err);
    CHECK(run_expect_fatal(options_in_child, (void *)keep_neg, err, sizeof(err)) != 0 && strstr(err, "option -keep must be >= 0, got -1"), "-keep -1: %s", err);
    Options d = default_options();
    CHECK(d.keep == 0, "-keep's default is %d, the usage text says 0 (keep all)", d.keep);
}

// ---- the options of the README's commands, as parsed and checked before the options became one
// table of rows (issue 31.1): every field of Options and ModelOptions written out here, so a change
// to a default or to how a flag lands in the model's options shows as a difference.
static Options written_defaults(void) {
    Options o;
    memset(&o, 0, sizeof(o));
    strcpy(o.train_pattern, "dev/data/tinyshakespeare/tinyshakespeare_llama2_train.bin");
    strcpy(o.val_pattern, "dev/data/tinyshakespeare/tinyshakespeare_llama2_val.bin");
    strcpy(o.tokenizer_path, "dev/data/tinyshakespeare/llama2_tokenizer.bin");
    strcpy(o.log_dir, "log");
    o.model.precision = PREC_FP8; o.model.fp8_current = 0; o.model.moments_bf16 = 1;
    o.model.B = 16; o.model.T = 1024; o.total_batch = 0; o.max_steps = 160; o.warmup = 20; o.val_every = 20;
    o.val_batches = 20;
    o.sample_every = 80; o.gen_tokens = 64; o.ckpt_every = 0; o.resume = 0; o.model.recompute = 0; o.seed = 1337;
    o.shuffle = 0;
    o.model.fp8_history = 16; o.model.fp8_margin = 0; o.model.fp8_lm_head = 0; o.fp8_log = 0; o.fp8_dump = 0;
    o.ngpu = 0;
    o.model.fp8_weight_cache = 1; o.deterministic = 0; o.model.cuda_graph = 1; o.keep = 0;
    o.model.fp8_grain = FP8_GRAIN_TENSOR; o.model.fp8_fallback = 0; o.fp8_fallback_threshold = 0.01f;
    o.model.fp8_fallback_patience = 3;
    o.data_changed_continue = 0;
    o.lr = 6e-4f; o.final_lr_frac = 0.1f; o.weight_decay = 0.1f; o.grad_clip = 1.0f; o.beta1 = 0.9f; o.beta2 = 0.95f;
    return o;
}

typedef struct { const char *argv[64]; Options want; ModelOptions want_mo; int want_grad_accum; } SameCase;

static void same_options_in_child(void *arg) {
    const SameCase *c = (const SameCase *)arg;
    int argc = 0, grad_accum = -1;
    while (c->argv[argc]) argc++;
    Options o = parse_options(argc, (char **)c->argv);
    ModelOptions mo = checked_options_of(&o, &grad_accum);
    int bad = 0;
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const OptSpec *s = &OPTION_SPECS[i];
        if (memcmp((const char *)&o + s->offset, (const char *)&c->want + s->offset, s->size) != 0) {
            fprintf(stderr, "%s differs\n", s->flag);
            bad = 1;
        }
    }
    if (memcmp(&o, &c->want, sizeof(o)) != 0) { fprintf(stderr, "Options differ\n"); bad = 1; }
    if (memcmp(&mo, &c->want_mo, sizeof(mo)) != 0) {
        fprintf(stderr, "ModelOptions: B %d T %d precision %d recompute %d moments_bf16 %d fp8_current %d history %d margin %d"
                " weight_cache %d lm_head %d cuda_graph %d\n", mo.B, mo.T, mo.precision, mo.recompute, mo.moments_bf16,
                mo.fp8_current, mo.fp8_history, mo.fp8_margin, mo.fp8_weight_cache, mo.fp8_lm_head, mo.cuda_graph);
        bad = 1;
    }
    if (grad_accum != c->want_grad_accum) { fprintf(stderr, "grad_accum %d, want %d\n", grad_accum, c->want_grad_accum); bad = 1; }
    if (bad) exit(3);
}

static void test_options_unchanged(void) {
    const char *vars[] = {"LLAMA_FP8_RANK", "LLAMA_FP8_WORLD", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (int i = 0; i < 5; i++) unsetenv(vars[i]);
    //                      B   T  prec      r  mom fp8cur hist margin wcache lm_head graph
    const ModelOptions mo_default = {16, 1024, PREC_FP8, 0, 1, 0, 16, 0, 1, 0, 1};
    static SameCase c[11];
    int n = 0;
    // Quick start: ./train_llama_fp8
    c[n] = (SameCase){{"train_llama_fp8"}, written_defaults(), mo_default, 1};
    c[n].want.total_batch = 16384; n++;
    // the Gutenberg runs, bf16 and fp8
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        c[n] = (SameCase){{"train_llama_fp8", "-e", "125m", "-i", "data/gutenberg_llama2_train_*.bin", "-j", "data/gutenberg_llama2_val.bin",
                           "-b", "16", "-t", "1024", "-d", "16384", "-x", "1500", "-u", "100", "-v", "100", "-m", "20",
                           "-precision", fp8 ? "fp8" : "bf16", "-o", fp8 ? "log_fp8" : "log_bf16"}, written_defaults(), mo_default, 1};
        Options *w = &c[n].want;
        strcpy(w->preset, "125m"); strcpy(w->train_pattern, "data/gutenberg_llama2_train_*.bin");
        strcpy(w->val_pattern, "data/gutenberg_llama2_val.bin");
        w->total_batch = 16384; w->max_steps = 1500; w->warmup = 100; w->val_every = 100; w->val_batches = 20;
        w->model.precision = fp8 ? PREC_FP8 : PREC_BF16; strcpy(w->log_dir, fp8 ? "log_fp8" : "log_bf16");
        c[n].want_mo.precision = fp8 ? PREC_FP8 : PREC_BF16;
        n++;
    }
    // the SLURM job, resumed
    c[n] = (SameCase){{"train_llama_fp8", "-ngpu", "8", "-e", "llama3-8b", "-b", "1", "-t", "8192", "-d", "65536", "-x", "20000", "-n", "500",
                       "-keep", "2", "-o", "/shared/runs/llama3-8b", "-y", "1", "-i", "data/my_llama3_train_*.bin", "-j", "data/my_llama3_val.bin",
                       "-tok", "data/llama3_tokenizer.bin"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        w->ngpu = 8; strcpy(w->preset, "llama3-8b"); w->model.B = 1; w->model.T = 8192; w->total_batch = 65536;
        w->max_steps = 20000; w->ckpt_every = 500;
        w->keep = 2; strcpy(w->log_dir, "/shared/runs/llama3-8b"); w->resume = 1; strcpy(w->train_pattern, "data/my_llama3_train_*.bin");
        strcpy(w->val_pattern, "data/my_llama3_val.bin"); strcpy(w->tokenizer_path, "data/llama3_tokenizer.bin");
        c[n].want_mo.B = 1; c[n].want_mo.T = 8192;
        n++;
    }
    // two GPUs, Llama-2-7B with recompute
    c[n] = (SameCase){{"train_llama_fp8", "-ngpu", "2", "-e", "llama2-7b", "-b", "2", "-t", "4096", "-d", "16384", "-r", "1"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        w->ngpu = 2; strcpy(w->preset, "llama2-7b"); w->model.B = 2; w->model.T = 4096; w->total_batch = 16384;
        w->model.recompute = 1;
        c[n].want_mo.B = 2; c[n].want_mo.T = 4096; c[n].want_mo.recompute = 1;
        n++;
    }
    // SmolLM2: its val loss, and HellaSwag
    c[n] = (SameCase){{"train_llama_fp8", "-init_from", "smollm2.bin", "-tok", "smollm2_tokenizer.bin", "-x", "0", "-j", "data/tinyshakespeare_smollm2_val.bin",
                       "-b", "4", "-t", "1024", "-m", "8"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        strcpy(w->init_from, "smollm2.bin"); strcpy(w->tokenizer_path, "smollm2_tokenizer.bin"); w->max_steps = 0;
        strcpy(w->val_pattern, "data/tinyshakespeare_smollm2_val.bin"); w->model.B = 4; w->model.T = 1024;
        w->val_batches = 8; w->total_batch = 4096;
        c[n].want_mo.B = 4;
        n++;
    }
    c[n] = (SameCase){{"train_llama_fp8", "-init_from", "smollm2.bin", "-tok", "smollm2_tokenizer.bin", "-x", "0", "-i", "synthetic", "-j", "",
                       "-s", "0", "-hs", "data/hellaswag_smollm2.bin"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        strcpy(w->init_from, "smollm2.bin"); strcpy(w->tokenizer_path, "smollm2_tokenizer.bin"); w->max_steps = 0; strcpy(w->train_pattern, "synthetic");
        w->val_pattern[0] = '\0'; w->sample_every = 0; strcpy(w->hellaswag_path, "data/hellaswag_smollm2.bin"); w->total_batch = 16384;
        n++;
    }
    // the 7B memory and speed commands (Results), fp8 on two GPUs
    c[n] = (SameCase){{"train_llama_fp8", "-e", "llama2-7b", "-b", "2", "-t", "4096", "-x", "13", "-v", "0", "-m", "0", "-s", "0", "-o", "", "-j", "",
                       "-tok", "", "-r", "1", "-precision", "fp8", "-ngpu", "2", "-d", "16384"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        strcpy(w->preset, "llama2-7b"); w->model.B = 2; w->model.T = 4096; w->max_steps = 13; w->val_every = 0;
        w->val_batches = 0; w->sample_every = 0;
        w->log_dir[0] = '\0'; w->val_pattern[0] = '\0'; w->tokenizer_path[0] = '\0'; w->model.recompute = 1;
        w->ngpu = 2; w->total_batch = 16384;
        c[n].want_mo.B = 2; c[n].want_mo.T = 4096; c[n].want_mo.recompute = 1;
        n++;
    }
    // the fine-tune flags of compare_convergence.sh's SmolLM2 run on 125m (untied: the fp8 lm_head), with margin 1 and every other
    // fp8 and AdamW flag
    c[n] = (SameCase){{"train_llama_fp8", "-e", "125m", "-i", "data/gutenberg_smollm2_train_000.bin", "-j", "data/gutenberg_smollm2_val.bin",
                       "-tok", "data/gutenberg_smollm2_tokenizer.bin", "-b", "16", "-t", "1024", "-x", "300", "-u", "30", "-l", "2e-4", "-q", "0.1",
                       "-v", "50", "-m", "8", "-s", "0", "-n", "0", "-fp8_margin", "1", "-fp8_lm_head", "1", "-fp8_recipe", "current",
                       "-fp8_history", "32", "-fp8_weight_cache", "0", "-adam_moments", "fp32", "-cuda_graph", "0", "-c", "0.05", "-clip", "0.5",
                       "-beta1", "0.8", "-beta2", "0.99"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        strcpy(w->preset, "125m"); strcpy(w->train_pattern, "data/gutenberg_smollm2_train_000.bin");
        strcpy(w->val_pattern, "data/gutenberg_smollm2_val.bin"); strcpy(w->tokenizer_path, "data/gutenberg_smollm2_tokenizer.bin");
        w->max_steps = 300; w->warmup = 30; w->lr = 2e-4f; w->final_lr_frac = 0.1f; w->val_every = 50; w->val_batches = 8; w->sample_every = 0;
        w->ckpt_every = 0; w->model.fp8_margin = 1; w->model.fp8_lm_head = 1; w->model.fp8_current = 1;
        w->model.fp8_history = 32; w->model.fp8_weight_cache = 0;
        w->model.moments_bf16 = 0; w->model.cuda_graph = 0; w->weight_decay = 0.05f; w->grad_clip = 0.5f;
        w->beta1 = 0.8f; w->beta2 = 0.99f;
        w->total_batch = 16384;
        c[n].want_mo = (ModelOptions){16, 1024, PREC_FP8, 0, 0, 1, 32, 1, 0, 1, 0};
        n++;
    }
    // the 7B fine-tune that -check 1 plans under 80 GiB (Model, "Memory: what fits 80 GB")
    c[n] = (SameCase){{"train_llama_fp8", "-init_from", "llama2_7b.bin", "-tok", "llama2_tokenizer.bin", "-b", "1", "-t",
                       "4096", "-r", "1", "-master_weights", "bf16", "-check", "1"}, written_defaults(), mo_default, 1};
    {
        Options *w = &c[n].want;
        strcpy(w->init_from, "llama2_7b.bin"); strcpy(w->tokenizer_path, "llama2_tokenizer.bin");
        w->model.B = 1; w->model.T = 4096;
        w->model.recompute = 1; w->model.master_bf16 = 1; w->check_only = 1; w->total_batch = 4096;
        c[n].want_mo.B = 1; c[n].want_mo.T = 4096; c[n].want_mo.recompute = 1; c[n].want_mo.master_bf16 = 1;
        n++;
    }
    char err[4096];
    for (int i = 0; i < n; i++) {
        int status = run_expect_fatal(same_options_in_child, &c[i], err, sizeof(err));
        CHECK(status == 0, "README command %d (%s %s ...): exit %d: %s", i, c[i].argv[1] ? c[i].argv[1] : "", c[i].argv[2] ? c[i].argv[2] : "", status, err);
    }
    // the tests' model options (model_options): the command line's defaults but fp32 moments
    for (int p = 0; p <= 1; p++) {
        ModelOptions got = model_options(4, 64, p ? PREC_FP8 : PREC_BF16), want = {4, 64, p ? PREC_FP8 : PREC_BF16, 0, 0, 0, 16, 0, 1, 0, 1};
        CHECK(memcmp(&got, &want, sizeof(got)) == 0, "model_options(4, 64, %s) differs from the command line's defaults", p ? "fp8" : "bf16");
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

// ---- loss-masked val data

// evaluate()'s arithmetic on loss-masked val data: per position the summed loss of the learned
// targets and their count (batch_learned_loss; a masked target's loss is the GPU's 0), and the val
// loss their total over the total count, not the mean of the positions' means; without masks
// val_loss_mean is that mean of means, as before. bpb (val_text, bits_per_byte) divides the learned
// targets' bits by their own bytes, on a masked shard read as evaluate() reads it.
static void test_masked_val_loss(void) {
    const int targets[12] = {5, 6, -1, 7, -1, -1, -1, -1, -1, 9, -1, -1}; // 3 positions of B*T 4: 3, 0 and 1 learned
    const float losses[12] = {1, 2, 0, 3, 0, 0, 0, 0, 0, 3, 0, 0};
    float sum[3], count[3];
    for (int p = 0; p < 3; p++) sum[p] = batch_learned_loss(losses + 4 * p, targets + 4 * p, 4, &count[p]);
    CHECK(sum[0] == 6.0f && count[0] == 3.0f && sum[1] == 0.0f && count[1] == 0.0f && sum[2] == 3.0f && count[2] == 1.0f,
          "per position: sums %g %g %g, counts %g %g %g (want 6 0 3, 3 0 1)", sum[0], sum[1], sum[2], count[0], count[1], count[2]);
    float masked = val_loss_mean(sum, count, 3);
    CHECK(masked == 2.25f, "masked val loss %g, want (6 + 3) / 4 = 2.25 (the mean of the positions' means: %g)", masked, (2.0 + 3.0) / 3.0);
    const float means[3] = {1.5f, 0.5f, 2.5f};
    CHECK(val_loss_mean(means, NULL, 3) == 1.5f, "unmasked val loss %g, want the mean of the means 1.5", val_loss_mean(means, NULL, 3));

    // a shard of 41 tokens (ids 100..140: B 2 x T 5, 4 positions) and its mask: token i learned unless i % 3 == 0
    char shard[128], mask[160];
    write_token_shard("mval.bin", 100, 41);
    path_in_dir(shard, sizeof(shard), "mval.bin");
    snprintf(mask, sizeof(mask), "%s.mask", shard);
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = MASK_MAGIC; h[1] = MASK_VERSION; h[2] = 41;
    unsigned char bytes[41];
    for (int i = 0; i < 41; i++) bytes[i] = i % 3 != 0;
    FILE *f = fopenCheck(mask, "wb");
    fwriteCheck(h, sizeof(int), 256, f);
    fwriteCheck(bytes, 1, 41, f);
    fcloseCheck(f);
    Tokenizer tok;
    tokenizer_init(&tok, default_options().tokenizer_path);
    DataLoader val;
    dataloader_init_eval(&val, shard, 2, 5, tok.vocab_size, 0);
    ValText v = val_text(&val, 4, &tok);
    double learned = 0.0, want_bytes = 0.0;
    for (int i = 1; i < 41; i++) { // target tokens 1..40
        if (i % 3 == 0) continue;
        learned += 1.0;
        want_bytes += tok.piece_len[100 + i];
    }
    CHECK(val.masked == 1 && v.tokens == learned && v.bytes == want_bytes, "val_text of the masked shard: %g tokens, %g bytes"
          " (want its %g learned targets and their %g bytes)", v.tokens, v.bytes, learned, want_bytes);
    double bpb = bits_per_byte(2.0f, v), want_bpb = 2.0 * learned / (M_LN2 * want_bytes);
    CHECK(bpb == want_bpb, "bpb %.9g, want %.9g (a loss of 2 nats per learned target over their bytes)", bpb, want_bpb);
    dataloader_free(&val);
    tokenizer_free(&tok);
    remove(shard);
    remove(mask);
}

typedef struct { const char *spec, *path; int draws; } MixStateArgs;

// The train loader's record as main puts it in a checkpoint (data_state_save, state_header,
// state_sections), written with write_sections.
static void write_data_state(const char *path, DataLoader *dl) {
    static Model m;
    memset(&m, 0, sizeof(m));
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    data_state_save(&ts, dl);
    int h[256];
    state_header(&m, &ts, h);
    Section sec[NUM_STATE_SECTIONS];
    state_sections(&m, &ts, sec);
    write_sections(path, h, sec, NUM_STATE_SECTIONS);
    free(ts.data);
}

// Reads a state file as load_checkpoint and start_model do into a new loader for a->spec; exits 3
// unless its next 50 batches are those of a loader that drew a->draws batches and went on.
static void resume_data_state(void *arg) {
    const MixStateArgs *a = (const MixStateArgs *)arg;
    static Model m;
    memset(&m, 0, sizeof(m));
    DataLoader resumed, straight;
    dataloader_init(&resumed, a->spec, 2, 4, 1, 2, 1, 3, 4000);
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    HeaderExpect ex[NUM_STATE_FIELDS];
    int n = state_expect(&m, &ts, ex);
    Section sec[NUM_STATE_SECTIONS];
    data_state_sized_from(&ts, a->path);
    state_sections(&m, &ts, sec);
    read_sections(a->path, STATE_MAGIC, ex, n, sec, NUM_STATE_SECTIONS, NULL);
    dataloader_load_state(&resumed, ts.data, (size_t)ts.data_bytes, a->path, 0);
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
    free(ts.data);
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
        write_data_state(path, &dl);
        dataloader_free(&dl);
        MixStateArgs args = {spec, path, draws[i]};
        int status = run_expect_fatal(resume_data_state, &args, err, sizeof(err));
        CHECK(status == 0, "resumed after %d draws: exit %d: %s", draws[i], status, err);
    }
    // a plain glob: the section is its record, word 18 its size (read back), word 22 0
    DataLoader dl;
    dataloader_init(&dl, a, 2, 4, 1, 2, 1, 3, 4000);
    for (int k = 0; k < 7; k++) dataloader_next_batch(&dl);
    size_t record = dataloader_state_bytes(&dl);
    write_data_state(plain_path, &dl);
    dataloader_free(&dl);
    CHECK(file_size(plain_path) == 1024 + (long)sizeof(uint64_t) + (long)record, "a plain glob's state file has %ld bytes", file_size(plain_path));
    MixStateArgs plain = {a, plain_path, 7};
    CHECK(run_expect_fatal(resume_data_state, &plain, err, sizeof(err)) == 0, "a plain glob's resume: %s", err);
    // one kind of file, the other kind of run: the loader refuses, naming the file
    MixStateArgs cross = {spec, plain_path, 7};
    CHECK(run_expect_fatal(resume_data_state, &cross, err, sizeof(err)) != 0 && strstr(err, plain_path) &&
          strstr(err, "saved by a glob of 1 sets, this run's -i has a mixture of 2"), "a plain glob's state resumed by a mixture: %s", err);
    MixStateArgs cross2 = {a, path, 7};
    CHECK(run_expect_fatal(resume_data_state, &cross2, err, sizeof(err)) != 0 && strstr(err, path) &&
          strstr(err, "saved by a mixture of 2 sets, this run's -i has a glob of 1"), "a mixture's state resumed by a plain glob: %s", err);
    // a shard appended since (the record, and word 18, now of another size): the loader names it, not the size word
    char added[128];
    write_token_shard("mixa_2.bin", 3000, 81);
    path_in_dir(added, sizeof(added), "mixa_2.bin");
    CHECK(run_expect_fatal(resume_data_state, &plain, err, sizeof(err)) != 0 && strstr(err, added) && strstr(err, "(added or inserted)") &&
          !strstr(err, "data loader state size"), "a shard appended since the checkpoint: %s", err);
    remove(added);
    // a state file from before the record (word 18: 48, a DataLoaderState): refused, saying how to continue
    static Model m;
    memset(&m, 0, sizeof(m));
    TrainState old;
    memset(&old, 0, sizeof(old));
    int64_t position[6] = {0, 0, 3, 3, 16, 1}; // epoch, shard, step, seed, B*T*world, shuffle
    old.data = (unsigned char *)position;
    old.data_bytes = (int)sizeof(position);
    int h[256];
    state_header(&m, &old, h);
    Section sec[NUM_STATE_SECTIONS];
    state_sections(&m, &old, sec);
    write_sections(plain_path, h, sec, NUM_STATE_SECTIONS);
    CHECK(run_expect_fatal(resume_data_state, &plain, err, sizeof(err)) != 0 && strstr(err, plain_path) &&
          strstr(err, "to resume it, pass -data_changed continue"), "a state file from before the record: %s", err);
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

int main(int argc, char **argv) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_host_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    run_test("checkpoint: a state file of other AdamW moments, master weights or precision refused, naming the flag"
             " that resumes it", test_checkpoint_other_run);
    run_test("checkpoint: every state-header field, changed in the run or the file, refused naming it (the read-back one read back)",
             test_state_header_every_field);
    run_test("-init_from: shape flags and a decode table of another vocabulary refused", test_init_from_config);
    run_test("options: errors name the problem; every row parses into its own field; every field has a row", test_options);
    run_test("options: every row's ends accepted, below and above (or another choice) refused naming the flag; defaults inside", test_option_ranges);
    run_test("options: the usage text has every row with its help, default and range or choices", test_usage);
    run_test("options: main.log's options line carries every row's value, -fp8_margin's too", test_log_header);
    run_test("options: the rules between options and with the model's shape refused by checked_options", test_option_rules);
    run_test("fp8 grains: the model's options of -fp8_grain and -fp8_fallback, and the flag the block GEMM check names", test_fp8_grain_options);
    run_test("fp8 grains through the state file: read back into a new model; a grain the run cannot have refused naming the file and linear",
             test_fp8_grain_state_file);
    run_test("options: bf16 AdamW moments by default, fp32 with -adam_moments fp32, others refused", test_adam_moments_option);
    run_test("options: fp32 master weights by default, bf16 with -master_weights bf16, others refused",
             test_master_weights_option);
    run_test("options: every choice row's words store their values, and main.log gives the words back", test_option_words);
    run_test("options: -x 0 -y 1 -o DIR evaluates the checkpoint; -y 1 without -o and -keep < 0 refused", test_resume_options);
    run_test("options: the README's commands parse and check to the Options and ModelOptions written out; model_options the defaults", test_options_unchanged);
    run_test("main loop: val, sample, checkpoint at their steps and at the end, a non-finite step too", test_after_step);
    run_test("main loop: five non-finite steps in a row end the run", test_five_bad_steps);
    run_test("learning-rate schedule: warmup, cosine, final fraction", test_lr_schedule);
    run_test("MFU: percent for a known GPU, n/a for an unknown one", test_mfu_text);
    run_test("data: the README's B x T on 1-8 GPUs start; each val position evaluated once; the val loss the same", test_data_every_world);
    run_test("data: a train shard too small for one step on N GPUs is left out, named by rank 0", test_data_small_shard_every_world);
    run_test("data: fewer val batches than -m: the line counts them (1 batch, 7 batches)", test_val_batches_notice);
    run_test("data: -x 0 neither opens nor checks -i (the README's SmolLM2 evaluation); its val data still checked", test_eval_only_data);
    run_test("mixture: its state through the state file resumes mid-mixture; a plain glob's file as before; the other kind refused", test_mixture_state_file);
    run_test("loss scale: today's without masks, 1 / the step's learned targets with them", test_loss_scale);
    run_test("masked val data: the val loss over the learned targets, bpb over their bytes; unmasked as before", test_masked_val_loss);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
