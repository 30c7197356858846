/*
Host-only tests of what the trainer checks before any GPU work and of -check 1's plan (issue 40 item
15): the device memory plan (model_memory_plan) against what real GPU runs allocated (the
'device memory allocated' lines of the H200 logs under dev/results/, with the configs those logs print),
the refusal of a run whose plan is more than its GPU has free and the flag sets it names (memory_refusal),
check_inputs' refusals (-o not a folder or not writable, a log that cannot be appended to, a corrupt
-init_from, a missing -hs or -hs_preds folder) each naming the path, -check 1 writing nothing, and the
trainer binary itself refusing each bad input before it looks for a GPU (run with no GPU visible: a
check made after the GPU start would print "no CUDA GPU found" instead), -o's lock and another run's
checkpoints there included, with -check 1 too.
Build and run: make dev/test/test_plan_host && ./dev/test/test_plan_host
*/
#define TESTING
#define CKPT_CHUNK ((size_t)1024)
#include "train_llama_fp8.cu"
#include <ftw.h>
#include <dirent.h>
#include <sys/file.h>
#include "dev/test/harness.h" // CHECK, run_test, run_expect_fatal

static char g_dir[64];

// A recorded run: the config and options its log printed, and the GiB it allocated.
typedef struct { char path[512]; LlamaConfig cfg; ModelOptions mo; int world; double gib; } RecordedRun;
static RecordedRun g_runs[256];
static int g_num_runs;

// Reads one trainer stdout log; keeps it if it printed the run line, the batch line and the memory line.
static void read_recorded_run(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    RecordedRun r;
    memset(&r, 0, sizeof(r));
    snprintf(r.path, sizeof(r.path), "%s", path);
    char line[4096], moments[16] = "", prec[16] = "", master[16] = "fp32"; // a log from before -master_weights: fp32
    int have = 0, B = 0, T = 0, recompute = 0, w_cache = 1, offload = 0; // the trainer's defaults, unless the command says
    r.world = 1;
    config_from_preset("125m", &r.cfg);
    while (fgets(line, sizeof(line), f)) {
        char *model = strstr(line, "| model ");
        if (strncmp(line, "BENCH_CMD ", 10) == 0) { // benchmark.sh's record of the command: flags older headers omit
            if (strstr(line, " -r ")) recompute = atoi(strstr(line, " -r ") + 4);
            if (strstr(line, " -fp8_weight_cache ")) w_cache = atoi(strstr(line, " -fp8_weight_cache ") + 19);
        } else if (strncmp(line, "train_llama_fp8 | ", 18) == 0 && model) {
            const char *colon = strstr(model, ": V ");
            if (!colon || sscanf(colon, ": V %d L %d C %d NH %d NKV %d FF %d", &r.cfg.V, &r.cfg.L, &r.cfg.C, &r.cfg.NH, &r.cfg.NKV, &r.cfg.FF) != 6) continue;
            r.cfg.tied_embeddings = strstr(line, "| tied embeddings") != NULL;
            sscanf(line + 18, "%d x ", &r.world);
            if (strstr(line + 18, " x ") == NULL || strstr(line + 18, " x ") > model) r.world = 1;
            sscanf(strchr(line + 18, '|') + 2, "%15s", prec);
            r.mo.fp8_current = strstr(line, "(current scaling)") != NULL;
            have |= 1;
        } else if (sscanf(line, "B %d T %d |", &B, &T) == 2 && strstr(line, "AdamW moments ")) {
            sscanf(strstr(line, "AdamW moments ") + 14, "%15s", moments);
            if (strstr(line, "| master weights ")) sscanf(strstr(line, "| master weights ") + 17, "%15s", master);
            have |= 2;
        } else if (sscanf(line, "device memory allocated: %lf GiB", &r.gib) == 1) { // -r and the cache: BENCH_CMD's in older logs
            if (strstr(line, "| recompute ")) recompute = strstr(line, "| recompute SwiGLU") != NULL;
            if (strstr(line, "| fp8 weight cache ")) w_cache = strstr(line, "| fp8 weight cache on") != NULL;
            offload = strstr(line, "| AdamW moments in host memory") != NULL;
            have |= 4;
        } else if (strncmp(line, "fp8 fallback: a per-tensor linear", 33) == 0 && strstr(line, "moves to ")) {
            for (int g = 1; g < FP8_GRAINS; g++)
                if (strncmp(strstr(line, "moves to ") + 9, FP8_GRAIN_NAMES[g], strlen(FP8_GRAIN_NAMES[g])) == 0) r.mo.fp8_fallback = g;
        } else if (strncmp(line, "fp8 grain: every fp8 linear ", 28) == 0) { // "block-scaled", "row-scaled"
            for (int g = 1; g < FP8_GRAINS; g++)
                if (strncmp(line + 28, FP8_GRAIN_NAMES[g], strlen(FP8_GRAIN_NAMES[g])) == 0) r.mo.fp8_grain = g;
        }
    }
    fclose(f);
    if (have != 7 || g_num_runs == 256) return;
    int current = r.mo.fp8_current, fallback = r.mo.fp8_fallback, grain = r.mo.fp8_grain;
    r.mo = model_options(B, T, strcmp(prec, "fp8") == 0 ? PREC_FP8 : PREC_BF16);
    r.mo.moments_bf16 = strcmp(moments, "bf16") == 0;
    r.mo.master_bf16 = strcmp(master, "bf16") == 0;
    r.mo.fp8_current = current; r.mo.fp8_fallback = fallback; r.mo.fp8_grain = grain;
    r.mo.recompute = recompute; r.mo.fp8_weight_cache = w_cache; r.mo.adam_offload = offload;
    g_runs[g_num_runs++] = r;
}

