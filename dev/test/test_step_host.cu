/*
Host-only tests of the trainer's step, evaluation, metrics and fp8-fallback code (issue 41), each on
the trainer's own functions, with stand-in ranks (a MultiGpu with only rank and world set) at world
1, 3 and 8 where the code is sharded: train_step's count of the step's learned targets
(step_learned_targets) and the loss scale it gives; the HellaSwag items of each rank
(hellaswag_rank_items); bits per byte's targets and bytes (val_text) with every token id a target;
the values a step's fp8 casts cast (linear_values_cast) in every grain, with and without the weight
cache (the fallback's rule itself: dev/test/test_fp8_fallback.h, in test_cpu); a step's metrics.jsonl line
(metrics_line, metrics_step) with fp8 counts and non-finite numbers, read back by a strict JSON
parser and scripts/to_tensorboard.py's reader (python3); the logs of a resumed run appended to,
a fresh run's started empty (open_logs).
Build and run from the repository root: make dev/test/test_step_host && ./dev/test/test_step_host
*/
#define TESTING
#include "train_llama_fp8.cu"
#include "dev/test/harness.h"   // CHECK, run_test

static char g_dir[64];
static const int WORLDS[3] = {1, 3, 8};

// Rank `rank` of `world` as host code sees it: rank and world set, nothing started.
static MultiGpu stand_in_rank(int rank, int world) {
    MultiGpu mg;
    memset(&mg, 0, sizeof(mg));
    mg.rank = rank; mg.world = world; mg.local_rank = rank; mg.local_world = world;
    return mg;
}

// ---- train_step: the step's learned targets

// step_learned_targets, which train_step calls, on stand-in ranks of B x T = 16 with grad accumulation
// 1-3. Without masks every rank learns all of its targets (id 0 the first, V-1 the last): every
// rank's count is 16 x grad_accum, the total that times the world, and the loss scale today's
// 1 / (B*T*grad_accum*world). With masks, at world 1 (several ranks add their counts in an all-reduce,
// on the GPU): micro-batch 0 all masked, the step's last target masked, every other target of the
// last micro-batch masked; the count is every micro-batch's.
static void test_step_learned_targets(void) {
    const int B = 2, T = 8, N = B * T, V = 64;
    int targets[3 * 16];
    for (int w = 0; w < 3; w++) {
        for (int ga = 1; ga <= 3; ga++) {
            for (int rank = 0; rank < WORLDS[w]; rank++) {
                for (int i = 0; i < ga * N; i++) targets[i] = i == ga * N - 1 ? V - 1 : (i + rank) % V;
                MultiGpu mg = stand_in_rank(rank, WORLDS[w]);
                Model m;
                memset(&m, 0, sizeof(m));
                m.opt.B = B; m.opt.T = T; m.mg = &mg;
                StepBuffers b = {NULL, targets, NULL, ga};
                long long mine = -1, total = step_learned_targets(&m, &b, &mine);
                float scale = step_loss_scale(total, N, ga, WORLDS[w]), want = 1.0f / ((float)N * ga * WORLDS[w]);
                CHECK(mine == (long long)N * ga && total == (long long)N * ga * WORLDS[w] && scale == want,
                      "no masks, world %d, rank %d, grad accumulation %d: %lld learned here, %lld in the step, scale %.9g (want %d, %d, %.9g)",
                      WORLDS[w], rank, ga, mine, total, scale, N * ga, N * ga * WORLDS[w], want);
            }
        }
    }
    struct { int ga; const char *masked; long long learned; } cases[] = {
        {3, "micro-batch 0", 2 * N}, {2, "the last target", 2 * N - 1}, {3, "every other target of micro-batch 2", 2 * N + N / 2},
    };
    for (int c = 0; c < 3; c++) {
        int ga = cases[c].ga;
        for (int i = 0; i < ga * N; i++) targets[i] = i % V;
        if (c == 0) for (int i = 0; i < N; i++) targets[i] = -1;
        if (c == 1) targets[ga * N - 1] = -1;
        if (c == 2) for (int i = 2 * N; i < 3 * N; i += 2) targets[i] = -1;
        MultiGpu mg = stand_in_rank(0, 1);
        Model m;
        memset(&m, 0, sizeof(m));
        m.opt.B = B; m.opt.T = T; m.mg = &mg; m.loss_masked = 1;
        StepBuffers b = {NULL, targets, NULL, ga};
        long long mine = -1, total = step_learned_targets(&m, &b, &mine);
        float scale = step_loss_scale(total, N, ga, 1), want = (float)(1.0 / (double)cases[c].learned);
        CHECK(mine == cases[c].learned && total == cases[c].learned && scale == want,
              "masks, grad accumulation %d, %s masked: %lld learned, %lld in the step, scale %.9g (want %lld, 1/%lld)", ga, cases[c].masked,
              mine, total, scale, cases[c].learned, cases[c].learned);
    }
}

