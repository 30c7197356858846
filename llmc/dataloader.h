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

Training (dataloader_init). Positions are dealt out in steps: a shard's `offset` counts the
entries of its position list already dealt out (to every rank), and at each step rank r reads entry
offset + r, then offset grows by world; so the ranks' batches are disjoint and together cover the
shard. Every rank takes the same number of steps, S = P / world, in each shard (so data-parallel
ranks change shards together); the last P - S*world positions of the list are left out that epoch.
A shard shorter than B*T + 1 tokens (P = 0) is left out with a warning naming it; one with P < world,
fewer than
    B*T*world + 1 tokens   (one step: B*T tokens for each rank, plus the last target),
keeps its place in the shard order but gives this world no step (the same warning), and only a run
none of whose shards gives a step is refused. Without shuffling the position list is 0, 1, ..., P-1
and the shards come in name order. With shuffling each epoch permutes the shard order and each
shard's position list (so a different tail is left out each epoch); the permutations derive only
from (seed, epoch, shard), never from a running random stream or the world size.

Resume (dataloader_save_state / dataloader_load_state). The position is (epoch, index in the epoch's
shard order, offset) per set, plus a mixture's pick counter: all independent of the world size, so
a run saved on N GPUs resumes on M. It continues with entry offset + r of the same list, so every
position dealt out before the save is not read again and none after it is skipped, except the
shard's tail: where fewer than M entries are left in that shard, they are left out (as any shard's
last P mod world are) and the next shard starts. The record also lists every set's shards (name,
size, and a CRC-32 of the first and last 64 KB, the header included): on resume the shards matched
now must be those, in the same order (compared by file name without its folder, so data moved to
another folder still resumes), else the resume is refused naming the first file added, removed or
changed; with continue_changed (-data_changed continue) each changed set starts its next epoch from
its first shard instead (the other sets and the pick counter go on).