static int visit_log(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st; (void)ftw;
    size_t n = strlen(path);
    if (type == FTW_F && n > 4 && strcmp(path + n - 4, ".log") == 0) read_recorded_run(path);
    return 0;
}

// Every GPU run the repository keeps a log of allocated what the plan says, to the log's 0.01 GiB:
// 7B fp8 with and without the block fallback, SmolLM2 (tied) in bf16 and fp8 at T 512-2048 with fp32
// and bf16 moments, 125M at B 64 T 256 (the master weights fp32 in each; a log names bf16 ones), and
// the H100's 7B and 8B runs with -r 1 -master_weights bf16 -fp8_weight_cache 0 in each grain (-r and
// -fp8_weight_cache read from the header's memory line, or from benchmark.sh's BENCH_CMD line in the logs
// of trainers before that line named them).
static void test_memory_plan_matches_gpu_runs(void) {
    g_num_runs = 0;
    nftw("dev/results", visit_log, 16, FTW_PHYS);
    CHECK(g_num_runs >= 10, "only %d logs with a config and a 'device memory allocated' line under dev/results", g_num_runs);
    int shapes_7b = 0, tied = 0, fp8 = 0, bf16 = 0, fallback = 0, lean = 0; // lean: -r 1 -fp8_weight_cache 0
    for (int i = 0; i < g_num_runs; i++) {
        const RecordedRun *r = &g_runs[i];
        double plan = model_memory_plan(&r->cfg, &r->mo, r->world) / 1073741824.0;
        CHECK(fabs(plan - r->gib) <= 0.005 + 1e-9, "%s: the plan says %.4f GiB, the run allocated %.2f GiB", r->path, plan, r->gib);
        shapes_7b += r->cfg.C == 4096;
        tied += r->cfg.tied_embeddings;
        fp8 += r->mo.precision == PREC_FP8;
        bf16 += r->mo.precision == PREC_BF16;
        fallback += r->mo.fp8_fallback != 0;
        lean += r->mo.recompute && !r->mo.fp8_weight_cache;
    }
    printf("    %d logged runs: 7B %d, tied %d, fp8 %d, bf16 %d, fallback %d, -r 1 -fp8_weight_cache 0 %d\n", g_num_runs,
           shapes_7b, tied, fp8, bf16, fallback, lean);
    CHECK(shapes_7b >= 2 && tied >= 3 && fp8 >= 3 && bf16 >= 3 && fallback >= 1 && lean >= 1,
          "the logs do not cover 7B (%d), tied (%d), fp8 (%d), bf16 (%d), the fallback (%d) and -r 1 -fp8_weight_cache 0 (%d)",
          shapes_7b, tied, fp8, bf16, fallback, lean);
}