// ---- HellaSwag: each rank's items

// At world 1, 3 and 8, item counts at the edges of the world (1, world - 1, world, world + 1,
// 2 world - 1, 2 world + 1, 7 world, HellaSwag's 10042 val items): the ranks' ranges follow each
// other from item 0 to the last, every item exactly once, their sizes within one of each other.
static void test_hellaswag_rank_items(void) {
    for (int w = 0; w < 3; w++) {
        int world = WORLDS[w], counts[8] = {1, world - 1, world, world + 1, 2 * world - 1, 2 * world + 1, 7 * world, 10042};
        for (int c = 0; c < 8; c++) {
            int n = counts[c];
            if (n < 1) continue;
            int *seen = (int *)callocCheck(n, sizeof(int));
            int end = 0, smallest = n, largest = 0, ordered = 1;
            for (int rank = 0; rank < world; rank++) {
                int item0 = -1, item1 = -1;
                hellaswag_rank_items(n, rank, world, &item0, &item1);
                ordered &= item0 == end && item1 >= item0 && item1 <= n;
                if (item1 - item0 < smallest) smallest = item1 - item0;
                if (item1 - item0 > largest) largest = item1 - item0;
                for (int i = item0; i >= 0 && i < item1 && i < n; i++) seen[i]++;
                end = item1;
            }
            int first_bad = -1;
            for (int i = 0; i < n && first_bad < 0; i++)
                if (seen[i] != 1) first_bad = i;
            CHECK(ordered && end == n && first_bad < 0 && largest - smallest <= 1,
                  "world %d, %d items: ranges %s, the last ends at %d, item %d taken %d times, sizes %d to %d", world, n,
                  ordered ? "in order" : "not following each other", end, first_bad, first_bad >= 0 ? seen[first_bad] : 1, smallest, largest);
            free(seen);
        }
    }
}

// ---- bits per byte: every token id a target

// A val shard of the Llama 2 decode table's vocabulary V: V-1, 0, 1, ..., V-1, so that every id is a
// target once (id 0 the first, V-1 the last of the last position), each after the id before it; read
// as evaluate() reads it (B 4 x T 16, V / 64 positions). Without a mask val_text counts V targets and
// their pieces' bytes (the document start's none, the token after it without a leading space); with
// a mask that keeps the ids that are not 2 mod 5 (0 and V-1 among them), only those.
static void test_val_text_every_id(void) {
    Tokenizer tok;
    tokenizer_init(&tok, default_options().tokenizer_path);
    const int V = tok.vocab_size, B = 4, T = 16, n = V + 1;
    CHECK(V % (B * T) == 0, "the decode table's %d tokens are not whole positions of %d", V, B * T);
    char shard[128], mask[160];
    snprintf(shard, sizeof(shard), "%s/every_id.bin", g_dir);
    snprintf(mask, sizeof(mask), "%s.mask", shard);
    int h[256];
    memset(h, 0, sizeof(h));
    h[0] = SHARD_MAGIC_U16; h[1] = SHARD_VERSION_U16; h[2] = n;
    uint16_t *tokens = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
    unsigned char *learn = (unsigned char *)mallocCheck(n);
    tokens[0] = (uint16_t)(V - 1);
    learn[0] = 1;
    for (int id = 0; id < V; id++) {
        tokens[id + 1] = (uint16_t)id;
        learn[id + 1] = id % 5 != 2;
    }
    FILE *f = fopenCheck(shard, "wb");
    fwriteCheck(h, sizeof(int), 256, f);
    fwriteCheck(tokens, sizeof(uint16_t), n, f);
    fcloseCheck(f);
    for (int masked = 0; masked <= 1; masked++) {
        if (masked) {
            h[0] = MASK_MAGIC; h[1] = MASK_VERSION;
            f = fopenCheck(mask, "wb");
            fwriteCheck(h, sizeof(int), 256, f);
            fwriteCheck(learn, 1, n, f);
            fcloseCheck(f);
        }
        double want_tokens = 0.0, want_bytes = 0.0;
        for (int id = 0; id < V; id++) {
            if (masked && !learn[id + 1]) continue;
            want_tokens += 1.0;
            if (id == tok.doc_start_id) continue; // no text
            int after_start = id - 1 == tok.doc_start_id || (id == 0 && V - 1 == tok.doc_start_id);
            want_bytes += tok.piece_len[id] - (after_start && tok.piece_len[id] > 0 && tok.pieces[id][0] == ' ');
        }
        DataLoader val;
        dataloader_init_eval(&val, shard, B, T, V, 0);
        ValText v = val_text(&val, V / (B * T), &tok);
        CHECK(val.masked == masked && v.tokens == want_tokens && v.bytes == want_bytes,
              "%s: val_text counts %g targets in %g bytes, want %g in %g (every id 0 to %d a target once)", masked ? "masked" : "no mask",
              v.tokens, v.bytes, want_tokens, want_bytes, V - 1);
        dataloader_free(&val);
    }
    free(tokens); free(learn);
    remove(shard); remove(mask);
    tokenizer_free(&tok);
}

