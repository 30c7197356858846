/*
The data loader: reads batches of token ids from llm.c-format shards (../shared/docs/FORMATS.md),
16-bit (magic 20240520, version 1) or 32-bit (magic 20240801, version 7), or makes up a learnable
synthetic stream when there is no data. Plain C, header-only; also compiles as C++ under nvcc.

Shards: every file matching a glob pattern, sorted by name (strcmp). Each shard is opened and its
header checked against its size when the loader is made; batches then read only the tokens they
need, at 64-bit offsets, so shards of any size stream from disk. The header's token count is read
as unsigned 32-bit, so a 16-bit shard may hold up to 2^32 - 1 tokens (8 GB).

Batch positions. A batch is B rows of T+1 consecutive tokens, taken as one run of B*T + 1 tokens:
    inputs  = run[0 .. B*T)      (row b is run[b*T .. b*T + T))
    targets = run[1 .. B*T + 1)  (each input's next token)
A shard of N tokens holds P = (N - 1) / (B*T) positions; position p is the run starting at token
p*B*T (a run's last token is the next run's first, as in llm.c, so no token is skipped).

Training (dataloader_init). Positions are dealt out in steps: at step s of a shard, rank r reads
entry s*world + r of the shard's position list, so the ranks' batches are disjoint and together
cover the shard. Every rank takes the same number of steps, S = P / world, in each shard (so
data-parallel ranks change shards together); the last P - S*world positions of the list are left
out that epoch. A shard with P < world, fewer than
    B*T*world + 1 tokens   (one step: B*T tokens for each rank, plus the last target),
gives no step: it is left out with a warning naming it, and only a run none of whose shards gives a
step is refused. Without shuffling the position list is 0, 1, ..., P-1 and the shards come in name
order. With shuffling each epoch permutes the shard order and each shard's position list (so a
different tail is left out each epoch); the permutations derive only from (seed, epoch, shard),
never from a running random stream, so any point of the sequence can be rebuilt from a small
DataLoaderState.

Evaluation (dataloader_init_eval). The positions of all shards, in name order, are numbered 0, 1, ...
(dataloader_positions of them; a shard shorter than B*T + 1 tokens has none and is left out with a
warning), the same numbers at any world size; dataloader_read_position reads any one of them. The
ranks share the first P in steps (dataloader_eval_position): at step s rank r evaluates number
s*world + r, so each of the P is evaluated by exactly one rank, and every rank takes the same
ceil(P / world) steps, so collectives inside a forward stay in step. Where s*world + r >= P the rank
re-reads a position that exists (the number modulo P) and marks it not its own: its loss is not
counted. The mean over the P positions is then the same at any world size.

Every batch's tokens are checked against the vocabulary size, naming the file and token position of
a bad one. Multi-byte values are read in the host's byte order: little-endian, as the format is.
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include "utils.h" // FATAL, fopenCheck, freadCheck, fseekCheck, mallocCheck, random_u32

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7

// The synthetic corpus: SYNTH_SENTENCES fixed random "sentences" of SYNTH_LEN tokens, repeated in a
// random order. Within a sentence the next token is determined, so a model can drive the loss down
// to about ln(SYNTH_SENTENCES) / SYNTH_LEN = 0.13 nats per token: proof that training works.
#define SYNTH_SENTENCES 8
#define SYNTH_LEN 16
#define SYNTH_STEPS_PER_EPOCH (1 << 20) // its nominal length; the stream is computed, never stored

// Where the loader is, saved in checkpoints so a resumed run replays the identical batch sequence.
// All 64-bit fields: one fwrite, no padding.
typedef struct {
    int64_t epoch;           // completed passes over all shards
    int64_t shard_index;     // index into this epoch's shard order
    int64_t position_index;  // step within that shard: next batch is position list[step*world + rank]
    uint64_t rng_seed;       // the whole random state: every permutation is a function of it and the epoch
    int64_t tokens_per_step; // B*T*world when saved: a step index means nothing under another geometry
    int64_t shuffle;         // 0 or 1 when saved
} DataLoaderState;

typedef struct {
    int B, T, rank, world, shuffle, vocab_size;
    int warn;                  // 1: name each shard left out (too small) on stderr; the main rank's loaders
    uint64_t seed;
    // the shards, in name order
    int num_shards;            // those that give a batch (a step, training); smaller ones are left out
    char **shard_paths;
    int64_t *shard_tokens;     // tokens in each shard (header count, checked against the file size)
    int *shard_token_bytes;    // 2 or 4
    int64_t num_tokens;        // sum over shards
    int64_t batches_per_epoch; // batches this rank reads in one pass over all shards
    // where the next batch comes from
    int64_t epoch;
    int shard_index;           // into shard_order
    int64_t step;              // within the current shard
    int64_t shard_steps;       // steps the current shard gives (S in the header comment)
    int *shard_order;          // this epoch's order of the shards (indices into shard_paths)
    int64_t *positions;        // the current shard's permuted position list (shuffle only)
    FILE *fp;                  // the current shard
    // synthetic corpus (synthetic == 1): one virtual shard whose tokens are computed
    int synthetic;
    int sentences[SYNTH_SENTENCES][SYNTH_LEN];
    // the batch: raw shard bytes, then int32 ids for the model
    unsigned char *raw;        // (B*T + 1) * 4 bytes
    int *inputs;               // (B, T)
    int *targets;              // (B, T)
} DataLoader;

// splitmix64's output mixer: turns counters into well-spread 64-bit seeds.
static uint64_t dataloader_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The seed of one shuffle: which = 0 for the shard order, 1 + shard for a shard's position list.
static uint64_t dataloader_shuffle_seed(uint64_t seed, int64_t epoch, int64_t which) {
    uint64_t s = dataloader_mix64(seed ^ dataloader_mix64((uint64_t)epoch ^ dataloader_mix64((uint64_t)which)));
    return s != 0 ? s : 1; // xorshift stays at 0 forever
}

// Fisher-Yates with 64-bit draws (a shard of tiny batches can have more than 2^32 positions).
static void dataloader_permute_i64(int64_t *a, int64_t n, uint64_t rng) {
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t r = ((uint64_t)random_u32(&rng) << 32) | random_u32(&rng);
        int64_t j = (int64_t)(r % (uint64_t)(i + 1));
        int64_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static char *dataloader_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)mallocCheck(n);
    memcpy(d, s, n);
    return d;
}

static int dataloader_cmp_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int64_t dataloader_steps_in_shard(const DataLoader *dl, int shard) {
    int64_t positions = (dl->shard_tokens[shard] - 1) / ((int64_t)dl->B * dl->T);
    return positions / dl->world;
}

// Opens shard `i` and checks its header against its size; stores its token count and width.
static void dataloader_check_shard(DataLoader *dl, int i) {
    const char *path = dl->shard_paths[i];
    FILE *fp = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(fp);
    int64_t header_bytes = SHARD_HEADER_INTS * (int64_t)sizeof(int32_t);
    if (size < header_bytes) {
        FATAL("data shard '%s' is truncated: %lld bytes, shorter than the %lld-byte header", path,
              (long long)size, (long long)header_bytes);
    }
    int32_t header[SHARD_HEADER_INTS];
    freadCheck(header, sizeof(int32_t), SHARD_HEADER_INTS, fp, path);
    fcloseCheck(fp);
    int width;
    if (header[0] == SHARD_MAGIC_U16) {
        if (header[1] != SHARD_VERSION_U16) {
            FATAL("data shard '%s' has version %d, expected %d for a 16-bit shard (magic %d)", path,
                  header[1], SHARD_VERSION_U16, SHARD_MAGIC_U16);
        }
        width = 2;
    } else if (header[0] == SHARD_MAGIC_U32) {
        if (header[1] != SHARD_VERSION_U32) {
            FATAL("data shard '%s' has version %d, expected %d for a 32-bit shard (magic %d)", path,
                  header[1], SHARD_VERSION_U32, SHARD_MAGIC_U32);
        }
        width = 4;
    } else {
        FATAL("data shard '%s' has bad magic %d, expected %d (16-bit tokens) or %d (32-bit tokens);"
              " is it a token shard?", path, header[0], SHARD_MAGIC_U16, SHARD_MAGIC_U32);
    }
    int64_t ntok = (int64_t)(uint32_t)header[2];
    int64_t expected = header_bytes + ntok * width;
    if (size < expected) {
        FATAL("data shard '%s' is truncated: its header says %lld tokens (%lld bytes) but the file has"
              " %lld bytes", path, (long long)ntok, (long long)expected, (long long)size);
    }
    if (size > expected) {
        FATAL("data shard '%s': header token count %lld disagrees with the file size (%lld bytes expected,"
              " %lld found)", path, (long long)ntok, (long long)expected, (long long)size);
    }
    dl->shard_tokens[i] = ntok;
    dl->shard_token_bytes[i] = width;
}

// Leaves out the shards too small for one batch of every rank (an evaluation loader has world 1),
// naming each on stderr if dl->warn; refuses the run, naming the data and the tokens needed, if no
// shard is left.
static void dataloader_drop_small_shards(DataLoader *dl, const char *pattern) {
    int64_t needed = (int64_t)dl->B * dl->T * dl->world + 1;
    const char *what = dl->world == 1 ? "batch" : "step";
    char rule[128];
    if (dl->world == 1) snprintf(rule, sizeof(rule), "B*T + 1 = %d*%d + 1 = %lld tokens", dl->B, dl->T, (long long)needed);
    else snprintf(rule, sizeof(rule), "B*T*world + 1 = %d*%d*%d + 1 = %lld tokens (B*T for each rank plus the last target)",
                  dl->B, dl->T, dl->world, (long long)needed);
    int kept = 0, largest = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        if (dl->shard_tokens[i] > dl->shard_tokens[largest]) largest = i;
        kept += dl->shard_tokens[i] >= needed;
    }
    const char *advice = dl->world == 1 ? "use a smaller -b/-t or more data" : "use a smaller -b/-t, fewer GPUs or more data";
    if (kept == 0 && dl->num_shards == 1) {
        FATAL("data shard '%s' has %lld tokens, fewer than one %s needs: %s; %s", dl->shard_paths[0],
              (long long)dl->shard_tokens[0], what, rule, advice);
    }
    if (kept == 0) {
        FATAL("none of the %d data shards matching '%s' holds one %s, which needs %s; the largest, '%s', has"
              " %lld; %s", dl->num_shards, pattern, what, rule, dl->shard_paths[largest],
              (long long)dl->shard_tokens[largest], advice);
    }
    int k = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        if (dl->shard_tokens[i] < needed) {
            if (dl->warn) fprintf(stderr, "warning: data shard '%s' has %lld tokens, fewer than one %s needs: %s; left out\n",
                                  dl->shard_paths[i], (long long)dl->shard_tokens[i], what, rule);
            free(dl->shard_paths[i]);
            continue;
        }
        dl->shard_paths[k] = dl->shard_paths[i];
        dl->shard_tokens[k] = dl->shard_tokens[i];
        dl->shard_token_bytes[k] = dl->shard_token_bytes[i];
        k++;
    }
    dl->num_shards = kept;
}

// The shard order of dl->epoch.
static void dataloader_order_shards(DataLoader *dl) {
    for (int i = 0; i < dl->num_shards; i++) dl->shard_order[i] = i;
    if (!dl->shuffle) return;
    uint64_t rng = dataloader_shuffle_seed(dl->seed, dl->epoch, 0);
    for (int i = dl->num_shards - 1; i > 0; i--) {
        int j = (int)(random_u32(&rng) % (uint32_t)(i + 1));
        int t = dl->shard_order[i]; dl->shard_order[i] = dl->shard_order[j]; dl->shard_order[j] = t;
    }
}

// Makes shard_order[dl->shard_index] of dl->epoch current: opens it, builds its position list.
static void dataloader_load_shard(DataLoader *dl) {
    int shard = dl->shard_order[dl->shard_index];
    dl->shard_steps = dataloader_steps_in_shard(dl, shard);
    if (dl->synthetic) return;
    if (dl->fp != NULL) fcloseCheck(dl->fp);
    dl->fp = fopenCheck(dl->shard_paths[shard], "rb");
    if (dl->shuffle) {
        int64_t n = (dl->shard_tokens[shard] - 1) / ((int64_t)dl->B * dl->T);
        for (int64_t p = 0; p < n; p++) dl->positions[p] = p;
        dataloader_permute_i64(dl->positions, n, dataloader_shuffle_seed(dl->seed, dl->epoch, 1 + (int64_t)shard));
    }
}

// Allocations and position bookkeeping shared by both kinds of loader; shards are already known.
static void dataloader_setup(DataLoader *dl) {
    size_t BT = (size_t)dl->B * dl->T;
    dl->raw = (unsigned char *)mallocCheck((BT + 1) * 4);
    dl->inputs = (int *)mallocCheck(BT * sizeof(int));
    dl->targets = (int *)mallocCheck(BT * sizeof(int));
    dl->shard_order = (int *)mallocCheck(dl->num_shards * sizeof(int));
    dl->num_tokens = 0;
    dl->batches_per_epoch = 0;
    int64_t max_positions = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        int64_t p = (dl->shard_tokens[i] - 1) / (int64_t)BT;
        if (p > max_positions) max_positions = p;
        dl->num_tokens += dl->shard_tokens[i];
        dl->batches_per_epoch += dataloader_steps_in_shard(dl, i);
    }
    dl->positions = dl->shuffle ? (int64_t *)mallocCheck(max_positions * sizeof(int64_t)) : NULL;
    dl->fp = NULL;
    dl->epoch = 0;
    dl->shard_index = 0;
    dl->step = 0;
    dataloader_order_shards(dl);
    dataloader_load_shard(dl);
}

static void dataloader_check_args(int B, int T, int rank, int world, int vocab_size) {
    if (B <= 0 || T <= 0) FATAL("data loader: B and T must be positive (got B=%d, T=%d)", B, T);
    if (world <= 0 || rank < 0 || rank >= world) FATAL("data loader: rank %d is not in [0, world=%d)", rank, world);
    if (vocab_size <= 0) FATAL("data loader: vocab_size must be positive (got %d)", vocab_size);
}

// Finds, checks and sorts every shard matching `pattern`, leaving out those too small.
static void dataloader_open_shards(DataLoader *dl, const char *pattern) {
    // GLOB_NOSORT + strcmp: glob's own sort follows the locale, and every rank and every machine
    // must see the same order.
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        if (strpbrk(pattern, "*?[") == NULL) FATAL("data file '%s' not found", pattern);
        FATAL("no data files match the pattern '%s'", pattern);
    }
    if (rc != 0) FATAL("glob of data pattern '%s' failed (code %d: %s)", pattern, rc,
                       rc == GLOB_NOSPACE ? "out of memory" : "read error");
    dl->num_shards = (int)g.gl_pathc;
    dl->shard_paths = (char **)mallocCheck(dl->num_shards * sizeof(char *));
    for (int i = 0; i < dl->num_shards; i++) dl->shard_paths[i] = dataloader_strdup(g.gl_pathv[i]);
    globfree(&g);
    qsort(dl->shard_paths, dl->num_shards, sizeof(char *), dataloader_cmp_paths);
    dl->shard_tokens = (int64_t *)mallocCheck(dl->num_shards * sizeof(int64_t));
    dl->shard_token_bytes = (int *)mallocCheck(dl->num_shards * sizeof(int));
    for (int i = 0; i < dl->num_shards; i++) dataloader_check_shard(dl, i);
    dataloader_drop_small_shards(dl, pattern);
}

// The training loader of rank `rank` of `world`: every shard matching `pattern` (a glob, or one file
// name). Exits with a message on any missing or malformed shard, or when no shard gives a step; the
// main rank (rank 0) names each shard left out as too small.
static void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int rank, int world,
                            int shuffle, uint64_t seed, int vocab_size) {
    dataloader_check_args(B, T, rank, world, vocab_size);
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle != 0; dl->seed = seed; dl->vocab_size = vocab_size;
    dl->warn = rank == 0;
    dataloader_open_shards(dl, pattern);
    dataloader_setup(dl);
}

// An evaluation loader (see the file comment): the same on every rank, read with
// dataloader_read_position. warn: name the shards left out as too small (the main rank's).
static void dataloader_init_eval(DataLoader *dl, const char *pattern, int B, int T, int vocab_size, int warn) {
    dataloader_check_args(B, T, 0, 1, vocab_size);
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = 0; dl->world = 1;
    dl->vocab_size = vocab_size;
    dl->warn = warn;
    dataloader_open_shards(dl, pattern);
    dataloader_setup(dl);
}

// The synthetic corpus (see SYNTH_SENTENCES): the same tokens for the same seed and vocab_size,
// ranks disjoint as with shards, never shuffled (it is random already).
static void dataloader_init_synthetic(DataLoader *dl, int B, int T, int rank, int world, int vocab_size,
                                      uint64_t seed) {
    dataloader_check_args(B, T, rank, world, vocab_size);
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = 0; dl->seed = seed; dl->vocab_size = vocab_size;
    dl->synthetic = 1;
    uint64_t rng = dataloader_shuffle_seed(seed, 0, 0);
    for (int s = 0; s < SYNTH_SENTENCES; s++) {
        for (int i = 0; i < SYNTH_LEN; i++) dl->sentences[s][i] = (int)(random_u32(&rng) % (uint32_t)vocab_size);
    }
    dl->num_shards = 1;
    dl->shard_paths = (char **)mallocCheck(sizeof(char *));
    dl->shard_paths[0] = dataloader_strdup("<synthetic>");
    dl->shard_tokens = (int64_t *)mallocCheck(sizeof(int64_t));
    dl->shard_tokens[0] = (int64_t)B * T * world * SYNTH_STEPS_PER_EPOCH + 1;
    dl->shard_token_bytes = (int *)mallocCheck(sizeof(int));
    dl->shard_token_bytes[0] = 4;
    dataloader_setup(dl);
}

// Token `i` of the synthetic stream: sentence number i / SYNTH_LEN is picked by hashing that number.
static int dataloader_synthetic_token(const DataLoader *dl, int64_t i) {
    uint64_t pick = dataloader_mix64(dl->seed + ((uint64_t)(i / SYNTH_LEN) + 1) * 0x9E3779B97F4A7C15ull);
    return dl->sentences[pick % SYNTH_SENTENCES][i % SYNTH_LEN];
}

// Reads position `position` of shard `shard` (dl->fp must be that shard) into dl->inputs and
// dl->targets (each B*T ints, row-major (B, T)).
static void dataloader_read_run(DataLoader *dl, int shard, int64_t position) {
    int64_t BT = (int64_t)dl->B * dl->T;
    int64_t start = position * BT; // first token of the run, within the shard
    if (dl->synthetic) {
        for (int64_t i = 0; i < BT; i++) {
            dl->inputs[i] = dataloader_synthetic_token(dl, start + i);
            dl->targets[i] = dataloader_synthetic_token(dl, start + i + 1);
        }
        return;
    }
    const char *path = dl->shard_paths[shard];
    int width = dl->shard_token_bytes[shard];
    fseekCheck(dl->fp, SHARD_HEADER_INTS * (int64_t)sizeof(int32_t) + start * width, SEEK_SET);
    freadCheck(dl->raw, width, (size_t)BT + 1, dl->fp, path);
    for (int64_t i = 0; i <= BT; i++) {
        uint32_t tok;
        if (width == 2) { uint16_t t16; memcpy(&t16, dl->raw + 2 * i, 2); tok = t16; }
        else { memcpy(&tok, dl->raw + 4 * i, 4); }
        if (tok >= (uint32_t)dl->vocab_size) {
            FATAL("data shard '%s': token id %u at token %lld is >= the vocabulary size %d"
                  " (was it made with another tokenizer?)", path, tok, (long long)(start + i), dl->vocab_size);
        }
        if (i < BT) dl->inputs[i] = (int)tok;
        if (i > 0) dl->targets[i - 1] = (int)tok;
    }
}

// Reads the next batch into dl->inputs and dl->targets (each B*T ints, row-major (B, T)).
static void dataloader_next_batch(DataLoader *dl) {
    int shard = dl->shard_order[dl->shard_index];
    int64_t slot = dl->step * dl->world + dl->rank;
    dataloader_read_run(dl, shard, dl->shuffle ? dl->positions[slot] : slot);
    // advance now, so the state always names the batch the next call returns
    dl->step++;
    if (dl->step == dl->shard_steps) {
        dl->step = 0;
        dl->shard_index++;
        if (dl->shard_index == dl->num_shards) {
            dl->shard_index = 0;
            dl->epoch++;
            dataloader_order_shards(dl);
        }
        dataloader_load_shard(dl);
    }
}

// Positions in all shards, numbered in name order: shard 0's, then shard 1's, ...
static int64_t dataloader_positions(const DataLoader *dl) {
    int64_t n = 0;
    for (int i = 0; i < dl->num_shards; i++) n += (dl->shard_tokens[i] - 1) / ((int64_t)dl->B * dl->T);
    return n;
}

// Reads position number `index` of all shards (see dataloader_positions) into dl->inputs and
// dl->targets. For an evaluation loader: in a training loader it would move the current shard.
static void dataloader_read_position(DataLoader *dl, int64_t index) {
    int64_t BT = (int64_t)dl->B * dl->T, first = 0;
    int shard = 0;
    while (shard + 1 < dl->num_shards && index >= first + (dl->shard_tokens[shard] - 1) / BT) {
        first += (dl->shard_tokens[shard] - 1) / BT;
        shard++;
    }
    if (index < 0 || index - first >= (dl->shard_tokens[shard] - 1) / BT)
        FATAL("data loader: position %lld is outside the %lld positions of the data", (long long)index,
              (long long)dataloader_positions(dl));
    if (shard != dl->shard_order[dl->shard_index]) {
        dl->shard_index = shard; // an evaluation loader is never shuffled: shard_order is the identity
        dataloader_load_shard(dl);
    }
    dataloader_read_run(dl, shard, index - first);
}

// Evaluation of the first P >= 1 positions by `world` ranks (see the file comment): the steps every
// rank takes, and the position rank `rank` reads at step `step`, with *own = 1 if its loss counts.
static int64_t dataloader_eval_steps(int64_t P, int world) { return (P + world - 1) / world; }
static int64_t dataloader_eval_position(int64_t P, int world, int rank, int64_t step, int *own) {
    int64_t i = step * world + rank;
    *own = i < P;
    return i % P;
}

// Tokens in all shards (the synthetic stream's nominal length for a synthetic loader).
static int64_t dataloader_num_tokens(const DataLoader *dl) { return dl->num_tokens; }

static DataLoaderState dataloader_get_state(const DataLoader *dl) {
    DataLoaderState s;
    s.epoch = dl->epoch;
    s.shard_index = dl->shard_index;
    s.position_index = dl->step;
    s.rng_seed = dl->seed;
    s.tokens_per_step = (int64_t)dl->B * dl->T * dl->world;
    s.shuffle = dl->shuffle;
    return s;
}

// Puts the loader where `s` says; the next batch is then the one that followed when s was saved.
// Exits if s was saved by a loader that would produce a different sequence.
static void dataloader_set_state(DataLoader *dl, const DataLoaderState *s) {
    int64_t tokens_per_step = (int64_t)dl->B * dl->T * dl->world;
    if (s->tokens_per_step != tokens_per_step) {
        FATAL("data loader state was saved with B*T*world = %lld tokens per step, this run has %lld;"
              " resume with the same -b, -t and number of processes", (long long)s->tokens_per_step,
              (long long)tokens_per_step);
    }
    if (s->shuffle != dl->shuffle || s->rng_seed != dl->seed) {
        FATAL("data loader state was saved with shuffle=%lld seed=%llu, this run has shuffle=%d seed=%llu;"
              " resume with the same settings", (long long)s->shuffle, (unsigned long long)s->rng_seed,
              dl->shuffle, (unsigned long long)dl->seed);
    }
    if (s->epoch < 0 || s->shard_index < 0 || s->shard_index >= dl->num_shards) {
        FATAL("data loader state (epoch %lld, shard %lld) does not fit the %d shard(s) of this run;"
              " resume with the same data", (long long)s->epoch, (long long)s->shard_index, dl->num_shards);
    }
    dl->epoch = s->epoch;
    dl->shard_index = (int)s->shard_index;
    dataloader_order_shards(dl);
    dataloader_load_shard(dl);
    if (s->position_index < 0 || s->position_index >= dl->shard_steps) {
        FATAL("data loader state step %lld is outside shard '%s' (%lld steps); resume with the same data",
              (long long)s->position_index, dl->shard_paths[dl->shard_order[dl->shard_index]],
              (long long)dl->shard_steps);
    }
    dl->step = s->position_index;
}

static void dataloader_free(DataLoader *dl) {
    if (dl->fp != NULL) fcloseCheck(dl->fp);
    for (int i = 0; i < dl->num_shards; i++) free(dl->shard_paths[i]);
    free(dl->shard_paths);
    free(dl->shard_tokens);
    free(dl->shard_token_bytes);
    free(dl->shard_order);
    free(dl->positions);
    free(dl->raw);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

#endif