// -master_weights bf16 plans the fp32 plan less the fp32 master (4 bytes per element of the shard) and,
// on one GPU with delayed scaling, plus the fp8 weight cache AdamW then no longer writes into the bf16
// weights (a byte per block linear weight: L x (C x QKV + C x C + C x 2FF + FF x C)); on two GPUs the
// cache was its own already. The issue 43 case, Llama-2-7B fp8 at B 1 T 4096 with -r 1 on one GPU,
// plans under 79 GiB.
static void test_memory_plan_bf16_master(void) {
    LlamaConfig c;
    config_from_preset("llama2-7b", &c);
    size_t sizes[NUM_PARAM_TENSORS], L = c.L, C = c.C, FF = c.FF, QKV = config_qkv_width(&c);
    param_sizes(&c, sizes);
    const size_t cache = L * (C * QKV + C * C + C * 2 * FF + FF * C);
    for (int world = 1; world <= 2; world++) {
        ModelOptions fp32 = model_options(1, 4096, PREC_FP8);
        fp32.recompute = 1; fp32.moments_bf16 = 1; // the command line's moments
        ModelOptions bf16 = fp32;
        bf16.master_bf16 = 1;
        ZeroLayout z = zero_layout(&c, sizes, 0, world);
        const size_t want = model_memory_plan(&c, &fp32, world) - z.shard * sizeof(float) + (world == 1 ? cache : 0);
        zero_layout_free(&z);
        const size_t got = model_memory_plan(&c, &bf16, world);
        printf("    %d GPU%s: fp32 master %.2f GiB, bf16 master %.2f GiB\n", world, world > 1 ? "s" : "",
               model_memory_plan(&c, &fp32, world) / 1073741824.0, got / 1073741824.0);
        CHECK(got == want, "%d GPUs: the bf16-master plan is %zu bytes, the fp32 plan less the master%s %zu", world,
              got, world == 1 ? " plus the fp8 weight cache" : "", want);
        if (world == 1)
            CHECK(got < 79.0 * 1073741824.0, "7B B 1 T 4096 -r 1 -master_weights bf16: %.2f GiB, not under 79",
                  got / 1073741824.0);
    }
}

// The flag sets a refusal's hint names, each planned again here through model_memory_plan with its
// flags set on the run's options: every one fits `budget` and is the GiB the hint says. Returns how many
// sets fit; a hint that says nothing fits has its least set checked the same way, over the budget.
static int check_hint_sets(const char *what, const char *msg, const LlamaConfig *c, const ModelOptions *o, int world,
                           size_t budget) {
    const char *nothing = strstr(msg, "the least is "), *within = strstr(msg, "within ");
    if (within) within = strstr(within, " GiB: ");
    CHECK(nothing || within, "%s: the refusal names no flag sets: %s", what, msg);
    if (!nothing && !within) return 0;
    char sets[2048];
    snprintf(sets, sizeof(sets), "%s", nothing ? nothing + 13 : within + 6);
    int fits = 0;
    for (char *save = NULL, *set = strtok_r(sets, ";", &save); set; set = strtok_r(NULL, ";", &save)) {
        ModelOptions f = *o;
        if (strstr(set, "-r 1")) f.recompute = 1;
        if (strstr(set, "-master_weights bf16")) f.master_bf16 = 1;
        if (strstr(set, "-fp8_weight_cache 0")) f.fp8_weight_cache = 0;
        if (strstr(set, "-adam_offload 1")) f.adam_offload = 1;
        const char *b = strstr(set, "-b ");
        if (b) f.B = atoi(b + 3);
        double said = -1;
        const char *paren = strchr(set, '(');
        if (paren) sscanf(paren, "(%lf GiB", &said);
        size_t plan = model_memory_plan(c, &f, world);
        CHECK(fabs(said - plan / 1073741824.0) <= 0.005 + 1e-9, "%s: '%s' says %.2f GiB, its plan is %.4f", what, set,
              said, plan / 1073741824.0);
        if (nothing) {
            CHECK(plan > budget, "%s: says nothing fits, but '%s' plans %.2f GiB of %.2f", what, set,
                  plan / 1073741824.0, budget / 1073741824.0);
            break;
        }
        CHECK(plan <= budget, "%s: suggests '%s', which plans %.2f GiB, more than %.2f", what, set, plan / 1073741824.0,
              budget / 1073741824.0);
        fits++;
    }
    return fits;
}