// ---- fp8: the values a step casts

static const LlamaConfig FP8_CFG = {64, 2, 128, 2, 1, 256, 32, 10000.0f, 1e-5f}; // V L C NH NKV FF max_T
enum { FP8_B = 2, FP8_T = 32 };

// Linear lin's width in and out in FP8_CFG, written out (qkv: NH + 2 NKV heads of C / NH).
static void fp8_cfg_linear(int lin, double *in, double *out) {
    const double C = 128, FF = 256, HS = 64, NH = 2, NKV = 1, V = 64;
    const double ins[LINS_PER_LAYER + 1] = {C, C, C, FF, C}, outs[LINS_PER_LAYER + 1] = {(NH + 2 * NKV) * HS, C, 2 * FF, C, V};
    *in = ins[lin];
    *out = outs[lin];
}

// The values tensor `kind` of a linear of this grain casts in a step, by docs/fp8_recipe.md: every rank
// casts X and dY in each micro-step (block and row: twice, row-wise and transposed), W once a step from the
// weight cache, without it before each micro-step's forward (any grain), and a bf16 linear nothing.
static double spec_values_cast(int lin, int kind, int grain, int w_cache, int grad_accum, int world) {
    double in, out, tokens = (double)grad_accum * FP8_B * FP8_T;
    fp8_cfg_linear(lin, &in, &out);
    if (grain == FP8_GRAIN_BF16) return 0.0;
    if (kind == FP8_W) return in * out * (w_cache ? 1 : grad_accum) * world;
    return tokens * (kind == FP8_X ? in : out) * (grain == FP8_GRAIN_BLOCK || grain == FP8_GRAIN_ROW ? 2 : 1) * world;
}

// The host part of FP8_CFG's linears that linear_values_cast reads: B x T, on `world` ranks, the weight
// cache or not, the lm_head in fp8 or not, every fp8 linear's grain `grain`.
static void fp8_linears(Linears *L, int world, int w_cache, int lm_head, int grain) {
    memset(L, 0, sizeof(*L));
    L->cfg = FP8_CFG;
    L->sh.o.fp8 = 1; L->sh.o.lm_head = lm_head; L->sh.o.N = FP8_B * FP8_T; L->sh.o.w_cache = w_cache; L->sh.o.world = world;
    L->count = fp8_num_linears(&FP8_CFG, lm_head);
    L->grain = (unsigned char *)mallocCheck(L->count);
    memset(L->grain, grain, L->count);
}

// A host-only fp8 model of FP8_CFG with what the metrics read: those linears, on rank mg.
static void fp8_model(Model *m, MultiGpu *mg, int w_cache, int lm_head, int grain) {
    memset(m, 0, sizeof(*m));
    m->cfg = FP8_CFG;
    m->opt.B = FP8_B; m->opt.T = FP8_T; m->opt.precision = PREC_FP8;
    m->fp8.on = 1; m->fp8.w_cache = w_cache; m->fp8.lm_head = lm_head;
    m->mg = mg;
    fp8_linears(&m->linears, mg->world, w_cache, lm_head, grain);
}

