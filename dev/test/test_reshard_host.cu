/*
Host-only test of a resume on another number of GPUs (llmc/reshard.h), with stand-in ranks and real
files, checked against statements made here, never against the code under test:
- save as N, load as M: for small models (untied and tied, so one with an empty lm_head) and AdamW
  moments of 2 bytes (bf16) and 4 (fp32), for every pair N, M of 1, 2, 3 and 8: N stand-in state files
  are written, each holding its rank's shard of m and v (every element's value a function of its flat
  parameter index, the padding filled with junk) between other bytes; every one of the M ranks fills
  its new shard from them, m a few hundred elements at a time (the chunks cross the copies' edges),
  v in one go, into a buffer of junk. Then: the M shards reassembled through zero_layout's pieces for M
  are byte for byte the moments of every parameter, each exactly once; the new padding is zero; each
  rank read only the old files' bytes of elements its shard holds, each once (never old padding, never
  more: no rank reads an old file whole); and saved as M and loaded as N again the shards are the
  original ones byte for byte (their padding zero, as the trainer's is);
- at 7B size (llama2-7b, llama3-8b), for the same pairs, without data: every copy of every new rank's
  plan maps each element to the one holding the same flat parameter index, and the copies cover the
  new shard's parameters exactly (what the streamed load reads is its share of the old files, ~27 GB / M
  of moments at 7B, not N whole files);
- -y 1's check of a checkpoint of N GPUs on M (checkpoint_rank_problem, llmc/checkpoint.h): every
  old state file is verified whole by some new rank (each damaged in turn is named), a sound one passes;
- the total batch across GPU counts (reshard_batch_problem): kept totals accepted, the ones that cannot
  be kept refused naming both GPU counts and what to pass or which counts work, worked out by hand;
  and a -d that does not split over this run's GPUs refused by checked_options naming their number.
Needs no GPU: CI runs it. Build and run: make dev/test/test_reshard_host && ./dev/test/test_reshard_host
*/
#include <stdio.h>
#include <stdint.h>
#include <unistd.h>
#include <algorithm>
#include <string>
#include <vector>
#define TESTING
#include "train_llama_fp8.cu"  // checked_options; llmc/reshard.h, llmc/checkpoint.h (checkpoint_rank_problem)
#include "dev/test/harness.h"  // run_expect_fatal

static const int WORLDS[] = {1, 2, 3, 8};
#define NUM_WORLDS 4
#define HEAD_BYTES 1024 // a stand-in state file: this many bytes, m, v, then TAIL_BYTES
#define TAIL_BYTES 24
#define CHUNK 333       // elements of m filled at a time

static char g_dir[64];

// The moment (m: which 0, v: which 1) of flat parameter k, elem bytes of it: never 0 (an element left
// out shows) and unlike its neighbours' and the other moment's (a shifted or swapped one shows).
static void moment_value(size_t k, int which, size_t elem, unsigned char *out) {
    uint64_t x = (uint64_t)k * 2 + which;
    uint32_t v = elem == 2 ? 1 + (uint32_t)(x * 40503u % 65535u) : 1 + (uint32_t)(x * 2654435761ull % 4294967295ull);
    memcpy(out, &v, elem); // little-endian: the low bytes
}

// For each element of rank `rank`'s shard: its flat parameter index, or SIZE_MAX for the padding. The
// pieces say it (zero_layout's own test holds them to the layout's rules).
static std::vector<size_t> shard_flat(const LlamaConfig *c, const size_t *sizes, int rank, int world) {
    ZeroLayout z = zero_layout(c, sizes, rank, world);
    std::vector<size_t> flat(z.shard, SIZE_MAX);
    for (int i = 0; i < z.num_pieces; i++)
        for (size_t j = 0; j < z.pieces[i].count; j++) flat[z.pieces[i].local + j] = z.pieces[i].flat + j;
    zero_layout_free(&z);
    return flat;
}