// A run whose plan is more than its GPU has free is refused, naming flag sets that fit, each checked by
// its own plan; one that fits (its plan and 1 GiB for the workspaces free, exactly) is not; flags the run has set are
// never suggested, nor -fp8_weight_cache in bf16. The issue 43 case: Llama-2-7B fp8 B 2 T 4096 in 80 GiB.
static void test_memory_refusal(void) {
    LlamaConfig c;
    config_from_preset("llama2-7b", &c);
    const size_t GIB = 1073741824;
    char msg[2048], want[256];
    ModelOptions o = model_options(2, 4096, PREC_FP8);
    o.moments_bf16 = 1; // the command line's default
    size_t plan = model_memory_plan(&c, &o, 1);
    CHECK(memory_refusal(model_memory_plan, "llama2-7b", &c, &o, 1, 8192, 80 * GIB, msg, sizeof(msg)), "7B B 2 T 4096 fp8 fits 80 GiB");
    printf("    %s\n", msg);
    snprintf(want, sizeof(want), "llama2-7b B 2 T 4096 would run out of memory: it needs %.2f GiB of device memory up front "
             "and 1 GiB for cuBLAS's and cuDNN's workspaces, the GPU has 80.00 GiB free: ", plan / 1073741824.0);
    CHECK(strncmp(msg, want, strlen(want)) == 0, "the refusal does not start '%s': %s", want, msg);
    CHECK(check_hint_sets("7B fp8 B 2 T 4096, 80 GiB", msg, &c, &o, 1, 79 * GIB) >= 1, "no flag set named: %s", msg);
    CHECK(!memory_refusal(model_memory_plan, "llama2-7b", &c, &o, 1, 8192, plan + GIB, msg, sizeof(msg)), "its plan + 1 GiB free, refused: %s", msg);
    CHECK(memory_refusal(model_memory_plan, "llama2-7b", &c, &o, 1, 8192, plan + GIB - 1, msg, sizeof(msg)), "a byte short of plan + 1 GiB free, "
          "not refused (a run whose plan fills the free memory runs out in model_init: workspaces come on top)");

    ModelOptions set = o; // -r 1 and -master_weights bf16 given: the hint adds neither
    set.recompute = 1; set.master_bf16 = 1;
    CHECK(memory_refusal(model_memory_plan, "llama2-7b", &c, &set, 1, 8192, 70 * GIB, msg, sizeof(msg)), "7B -r 1 bf16 master fits 70");
    CHECK(!strstr(msg, "-r 1") && !strstr(msg, "-master_weights"), "suggests a flag the run has: %s", msg);
    CHECK(check_hint_sets("7B fp8 -r 1 bf16 master, 70 GiB", msg, &c, &set, 1, 69 * GIB) >= 1, "none fits: %s", msg);

    ModelOptions all = set; // every flag the hint knows already given, at B 1: nothing left to name
    all.B = 1; all.fp8_weight_cache = 0; all.adam_offload = 1;
    CHECK(memory_refusal(model_memory_plan, "llama2-7b", &c, &all, 1, 4096, 10 * GIB, msg, sizeof(msg)),
          "7B fits 10 GiB");
    CHECK(strstr(msg, "nothing fits 9.00 GiB and no flag here is left to give up: use more GPUs") &&
          !strstr(msg, "the least is"), "every flag given, at -b 1: %s", msg);

    ModelOptions two = o; // on two GPUs ZeRO-1 shares the optimizer state out: sets at -d 16384
    CHECK(memory_refusal(model_memory_plan, "llama2-7b", &c, &two, 2, 16384, 70 * GIB, msg, sizeof(msg)), "7B on 2 GPUs fits 70 GiB");
    CHECK(check_hint_sets("7B fp8 B 2 on 2 GPUs, 70 GiB", msg, &c, &two, 2, 69 * GIB) >= 1, "none fits: %s", msg);

    ModelOptions bf16 = o;
    bf16.precision = PREC_BF16;
    const size_t budgets[] = {80 * GIB, 10 * GIB}; // some sets fit; none does
    for (size_t budget : budgets) {
        CHECK(memory_refusal(model_memory_plan, "llama2-7b", &c, &bf16, 1, 8192, budget, msg, sizeof(msg)), "7B bf16 fits");
        CHECK(!strstr(msg, "-fp8_weight_cache"), "bf16 told of -fp8_weight_cache: %s", msg);
        int fits = check_hint_sets("7B bf16 B 2 T 4096", msg, &c, &bf16, 1, budget - GIB); // 1 GiB for workspaces
        CHECK((fits > 0) == (budget == 80 * GIB) && (strstr(msg, "nothing fits") != NULL) == (fits == 0),
              "%zu GiB: %d sets fit: %s", budget / GIB, fits, msg);
    }
}