// linear_values_cast against spec_values_cast for every tensor of every linear (the lm_head's too), in
// every grain, with the weight cache and without, grad accumulation 1 and 3, on 1, 3 and 8 ranks.
static void test_fp8_values_cast(void) {
    for (int grain = 0; grain < FP8_GRAINS; grain++) {
        for (int w_cache = 0; w_cache <= 1; w_cache++) {
            for (int ga = 1; ga <= 3; ga += 2) {
                for (int w = 0; w < 3; w++) {
                    Linears L;
                    fp8_linears(&L, WORLDS[w], w_cache, 1, grain);
                    char first_wrong[200] = "";
                    for (int l = 0; l < FP8_CFG.L; l++) {
                        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0); lin++) {
                            for (int k = 0; k < FP8_KINDS; k++) {
                                double got = linear_values_cast(&L, l, lin, k, ga);
                                double want = spec_values_cast(lin, k, grain, w_cache, ga, WORLDS[w]);
                                if (got != want && !first_wrong[0])
                                    snprintf(first_wrong, sizeof(first_wrong), "layer %d %s %s cast %.0f values, want %.0f", l, LINEAR_NAMES[lin],
                                             FP8_KIND_NAMES[k], got, want);
                            }
                        }
                    }
                    CHECK(!first_wrong[0], "grain %s, weight cache %d, grad accumulation %d, world %d: %s", FP8_GRAIN_NAMES[grain], w_cache, ga,
                          WORLDS[w], first_wrong);
                    free(L.grain);
                }
            }
        }
    }
}

// ---- metrics.jsonl

// The number after "key": in a metrics line; NAN if the key is missing or not a number.
static double json_value(const char *line, const char *key) {
    char k[64];
    snprintf(k, sizeof(k), "\"%s\": ", key);
    const char *at = strstr(line, k);
    if (!at) return NAN;
    char *end;
    double v = strtod(at + strlen(k), &end);
    return end == at + strlen(k) ? NAN : v;
}

// Whether v is want to the 8 significant digits metrics.jsonl writes (%.8g).
static int same_8_digits(double v, double want) { return fabs(v - want) <= 1e-7 * fabs(want); }