// A stand-in state file: HEAD_BYTES of junk, a shard's m and v, TAIL_BYTES of junk.
static void write_state(const char *path, const std::vector<unsigned char> &m, const std::vector<unsigned char> &v) {
    std::vector<unsigned char> head(HEAD_BYTES, 0x5A), tail(TAIL_BYTES, 0xA5);
    FILE *f = fopen(path, "wb");
    fwrite(head.data(), 1, head.size(), f);
    fwrite(m.data(), 1, m.size(), f);
    fwrite(v.data(), 1, v.size(), f);
    fwrite(tail.data(), 1, tail.size(), f);
    fclose(f);
}

// The shard's moment `which` as the trainer holds it, the padding set to `pad`.
static std::vector<unsigned char> shard_bytes(const std::vector<size_t> &flat, int which, size_t elem, unsigned char pad) {
    std::vector<unsigned char> b(flat.size() * elem, pad);
    for (size_t i = 0; i < flat.size(); i++) if (flat[i] != SIZE_MAX) moment_value(flat[i], which, elem, &b[i * elem]);
    return b;
}

// A ReshardRead in front of the files that refuses what a new rank must never read: a range outside
// one moment section of an old file, or one holding padding. It counts the bytes read.
typedef struct {
    ReshardFiles files;
    const std::vector<size_t> *old_flat; // per old rank
    size_t elem;
    uint64_t bytes;
    const char *bad;
} CheckedReader;

static void checked_read(void *ctx, int from, uint64_t offset, void *dst, size_t n) {
    CheckedReader *r = (CheckedReader *)ctx;
    const std::vector<size_t> &flat = r->old_flat[from];
    uint64_t section = flat.size() * r->elem, rel = offset - HEAD_BYTES;
    if (offset < HEAD_BYTES || rel / section != (rel + n - 1) / section || rel + n > 2 * section || rel % r->elem || n % r->elem) {
        r->bad = "a read outside the old file's moment sections, or across them";
        memset(dst, 0, n);
        return;
    }
    size_t first = (rel % section) / r->elem;
    for (size_t i = first; i < first + n / r->elem; i++)
        if (flat[i] == SIZE_MAX) r->bad = "a read of an old shard's padding";
    r->bytes += n;
    reshard_read_files(&r->files, from, offset, dst, n);
}

typedef struct {
    std::vector<unsigned char> m, v;
} Shard;

// Loads the shards of `to` ranks from the files of `from` ranks (paths[rank]), each through
// reshard_plan and reshard_fill as the trainer does: m CHUNK elements at a time, v whole. Returns
// why not, or NULL.
static const char *load(const LlamaConfig *c, const size_t *sizes, size_t elem, int from, int to,
                        const std::vector<std::string> &paths, std::vector<Shard> *out) {
    std::vector<std::vector<size_t>> old_flat(from);
    std::vector<FILE *> files(from);
    std::vector<const char *> names(from);
    for (int i = 0; i < from; i++) {
        old_flat[i] = shard_flat(c, sizes, i, from);
        files[i] = fopen(paths[i].c_str(), "rb");
        names[i] = paths[i].c_str();
    }
    const char *why = NULL;
    out->assign(to, Shard());
    for (int r = 0; r < to && !why; r++) {
        ReshardPlan p = reshard_plan(c, sizes, from, to, r);
        std::vector<size_t> flat = shard_flat(c, sizes, r, to);
        size_t held = 0;
        for (size_t f : flat) held += f != SIZE_MAX;
        CheckedReader reader = {{files.data(), names.data()}, old_flat.data(), elem, 0, NULL};
        Shard &s = (*out)[r];
        s.m.assign(p.new_shard * elem, 0xCD); // junk: the padding must come out zero
        s.v.assign(p.new_shard * elem, 0xCD);
        if (p.new_shard != flat.size() || p.old_shard != old_flat[0].size()) why = "the plan's shard sizes are not the layouts'";
        uint64_t m_at = HEAD_BYTES, v_at = HEAD_BYTES + (uint64_t)p.old_shard * elem;
        for (size_t first = 0; !why && first < p.new_shard; first += CHUNK) {
            size_t n = p.new_shard - first < CHUNK ? p.new_shard - first : CHUNK;
            reshard_fill(&p, elem, m_at, first, n, &s.m[first * elem], checked_read, &reader);
        }
        if (!why) reshard_fill(&p, elem, v_at, 0, p.new_shard, s.v.data(), checked_read, &reader);
        if (!why && reader.bad) why = reader.bad;
        if (!why && reader.bytes != 2 * held * elem) why = "a rank read other than the old files' bytes of its elements, each once";
        reshard_plan_free(&p);
    }
    for (int i = 0; i < from; i++) fclose(files[i]);
    return why;
}