// -check 1's line on an 80 GB GPU (78.66 GiB free at the start on the H100 of 2026-12-05): 7B fp8 at
// B 2 T 4096 is too small there and names sets that fit 77.66 GiB (the first of them ran there in
// 77.80 GiB); the H100's out-of-memory case, bf16 -r 1 -master_weights bf16 at 78.65 GiB, is too small
// (it fills the free memory); 125M fits; 8 GPUs of 7B fit, said of each GPU.
static void test_plan_80gb(void) {
    LlamaConfig c, small;
    config_from_preset("llama2-7b", &c);
    config_from_preset("125m", &small);
    const size_t GIB = 1073741824;
    char line[2048];
    ModelOptions o = model_options(2, 4096, PREC_FP8);
    o.moments_bf16 = 1;
    plan_80gb_line(model_memory_plan, line, sizeof(line), &c, &o, 1, 8192);
    printf("    %s\n", line);
    const char *lead = "plan: on one 80 GB GPU (78.66 GiB free at the start on an H100, 1 GiB of it kept for the workspaces): ";
    CHECK(strncmp(line, lead, strlen(lead)) == 0 && strstr(line, "too small; within 77.66 GiB: "), "7B fp8 B 2 T 4096: %s", line);
    CHECK(check_hint_sets("7B fp8 B 2 T 4096, an 80 GB GPU", line, &c, &o, 1, fit_budget(GPU_80GB_FREE)) >= 1,
          "no set named: %s", line);
    ModelOptions oom = o; // planned 78.65 GiB: ran out of memory with 78.66 GiB free
    oom.precision = PREC_BF16; oom.recompute = 1; oom.master_bf16 = 1;
    plan_80gb_line(model_memory_plan, line, sizeof(line), &c, &oom, 1, 8192);
    CHECK(strstr(line, "too small; "), "7B bf16 -r 1 -master_weights bf16 (%.2f GiB) said to fit: %s",
          model_memory_plan(&c, &oom, 1) / (double)GIB, line);
    ModelOptions s = model_options(16, 1024, PREC_FP8);
    plan_80gb_line(model_memory_plan, line, sizeof(line), &small, &s, 1, 16384);
    CHECK(strcmp(line + strlen(line) - 6, ": fits") == 0, "125M B 16 T 1024: %s", line);
    plan_80gb_line(model_memory_plan, line, sizeof(line), &c, &o, 8, 65536);
    CHECK(strstr(line, "plan: on 80 GB GPUs (") && strcmp(line + strlen(line) - 6, ": fits") == 0, "7B on 8 GPUs: %s", line);
}