Shard records (docs/formats.md). A shard written by llama_fp8/formats.py records in header words 3-6
its role (train or val) and its tokenizer's token count and fingerprint. A training loader refuses
a val shard; every shard with a record must name the same tokenizer as every other of the run (all
sets, the val data) and as the decode table, and no more tokens than the model's vocabulary
(dataloader_check_run, which also refuses a -j shard among the training data and gives one warning
for llm.c's shards, which have no record).

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
(each a glob, as above) with non-negative weights (a set's weight after its last ':', so a pattern
may hold a ':'). Each set has its own loader over its own shards, rank and world as given, shuffled
with seed + its index; no file may be in two sets (it would be drawn more often than its set's
weight says): that is refused naming the shards. Batch
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
#include <ctype.h>    // isspace
#include <unistd.h>   // access
#include <sys/stat.h> // stat: a file's identity
#include <zlib.h>     // crc32: the shards' fingerprints
#include "utils.h" // FATAL, fopenCheck, freadCheck, fseekCheck, mallocCheck, random_u32

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7
#define MASK_MAGIC 20261206
#define MASK_VERSION 1
#define MASK_SUFFIX ".mask"
#define SHARD_RECORD_MAGIC 20261207 // header word 3 of a shard with a record (words 4-6)
enum { SHARD_ROLE_NONE, SHARD_ROLE_TRAIN, SHARD_ROLE_VAL };
#define DATA_TABLE_MAGIC 20240328   // a decode table's (llmc/tokenizer.h), named when one is given as data
#define DATA_RECORD_MAGIC 20261208  // word 0 of a resume record (dataloader_save_state)
#define DATA_FINGERPRINT_BYTES 65536 // a shard's cheap fingerprint reads this much at each end

// The synthetic corpus: SYNTH_SENTENCES fixed random "sentences" of SYNTH_LEN tokens, repeated in a
// random order. Within a sentence the next token is determined, so a model can drive the loss down
// to about ln(SYNTH_SENTENCES) / SYNTH_LEN = 0.13 nats per token: proof that training works.
#define SYNTH_SENTENCES 8
#define SYNTH_LEN 16
#define SYNTH_STEPS_PER_EPOCH (1 << 20) // its nominal length; the stream is computed, never stored

// One shard: what its header and file say.
typedef struct {
    char *path;
    int64_t tokens;      // header count, checked against the file size
    int token_bytes;     // 2 or 4
    int64_t file_bytes;
    uint32_t content;    // CRC-32 of the file's first and last DATA_FINGERPRINT_BYTES: the resume record's fingerprint
    int role;            // SHARD_ROLE_*; SHARD_ROLE_NONE: no record (llm.c's format)
    int tok_vocab;       // the record's tokenizer token count
    uint32_t tokenizer;  // the record's tokenizer fingerprint
    uint64_t dev, ino;   // the file's identity: one file under two names is one
} DataShard;

typedef struct DataLoader {
    int B, T, rank, world, shuffle, vocab_size;
    int warn;                  // 1: name each shard left out (too small) on stderr; the main rank's loaders
    uint64_t seed;
    // the shards, in name order
    int num_shards;            // those holding a batch position; shorter ones are left out
    DataShard *shards;
    int64_t num_tokens;        // sum over the shards that give this world a step
    int64_t batches_per_epoch; // batches this rank reads in one pass over all shards
    // where the next batch comes from
    int64_t epoch;
    int shard_index;           // into shard_order
    int64_t offset;            // entries of the current shard's position list dealt out: rank r reads offset + r
    int64_t shard_positions;   // P of the current shard
    int *shard_order;          // this epoch's order of the shards (indices into shards)
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

static int64_t dataloader_shard_positions(const DataLoader *dl, int shard) {
    return (dl->shards[shard].tokens - 1) / ((int64_t)dl->B * dl->T);
}

static int64_t dataloader_steps_in_shard(const DataLoader *dl, int shard) {
    return dataloader_shard_positions(dl, shard) / dl->world;
}

// CRC-32 of the first and last DATA_FINGERPRINT_BYTES of an open file of `size` bytes (the whole of
// a smaller one): cheap for shards of any size, and it sees a changed header or a re-cut end.
static uint32_t dataloader_file_fingerprint(FILE *fp, int64_t size, const char *path) {
    static unsigned char buf[DATA_FINGERPRINT_BYTES];
    int64_t head = size < DATA_FINGERPRINT_BYTES ? size : DATA_FINGERPRINT_BYTES;
    int64_t tail_at = size - DATA_FINGERPRINT_BYTES > head ? size - DATA_FINGERPRINT_BYTES : head;
    uLong crc = crc32(0L, Z_NULL, 0);
    fseekCheck(fp, 0, SEEK_SET);
    freadCheck(buf, 1, (size_t)head, fp, path);
    crc = crc32(crc, buf, (uInt)head);
    fseekCheck(fp, tail_at, SEEK_SET);
    freadCheck(buf, 1, (size_t)(size - tail_at), fp, path);
    return (uint32_t)crc32(crc, buf, (uInt)(size - tail_at));
}

// Opens shard `i` and checks its header against its size; stores what its header and file say.
static void dataloader_check_shard(DataLoader *dl, int i) {
    DataShard *sh = &dl->shards[i];
    const char *path = sh->path;
    FILE *fp = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(fp);
    int64_t header_bytes = SHARD_HEADER_INTS * (int64_t)sizeof(int32_t);
    if (size < header_bytes) {
        FATAL("data shard '%s' is truncated: %lld bytes, shorter than the %lld-byte header", path,
              (long long)size, (long long)header_bytes);
    }
    int32_t header[SHARD_HEADER_INTS];
    freadCheck(header, sizeof(int32_t), SHARD_HEADER_INTS, fp, path);
    sh->content = dataloader_file_fingerprint(fp, size, path);
    fcloseCheck(fp);
    int width;
    if (header[0] == DATA_TABLE_MAGIC) {
        FATAL("data shard '%s' is a tokenizer decode table (magic %d), not a token shard: make the data pattern match the"
              " token shards only", path, DATA_TABLE_MAGIC);
    } else if (header[0] == SHARD_MAGIC_U16) {
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
    sh->tokens = ntok;
    sh->token_bytes = width;
    sh->file_bytes = size;
    sh->role = SHARD_ROLE_NONE;
    if (header[3] == SHARD_RECORD_MAGIC) {
        if (header[4] != SHARD_ROLE_TRAIN && header[4] != SHARD_ROLE_VAL)
            FATAL("data shard '%s' has role %d in its header, expected %d (train) or %d (val)", path, header[4], SHARD_ROLE_TRAIN,
                  SHARD_ROLE_VAL);
        sh->role = header[4];
        sh->tok_vocab = header[5];
        sh->tokenizer = (uint32_t)header[6];
    }
    struct stat st;
    if (stat(path, &st) != 0) FATAL("data shard '%s': cannot stat it: %s", path, strerror(errno));
    sh->dev = (uint64_t)st.st_dev;
    sh->ino = (uint64_t)st.st_ino;
}

// The loss mask's name of a shard: its path with MASK_SUFFIX appended (path: at most 4096 bytes).
static void dataloader_mask_path(char *out, size_t n, const char *shard_path) {
    snprintf(out, n, "%s%s", shard_path, MASK_SUFFIX);
}

// Checks the loss mask of shard `i` (which exists) against its shard: header, size, token count.
static void dataloader_check_mask(const DataLoader *dl, int i) {
    char path[4200];
    dataloader_mask_path(path, sizeof(path), dl->shards[i].path);
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
    if (ntok != dl->shards[i].tokens) {
        FATAL("loss mask '%s' is for %lld tokens, its shard '%s' has %lld", path, (long long)ntok, dl->shards[i].path,
              (long long)dl->shards[i].tokens);
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
        dataloader_mask_path(path, sizeof(path), dl->shards[i].path);
        if (access(path, F_OK) == 0) { with++; one_with = i; }
        else if (without < 0) without = i;
    }
    if (with > 0 && with < dl->num_shards) {
        char missing[4200];
        dataloader_mask_path(missing, sizeof(missing), dl->shards[without].path);
        FATAL("data shard '%s' has no loss mask '%s', but %d of the %d shards matching '%s' have one (e.g. '%s'):"
              " every shard of a set needs its mask, or none", dl->shards[without].path, missing, with, dl->num_shards,
              pattern, dl->shards[one_with].path);
    }
    dl->masked = with > 0;
    for (int i = 0; dl->masked && i < dl->num_shards; i++) dataloader_check_mask(dl, i);
}

// Names on stderr (if dl->warn) each shard too small for one batch of every rank (an evaluation
// loader has world 1) and leaves out those without a batch position; one with positions for fewer
// ranks than the world keeps its place in the shard order (which is so the same at any world size)
// but gives no step. Refuses the run, naming the data and the tokens needed, if no shard gives a step.
static void dataloader_drop_small_shards(DataLoader *dl, const char *pattern) {
    int64_t needed = (int64_t)dl->B * dl->T * dl->world + 1;
    const char *what = dl->world == 1 ? "batch" : "step";
    char rule[128];
    if (dl->world == 1) snprintf(rule, sizeof(rule), "B*T + 1 = %d*%d + 1 = %lld tokens", dl->B, dl->T, (long long)needed);
    else snprintf(rule, sizeof(rule), "B*T*world + 1 = %d*%d*%d + 1 = %lld tokens (B*T for each rank plus the last target)",
                  dl->B, dl->T, dl->world, (long long)needed);
    int kept = 0, largest = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        if (dl->shards[i].tokens > dl->shards[largest].tokens) largest = i;
        kept += dl->shards[i].tokens >= needed;
    }
    const char *advice = dl->world == 1 ? "use a smaller -b/-t or more data" : "use a smaller -b/-t, fewer GPUs or more data";
    if (kept == 0 && dl->num_shards == 1) {
        FATAL("data shard '%s' has %lld tokens, fewer than one %s needs: %s; %s", dl->shards[0].path,
              (long long)dl->shards[0].tokens, what, rule, advice);
    }
    if (kept == 0) {
        FATAL("none of the %d data shards matching '%s' holds one %s, which needs %s; the largest, '%s', has"
              " %lld; %s", dl->num_shards, pattern, what, rule, dl->shards[largest].path,
              (long long)dl->shards[largest].tokens, advice);
    }
    int k = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        if (dl->shards[i].tokens < needed && dl->warn)
            fprintf(stderr, "warning: data shard '%s' has %lld tokens, fewer than one %s needs: %s; left out\n",
                    dl->shards[i].path, (long long)dl->shards[i].tokens, what, rule);
        if (dataloader_shard_positions(dl, i) == 0) { free(dl->shards[i].path); continue; }
        dl->shards[k++] = dl->shards[i];
    }
    dl->num_shards = k;
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
    dl->shard_positions = dataloader_shard_positions(dl, shard);
    if (dl->synthetic) return;
    if (dl->fp != NULL) fcloseCheck(dl->fp);
    dl->fp = fopenCheck(dl->shards[shard].path, "rb");
    if (dl->masked) {
        char path[4200];
        dataloader_mask_path(path, sizeof(path), dl->shards[shard].path);
        if (dl->mask_fp != NULL) fcloseCheck(dl->mask_fp);
        dl->mask_fp = fopenCheck(path, "rb");
    }
    if (dl->shuffle) {
        int64_t n = dl->shard_positions;
        for (int64_t p = 0; p < n; p++) dl->positions[p] = p;
        dataloader_permute_i64(dl->positions, n, dataloader_shuffle_seed(dl->seed, dl->epoch, 1 + (int64_t)shard));
    }
}

// Puts the loader `offset` entries into the position list of shard `shard_index` of epoch `epoch`'s
// order; where that shard has no whole step left for this world, at the start of the next shard that
// gives one (in this epoch's order, then the next epoch's).
static void dataloader_set_position(DataLoader *dl, int64_t epoch, int shard_index, int64_t offset) {
    dl->epoch = epoch;
    dl->shard_index = shard_index;
    dl->offset = offset;
    dataloader_order_shards(dl);
    while (dl->offset + dl->world > dataloader_shard_positions(dl, dl->shard_order[dl->shard_index])) {
        dl->offset = 0;
        if (++dl->shard_index == dl->num_shards) {
            dl->shard_index = 0;
            dl->epoch++;
            dataloader_order_shards(dl);
        }
    }
    dataloader_load_shard(dl);
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
        int64_t p = dataloader_shard_positions(dl, i);
        if (p > max_positions) max_positions = p;
        if (dataloader_steps_in_shard(dl, i) > 0) dl->num_tokens += dl->shards[i].tokens;
        dl->batches_per_epoch += dataloader_steps_in_shard(dl, i);
    }
    dl->positions = dl->shuffle ? (int64_t *)mallocCheck(max_positions * sizeof(int64_t)) : NULL;
    dl->fp = NULL;
    dl->mask_fp = NULL;
    dataloader_set_position(dl, 0, 0, 0);
}