static std::vector<std::string> write_shards(const char *prefix, int world, const std::vector<Shard> &shards) {
    std::vector<std::string> paths;
    for (int r = 0; r < world; r++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s_%d.bin", g_dir, prefix, r);
        write_state(path, shards[r].m, shards[r].v);
        paths.push_back(path);
    }
    return paths;
}

// Save as N, load as M, reassemble; save as M, load as N.
static const char *check_pair(const LlamaConfig *c, size_t elem, int N, int M) {
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(c, sizes);
    std::vector<Shard> old_shards(N), clean(N);
    for (int i = 0; i < N; i++) {
        std::vector<size_t> flat = shard_flat(c, sizes, i, N);
        old_shards[i] = {shard_bytes(flat, 0, elem, 0xEE), shard_bytes(flat, 1, elem, 0xEE)}; // junk padding: never read
        clean[i] = {shard_bytes(flat, 0, elem, 0), shard_bytes(flat, 1, elem, 0)};
    }
    std::vector<Shard> loaded;
    const char *why = load(c, sizes, elem, N, M, write_shards("old", N, old_shards), &loaded);
    if (why) return why;
    // reassembled: every parameter's moments exactly once, the padding zero
    std::vector<unsigned char> want_m(n * elem), want_v(n * elem), got_m(n * elem, 0), got_v(n * elem, 0);
    for (size_t k = 0; k < n; k++) { moment_value(k, 0, elem, &want_m[k * elem]); moment_value(k, 1, elem, &want_v[k * elem]); }
    std::vector<int> seen(n, 0);
    for (int r = 0; r < M; r++) {
        std::vector<size_t> flat = shard_flat(c, sizes, r, M);
        for (size_t i = 0; i < flat.size(); i++) {
            const unsigned char *m = &loaded[r].m[i * elem], *v = &loaded[r].v[i * elem];
            if (flat[i] == SIZE_MAX) {
                for (size_t b = 0; b < elem; b++) if (m[b] || v[b]) return "the new shard's padding is not zero";
                continue;
            }
            seen[flat[i]]++;
            memcpy(&got_m[flat[i] * elem], m, elem);
            memcpy(&got_v[flat[i] * elem], v, elem);
        }
    }
    for (size_t k = 0; k < n; k++) if (seen[k] != 1) return "a parameter is in no new shard or in two";
    if (got_m != want_m) return "m reassembled from the new shards differs from the saved";
    if (got_v != want_v) return "v reassembled from the new shards differs from the saved";
    std::vector<Shard> back;
    why = load(c, sizes, elem, M, N, write_shards("new", M, loaded), &back);
    if (why) return why;
    for (int i = 0; i < N; i++) if (back[i].m != clean[i].m || back[i].v != clean[i].v) return "saved as M and loaded as N: not the original shards";
    return NULL;
}

// Walks copy k of rank `rank`'s plan through both layouts' pieces: every element must go to the one
// of the same flat parameter index; returns the elements checked, or 0 on a mismatch.
static size_t same_flat(const ReshardCopy &k, const ZeroLayout &to, const ZeroLayout &was) {
    size_t dst = k.dst, src = k.src, left = k.count;
    while (left > 0) {
        const ShardPiece *a = NULL, *b = NULL;
        for (int i = 0; i < to.num_pieces; i++) if (dst >= to.pieces[i].local && dst < to.pieces[i].local + to.pieces[i].count) a = &to.pieces[i];
        for (int i = 0; i < was.num_pieces; i++) if (src >= was.pieces[i].local && src < was.pieces[i].local + was.pieces[i].count) b = &was.pieces[i];
        if (!a || !b || a->flat + (dst - a->local) != b->flat + (src - b->local)) return 0;
        size_t step = std::min(left, std::min(a->local + a->count - dst, b->local + b->count - src));
        dst += step; src += step; left -= step;
    }
    return k.count;
}