// metrics.jsonl's step lines written by the trainer's writer into g_dir/metrics.jsonl: an fp8 step of
// rank 0 of 3 without the weight cache, grad accumulation 2, the lm_head in fp8, layer 0's w13 block-
// scaled and layer 1's wo fallen back to bf16 (its counts 0, as the GPU leaves them), every other tensor
// with underflows and saturations of its own (saturations never the underflows), the lm_head's dY the
// worst underflow; the same step with a NaN loss and an infinite norm; a bf16 step (metrics_step) with
// a NaN loss. fp8_underflow and fp8_saturation must be the lost values over every value cast
// (spec_values_cast), the non-finite numbers null. Then the file read by Python: every line strict
// JSON (no NaN or Infinity), and scripts/to_tensorboard.py's read_metrics reads the nulls as None (no value).
static void test_metrics_lines(void) {
    MultiGpu mg = stand_in_rank(0, 3);
    Model m;
    fp8_model(&m, &mg, 0, 1, FP8_GRAIN_TENSOR);
    m.linears.grain[fp8_linear(&FP8_CFG, 0, LIN_W13)] = FP8_GRAIN_BLOCK;
    m.linears.grain[fp8_linear(&FP8_CFG, 1, LIN_WO)] = FP8_GRAIN_BF16;
    const int ga = 2, nt = fp8_num_tensors(&FP8_CFG, 1);
    unsigned long long *counts = (unsigned long long *)callocCheck((size_t)FP8_COUNTS * nt, sizeof(unsigned long long));
    double cast = 0.0, under = 0.0, sat = 0.0;
    for (int t = 0; t < nt; t++) {
        int i = t / FP8_KINDS, k = t % FP8_KINDS, lin = i < LINS_PER_LAYER * FP8_CFG.L ? i % LINS_PER_LAYER : LIN_LM_HEAD;
        double values = spec_values_cast(lin, k, m.linears.grain[i], 0, ga, 3);
        if (values == 0.0) continue;
        counts[FP8_COUNTS * t + FP8_UNDERFLOWS] = t == nt - 1 ? (unsigned long long)(0.25 * values) : 100 + 7 * t;
        counts[FP8_COUNTS * t + FP8_SATURATIONS] = 3 + 11 * t;
        cast += values;
        under += (double)counts[FP8_COUNTS * t + FP8_UNDERFLOWS];
        sat += (double)counts[FP8_COUNTS * t + FP8_SATURATIONS];
    }
    char path[128];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", g_dir);
    FILE *f = fopenCheck(path, "w");
    size_t gib = (size_t)1 << 30;
    metrics_line(f, &m, counts, 7, 2.5f, 1.25f, 3e-4f, 20.0f, 51200.0, 0.25, 3 * gib, ga);
    metrics_line(f, &m, counts, 8, NAN, INFINITY, 3e-4f, 20.0f, 51200.0, 0.25, 3 * gib, ga);
    m.fp8.on = 0;
    metrics_step(f, &m, 9, NAN, 1.0f, 2e-4f, 21.0f, 48000.0, 0.0, 3 * gib, ga);
    fcloseCheck(f);
    free(m.linears.grain);
    free(counts);

    char lines[3][1024];
    f = fopenCheck(path, "r");
    for (int s = 0; s < 3; s++) if (!fgets(lines[s], sizeof(lines[s]), f)) lines[s][0] = '\0';
    fcloseCheck(f);
    for (int s = 0; s < 2; s++) {
        double u = json_value(lines[s], "fp8_underflow"), v = json_value(lines[s], "fp8_saturation");
        double worst = json_value(lines[s], "fp8_worst_underflow"), want_worst = 0.25 * spec_values_cast(LIN_LM_HEAD, FP8_DY, 0, 0, ga, 3);
        want_worst = floor(want_worst) / spec_values_cast(LIN_LM_HEAD, FP8_DY, 0, 0, ga, 3);
        CHECK(same_8_digits(u, under / cast) && same_8_digits(v, sat / cast) && same_8_digits(worst, want_worst) &&
              strstr(lines[s], "\"fp8_worst_underflow_tensor\": \"layer 2 lm_head dy\""),
              "step %d: fp8_underflow %.9g, fp8_saturation %.9g, worst %.9g (want %.9g, %.9g, %.9g of layer 2 lm_head dy): %s", 7 + s, u, v,
              worst, under / cast, sat / cast, want_worst, lines[s]);
    }
    CHECK(json_value(lines[0], "loss") == 2.5 && json_value(lines[0], "norm") == 1.25, "step 7: loss and norm not 2.5 and 1.25: %s", lines[0]);
    CHECK(strstr(lines[1], "\"loss\": null") && strstr(lines[1], "\"norm\": null"), "step 8: a NaN loss, an infinite norm not null: %s",
          lines[1]);
    CHECK(strstr(lines[2], "\"loss\": null") && !strstr(lines[2], "fp8_"), "bf16 step 9: a NaN loss not null, or fp8 fields: %s", lines[2]);

    // Python (the project's .venv/ where there is one: to_tensorboard.py's package needs numpy): strict
    // JSON, then the reader of scripts/to_tensorboard.py (a null is None there: a value it leaves out and
    // names); one line per record, its tags sorted
    char cmd[800], out[4096] = "", copy[4096];
    snprintf(cmd, sizeof(cmd), "$([ -x .venv/bin/python3 ] && echo .venv/bin/python3 || echo python3) -c '"
             "import json, sys\n"
             "sys.path[:0] = [\".\", \"scripts\"]\n"
             "from to_tensorboard import read_metrics\n"
             "def strict(c): raise ValueError(\"not JSON: \" + c)\n"
             "[json.loads(line, parse_constant=strict) for line in open(sys.argv[1])]\n"
             "for step, tags in read_metrics(sys.argv[1]):\n"
             "    print(step, *sorted(t + \"=\" + (\"null\" if v is None else \"%%.17g\" %% v) for t, v in tags.items()))\n"
             "' %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[n] = '\0';
    int status = p ? pclose(p) : -1;
    memcpy(copy, out, sizeof(out));
    char want_sat[64];
    snprintf(want_sat, sizeof(want_sat), "fp8/saturation=%.17g ", json_value(lines[1], "fp8_saturation"));
    char record[3][1024] = {"", "", ""}; // steps 7, 8, 9
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] >= '7' && line[0] <= '9' && line[1] == ' ') snprintf(record[line[0] - '7'], sizeof(record[0]), "%s ", line);
    CHECK(status == 0 && strstr(record[0], "train/loss=2.5 ") && strstr(record[0], "train/norm=1.25 ") && strstr(record[1], want_sat) &&
          strstr(record[1], "train/loss=null ") && strstr(record[1], "train/norm=null ") && strstr(record[2], "train/loss=null "),
          "read back by python (exit %d; want steps 7-9, 8's %s, its loss and norm null, 9's loss null):\n%s", status, want_sat, out);
}