// -adam_offload 1 moves AdamW's m and v of each GPU's shard from the device plan to pinned host memory
// (moments_host_plan), at 1 and 2 GPUs, bf16 and fp32 moments. Llama-3-8B B 1 T 8192, which fits no
// 80 GB GPU with the other flags (88.69 GiB with all of them), fits with it and is told so; the host
// check refuses what the host cannot pin, counting every GPU of the host.
static void test_adam_offload_plan(void) {
    LlamaConfig c;
    config_from_preset("llama3-8b", &c);
    size_t sizes[NUM_PARAM_TENSORS];
    param_sizes(&c, sizes);
    for (int world = 1; world <= 2; world++) {
        for (int bf16 = 0; bf16 < 2; bf16++) {
            ModelOptions on = model_options(1, 8192, PREC_FP8);
            on.recompute = 1; on.moments_bf16 = bf16;
            ModelOptions off = on;
            on.adam_offload = 1;
            ZeroLayout z = zero_layout(&c, sizes, 0, world);
            const size_t moments = 2 * z.shard * (bf16 ? 2 : 4);
            zero_layout_free(&z);
            CHECK(model_memory_plan(&c, &off, world) - model_memory_plan(&c, &on, world) == moments &&
                  moments_host_plan(&c, &on, world) == moments && moments_host_plan(&c, &off, world) == 0,
                  "%d GPUs, %s moments: the offload moves %zu bytes of %zu to the host (%zu there)", world,
                  bf16 ? "bf16" : "fp32", model_memory_plan(&c, &off, world) - model_memory_plan(&c, &on, world),
                  moments, moments_host_plan(&c, &on, world));
        }
    }
    ModelOptions all = model_options(1, 8192, PREC_FP8);
    all.moments_bf16 = 1; all.recompute = 1; all.master_bf16 = 1; all.fp8_weight_cache = 0;
    char line[2048], msg[512];
    plan_80gb_line(model_memory_plan, line, sizeof(line), &c, &all, 1, 8192);
    printf("    %s\n", line);
    CHECK(strstr(line, "too small; within 77.66 GiB: -adam_offload 1 ("), "8B T 8192 with every other flag: %s", line);
    CHECK(check_hint_sets("8B fp8 B 1 T 8192, an 80 GB GPU", line, &c, &all, 1, fit_budget(GPU_80GB_FREE)) == 1,
          "8B T 8192: %s", line);
    all.adam_offload = 1;
    plan_80gb_line(model_memory_plan, line, sizeof(line), &c, &all, 1, 8192);
    CHECK(strcmp(line + strlen(line) - 6, ": fits") == 0, "8B T 8192 with -adam_offload 1: %s", line);
    const size_t need = moments_host_plan(&c, &all, 1);
    CHECK(!host_memory_refusal(need, 1, need, msg, sizeof(msg)) && !host_memory_refusal(need, 4, 0, msg, sizeof(msg)),
          "refused with exactly enough host memory, or with none known");
    CHECK(host_memory_refusal(need, 2, 2 * need - 1, msg, sizeof(msg)) && strstr(msg, "on each of 2 GPUs here") &&
          strstr(msg, "run without -adam_offload"), "2 GPUs' moments a byte over the host's memory: %s", msg);
    printf("    %s\n", msg);
}

typedef struct { Options o; int check_only; } CheckArgs;
static void check_in_child(void *p) {
    CheckArgs *a = (CheckArgs *)p;
    LlamaConfig cfg;
    config_from_preset("tiny", &cfg);
    cfg.V = 32000;
    DataLoader train, val;
    HellaSwag hs;
    check_inputs(&a->o, &cfg, NULL, 1, a->check_only, &train, &val, &hs);
}

// The shipped data at a small shape, -o inside the test's folder.
static Options check_options(const char *log_dir) {
    Options o = default_options();
    o.model.B = 4; o.model.T = 64;
    snprintf(o.log_dir, sizeof(o.log_dir), "%s", log_dir);
    return o;
}

static void expect_refused(CheckArgs *a, const char *want, const char *what) {
    char err[4096];
    int status = run_expect_fatal(check_in_child, a, err, sizeof(err));
    CHECK(status != 0 && strstr(err, want), "%s: exit %d, message lacks '%s': %s", what, status, want, err);
}

static void test_check_inputs_refusals(void) {
    char path[300], log_dir[256], err[4096];
    snprintf(log_dir, sizeof(log_dir), "%s/run", g_dir);
    CheckArgs a = {check_options(log_dir), 0};
    CHECK(run_expect_fatal(check_in_child, &a, err, sizeof(err)) == 0, "good inputs refused: %s", err);
    struct stat st;
    CHECK(stat(log_dir, &st) == 0 && S_ISDIR(st.st_mode), "-o was not made");
    DIR *d = opendir(log_dir);
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.' || strlen(e->d_name) > 2;
    if (d) closedir(d);
    CHECK(entries == 0, "the write check left %d files in -o", entries);

    snprintf(path, sizeof(path), "%s/a_file", g_dir);
    FILE *f = fopen(path, "w");
    fclose(f);
    a.o = check_options(path);
    expect_refused(&a, "exists and is not a directory", "-o naming a file");
    snprintf(a.o.log_dir, sizeof(a.o.log_dir), "%s/a_file/sub", g_dir);
    expect_refused(&a, "a_file/sub", "-o inside a file");

    snprintf(path, sizeof(path), "%s/metrics.jsonl", log_dir); // a resumed run appends to it
    CHECK(mkdir(path, 0755) == 0, "mkdir");
    a.o = check_options(log_dir);
    expect_refused(&a, "metrics.jsonl' cannot be appended to", "metrics.jsonl a folder");
    rmdir(path);

    a.o = check_options(log_dir);
    snprintf(a.o.hellaswag_path, sizeof(a.o.hellaswag_path), "%s/no_such_hellaswag.bin", g_dir);
    expect_refused(&a, "no_such_hellaswag.bin", "a missing -hs file");
    a.o = check_options(log_dir);
    snprintf(a.o.hellaswag_preds, sizeof(a.o.hellaswag_preds), "%s/no_such_dir/preds.jsonl", g_dir);
    expect_refused(&a, "-hs_preds '", "-hs_preds in a missing folder");
    a.o = check_options(log_dir);
    snprintf(a.o.train_pattern, sizeof(a.o.train_pattern), "%s/nothing_*.bin", g_dir);
    expect_refused(&a, "nothing_*.bin", "a -i that matches nothing");
}