static const char *check_plan(const LlamaConfig *c, int N, int M) {
    size_t sizes[NUM_PARAM_TENSORS];
    param_sizes(c, sizes);
    std::vector<ZeroLayout> was(N);
    for (int i = 0; i < N; i++) was[i] = zero_layout(c, sizes, i, N);
    const char *why = NULL;
    for (int r = 0; r < M && !why; r++) {
        ZeroLayout to = zero_layout(c, sizes, r, M);
        ReshardPlan p = reshard_plan(c, sizes, N, M, r);
        size_t held = 0, copied = 0, end = 0;
        for (int i = 0; i < to.num_pieces; i++) held += to.pieces[i].count;
        for (int i = 0; i < p.num_copies && !why; i++) {
            const ReshardCopy &k = p.copies[i];
            if (k.from < 0 || k.from >= N || k.dst < end || k.dst + k.count > to.shard || k.src + k.count > p.old_shard) why = "copies overlap or leave their shards";
            else if (!same_flat(k, to, was[k.from])) why = "a copy maps an element to another parameter's, or to padding";
            copied += k.count;
            end = k.dst + k.count;
        }
        if (!why && copied != held) why = "the copies do not cover the new shard's parameters";
        reshard_plan_free(&p);
        zero_layout_free(&to);
    }
    for (int i = 0; i < N; i++) zero_layout_free(&was[i]);
    return why;
}

// A checkpoint file of run `run` as checkpoint_file_problem reads it: a header (magic, version, run id,
// checksum over the header and body) and `body`.
static void write_verifiable(const char *path, int magic, uint64_t run, const std::vector<unsigned char> &body) {
    int32_t h[MODEL_HEADER_INTS] = {0};
    h[0] = magic;
    h[1] = MODEL_VERSION;
    header_set_run_id(h, run);
    header_set_checksum_word(h, checksum_of_version(MODEL_VERSION)(checksum_of_header(h), body.data(), body.size()));
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof(h), 1, f);
    fwrite(body.data(), 1, body.size(), f);
    fclose(f);
}

// A checkpoint of N GPUs picked on M (checkpoint_rank_problem, which -y 1 runs on every rank before
// anything loads): all files sound, no rank objects; each old state file damaged in turn, some rank
// names it (a resume on M reads parts of every old file, so each must have been verified whole).
static const char *check_verified(int N, int M) {
    const uint64_t run = 0x1234abcd5678ef90ull;
    const int step = 5;
    char path[1200], msg[1400];
    std::vector<unsigned char> body(3000);
    for (size_t i = 0; i < body.size(); i++) body[i] = (unsigned char)(i * 7 + 1);
    checkpoint_path(path, sizeof(path), g_dir, CKPT_MODEL, step, 0);
    write_verifiable(path, MODEL_MAGIC, run, body);
    for (int i = 0; i < N; i++) {
        checkpoint_path(path, sizeof(path), g_dir, CKPT_STATE, step, i);
        write_verifiable(path, STATE_MAGIC, run, body);
    }
    checkpoint_path(path, sizeof(path), g_dir, CKPT_DONE, step, 0);
    FILE *f = fopen(path, "w");
    fprintf(f, "run %016llx ranks %d\n", (unsigned long long)run, N);
    fclose(f);
    const char *why = NULL;
    for (int r = 0; r < M && !why; r++)
        if (checkpoint_rank_problem(g_dir, step, run, r, M, msg, sizeof(msg))) why = "a sound checkpoint refused";
    for (int bad = 0; bad < N && !why; bad++) {
        char state[1200];
        checkpoint_path(state, sizeof(state), g_dir, CKPT_STATE, step, bad);
        FILE *g = fopen(state, "r+b"); // the body's last byte flipped
        fseek(g, -1, SEEK_END);
        fputc(body.back() ^ 1, g);
        fclose(g);
        int named = 0;
        for (int r = 0; r < M; r++) {
            const char *problem = checkpoint_rank_problem(g_dir, step, run, r, M, msg, sizeof(msg));
            named |= problem != NULL && strstr(problem, state) != NULL;
        }
        if (!named) why = "a damaged old state file passed: no new rank verified it";
        write_verifiable(state, STATE_MAGIC, run, body);
    }
    for (int i = 0; i < N; i++) { checkpoint_path(path, sizeof(path), g_dir, CKPT_STATE, step, i); remove(path); }
    return why;
}