// ---- the logs of a resumed run

static void write_text(const char *path, const char *text) {
    FILE *f = fopenCheck(path, "w");
    fputs(text, f);
    fcloseCheck(f);
}

static void read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    if (f) fclose(f);
}

// open_logs on a log directory holding a run's main.log, metrics.jsonl and fp8.log: a resumed run
// (with fp8.log, and without, which leaves it alone) appends to every log it opens, a fresh one starts
// them over; without fp8_log no fp8.log is opened or made.
static void test_open_logs(void) {
    const char *names[3] = {"main.log", "metrics.jsonl", "fp8.log"};
    char dir[128], path[3][200], got[256];
    snprintf(dir, sizeof(dir), "%s/logs", g_dir);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));
    for (int k = 0; k < 3; k++) snprintf(path[k], sizeof(path[k]), "%s/%s", dir, names[k]);
    struct { int resumed, fp8_log; const char *want[3]; } runs[] = {
        {1, 1, {"step 1\nstep 2\n", "step 1\nstep 2\n", "step 1\nstep 2\n"}},
        {1, 0, {"step 1\nstep 2\n", "step 1\nstep 2\n", "step 1\n"}},
        {0, 1, {"step 2\n", "step 2\n", "step 2\n"}},
    };
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++) write_text(path[k], "step 1\n");
        FILE *f[3] = {NULL, NULL, NULL};
        open_logs(dir, runs[r].resumed, runs[r].fp8_log, &f[0], &f[1], &f[2]);
        CHECK(f[0] && f[1] && (f[2] != NULL) == runs[r].fp8_log, "resumed %d, fp8_log %d: main.log %s, metrics.jsonl %s, fp8.log %s",
              runs[r].resumed, runs[r].fp8_log, f[0] ? "open" : "not open", f[1] ? "open" : "not open", f[2] ? "open" : "not open");
        for (int k = 0; k < 3; k++) {
            if (!f[k]) continue;
            fputs("step 2\n", f[k]);
            fcloseCheck(f[k]);
        }
        for (int k = 0; k < 3; k++) {
            read_text(path[k], got, sizeof(got));
            CHECK(strcmp(got, runs[r].want[k]) == 0, "resumed %d, fp8_log %d: %s holds '%s', want '%s'", runs[r].resumed, runs[r].fp8_log,
                  names[k], got, runs[r].want[k]);
        }
    }
    remove(path[2]);
    FILE *f[3];
    open_logs(dir, 0, 0, &f[0], &f[1], &f[2]);
    fcloseCheck(f[0]);
    fcloseCheck(f[1]);
    CHECK(f[2] == NULL && access(path[2], F_OK) != 0, "a fresh run without fp8_log made fp8.log");
    for (int k = 0; k < 3; k++) remove(path[k]);
    rmdir(dir);
}

int main(int argc, char **argv) {
    if (argc > 1) g_test_filter = argv[1];
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_step_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    run_test("train_step's learned targets: every micro-batch's, times the world without masks; the loss scale they give",
             test_step_learned_targets);
    run_test("HellaSwag: the ranks' item ranges cover every item once, at world 1, 3 and 8 and item counts at the edges",
             test_hellaswag_rank_items);
    run_test("bits per byte: every token id 0 to V-1 a target (the first and the last), with and without a mask", test_val_text_every_id);
    run_test("fp8: the values a step casts, every grain, with and without the weight cache, on 1, 3 and 8 ranks", test_fp8_values_cast);
    run_test("metrics.jsonl: fp8 underflows and saturations of their own, non-finite numbers null; strict JSON, to_tensorboard's reader",
             test_metrics_lines);
    run_test("logs: a resumed run appends to main.log, metrics.jsonl and fp8.log; a fresh run starts them empty", test_open_logs);
    char rm[100];
    snprintf(rm, sizeof(rm), "rm -rf %s", g_dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
