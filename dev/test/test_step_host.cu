/*
Host-only tests of the trainer's step, evaluation, metrics and fp8-fallback code (issue 41), each on
the trainer's own functions, with stand-in ranks (a MultiGpu with only rank and world set) at world
1, 3 and 8 where the code is sharded: train_step's count of the step's learned targets
(step_learned_targets) and the loss scale it gives; the HellaSwag items of each rank
(hellaswag_rank_items); bits per byte's targets and bytes (val_text) with every token id a target;
the values a step's fp8 casts cast (linear_values_cast) in every grain, with and without the weight
cache (the fallback's rule itself: dev/test/test_fp8_fallback.h, in test_cpu); the run log (llmc/run_log.h):
every event's stdout line, main.log line and metrics.jsonl record against the documented formats
(NaN and inf too), without the log files, on another rank (nothing); a step's fp8 health from its
counts (fp8_health), its metrics.jsonl records read back by a strict JSON parser and
scripts/to_tensorboard.py's reader (python3); the logs of a resumed run appended to, a fresh run's
started empty (run_log_open).
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

static void fp8_model_free(Model *m) { free(m->linears.grain); }


// ---- the run log (llmc/run_log.h): each event's stdout line, main.log line and metrics.jsonl record

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

static const size_t GIB = (size_t)1 << 30;
static const char *const OUTPUT_NAMES[3] = {"stdout", "main.log", "metrics.jsonl"};

// The events, each written into a run log by one call. The numbers are exact in binary (0.0009765625 is
// 2^-10), so each expected text below is what the format documented in docs/formats.md and README.md
// prints.
static void event_step_fp8(const RunLog *rl) {
    RunStep s = {7, 100, 2.5f, 1.25f, 0.0009765625f, 20.5f, 51200.0, 250e12, 1000.0, 3 * GIB, 0};
    Fp8Health h = {0.125, 0.0625, 0.5, "layer 2 lm_head dy"};
    run_log_step(rl, &s, &h);
}
static void event_step_nonfinite(const RunLog *rl) { // no peak known (MFU n/a), the update skipped, every linear bf16
    RunStep s = {8, 100, NAN, INFINITY, 0.0009765625f, 20.5f, 51200.0, 250e12, 0.0, 3 * GIB, 1};
    Fp8Health h = {NAN, NAN, -1.0, ""};
    run_log_step(rl, &s, &h);
}
static void event_step_bf16(const RunLog *rl) {
    RunStep s = {9, 100, 3.0f, 0.5f, 0.25f, 19.75f, 8192.0, 0.0, 0.0, GIB / 2, 0};
    run_log_step(rl, &s, NULL);
}
static void event_val(const RunLog *rl) { run_log_val(rl, 20, 3.25f, 1.5, ""); }
static void event_val_no_bpb(const RunLog *rl) { run_log_val(rl, 0, NAN, 0.0, " over 2 batches of 4 x 64 tokens"); }
static void event_val_eval_only(const RunLog *rl) { run_log_val(rl, 0, 3.25f, 1.5, " over 1 batch of 16 x 1024 tokens"); }
static void event_hellaswag(const RunLog *rl) { run_log_hellaswag(rl, 20, 0.25, 0.3125, 40); }
static void event_fallback(const RunLog *rl) { run_log_fallback(rl, 4, 11, "w2", "block", "x", 0.125, 1.0, 3); }
static void event_sample(const RunLog *rl) {
    int tokens[3] = {1, 450, 29871};
    run_log_sample(rl, tokens, 3);
}
static void event_mixture(const RunLog *rl) { run_log_mixture(rl, "'a_*.bin' 3 of 4 batches (0.7500, weight 0.7000)"); }
static void event_median(const RunLog *rl) { run_log_median(rl, 22.5f, 10, 51200.0, 250e12, 1000.0, 3 * GIB, 2); }
static void event_header(const RunLog *rl) { // 2 GPUs, fp8, llama3 RoPE, tied, resumed, synthetic data, bf16 master,
                                             // -r 1, no fp8 weight cache, moments in host memory
    LlamaConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.V = 32000; cfg.L = 4; cfg.C = 256; cfg.NH = 4; cfg.NKV = 2; cfg.FF = 768; cfg.rope_theta = 500000.0f;
    cfg.tied_embeddings = 1; cfg.rope_scaling = ROPE_LLAMA3;
    cfg.rope_factor = 32.0f; cfg.rope_low_freq_factor = 1.0f; cfg.rope_high_freq_factor = 4.0f;
    cfg.rope_original_T = 8192;
    RunHeader h = {"NVIDIA H200", "-ngpu fork launcher", 2, "fp8", "delayed", "tiny", &cfg, 12345678, 7 * GIB / 2,
                   4, 64, 512, 1, 100, 10, 1, 1, 0.25f, 0.125f, 0.5f, 1.0f, "bf16", "bf16", "cuDNN fused", 1, 0, 1,
                   " -b 4 -t 64"};
    run_log_header(rl, &h);
}
static void event_header_plain(const RunLog *rl) { // 1 GPU, bf16, a fresh start
    LlamaConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.V = 32000; cfg.L = 12; cfg.C = 768; cfg.NH = 12; cfg.NKV = 12; cfg.FF = 2048; cfg.rope_theta = 10000.0f;
    RunHeader h = {"NVIDIA H100 80GB HBM3", "single GPU", 1, "bf16", NULL, "125m", &cfg, 134100000, 2 * GIB,
                   16, 1024, 16384, 1, 50, 0, 0, 0, 0.5f, 0.0f, 0.0f, 0.0f, "fp32", "fp32", "plain", 0, -1, 0, " -x 50"};
    run_log_header(rl, &h);
}

static const struct {
    const char *name;
    void (*write)(const RunLog *rl);
    const char *want[3]; // stdout, main.log, metrics.jsonl
} EVENTS[] = {
    {"an fp8 step", event_step_fp8,
     {"step     7/100 | loss 2.500000 | norm 1.2500 | lr 9.766e-04 | 20.50 ms | 51200 tok/s | MFU 25.0%\n",
      "s:7 trl:2.500000 norm:1.2500 lr:9.7656e-04 ms:20.50 tok/s:51200\n",
      "{\"step\": 7, \"loss\": 2.5, \"lr\": 0.0009765625, \"norm\": 1.25, \"ms\": 20.5, \"tokens_per_s\": 51200,"
      " \"mfu\": 0.25, \"memory_gib\": 3, \"fp8_underflow\": 0.125, \"fp8_saturation\": 0.0625,"
      " \"fp8_worst_underflow\": 0.5, \"fp8_worst_underflow_tensor\": \"layer 2 lm_head dy\"}\n"}},
    {"a step with a NaN loss, an infinite norm, no MFU, the update skipped, NaN fp8 fractions", event_step_nonfinite,
     {"step     8/100 | loss nan | norm inf | lr 9.766e-04 | 20.50 ms | 51200 tok/s | MFU n/a"
      " | update SKIPPED (non-finite gradient)\n",
      "s:8 trl:nan norm:inf lr:9.7656e-04 ms:20.50 tok/s:51200\n",
      "{\"step\": 8, \"loss\": null, \"lr\": 0.0009765625, \"norm\": null, \"ms\": 20.5, \"tokens_per_s\": 51200,"
      " \"memory_gib\": 3, \"fp8_underflow\": null, \"fp8_saturation\": null, \"fp8_worst_underflow\": -1,"
      " \"fp8_worst_underflow_tensor\": \"\"}\n"}},
    {"a bf16 step", event_step_bf16,
     {"step     9/100 | loss 3.000000 | norm 0.5000 | lr 2.500e-01 | 19.75 ms | 8192 tok/s | MFU n/a\n",
      "s:9 trl:3.000000 norm:0.5000 lr:2.5000e-01 ms:19.75 tok/s:8192\n",
      "{\"step\": 9, \"loss\": 3, \"lr\": 0.25, \"norm\": 0.5, \"ms\": 19.75, \"tokens_per_s\": 8192,"
      " \"memory_gib\": 0.5}\n"}},
    {"a val loss with bpb", event_val,
     {"val loss 3.250000 | bpb 1.5000\n", "s:20 tel:3.250000 bpb:1.500000\n",
      "{\"step\": 20, \"val_loss\": 3.25, \"bpb\": 1.5}\n"}},
    {"a NaN val loss without bpb, -x 0's end of line", event_val_no_bpb,
     {"val loss nan over 2 batches of 4 x 64 tokens\n", "s:0 tel:nan\n", "{\"step\": 0, \"val_loss\": null}\n"}},
    {"a val loss with bpb, -x 0's end of line", event_val_eval_only,
     {"val loss 3.250000 | bpb 1.5000 over 1 batch of 16 x 1024 tokens\n", "s:0 tel:3.250000 bpb:1.500000\n",
      "{\"step\": 0, \"val_loss\": 3.25, \"bpb\": 1.5}\n"}},
    {"a HellaSwag score", event_hellaswag,
     {"hellaswag: acc 0.2500 acc_norm 0.3125 (40 items)\n", "s:20 hs_acc:0.250000 hs_acc_norm:0.312500 hs_items:40\n",
      "{\"step\": 20, \"hellaswag_acc\": 0.25, \"hellaswag_acc_norm\": 0.3125, \"hellaswag_items\": 40}\n"}},
    {"an fp8 fallback switch", event_fallback,
     {"fp8 fallback: layer 11 w2 -> block from step 5 on (its x lost 12.50% of its values in step 4, over 1% in 3 steps"
      " in a row)\n",
      "fp8_fallback: s:4 layer:11 linear:w2 grain:block tensor:x lost:1.250000e-01 steps:3\n",
      "{\"step\": 4, \"fp8_fallback\": \"layer 11 w2\", \"fp8_grain\": \"block\", \"fp8_fallback_tensor\": \"x\","
      " \"fp8_fallback_lost\": 0.125}\n"}},
    {"a sample", event_sample, {"", "sample: 1 450 29871\n", ""}},
    {"the data mixture", event_mixture,
     {"data mixture realized: 'a_*.bin' 3 of 4 batches (0.7500, weight 0.7000)\n",
      "mixture: 'a_*.bin' 3 of 4 batches (0.7500, weight 0.7000)\n", ""}},
    {"the median step", event_median,
     {"median step 22.50 ms over 10 steps after warm-up | 51200 tok/s | MFU 25.0% | device memory in use 3.00 GiB"
      " (rank 0)\n", "", ""}},
    {"the header of a resumed 2-GPU fp8 run", event_header,
     {"train_llama_fp8 | 2 x NVIDIA H200 (-ngpu fork launcher) | fp8 (delayed scaling) | model tiny: V 32000 L 4 C 256"
      " NH 4 NKV 2 FF 768 theta 500000 (llama3 scaling: factor 32, low 1, high 4, original 8192) | tied embeddings"
      " | 12.3M params\n"
      "B 4 T 64 | total batch 512 tokens (grad accum 1) | 100 steps | lr 0.25 warmup 10 final 0.125 | wd 0.5 clip 1"
      " | AdamW moments bf16 | master weights bf16 | cuDNN fused attention\n"
      "device memory allocated: 3.50 GiB per GPU (ZeRO-1) | recompute SwiGLU | fp8 weight cache off"
      " | AdamW moments in host memory | resumed\n",
      "# NVIDIA H200 precision fp8 model tiny V 32000 L 4 C 256 NH 4 NKV 2 FF 768 B 4 T 64 total_batch 512"
      " adam_moments bf16 data synthetic gpus 2\noptions: -b 4 -t 64\n", ""}},
    {"the header of a 1-GPU bf16 run", event_header_plain,
     {"train_llama_fp8 | NVIDIA H100 80GB HBM3 | bf16 | model 125m: V 32000 L 12 C 768 NH 12 NKV 12 FF 2048 theta 10000"
      " | 134.1M params\n"
      "B 16 T 1024 | total batch 16384 tokens (grad accum 1) | 50 steps | lr 0.5 warmup 0 final 0 | wd 0 clip 0"
      " | AdamW moments fp32 | master weights fp32 | plain attention\n"
      "device memory allocated: 2.00 GiB | recompute none\n",
      "# NVIDIA H100 80GB HBM3 precision bf16 model 125m V 32000 L 12 C 768 NH 12 NKV 12 FF 2048 B 16 T 1024"
      " total_batch 16384 adam_moments fp32\noptions: -x 50\n", ""}},
};

// What `write` writes into a run log of the main rank (main_rank 1) or another, its stdout, main.log and
// metrics.jsonl files in g_dir (files 0: stdout's alone, main.log and metrics.jsonl NULL), read back.
static void event_outputs(void (*write)(const RunLog *rl), int main_rank, int files, char got[3][1024]) {
    char path[3][128];
    RunLog rl = {main_rank, NULL, NULL, NULL, NULL};
    FILE **f[3] = {&rl.out, &rl.log, &rl.metrics};
    for (int k = 0; k < 3; k++) {
        snprintf(path[k], sizeof(path[k]), "%s/event_%s", g_dir, OUTPUT_NAMES[k]);
        remove(path[k]);
        if (k == 0 || files) *f[k] = fopenCheck(path[k], "w");
    }
    write(&rl);
    fcloseCheck(rl.out);
    run_log_close(&rl);
    for (int k = 0; k < 3; k++) read_text(path[k], got[k], sizeof(got[k]));
}

// Every event's three outputs against the formats (NaN and inf in the text, null in metrics.jsonl);
// without main.log and metrics.jsonl (no -o, -x 0) its stdout the same; another rank writes nothing.
static void test_run_log_events(void) {
    char got[3][1024];
    for (size_t e = 0; e < sizeof(EVENTS) / sizeof(EVENTS[0]); e++) {
        event_outputs(EVENTS[e].write, 1, 1, got);
        for (int k = 0; k < 3; k++)
            CHECK(strcmp(got[k], EVENTS[e].want[k]) == 0, "%s: %s\n      '%s'\n want '%s'", EVENTS[e].name,
                  OUTPUT_NAMES[k], got[k], EVENTS[e].want[k]);
        event_outputs(EVENTS[e].write, 1, 0, got);
        CHECK(strcmp(got[0], EVENTS[e].want[0]) == 0 && !got[1][0] && !got[2][0],
              "%s, no main.log or metrics.jsonl: stdout\n      '%s'\n want '%s'", EVENTS[e].name, got[0],
              EVENTS[e].want[0]);
        event_outputs(EVENTS[e].write, 0, 1, got);
        CHECK(!got[0][0] && !got[1][0] && !got[2][0],
              "%s, not the main rank: stdout '%s', main.log '%s', metrics.jsonl '%s' (want nothing)", EVENTS[e].name,
              got[0], got[1], got[2]);
    }
}

// fp8_health of a step of rank 0 of 3 without the weight cache, grad accumulation 2, the lm_head in fp8,
// layer 0's w13 block-scaled and layer 1's wo fallen back to bf16 (its counts 0, as the GPU leaves
// them), every other tensor with underflows and saturations of its own (saturations never the
// underflows), the lm_head's dY the worst underflow: fp8_underflow and fp8_saturation must be the lost
// values over every value cast (spec_values_cast). Then metrics.jsonl's records of that step, of the
// same step with a NaN loss and an infinite norm, and of a bf16 step with a NaN loss, written by
// run_log_step, read by Python: every line strict JSON (no NaN or Infinity), and
// scripts/to_tensorboard.py's read_metrics reads the nulls as None (no value).
static void test_fp8_health(void) {
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
    Fp8Health h = fp8_health(&m, counts, ga);
    double dy = spec_values_cast(LIN_LM_HEAD, FP8_DY, 0, 0, ga, 3), want_worst = floor(0.25 * dy) / dy;
    // sums of whole numbers below 2^53: exact in any order
    CHECK(h.underflow == under / cast && h.saturation == sat / cast && h.worst_underflow == want_worst &&
          strcmp(h.worst_tensor, "layer 2 lm_head dy") == 0,
          "fp8_underflow %.9g, fp8_saturation %.9g, worst %.9g of %s (want %.9g, %.9g, %.9g of layer 2 lm_head dy)",
          h.underflow, h.saturation, h.worst_underflow, h.worst_tensor, under / cast, sat / cast, want_worst);
    fp8_model_free(&m);
    free(counts);

    char path[128];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", g_dir);
    RunLog rl = {1, fopenCheck("/dev/null", "w"), NULL, fopenCheck(path, "w"), NULL};
    RunStep steps[3] = {{7, 10, 2.5f, 1.25f, 3e-4f, 20.0f, 51200.0, 0.0, 0.0, 3 * GIB, 0},
                        {8, 10, NAN, INFINITY, 3e-4f, 20.0f, 51200.0, 0.0, 0.0, 3 * GIB, 1},
                        {9, 10, NAN, 1.0f, 2e-4f, 21.0f, 48000.0, 0.0, 0.0, 3 * GIB, 0}};
    for (int s = 0; s < 3; s++) run_log_step(&rl, &steps[s], s < 2 ? &h : NULL);
    fcloseCheck(rl.out);
    run_log_close(&rl);

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
    char written[32], want_sat[64]; // step 8's saturation as metrics.jsonl holds it (%.8g), read back
    snprintf(written, sizeof(written), "%.8g", h.saturation);
    snprintf(want_sat, sizeof(want_sat), "fp8/saturation=%.17g ", strtod(written, NULL));
    char record[3][1024] = {"", "", ""}; // steps 7, 8, 9
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] >= '7' && line[0] <= '9' && line[1] == ' ') snprintf(record[line[0] - '7'], sizeof(record[0]), "%s ", line);
    CHECK(status == 0 && strstr(record[0], "train/loss=2.5 ") && strstr(record[0], "train/norm=1.25 ") &&
          strstr(record[1], want_sat) && strstr(record[1], "train/loss=null ") &&
          strstr(record[1], "train/norm=null ") && strstr(record[2], "train/loss=null ") && !strstr(record[2], "fp8/"),
          "read back by python (exit %d; want steps 7-9, 8's %s, its loss and norm null, 9's loss null, no fp8 tags):"
          "\n%s", status, want_sat, out);
}

// run_log_open on a log directory holding a run's main.log, metrics.jsonl and fp8.log: a resumed run
// (with fp8.log, and without, which leaves it alone) appends to every log it opens, a fresh one starts
// them over; without fp8_log no fp8.log is opened or made; another rank, or no directory, opens none.
static void test_run_log_open(void) {
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
        RunLog rl = run_log_open(1, dir, runs[r].resumed, runs[r].fp8_log);
        FILE *f[3] = {rl.log, rl.metrics, rl.fp8};
        CHECK(rl.main_rank && rl.out == stdout && f[0] && f[1] && (f[2] != NULL) == runs[r].fp8_log,
              "resumed %d, fp8_log %d: main.log %s, metrics.jsonl %s, fp8.log %s", runs[r].resumed, runs[r].fp8_log,
              f[0] ? "open" : "not open", f[1] ? "open" : "not open", f[2] ? "open" : "not open");
        for (int k = 0; k < 3; k++)
            if (f[k]) fputs("step 2\n", f[k]);
        run_log_close(&rl);
        CHECK(!rl.log && !rl.metrics && !rl.fp8, "run_log_close left a file in the run log");
        for (int k = 0; k < 3; k++) {
            read_text(path[k], got, sizeof(got));
            CHECK(strcmp(got, runs[r].want[k]) == 0, "resumed %d, fp8_log %d: %s holds '%s', want '%s'", runs[r].resumed, runs[r].fp8_log,
                  names[k], got, runs[r].want[k]);
        }
    }
    for (int k = 0; k < 3; k++) remove(path[k]);
    struct { int main_rank; const char *dir, *what; } none[] = {{0, dir, "another rank"}, {1, NULL, "no directory"}};
    for (int c = 0; c < 2; c++) {
        RunLog rl = run_log_open(none[c].main_rank, none[c].dir, 0, 1);
        CHECK(rl.main_rank == none[c].main_rank && !rl.log && !rl.metrics && !rl.fp8 && access(path[0], F_OK) != 0 &&
              access(path[1], F_OK) != 0 && access(path[2], F_OK) != 0, "%s: a log opened or made", none[c].what);
        run_log_close(&rl);
    }
    RunLog rl = run_log_open(1, dir, 0, 0);
    run_log_close(&rl);
    CHECK(access(path[2], F_OK) != 0, "a fresh run without fp8_log made fp8.log");
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
    run_test("run log: each event's stdout, main.log and metrics.jsonl lines; without the files; another rank: none",
             test_run_log_events);
    run_test("fp8 health: underflows and saturations of their own; metrics.jsonl strict JSON, to_tensorboard's reader",
             test_fp8_health);
    run_test("run log: a resumed run appends to main.log, metrics.jsonl and fp8.log; a fresh run starts them empty",
             test_run_log_open);
    char rm[100];
    snprintf(rm, sizeof(rm), "rm -rf %s", g_dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
