/*
The data loader: reads batches of token ids from llm.c-format shards (docs/formats.md),
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

Loss masks (optional; docs/formats.md). Beside shard X a file X.mask (the name with ".mask" appended,
so a glob of *.bin never matches one) holds one byte per token of X: byte i is 1 when token i is
learned as a target, 0 when it is not. In the pairing above, target (b, t) of a batch is token
start + b*T + t + 1 of the shard, so it is learned iff mask byte start + b*T + t + 1 is 1 (byte 0
of a shard is never a target's: token 0 is never predicted). This is transformers' labels
convention (labels aligned with input_ids, -100 where not learned; the model shifts). A masked
target is written as -1 in dl->targets (the trainer's ignore index), the one record of what is
learned: the trainer's step counts its learned targets from the targets it trains on. Either every
shard of a glob has its mask or none has (a mismatch is refused naming a shard without one); a
mask's header must give its shard's token count. The evaluation loader reads masks the same way
(the trainer's val loss is then the mean over the learned targets).

Mixtures (dataloader_init with a spec holding a comma): 'A:wA,B:wB,...' names several shard sets
(each a glob, as above) with non-negative weights (a set's weight after its last ':'). Each set has
its own loader over its own shards, rank and world as given, shuffled with seed + its index. Batch
number k of the mixture (k = 0, 1, ... counted over every call of dataloader_next_batch, i.e. per
micro-step) comes from set j, the first whose cumulative normalized weight exceeds u_k, where
u_k in [0, 1) is a hash of (seed, k): counter-based, so the pick of any batch is a function of the
seed and k alone, the same on every rank (all ranks draw from the same set at each micro-step, their
batches disjoint within it), and a resumed loader needs only k and each set's own state. Over n
batches set j is drawn Binomial(n, w_j) times. A spec without a comma is one glob, read exactly as
without mixtures.

Every batch's tokens are checked against the vocabulary size, naming the file and token position of
a bad one. Multi-byte values are read in the host's byte order: little-endian, as the format is.
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <ctype.h>  // isspace
#include <unistd.h> // access
#include "utils.h" // FATAL, fopenCheck, freadCheck, fseekCheck, mallocCheck, random_u32

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7
#define MASK_MAGIC 20261206
#define MASK_VERSION 1
#define MASK_SUFFIX ".mask"

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

typedef struct DataLoader {
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
    // loss masks (masked == 1: every shard has one)
    int masked;
    FILE *mask_fp;             // the current shard's mask
    unsigned char *mask_raw;   // the B*T mask bytes of the batch's targets
    // a mixture (num_sets > 0): every batch comes from one of the sets, drawn as the file comment says
    int num_sets;
    struct DataLoader *sets;
    char **set_patterns;
    double *weights;           // as given
    double *cumulative;        // running sums of the normalized weights; the last nonzero one is exactly 1
    int64_t draws;             // batches drawn so far: the counter of the next pick
    int64_t *drawn;            // batches drawn from each set
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

// The loss mask's name of a shard: its path with MASK_SUFFIX appended (path: at most 4096 bytes).
static void dataloader_mask_path(char *out, size_t n, const char *shard_path) {
    snprintf(out, n, "%s%s", shard_path, MASK_SUFFIX);
}

// Checks the loss mask of shard `i` (which exists) against its shard: header, size, token count.
static void dataloader_check_mask(const DataLoader *dl, int i) {
    char path[4200];
    dataloader_mask_path(path, sizeof(path), dl->shard_paths[i]);
    FILE *fp = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(fp);
    int64_t header_bytes = SHARD_HEADER_INTS * (int64_t)sizeof(int32_t);
    if (size < header_bytes) {
        FATAL("loss mask '%s' is truncated: %lld bytes, shorter than the %lld-byte header", path, (long long)size,
              (long long)header_bytes);
    }
    int32_t header[SHARD_HEADER_INTS];
    freadCheck(header, sizeof(int32_t), SHARD_HEADER_INTS, fp, path);
    fcloseCheck(fp);
    if (header[0] != MASK_MAGIC) FATAL("loss mask '%s' has bad magic %d, expected %d; is it a loss mask?", path, header[0], MASK_MAGIC);
    if (header[1] != MASK_VERSION) FATAL("loss mask '%s' has version %d, expected %d", path, header[1], MASK_VERSION);
    int64_t ntok = (int64_t)(uint32_t)header[2];
    if (ntok != dl->shard_tokens[i]) {
        FATAL("loss mask '%s' is for %lld tokens, its shard '%s' has %lld", path, (long long)ntok, dl->shard_paths[i],
              (long long)dl->shard_tokens[i]);
    }
    if (size != header_bytes + ntok) {
        FATAL("loss mask '%s': header token count %lld disagrees with the file size (%lld bytes expected, %lld found)", path,
              (long long)ntok, (long long)(header_bytes + ntok), (long long)size);
    }
}

// Sets dl->masked: 1 if every shard has a loss mask (each checked), 0 if none has; refuses a mix,
// naming a shard without its mask.
static void dataloader_find_masks(DataLoader *dl, const char *pattern) {
    int with = 0, without = -1, one_with = -1;
    for (int i = 0; i < dl->num_shards; i++) {
        char path[4200];
        dataloader_mask_path(path, sizeof(path), dl->shard_paths[i]);
        if (access(path, F_OK) == 0) { with++; one_with = i; }
        else if (without < 0) without = i;
    }
    if (with > 0 && with < dl->num_shards) {
        char missing[4200];
        dataloader_mask_path(missing, sizeof(missing), dl->shard_paths[without]);
        FATAL("data shard '%s' has no loss mask '%s', but %d of the %d shards matching '%s' have one (e.g. '%s'):"
              " every shard of a set needs its mask, or none", dl->shard_paths[without], missing, with, dl->num_shards,
              pattern, dl->shard_paths[one_with]);
    }
    dl->masked = with > 0;
    for (int i = 0; dl->masked && i < dl->num_shards; i++) dataloader_check_mask(dl, i);
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
    if (dl->masked) {
        char path[4200];
        dataloader_mask_path(path, sizeof(path), dl->shard_paths[shard]);
        if (dl->mask_fp != NULL) fcloseCheck(dl->mask_fp);
        dl->mask_fp = fopenCheck(path, "rb");
    }
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
    dl->mask_raw = dl->masked ? (unsigned char *)mallocCheck(BT) : NULL;
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
    dl->mask_fp = NULL;
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
    dataloader_find_masks(dl, pattern);
    dataloader_drop_small_shards(dl, pattern);
}

// One shard set's training loader (see dataloader_init).
static void dataloader_init_glob(DataLoader *dl, const char *pattern, int B, int T, int rank, int world,
                                 int shuffle, uint64_t seed, int vocab_size) {
    dataloader_check_args(B, T, rank, world, vocab_size);
    memset(dl, 0, sizeof(*dl));
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle != 0; dl->seed = seed; dl->vocab_size = vocab_size;
    dl->warn = rank == 0;
    dataloader_open_shards(dl, pattern);
    dataloader_setup(dl);
}

// Splits a mixture spec 'A:wA,B:wB,...' into its sets' patterns and weights (n of each, returned);
// refuses, naming the spec, an empty set, a set without a pattern or a weight, a weight that is not
// a finite number (all of the text after the set's last ':') or is negative, and weights summing to 0.
static int dataloader_parse_mixture(const char *spec, char ***patterns, double **weights) {
    int n = 1;
    for (const char *c = spec; *c; c++) n += *c == ',';
    *patterns = (char **)mallocCheck(n * sizeof(char *));
    *weights = (double *)mallocCheck(n * sizeof(double));
    const char *item = spec;
    double total = 0.0;
    for (int k = 0; k < n; k++) {
        const char *end = strchr(item, ',');
        size_t len = end ? (size_t)(end - item) : strlen(item);
        if (len == 0) FATAL("-i mixture '%s': set %d is empty (a comma at an end, or two in a row)", spec, k + 1);
        char *text = (char *)mallocCheck(len + 1);
        memcpy(text, item, len);
        text[len] = '\0';
        char *colon = strrchr(text, ':');
        if (colon == NULL) FATAL("-i mixture '%s': set '%s' has no weight; write PATTERN:WEIGHT, e.g. '%s:1'", spec, text, text);
        *colon = '\0';
        const char *w = colon + 1;
        if (colon == text) FATAL("-i mixture '%s': set ':%s' has no pattern before its weight", spec, w);
        char *rest;
        double v = strtod(w, &rest);
        if (*w == '\0' || isspace((unsigned char)*w) || *rest != '\0')
            FATAL("-i mixture '%s': the weight '%s' of set '%s' is not a number", spec, w, text);
        if (!isfinite(v)) FATAL("-i mixture '%s': the weight '%s' of set '%s' is not finite", spec, w, text);
        if (v < 0.0) FATAL("-i mixture '%s': the weight '%s' of set '%s' is negative", spec, w, text);
        (*patterns)[k] = text;
        (*weights)[k] = v;
        total += v;
        item = end ? end + 1 : item + len;
    }
    if (!(total > 0.0)) FATAL("-i mixture '%s': the weights sum to 0; at least one set needs a positive weight", spec);
    return n;
}

// A mixture's training loader (the file comment, "Mixtures"): one loader per set, the pick counter at 0.
static void dataloader_init_mixture(DataLoader *dl, const char *spec, int B, int T, int rank, int world,
                                    int shuffle, uint64_t seed, int vocab_size) {
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle != 0; dl->seed = seed; dl->vocab_size = vocab_size;
    dl->num_sets = dataloader_parse_mixture(spec, &dl->set_patterns, &dl->weights);
    dl->sets = (DataLoader *)mallocCheck(dl->num_sets * sizeof(DataLoader));
    for (int k = 0; k < dl->num_sets; k++) {
        glob_t g; // a set without files is the spec's mistake: say so before the set's loader would
        if (glob(dl->set_patterns[k], GLOB_NOSORT, NULL, &g) == GLOB_NOMATCH)
            FATAL("-i mixture '%s': no data files match set %d's pattern '%s'", spec, k + 1, dl->set_patterns[k]);
        globfree(&g);
        dataloader_init_glob(&dl->sets[k], dl->set_patterns[k], B, T, rank, world, shuffle, seed + (uint64_t)k, vocab_size);
        dl->masked |= dl->sets[k].masked;
        dl->num_tokens += dl->sets[k].num_tokens;
        dl->batches_per_epoch += dl->sets[k].batches_per_epoch;
    }
    double total = 0.0, acc = 0.0;
    int last = 0;
    for (int k = 0; k < dl->num_sets; k++) { total += dl->weights[k]; if (dl->weights[k] > 0.0) last = k; }
    dl->cumulative = (double *)mallocCheck(dl->num_sets * sizeof(double));
    for (int k = 0; k < dl->num_sets; k++) {
        acc += dl->weights[k] / total;
        dl->cumulative[k] = k >= last ? 1.0 : acc; // no rounding can leave a u past the end
    }
    dl->drawn = (int64_t *)callocCheck(dl->num_sets, sizeof(int64_t));
    size_t BT = (size_t)B * T;
    dl->inputs = (int *)mallocCheck(BT * sizeof(int));
    dl->targets = (int *)mallocCheck(BT * sizeof(int));
}

// The set batch number k of a mixture comes from: u_k = a hash of (seed, k) in [0, 1), the first set
// whose cumulative weight exceeds it.
static int dataloader_mixture_pick(const DataLoader *dl, int64_t k) {
    uint64_t h = dataloader_mix64(dataloader_mix64(dl->seed ^ 0x6A09E667F3BCC909ull) + (uint64_t)k * 0x9E3779B97F4A7C15ull);
    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0); // 53 bits: exact in a double
    int j = 0;
    while (u >= dl->cumulative[j]) j++;
    return j;
}

// The training loader of rank `rank` of `world`: every shard matching `pattern` (a glob, or one file
// name), or a mixture of several such sets when `pattern` holds a comma (the file comment). Exits
// with a message on any missing or malformed shard or mask, a bad mixture spec, or when no shard of
// a set gives a step; the main rank (rank 0) names each shard left out as too small.
static void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int rank, int world,
                            int shuffle, uint64_t seed, int vocab_size) {
    if (strchr(pattern, ',') == NULL) {
        dataloader_init_glob(dl, pattern, B, T, rank, world, shuffle, seed, vocab_size);
        return;
    }
    dataloader_check_args(B, T, rank, world, vocab_size);
    memset(dl, 0, sizeof(*dl));
    dataloader_init_mixture(dl, pattern, B, T, rank, world, shuffle, seed, vocab_size);
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
    if (!dl->masked) return;
    char mpath[4200];
    dataloader_mask_path(mpath, sizeof(mpath), path);
    // the targets' flags: bytes start + 1 .. start + BT (target i is token start + i + 1)
    fseekCheck(dl->mask_fp, SHARD_HEADER_INTS * (int64_t)sizeof(int32_t) + start + 1, SEEK_SET);
    freadCheck(dl->mask_raw, 1, (size_t)BT, dl->mask_fp, mpath);
    for (int64_t i = 0; i < BT; i++) {
        unsigned char b = dl->mask_raw[i];
        if (b > 1) FATAL("loss mask '%s': byte %u at token %lld is neither 0 nor 1", mpath, b, (long long)(start + i + 1));
        if (b == 0) dl->targets[i] = -1;
    }
}

// Reads the next batch into dl->inputs and dl->targets (each B*T ints, row-major (B, T); a masked
// target is -1).
static void dataloader_next_batch(DataLoader *dl) {
    if (dl->num_sets > 0) {
        int j = dataloader_mixture_pick(dl, dl->draws);
        DataLoader *set = &dl->sets[j];
        dataloader_next_batch(set);
        memcpy(dl->inputs, set->inputs, (size_t)dl->B * dl->T * sizeof(int));
        memcpy(dl->targets, set->targets, (size_t)dl->B * dl->T * sizeof(int));
        dl->draws++;
        dl->drawn[j]++;
        return;
    }
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

// The whole resume state, for any training loader: a glob's is its DataLoaderState's bytes; a
// mixture's is int64 sets, int64 draws, then per set double weight, int64 batches drawn and its
// DataLoaderState (all 8-byte fields: no padding).
typedef struct { double weight; int64_t drawn; DataLoaderState set; } DataMixtureSetState;

static size_t dataloader_state_bytes(const DataLoader *dl) {
    if (dl->num_sets == 0) return sizeof(DataLoaderState);
    return 2 * sizeof(int64_t) + dl->num_sets * sizeof(DataMixtureSetState);
}

static void dataloader_save_state(const DataLoader *dl, void *buf) {
    if (dl->num_sets == 0) {
        DataLoaderState s = dataloader_get_state(dl);
        memcpy(buf, &s, sizeof(s));
        return;
    }
    int64_t head[2] = {dl->num_sets, dl->draws};
    memcpy(buf, head, sizeof(head));
    for (int k = 0; k < dl->num_sets; k++) {
        DataMixtureSetState s = {dl->weights[k], dl->drawn[k], dataloader_get_state(&dl->sets[k])};
        memcpy((char *)buf + sizeof(head) + k * sizeof(s), &s, sizeof(s));
    }
}

// Puts the loader where dataloader_save_state's `buf` says; exits if it was saved by a loader that
// would draw another sequence (another number of sets, other weights, or a set's state that does not fit).
static void dataloader_load_state(DataLoader *dl, const void *buf) {
    if (dl->num_sets == 0) {
        DataLoaderState s;
        memcpy(&s, buf, sizeof(s));
        dataloader_set_state(dl, &s);
        return;
    }
    int64_t head[2];
    memcpy(head, buf, sizeof(head));
    if (head[0] != dl->num_sets) {
        FATAL("data loader state was saved by a mixture of %lld sets, this run's -i has %d; resume with the same -i",
              (long long)head[0], dl->num_sets);
    }
    int64_t sum = 0;
    for (int k = 0; k < dl->num_sets; k++) {
        DataMixtureSetState s;
        memcpy(&s, (const char *)buf + sizeof(head) + k * sizeof(s), sizeof(s));
        if (s.weight != dl->weights[k]) {
            FATAL("data loader state was saved with weight %g for mixture set %d, this run's -i gives '%s' weight %g;"
                  " resume with the same -i", s.weight, k + 1, dl->set_patterns[k], dl->weights[k]);
        }
        if (s.drawn < 0) FATAL("data loader state: mixture set %d has %lld batches drawn", k + 1, (long long)s.drawn);
        dataloader_set_state(&dl->sets[k], &s.set);
        dl->drawn[k] = s.drawn;
        sum += s.drawn;
    }
    if (head[1] != sum) {
        FATAL("data loader state: the mixture drew %lld batches but its sets %lld; the state is corrupt",
              (long long)head[1], (long long)sum);
    }
    dl->draws = head[1];
}

// A mixture's realized proportions: "'A' 70 of 100 batches (0.7000, weight 0.7000), ..." with the
// weights normalized to sum 1.
static void dataloader_mixture_report(const DataLoader *dl, char *out, size_t n) {
    double total = 0.0;
    for (int k = 0; k < dl->num_sets; k++) total += dl->weights[k];
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < dl->num_sets && used < n; k++) {
        double realized = dl->draws > 0 ? (double)dl->drawn[k] / (double)dl->draws : 0.0;
        int w = snprintf(out + used, n - used, "%s'%s' %lld of %lld batches (%.4f, weight %.4f)", k ? ", " : "",
                         dl->set_patterns[k], (long long)dl->drawn[k], (long long)dl->draws, realized, dl->weights[k] / total);
        if (w < 0) break;
        used += (size_t)w;
    }
}

static void dataloader_free(DataLoader *dl) {
    for (int k = 0; k < dl->num_sets; k++) { dataloader_free(&dl->sets[k]); free(dl->set_patterns[k]); }
    free(dl->sets);
    free(dl->set_patterns);
    free(dl->weights);
    free(dl->cumulative);
    free(dl->drawn);
    if (dl->fp != NULL) fcloseCheck(dl->fp);
    if (dl->mask_fp != NULL) fcloseCheck(dl->mask_fp);
    free(dl->mask_raw);
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