static void dataloader_check_args(int B, int T, int rank, int world, int vocab_size) {
    if (B <= 0 || T <= 0) FATAL("data loader: B and T must be positive (got B=%d, T=%d)", B, T);
    if (world <= 0 || rank < 0 || rank >= world) FATAL("data loader: rank %d is not in [0, world=%d)", rank, world);
    if (vocab_size <= 0) FATAL("data loader: vocab_size must be positive (got %d)", vocab_size);
}

// Refuses two shards whose records name different tokenizers, naming both.
static void dataloader_same_tokenizer(const DataShard *a, const DataShard *b) {
    if (a->tokenizer != b->tokenizer || a->tok_vocab != b->tok_vocab)
        FATAL("data shard '%s' was made with another tokenizer (fingerprint %08x, %d tokens) than '%s' (%08x, %d tokens):"
              " a run's data must all be of one tokenizer", b->path, b->tokenizer, b->tok_vocab, a->path, a->tokenizer, a->tok_vocab);
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
    char **paths = (char **)mallocCheck(dl->num_shards * sizeof(char *));
    for (int i = 0; i < dl->num_shards; i++) paths[i] = dataloader_strdup(g.gl_pathv[i]);
    globfree(&g);
    qsort(paths, dl->num_shards, sizeof(char *), dataloader_cmp_paths);
    dl->shards = (DataShard *)callocCheck(dl->num_shards, sizeof(DataShard));
    for (int i = 0; i < dl->num_shards; i++) { dl->shards[i].path = paths[i]; dataloader_check_shard(dl, i); }
    free(paths);
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
    for (int i = 0; i < dl->num_shards; i++) {
        if (dl->shards[i].role == SHARD_ROLE_VAL)
            FATAL("data shard '%s' is a val shard (its header's role): the training data '%s' must not hold it", dl->shards[i].path,
                  pattern);
    }
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

typedef struct { uint64_t dev, ino; int set, shard; } DataFileId;

static int dataloader_cmp_file_ids(const void *a, const void *b) {
    const DataFileId *x = (const DataFileId *)a, *y = (const DataFileId *)b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->set - y->set;
}

// Refuses a mixture with a file in two sets (or twice in one, under two names), naming up to three.
static void dataloader_check_disjoint(const DataLoader *dl, const char *spec) {
    int n = 0;
    for (int k = 0; k < dl->num_sets; k++) n += dl->sets[k].num_shards;
    DataFileId *ids = (DataFileId *)mallocCheck((size_t)n * sizeof(DataFileId));
    n = 0;
    for (int k = 0; k < dl->num_sets; k++)
        for (int i = 0; i < dl->sets[k].num_shards; i++) ids[n++] = (DataFileId){dl->sets[k].shards[i].dev, dl->sets[k].shards[i].ino, k, i};
    qsort(ids, n, sizeof(DataFileId), dataloader_cmp_file_ids);
    char names[3200] = "";
    int twice = 0;
    for (int i = 1; i < n; i++) {
        const DataFileId *a = &ids[i - 1], *b = &ids[i];
        if (a->dev != b->dev || a->ino != b->ino) continue;
        if (++twice <= 3) {
            size_t used = strlen(names);
            snprintf(names + used, sizeof(names) - used, "%s'%s' (set %d) is '%s' (set %d)", twice > 1 ? ", " : "",
                     dl->sets[a->set].shards[a->shard].path, a->set + 1, dl->sets[b->set].shards[b->shard].path, b->set + 1);
        }
    }
    free(ids);
    if (twice)
        FATAL("-i mixture '%s': %d shard%s in two sets: %s%s; such a shard is drawn more often than its set's weight says: make the"
              " sets' patterns disjoint", spec, twice, twice == 1 ? " is" : "s are", names, twice > 3 ? ", ..." : "");
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
    dataloader_check_disjoint(dl, spec);
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
    dl->shards = (DataShard *)callocCheck(1, sizeof(DataShard));
    dl->shards[0].path = dataloader_strdup("<synthetic>");
    dl->shards[0].tokens = (int64_t)B * T * world * SYNTH_STEPS_PER_EPOCH + 1;
    dl->shards[0].token_bytes = 4;
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
    const char *path = dl->shards[shard].path;
    int width = dl->shards[shard].token_bytes;
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
    int64_t slot = dl->offset + dl->rank;
    dataloader_read_run(dl, shard, dl->shuffle ? dl->positions[slot] : slot);
    // advance now, so the state always names the batch the next call returns
    dl->offset += dl->world;
    if (dl->offset + dl->world > dl->shard_positions) {
        int next = dl->shard_index + 1;
        dataloader_set_position(dl, dl->epoch + (next == dl->num_shards), next % dl->num_shards, 0);
    }
}

// Positions in all shards, numbered in name order: shard 0's, then shard 1's, ...
static int64_t dataloader_positions(const DataLoader *dl) {
    int64_t n = 0;
    for (int i = 0; i < dl->num_shards; i++) n += dataloader_shard_positions(dl, i);
    return n;
}

// Reads position number `index` of all shards (see dataloader_positions) into dl->inputs and
// dl->targets. For an evaluation loader: in a training loader it would move the current shard.
static void dataloader_read_position(DataLoader *dl, int64_t index) {
    int64_t first = 0;
    int shard = 0;
    while (shard + 1 < dl->num_shards && index >= first + dataloader_shard_positions(dl, shard)) {
        first += dataloader_shard_positions(dl, shard);
        shard++;
    }
    if (index < 0 || index - first >= dataloader_shard_positions(dl, shard))
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

// The run's loaders: part p of train's sets (train itself for a glob), then val (NULL: none).
static const DataLoader *dataloader_run_part(const DataLoader *train, const DataLoader *val, int p) {
    int sets = train->num_sets ? train->num_sets : 1;
    if (p < sets) return train->num_sets ? &train->sets[p] : train;
    return p == sets ? val : NULL;
}

// The checks between a run's shard loaders (val: NULL without val data; a synthetic train loader has no
// shards to check), its decode table (table_path: NULL without one; table_fingerprint: its
// tokenizer_fingerprint) and its model's vocabulary V (the file comment, "Shard records"), each
// refusal naming the file: the training data holds no val
// shard; every shard that records its tokenizer names the same one as every other and as the table,
// with at most V tokens. The shards without a record (llm.c's format) get one warning (if warn).
static void dataloader_check_run(const DataLoader *train, const DataLoader *val, const char *table_path, uint32_t table_fingerprint,
                                 int V, int warn) {
    const DataShard *recorded = NULL, *unrecorded = NULL;
    int num_unrecorded = 0, parts = (train->num_sets ? train->num_sets : 1) + 1;
    for (int p = 0; p < parts; p++) {
        const DataLoader *part = dataloader_run_part(train, val, p);
        if (part == NULL || part->synthetic) continue; // no val data; the built-in corpus (-i synthetic, -x 0's train)
        for (int i = 0; i < part->num_shards; i++) {
            const DataShard *sh = &part->shards[i];
            if (sh->role == SHARD_ROLE_NONE) { if (num_unrecorded++ == 0) unrecorded = sh; continue; }
            if (recorded) dataloader_same_tokenizer(recorded, sh);
            recorded = sh;
            if (table_path && sh->tokenizer != table_fingerprint)
                FATAL("data shard '%s' was made with another tokenizer (fingerprint %08x, %d tokens) than the decode table '%s' (%08x):"
                      " give -tok the table made with the shards' tokenizer (dev/data/tokenize_text.py writes it beside them)", sh->path,
                      sh->tokenizer, sh->tok_vocab, table_path, table_fingerprint);
            if (sh->tok_vocab > V)
                FATAL("data shard '%s' was made with a tokenizer of %d tokens, more than the model's vocabulary of %d", sh->path, sh->tok_vocab, V);
        }
    }
    for (int i = 0; val && i < val->num_shards; i++) {
        for (int p = 0; p + 1 < parts; p++) {
            const DataLoader *part = dataloader_run_part(train, val, p);
            for (int j = 0; !part->synthetic && j < part->num_shards; j++)
                if (part->shards[j].dev == val->shards[i].dev && part->shards[j].ino == val->shards[i].ino)
                    FATAL("the training data (-i) holds the val shard '%s' (-j) as '%s': train on other data than you validate on",
                          val->shards[i].path, part->shards[j].path);
        }
    }
    if (warn && num_unrecorded)
        fprintf(stderr, "warning: %d data shard%s record%s no tokenizer (llm.c's format, e.g. '%s'): not checked against the decode table or"
                " the other shards\n", num_unrecorded, num_unrecorded == 1 ? "" : "s", num_unrecorded == 1 ? "s" : "", unrecorded->path);
}

// Tokens in all shards (the synthetic stream's nominal length for a synthetic loader).
static int64_t dataloader_num_tokens(const DataLoader *dl) { return dl->num_tokens; }

// ---- the resume record (the file comment, "Resume"): little-endian 64-bit words, names padded
//   magic DATA_RECORD_MAGIC, version 1, B*T, shuffle, seed, sets (0: one glob), mixture draws,
//   then per set (one for a glob): weight (double), batches drawn, epoch, index in the epoch's shard
//   order, offset, shards; per shard: file bytes, fingerprint, name length, the name (NUL-padded to a
//   multiple of 8, at least one NUL).
// A checkpoint from before the record held a DataLoaderState of 6 words (epoch, shard index, step,
// seed, B*T*world, shuffle) per set, after a mixture's (sets, draws) and each set's (weight, drawn).
#define DATA_RECORD_VERSION 1
#define DATA_OLD_STATE_BYTES 48

typedef struct { unsigned char *buf; size_t at, size; const char *what; } DataRecord; // buf NULL: only counts

static void record_put(DataRecord *r, const void *v, size_t n) {
    if (r->buf) memcpy(r->buf + r->at, v, n);
    r->at += n;
}
static void record_put_i64(DataRecord *r, int64_t v) { record_put(r, &v, sizeof(v)); }
static void record_get(DataRecord *r, void *v, size_t n) {
    if (n > r->size - r->at) FATAL("the data loader's record in '%s' is truncated (%zu bytes): the file is corrupt", r->what, r->size);
    memcpy(v, r->buf + r->at, n);
    r->at += n;
}
static int64_t record_get_i64(DataRecord *r) { int64_t v; record_get(r, &v, sizeof(v)); return v; }

static void dataloader_record_set(DataRecord *r, const DataLoader *set, double weight, int64_t drawn) {
    record_put(r, &weight, sizeof(weight));
    int64_t words[5] = {drawn, set->epoch, set->shard_index, set->offset, set->num_shards};
    record_put(r, words, sizeof(words));
    for (int i = 0; i < set->num_shards; i++) {
        const DataShard *sh = &set->shards[i];
        int64_t len = (int64_t)strlen(sh->path), padded = (len + 8) / 8 * 8, zero = 0;
        int64_t file[3] = {sh->file_bytes, sh->content, len};
        record_put(r, file, sizeof(file));
        record_put(r, sh->path, (size_t)len);
        for (int64_t k = len; k < padded; k++) record_put(r, &zero, 1);
    }
}

static void dataloader_record(const DataLoader *dl, DataRecord *r) {
    int64_t head[7] = {DATA_RECORD_MAGIC, DATA_RECORD_VERSION, (int64_t)dl->B * dl->T, dl->shuffle, (int64_t)dl->seed, dl->num_sets, dl->draws};
    record_put(r, head, sizeof(head));
    if (dl->num_sets == 0) dataloader_record_set(r, dl, 1.0, 0);
    for (int k = 0; k < dl->num_sets; k++) dataloader_record_set(r, &dl->sets[k], dl->weights[k], dl->drawn[k]);
}

// The bytes of the loader's resume record now (it grows with the shards' names).
static size_t dataloader_state_bytes(const DataLoader *dl) {
    DataRecord r = {NULL, 0, 0, NULL};
    dataloader_record(dl, &r);
    return r.at;
}

// Writes the resume record into buf (dataloader_state_bytes of it).
static void dataloader_save_state(const DataLoader *dl, void *buf) {
    DataRecord r = {(unsigned char *)buf, 0, 0, NULL};
    dataloader_record(dl, &r);
}

typedef struct { const char *name; int64_t bytes; uint32_t content; } SavedShard;
typedef struct { double weight; int64_t drawn, epoch, shard_index, offset, num_shards; SavedShard *shards; } SavedSet; // num_shards -1: not recorded

static const char *dataloader_base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

// Whether `set` matches the shards of `saved` (name without its folder, size, fingerprint, in order);
// if not, the first difference, as a phrase after the set's name, in out.
static int dataloader_files_changed(const DataLoader *set, const SavedSet *saved, char *out, size_t n) {
    if (saved->num_shards < 0) {
        snprintf(out, n, "was saved by a trainer that did not record the data's files (a checkpoint from before the data record)");
        return 1;
    }
    for (int64_t i = 0; i < set->num_shards || i < saved->num_shards; i++) {
        const DataShard *now = i < set->num_shards ? &set->shards[i] : NULL;
        const SavedShard *was = i < saved->num_shards ? &saved->shards[i] : NULL;
        if (now && was && strcmp(dataloader_base_name(now->path), dataloader_base_name(was->name)) == 0) {
            if (now->file_bytes != was->bytes) {
                snprintf(out, n, "has shard '%s' of %lld bytes, %lld when the checkpoint was written (re-cut or appended to)", now->path,
                         (long long)now->file_bytes, (long long)was->bytes);
                return 1;
            }
            if (now->content != was->content) {
                snprintf(out, n, "has shard '%s' changed since the checkpoint was written (its first or last 64 KB differ)", now->path);
                return 1;
            }
            continue;
        }
        // names differ here: the recorded one was removed if the present one comes later in the record
        int present_later = 0;
        for (int64_t j = i + 1; now && was && j < saved->num_shards; j++)
            present_later |= strcmp(dataloader_base_name(now->path), dataloader_base_name(saved->shards[j].name)) == 0;
        if (now == NULL || present_later)
            snprintf(out, n, "lacks shard '%s' of the checkpoint's data (removed, renamed or no longer matched)", was->name);
        else
            snprintf(out, n, "has shard '%s' that the checkpoint's data did not (added or inserted)", now->path);
        return 1;
    }
    return 0;
}

// Puts one set (a glob's loader, or a mixture's set) where `saved` says; a set whose files changed is
// refused, or with continue_changed starts its next epoch.
static void dataloader_resume_set(DataLoader *set, const SavedSet *saved, const char *what, const char *label, int continue_changed) {
    char problem[4400];
    if (dataloader_files_changed(set, saved, problem, sizeof(problem))) {
        if (!continue_changed && saved->num_shards < 0)
            FATAL("cannot resume from '%s': %s %s, so the data cannot be checked; to resume it, pass -data_changed continue (%s"
                  " then starts its next epoch, %lld, at its first shard)", what, label, problem, label, (long long)saved->epoch + 1);
        if (!continue_changed)
            FATAL("cannot resume from '%s': %s %s, and its saved position would then train some batches twice and skip others;"
                  " resume with the data as it was, or pass -data_changed continue to start %s at its next epoch (%lld) from its first"
                  " shard", what, label, problem, label, (long long)saved->epoch + 1);
        if (set->warn)
            fprintf(stderr, "warning: -data_changed continue: %s %s: it starts its epoch %lld at its first shard\n", label, problem,
                    (long long)saved->epoch + 1);
        dataloader_set_position(set, saved->epoch + 1, 0, 0);
        return;
    }
    int fits = saved->epoch >= 0 && saved->shard_index >= 0 && saved->shard_index < set->num_shards && saved->offset >= 0;
    if (fits) {
        set->epoch = saved->epoch;
        dataloader_order_shards(set);
        fits = saved->offset <= dataloader_shard_positions(set, set->shard_order[saved->shard_index]);
    }
    if (!fits)
        FATAL("the data loader's record in '%s' is corrupt: %s at epoch %lld, shard %lld of %d, offset %lld", what, label,
              (long long)saved->epoch, (long long)saved->shard_index, set->num_shards, (long long)saved->offset);
    dataloader_set_position(set, saved->epoch, (int)saved->shard_index, saved->offset);
}

// Reads a record (or a state from before the record) into sets (*nsets of them, allocated; names
// point into buf) and the mixture's draws; returns 1 if it was saved by a glob, 0 by a mixture.
static int dataloader_parse_state(const DataLoader *dl, DataRecord *r, SavedSet **sets, int64_t *nsets, int64_t *draws) {
    int64_t first = r->size >= 8 ? record_get_i64(r) : 0;
    if (first != DATA_RECORD_MAGIC) { // from before the record: only the epochs and a mixture's counters are of use
        int glob = r->size == DATA_OLD_STATE_BYTES;
        int64_t sets_old = glob ? 1 : first, set_bytes = 16 + DATA_OLD_STATE_BYTES;
        if (!glob && (r->size < 16 || first < 1 || (int64_t)r->size != 16 + first * set_bytes))
            FATAL("the data loader's state in '%s' (%zu bytes) is not one this build reads: the file is corrupt", r->what, r->size);
        *nsets = sets_old;
        *draws = glob ? 0 : record_get_i64(r);
        *sets = (SavedSet *)callocCheck((size_t)sets_old, sizeof(SavedSet));
        for (int64_t k = 0; k < sets_old; k++) {
            SavedSet *s = &(*sets)[k];
            r->at = glob ? 0 : (size_t)(16 + k * set_bytes);
            if (!glob) { record_get(r, &s->weight, sizeof(double)); s->drawn = record_get_i64(r); }
            else s->weight = 1.0;
            s->epoch = record_get_i64(r);
            s->num_shards = -1;
        }
        return glob;
    }
    int64_t head[6];
    record_get(r, head, sizeof(head));
    if (head[0] != DATA_RECORD_VERSION) FATAL("the data loader's record in '%s' has version %lld, this build reads %d", r->what, (long long)head[0], DATA_RECORD_VERSION);
    if (head[1] != (int64_t)dl->B * dl->T)
        FATAL("cannot resume from '%s': its data position is in batches of B*T = %lld tokens, this run's are %lld; resume with the same"
              " -b and -t", r->what, (long long)head[1], (long long)dl->B * dl->T);
    if (head[2] != dl->shuffle || (uint64_t)head[3] != dl->seed)
        FATAL("cannot resume from '%s': its data was read with shuffle=%lld seed=%llu, this run has shuffle=%d seed=%llu; resume with"
              " the same -shuffle and -seed", r->what, (long long)head[2], (unsigned long long)head[3], dl->shuffle, (unsigned long long)dl->seed);
    *nsets = head[4] == 0 ? 1 : head[4];
    *draws = head[5];
    if (head[4] < 0 || *nsets > (int64_t)(r->size / 48)) FATAL("the data loader's record in '%s' is corrupt: %lld sets", r->what, (long long)head[4]);
    *sets = (SavedSet *)callocCheck((size_t)*nsets, sizeof(SavedSet));
    for (int64_t k = 0; k < *nsets; k++) {
        SavedSet *s = &(*sets)[k];
        record_get(r, &s->weight, sizeof(double));
        int64_t words[5];
        record_get(r, words, sizeof(words));
        s->drawn = words[0]; s->epoch = words[1]; s->shard_index = words[2]; s->offset = words[3]; s->num_shards = words[4];
        if (s->num_shards < 0 || s->num_shards > (int64_t)((r->size - r->at) / 32))
            FATAL("the data loader's record in '%s' is corrupt: %lld shards in set %lld", r->what, (long long)s->num_shards, (long long)k + 1);
        s->shards = (SavedShard *)mallocCheck((size_t)s->num_shards * sizeof(SavedShard) + 1);
        for (int64_t i = 0; i < s->num_shards; i++) {
            int64_t file[3];
            record_get(r, file, sizeof(file));
            int64_t padded = (file[2] + 8) / 8 * 8;
            if (file[2] < 0 || padded > (int64_t)(r->size - r->at) || r->buf[r->at + file[2]] != 0)
                FATAL("the data loader's record in '%s' is corrupt: a shard name of %lld bytes", r->what, (long long)file[2]);
            s->shards[i] = (SavedShard){(const char *)r->buf + r->at, file[0], (uint32_t)file[1]};
            r->at += (size_t)padded;
        }
    }
    if (r->at != r->size) FATAL("the data loader's record in '%s' has %zu bytes after its end: the file is corrupt", r->what, r->size - r->at);
    return head[4] == 0;
}

// Puts the loader where a record of dataloader_save_state (`bytes` of it at buf, from the checkpoint
// file `what`) says, so the next batch is the one that followed when it was saved. Exits, naming
// `what`, if it was saved by a loader reading batches of another B*T, another seed or shuffle, or
// (unless continue_changed) other sets, other weights, or shards added, removed or changed (naming
// the first such file); a corrupt record is refused. continue_changed: the file comment, "Resume".
static void dataloader_load_state(DataLoader *dl, const void *buf, size_t bytes, const char *what, int continue_changed) {
    DataRecord r = {(unsigned char *)buf, 0, bytes, what};
    SavedSet *saved;
    int64_t nsaved, draws, sum = 0;
    int glob = dataloader_parse_state(dl, &r, &saved, &nsaved, &draws);
    for (int64_t k = 0; k < nsaved; k++) {
        if (saved[k].drawn < 0) FATAL("the data loader's record in '%s': mixture set %lld has %lld batches drawn", what, (long long)k + 1, (long long)saved[k].drawn);
        sum += saved[k].drawn;
    }
    if (!glob && draws != sum)
        FATAL("the data loader's record in '%s': the mixture drew %lld batches but its sets %lld; the file is corrupt", what, (long long)draws, (long long)sum);
    int nsets = dl->num_sets ? dl->num_sets : 1;
    if ((glob != (dl->num_sets == 0) || nsaved != nsets) && !continue_changed)
        FATAL("cannot resume from '%s': it was saved by %s of %lld sets, this run's -i has %s of %d; resume with the same -i, or pass"
              " -data_changed continue (each set then starts its next epoch, a new one its first)", what, glob ? "a glob" : "a mixture",
              (long long)(glob ? 1 : nsaved), dl->num_sets ? "a mixture" : "a glob", nsets);
    for (int k = 0; k < nsets; k++) {
        DataLoader *set = dl->num_sets ? &dl->sets[k] : dl;
        char label[2200];
        if (dl->num_sets) snprintf(label, sizeof(label), "mixture set %d ('%s')", k + 1, dl->set_patterns[k]);
        else snprintf(label, sizeof(label), "the training data");
        if (k >= nsaved) continue; // a new set: from its start
        if (dl->num_sets && saved[k].weight != dl->weights[k] && !continue_changed)
            FATAL("cannot resume from '%s': it was saved with weight %g for %s, this run's -i gives it weight %g; resume with the same -i,"
                  " or pass -data_changed continue", what, saved[k].weight, label, dl->weights[k]);
        dataloader_resume_set(set, &saved[k], what, label, continue_changed);
        if (dl->num_sets) dl->drawn[k] = saved[k].drawn;
    }
    if (dl->num_sets) dl->draws = draws;
    for (int64_t k = 0; k < nsaved; k++) free(saved[k].shards);
    free(saved);
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
    for (int i = 0; i < dl->num_shards; i++) free(dl->shards[i].path);
    free(dl->shards);
    free(dl->shard_order);
    free(dl->positions);
    free(dl->raw);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

#endif