// -init_from's checksum is checked before the GPU: a weight byte changed in a model file is refused.
static void test_check_inputs_model_checksum(void) {
    char model[256], log_dir[256], err[4096];
    snprintf(model, sizeof(model), "%s/init.bin", g_dir);
    snprintf(log_dir, sizeof(log_dir), "%s/run_init", g_dir);
    LlamaConfig c;
    config_from_preset("tiny", &c);
    c.V = 512; // small and fast; check_model_file reads the shape from the file
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(&c, sizes);
    float *w = (float *)calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = (float)(i % 97) * 0.01f;
    int h[256];
    model_header_put(h, &c, 0);
    Section ms[] = {{w, n * sizeof(float), 0}};
    write_sections(model, h, ms, 1);
    free(w);
    CheckArgs a = {check_options(log_dir), 0};
    snprintf(a.o.init_from, sizeof(a.o.init_from), "%s", model);
    CHECK(run_expect_fatal(check_in_child, &a, err, sizeof(err)) == 0, "a good model file refused: %s", err);
    FILE *f = fopen(model, "r+b");
    fseek(f, 1024 + (long)(n / 2) * 4, SEEK_SET); // a weight in the middle, past the header
    unsigned char byte;
    CHECK(fread(&byte, 1, 1, f) == 1, "read");
    byte ^= 0x10;
    fseek(f, -1, SEEK_CUR);
    fwrite(&byte, 1, 1, f);
    fclose(f);
    expect_refused(&a, "corrupt (checksum mismatch)", "a model file with one weight byte changed");
}

// -check 1 makes no -o: it checks that the folder -o would be made in takes files.
static void test_check_only_writes_nothing(void) {
    char log_dir[256], err[4096];
    snprintf(log_dir, sizeof(log_dir), "%s/never_made", g_dir);
    CheckArgs a = {check_options(log_dir), 1};
    CHECK(run_expect_fatal(check_in_child, &a, err, sizeof(err)) == 0, "-check 1 refused good inputs: %s", err);
    CHECK(access(log_dir, F_OK) != 0, "-check 1 made -o '%s'", log_dir);
}