// reshard_batch_problem, with B 4, T 64 (256 tokens a micro-batch); every number worked out by hand.
static void check_batch(int *passed, int *failed) {
    struct { int old_world, old_accum, new_world, new_accum; const char *want; } cases[] = {
        {2, 4, 2, 4, NULL},
        {2, 4, 8, 1, NULL},
        {8, 1, 1, 8, NULL},
        {3, 2, 6, 1, NULL},
        // no -d on 1 GPU: its default is one micro-batch
        {8, 1, 1, 1, "the checkpoint was written by 8 GPUs with a total batch of 2048 tokens (B*T*GPUs*grad accum = 4*64*8*1); this run has"
                     " 1 GPU and a total batch of 256: pass -d 2048 to resume it on 1 GPU (grad accum 8)"},
        {1, 6, 2, 1, "the checkpoint was written by 1 GPU with a total batch of 1536 tokens (B*T*GPUs*grad accum = 4*64*1*6); this run has"
                     " 2 GPUs and a total batch of 512: pass -d 1536 to resume it on 2 GPUs (grad accum 3)"},
        // 8 micro-batches a step do not split over 3 GPUs
        {2, 4, 3, 1, "the checkpoint was written by 2 GPUs with a total batch of 2048 tokens (B*T*GPUs*grad accum = 4*64*2*4); this run has"
                     " 3 GPUs and a total batch of 768: 3 GPUs cannot keep it (2048 is not a multiple of B*T*3 = 768); resume on a number"
                     " of GPUs that divides 8, its micro-batches per step (of 1 to 8: 1 2 4 8)"},
        {3, 1, 8, 1, "the checkpoint was written by 3 GPUs with a total batch of 768 tokens (B*T*GPUs*grad accum = 4*64*3*1); this run has"
                     " 8 GPUs and a total batch of 2048: 8 GPUs cannot keep it (768 is not a multiple of B*T*8 = 2048); resume on a number"
                     " of GPUs that divides 3, its micro-batches per step (of 1 to 8: 1 3)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char msg[1024];
        const char *got = reshard_batch_problem(4, 64, cases[i].old_world, cases[i].old_accum, cases[i].new_world, cases[i].new_accum, msg, sizeof(msg));
        int ok = cases[i].want ? got != NULL && strcmp(got, cases[i].want) == 0 : got == NULL;
        if (ok) { (*passed)++; continue; }
        (*failed)++;
        printf("FAIL total batch, %d GPUs x grad accum %d resumed on %d x %d: got %s%s%s, want %s%s%s\n", cases[i].old_world, cases[i].old_accum,
               cases[i].new_world, cases[i].new_accum, got ? "'" : "", got ? got : "none (accepted)", got ? "'" : "", cases[i].want ? "'" : "",
               cases[i].want ? cases[i].want : "none (accepted)", cases[i].want ? "'" : "");
    }
}

// checked_options on a command line (argv: NULL-terminated), in a child: a refused rule exits naming it.
static void options_in_child(void *arg) {
    char **argv = (char **)arg;
    int argc = 0, grad_accum;
    while (argv[argc]) argc++;
    Options o = parse_options(argc, argv);
    LlamaConfig cfg = run_model_config(&o, NULL);
    checked_options(&o, &cfg, NULL, &grad_accum);
}

// The run's -d that does not split over its GPUs is refused before anything starts, naming the GPU
// count, and under -y 1 saying what resumes a checkpoint (B 4, T 64: 256 tokens a micro-batch).
static void check_split(int *passed, int *failed) {
    const char *cases[][14] = {
        {"-d 2048 (total batch tokens) must be a multiple of B*T*ngpu = 4*64*3 = 768: it does not split over 3 GPUs (-y 1 keeps a"
         " checkpoint's total batch: resume it on a number of GPUs that divides its micro-batches per step)",
         "-ngpu", "3", "-b", "4", "-t", "64", "-d", "2048", "-y", "1", "-o", g_dir},
        {"-d 1024 (total batch tokens) must be a multiple of B*T*ngpu = 4*64*8 = 2048: it does not split over 8 GPUs (-y 1",
         "-ngpu", "8", "-b", "4", "-t", "64", "-d", "1024", "-y", "1", "-o", g_dir},
        {"= 4*64*3 = 768: it does not split over 3 GPUs\n", "-ngpu", "3", "-b", "4", "-t", "64", "-d", "2048"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[15] = {"train_llama_fp8"};
        for (int k = 1; k < 14 && cases[i][k]; k++) argv[k] = cases[i][k];
        char err[2048];
        int status = run_expect_fatal(options_in_child, (void *)argv, err, sizeof(err));
        if (status != 0 && strstr(err, cases[i][0])) { (*passed)++; continue; }
        (*failed)++;
        printf("FAIL -d that does not split, case %zu: exit %d, want the message '%s': %s\n", i, status, cases[i][0], err);
    }
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_reshard.XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    // the by-hand model of test_zero_layout (2 layers, 65856 parameters), one with GQA and 3 layers,
    // and a tied one of odd sizes (no lm_head: an empty tensor in the layout)
    LlamaConfig small = {64, 2, 64, 1, 1, 64, 64, 10000.0f, 1e-5f}, gqa = {256, 3, 128, 4, 2, 256, 64, 10000.0f, 1e-5f};
    LlamaConfig tied = {1001, 3, 24, 2, 1, 40, 64, 10000.0f, 1e-5f};
    tied.tied_embeddings = 1;
    const LlamaConfig *models[] = {&small, &gqa, &tied};
    const char *model_names[] = {"V 64 L 2 C 64", "V 256 L 3 C 128 GQA", "V 1001 L 3 C 24 tied"};
    int passed = 0, failed = 0;
    for (int s = 0; s < 3; s++) {
        for (size_t elem = 2; elem <= 4; elem += 2) {
            for (int a = 0; a < NUM_WORLDS; a++) {
                for (int b = 0; b < NUM_WORLDS; b++) {
                    const char *why = check_pair(models[s], elem, WORLDS[a], WORLDS[b]);
                    if (why) { printf("FAIL reshard %s, %s moments, %d GPUs -> %d: %s\n", model_names[s], elem == 2 ? "bf16" : "fp32", WORLDS[a], WORLDS[b], why); failed++; }
                    else passed++;
                }
            }
        }
    }
    const char *presets[] = {"llama2-7b", "llama3-8b"};
    for (int s = 0; s < 2; s++) {
        LlamaConfig c;
        config_from_preset(presets[s], &c);
        for (int a = 0; a < NUM_WORLDS; a++) {
            for (int b = 0; b < NUM_WORLDS; b++) {
                const char *why = check_plan(&c, WORLDS[a], WORLDS[b]);
                if (why) { printf("FAIL reshard plan %s, %d GPUs -> %d: %s\n", presets[s], WORLDS[a], WORLDS[b], why); failed++; }
                else passed++;
            }
        }
    }
    for (int a = 0; a < NUM_WORLDS; a++) {
        for (int b = 0; b < NUM_WORLDS; b++) {
            const char *why = check_verified(WORLDS[a], WORLDS[b]);
            if (why) { printf("FAIL -y 1 picking a checkpoint of %d GPUs on %d: %s\n", WORLDS[a], WORLDS[b], why); failed++; }
            else passed++;
        }
    }
    check_batch(&passed, &failed);
    check_split(&passed, &failed);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", g_dir);
    printf("%s reshard: %d of %d checks hold\n", failed ? "FAIL" : "ok  ", passed, passed + failed);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