// The trainer refuses each bad input with its own message while no GPU is visible: the checks come
// before the GPU start, whose failure would say "no CUDA GPU found".
static void test_trainer_checks_before_gpu(void) {
    if (access("./train_llama_fp8", X_OK) != 0) { CHECK(0, "./train_llama_fp8 is not built (make test builds it)"); return; }
    char file[256], cmd[1024];
    snprintf(file, sizeof(file), "%s/plain_file", g_dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    char other_run[300], busy[300], path[400];
    snprintf(other_run, sizeof(other_run), "%s/other_run", g_dir); // holds another run's checkpoint file
    snprintf(busy, sizeof(busy), "%s/busy", g_dir);                // locked by a run in progress (this process)
    mkdir(other_run, 0755);
    mkdir(busy, 0755);
    snprintf(path, sizeof(path), "%s/model_00000010.bin", other_run);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof(path), "%s/train.lock", busy);
    int lock_fd = open(path, O_RDWR | O_CREAT, 0644);
    CHECK(lock_fd >= 0 && flock(lock_fd, LOCK_EX) == 0 && write(lock_fd, "host here pid 1\n", 16) == 16, "locking %s", path);
    struct { const char *args, *want; } cases[] = {
        {"-o OTHER_RUN", "checkpoint files of another run"},
        {"-check 1 -o OTHER_RUN", "checkpoint files of another run"},
        {"-o BUSY", "is in use by another run"},
        {"-check 1 -o BUSY", "is in use by another run now (host here pid 1"},
        {"-i 'no_such_*.bin'", "no_such_*.bin"},
        {"-j no_such_val.bin", "no_such_val.bin"},
        {"-i 'dev/data/tinyshakespeare/tinyshakespeare_llama2_train.bin:1,no_such_*.bin:1'", "no_such_*.bin"},
        {"-hs no_such_hellaswag.bin", "no_such_hellaswag.bin"},
        {"-init_from no_such_model.bin", "no_such_model.bin"},
        {"-o PLAIN_FILE", "exists and is not a directory"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char args[512];
        snprintf(args, sizeof(args), "%s", cases[i].args);
        const char *names[3][2] = {{"PLAIN_FILE", file}, {"OTHER_RUN", other_run}, {"BUSY", busy}};
        for (int k = 0; k < 3; k++) {
            char *at = strstr(args, names[k][0]);
            if (at) snprintf(at, sizeof(args) - (at - args), "%s", names[k][1]);
        }
        snprintf(cmd, sizeof(cmd), "CUDA_VISIBLE_DEVICES= ./train_llama_fp8 -b 4 -t 64 -o %s/gpu_run %s 2>&1", g_dir, args); // a later -o wins
        FILE *p = popen(cmd, "r");
        char out[8192] = "";
        size_t got = fread(out, 1, sizeof(out) - 1, p);
        out[got] = '\0';
        int status = pclose(p);
        CHECK(status != 0 && strstr(out, cases[i].want) && !strstr(out, "no CUDA GPU"), "%s: status %d, want '%s' before any GPU: %s",
              cases[i].args, status, cases[i].want, out);
    }
    close(lock_fd);
    snprintf(cmd, sizeof(cmd), "CUDA_VISIBLE_DEVICES= ./train_llama_fp8 -check 1 -b 4 -t 64 -o %s/plan_run -n 10 -keep 2 2>&1", g_dir);
    FILE *p = popen(cmd, "r");
    char out[8192] = "";
    size_t got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = '\0';
    int status = pclose(p);
    CHECK(status == 0 && strstr(out, "plan: device memory per GPU: ") && strstr(out, "plan: checkpoints in '") &&
          strstr(out, "plan: on one 80 GB GPU (78.66 GiB free at the start on an H100") &&
          strstr(out, "16 (every 10 steps and the last)") && strstr(out, "-check 1: every input is good") &&
          !strstr(out, "no tokenizer (llm.c's format"), "-check 1 with no GPU (the shipped shards record their tokenizer): status %d: %s", status, out);
}

int main(int argc, char **argv) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_plan_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    if (argc > 1) g_test_filter = argv[1];
    run_test("plan: device memory of every logged GPU run as it allocated it (0.01 GiB)", test_memory_plan_matches_gpu_runs);
    run_test("plan: -master_weights bf16 drops the fp32 master (7B B 1 T 4096 -r 1 under 79 GiB on one GPU)",
             test_memory_plan_bf16_master);
    run_test("plan: a run over its GPU's free memory refused, naming flag sets whose plans fit (7B B 2 T 4096, 80 GiB)",
             test_memory_refusal);
    run_test("plan: -check 1's line on an 80 GB GPU (fits, or too small with the sets that fit)", test_plan_80gb);
    run_test("plan: -adam_offload 1 moves the moments to pinned host memory; 8B T 8192 fits 80 GB with it; the host check",
             test_adam_offload_plan);
    run_test("inputs before the GPU: -o, a log, -hs, -hs_preds, -i refused naming the path", test_check_inputs_refusals);
    run_test("inputs before the GPU: -init_from's checksum", test_check_inputs_model_checksum);
    run_test("-check 1 writes nothing (-o not made)", test_check_only_writes_nothing);
    run_test("the trainer with no GPU visible: each bad input refused by its own message; -check 1 prints the plan", test_trainer_checks_before_gpu);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed ? 1 : 0;
}
