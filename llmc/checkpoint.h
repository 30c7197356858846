/*
Checkpoints in the log directory (-o): their names, and every step of writing, completing, choosing
and removing them. The files of step S (each written to NAME.tmp and renamed):
  model_SSSSSSSS.bin        the model (rank 0)
  state_SSSSSSSS_RRRRR.bin  each rank's optimizer and data state
  done_SSSSSSSS             the completion marker, written last, once every file above exists:
                            "run <16 hex digits> ranks <N>\n". A checkpoint without it is incomplete.
and of the directory:
  run_id                    the run the directory belongs to (16 hex digits): made at a fresh start,
                            kept across resumes. The model and state files carry it too (header
                            words 252-253), so files of two runs never pass for one checkpoint.
  train.lock                held (flock) by the run's main rank for its whole life; it names the
                            holder's host and pid, for the refusal a second run gets.
Names are parsed from the directory's listing (readdir), never globbed from -o, which may hold glob
characters. The files' layout, writer and reader: llmc/checkpoint_file.h; what they hold is
train_llama_fp8.cu's (STATE_FIELDS, state_sections). The ranks meet through CheckpointRanks, which
the trainer fills with its collectives and the host test (dev/test/test_checkpoint_host.cu) with
stand-in processes.
Plain C, header-only; also compiles as C++ under nvcc.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>        // kill(pid, 0): whether a lock file names a live process
#include <sys/file.h>      // flock
#include <sys/random.h>    // getrandom
#include <sys/stat.h>      // stat: whether -o exists (-check 1)
#include <sys/statvfs.h>
#include "utils.h"         // FATAL, mallocCheck
#include "model_file.h"    // MODEL_MAGIC, header_run_id, the checksums
#include "checkpoint_file.h" // STATE_MAGIC, write_sections, read_sections: the files themselves
#include "stop_signal.h"   // stop_signal_partial, stop_signal_unfinished

// ---- names: one format and one parser for every file of a checkpoint
enum { CKPT_NONE, CKPT_MODEL, CKPT_STATE, CKPT_DONE };

static void checkpoint_name(char *out, size_t n, int kind, int step, int rank) {
    if (kind == CKPT_MODEL) snprintf(out, n, "model_%08d.bin", step);
    else if (kind == CKPT_STATE) snprintf(out, n, "state_%08d_%05d.bin", step, rank);
    else snprintf(out, n, "done_%08d", step);
}

static void checkpoint_path(char *out, size_t n, const char *dir, int kind, int step, int rank) {
    char name[64];
    checkpoint_name(name, sizeof(name), kind, step, rank);
    snprintf(out, n, "%s/%s", dir, name);
}

static void checkpoint_paths(const char *dir, int step, int rank, char *model_path, char *state_path) {
    checkpoint_path(model_path, 1024, dir, CKPT_MODEL, step, 0);
    checkpoint_path(state_path, 1024, dir, CKPT_STATE, step, rank);
}

// The kind of checkpoint file `name` is (its step, and rank for a state file; *tmp: its temporary
// file), CKPT_NONE for any other name: only exactly what checkpoint_name writes (not model_best.bin,
// model_7.bin or model_+0000007.bin).
static int checkpoint_name_parse(const char *name, int *step, int *rank, int *tmp) {
    size_t len = strlen(name);
    *tmp = len > 4 && strcmp(name + len - 4, ".tmp") == 0;
    for (int kind = CKPT_MODEL; kind <= CKPT_DONE; kind++) {
        int s = -1, r = 0;
        int got = kind == CKPT_STATE ? sscanf(name, "state_%d_%d", &s, &r) == 2 : sscanf(name, kind == CKPT_MODEL ? "model_%d" : "done_%d", &s) == 1;
        if (!got || s < 0 || r < 0) continue;
        char canon[80];
        checkpoint_name(canon, sizeof(canon), kind, s, r);
        if (*tmp) strcat(canon, ".tmp");
        if (strcmp(canon, name) == 0) { *step = s; *rank = r; return kind; }
    }
    return CKPT_NONE;
}

// ---- the completion marker

// Whether step's marker in dir is one this code wrote; its run id and rank count.
static int checkpoint_done_read(const char *dir, int step, uint64_t *run, int *ranks) {
    char path[1100], end = 0;
    checkpoint_path(path, sizeof(path), dir, CKPT_DONE, step, 0);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    unsigned long long id = 0;
    int ok = fscanf(f, "run %16llx ranks %d%c", &id, ranks, &end) == 3 && end == '\n' && *ranks >= 1 && id != 0;
    fclose(f);
    *run = id;
    return ok;
}

// fsync of a directory: the renames into it survive a crash of the machine, not only of the process.
static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) FATAL("cannot sync the directory '%s': %s", dir, strerror(errno));
    close(fd);
}

// A small text file written whole or not at all: to path.tmp, synced, renamed, the directory synced.
static void write_small_file(const char *dir, const char *path, const char *text) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    stop_signal_partial(tmp);
    FILE *f = fopenCheck(tmp, "w");
    if (fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) FATAL("writing '%s' failed: %s", tmp, strerror(errno));
    fcloseCheck(f);
    renameCheck(tmp, path);
    stop_signal_partial(NULL);
    fsync_dir(dir);
}

// ---- what a directory holds

// The steps of dir's complete checkpoints of `run` (a marker naming it), newest first, in *steps
// (malloc'd, the caller frees it); returns their count.
static int checkpoint_complete_steps(const char *dir, uint64_t run, int **steps) {
    int n = 0, cap = 16;
    *steps = (int *)mallocCheck(cap * sizeof(int));
    DIR *d = opendir(dir);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        int step, rank, tmp, ranks;
        uint64_t id;
        if (checkpoint_name_parse(e->d_name, &step, &rank, &tmp) != CKPT_DONE || tmp) continue;
        if (!checkpoint_done_read(dir, step, &id, &ranks) || id != run) continue;
        if (n == cap) *steps = (int *)realloc(*steps, (cap *= 2) * sizeof(int));
        if (*steps == NULL) FATAL("out of memory listing the checkpoints of '%s'", dir);
        (*steps)[n++] = step;
    }
    if (d != NULL) closedir(d);
    for (int i = 1; i < n; i++) // newest first
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) { int t = (*steps)[j]; (*steps)[j] = (*steps)[j - 1]; (*steps)[j - 1] = t; }
    return n;
}

// The run id in the header of checkpoint file `path` (0 if it has none or cannot be read).
static uint64_t checkpoint_file_run(const char *path) {
    int32_t h[MODEL_HEADER_INTS];
    FILE *f = fopen(path, "rb");
    int ok = f != NULL && fread(h, sizeof(int32_t), MODEL_HEADER_INTS, f) == MODEL_HEADER_INTS;
    if (f != NULL) fclose(f);
    return ok ? header_run_id(h) : 0;
}

// Removes every file of step's checkpoint in dir: the marker first, so that what is left of a
// removal cut short is an incomplete checkpoint (removed at the next start-up), never a complete one
// missing a file. A file that cannot be removed is named on stderr (`why`: what removes it).
static void checkpoint_remove(const char *dir, int step, const char *why) {
    char path[1100];
    checkpoint_path(path, sizeof(path), dir, CKPT_DONE, step, 0);
    if (unlink(path) != 0 && errno != ENOENT) fprintf(stderr, "warning: %s: cannot remove '%s': %s\n", why, path, strerror(errno));
    DIR *d = opendir(dir);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        int s, rank, tmp, kind = checkpoint_name_parse(e->d_name, &s, &rank, &tmp);
        if ((kind != CKPT_MODEL && kind != CKPT_STATE) || tmp || s != step) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) fprintf(stderr, "warning: %s: cannot remove '%s': %s\n", why, path, strerror(errno));
    }
    if (d != NULL) closedir(d);
}

// -keep K, on the main rank, once the checkpoint of step `newest` is complete: removes run's complete
// checkpoints older than it beyond the K - 1 newest of those. Nothing goes while `newest` is not
// complete, and nothing of another run or of a later step (a checkpoint -y 1 passed over).
static void checkpoint_prune(const char *dir, uint64_t run, int keep, int newest) {
    if (keep <= 0) return;
    int *steps, n = checkpoint_complete_steps(dir, run, &steps), kept = 0, complete = 0;
    for (int i = 0; i < n; i++) complete |= steps[i] == newest;
    for (int i = 0; i < n && complete; i++) {
        if (steps[i] > newest || kept++ < keep) continue;
        char why[64];
        snprintf(why, sizeof(why), "-keep %d", keep);
        checkpoint_remove(dir, steps[i], why);
    }
    free(steps);
}

// ---- the run: its id, its lock on the directory, its start-up

static uint64_t checkpoint_new_run_id(void) {
    uint64_t id = 0;
    while (id == 0) // 0 is "no run"
        if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) FATAL("cannot draw a run id (getrandom): %s", strerror(errno));
    return id;
}

// Whether dir holds a run_id file (its id in *id); a file that is not one is refused.
static int checkpoint_run_id_read(const char *dir, uint64_t *id) {
    char path[1100], end = 0;
    snprintf(path, sizeof(path), "%s/run_id", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL && errno == ENOENT) return 0;
    if (f == NULL) FATAL("cannot read '%s': %s", path, strerror(errno));
    unsigned long long v = 0;
    int ok = fscanf(f, "%16llx%c", &v, &end) == 2 && end == '\n' && v != 0;
    fclose(f);
    if (!ok) FATAL("'%s' does not hold a run id (16 hex digits and a newline): not written by this trainer, or damaged", path);
    *id = v;
    return 1;
}

// Takes the lock of dir for the rest of this process's life (flock on dir/train.lock, released by the
// kernel however the process ends, SIGKILL included) and writes this host and pid into the file.
// A second run is refused naming the holder. Where the file system has no flock (ENOLCK, ENOSYS,
// EOPNOTSUPP: e.g. Lustre without its flock mount option) the run goes on with a warning.
// The descriptor is never closed: the lock lasts as long as the process.
static void checkpoint_lock(const char *dir) {
    char path[1100], holder[300] = "";
    snprintf(path, sizeof(path), "%s/train.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) FATAL("cannot open the lock file '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == ENOLCK || errno == ENOSYS || errno == EOPNOTSUPP) {
            fprintf(stderr, "warning: cannot lock '%s' (%s): this file system does not support flock, so nothing stops a second run"
                    " from writing the same -o directory at the same time\n", path, strerror(errno));
            close(fd);
            return;
        }
        if (errno != EWOULDBLOCK) FATAL("cannot lock '%s': %s", path, strerror(errno));
        // the holder writes its name right after it locks, over an earlier holder's: until then the
        // file is empty or names that one, a process of this host that is gone
        for (int i = 0, stale = 1; i < 100 && stale; i++) {
            ssize_t got = pread(fd, holder, sizeof(holder) - 1, 0);
            holder[got > 0 ? got : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            char host[256] = "", named[256] = "";
            int pid = 0;
            gethostname(host, sizeof(host) - 1);
            stale = holder[0] == '\0' || (sscanf(holder, "host %255s pid %d", named, &pid) == 2 && strcmp(named, host) == 0 &&
                                          kill(pid, 0) != 0 && errno == ESRCH);
            if (stale) usleep(10000);
        }
        FATAL("the log directory '%s' is in use by another run (%s holds '%s'): two runs writing one directory overwrite each"
              " other's checkpoints. Wait for it to end, or give this run another -o", dir, holder[0] ? holder : "a process that has not said who it is", path);
    }
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    int n = snprintf(holder, sizeof(holder), "host %s pid %d\n", host, (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, holder, n, 0) != n) FATAL("cannot write the lock file '%s': %s", path, strerror(errno));
}

// The start of a run that writes checkpoints into dir, on the main rank, holding dir's lock: returns
// the run's id. With resume (-y 1), the run dir/run_id names (none there: refused, unless
// may_start_fresh: -init_from gives the weights); otherwise, or where there is none, a new run, whose
// id is written there: refused where dir holds checkpoint files (another run's: a new
// experiment pointed at an old directory) unless overwrite (-overwrite 1: those files are kept, never
// resumed or pruned; the names carry no run id, so one at a step the new run writes is replaced).
// Then removes, saying so, every checkpoint's temporary file
// (under the lock nothing else writes them) and this run's incomplete checkpoints (a model or state
// file of this run without its marker: a process killed while writing).
// checkpoint_dir_start's refusals, reading only (-check 1 makes them too): returns whether the run
// continues the one dir/run_id names (its id in *run).
static int checkpoint_dir_check(const char *dir, int resume, int overwrite, int may_start_fresh, uint64_t *run) {
    int have = checkpoint_run_id_read(dir, run);
    if (resume && !have && !may_start_fresh)
        FATAL("-y 1: the log directory '%s' holds no run to resume (no run_id file: this trainer never started a run there; is it the"
              " directory you meant?). To start a new run there, leave out -y 1", dir);
    if (resume && have) return 1;
    char first[300] = "";
    int files = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        int step, rank, tmp;
        if (checkpoint_name_parse(e->d_name, &step, &rank, &tmp) == CKPT_NONE || tmp) continue;
        if (files++ == 0) snprintf(first, sizeof(first), "%s", e->d_name);
    }
    if (d != NULL) closedir(d);
    if (files > 0 && !overwrite)
        FATAL("the log directory '%s' holds %d checkpoint files of another run (%s, ...): to continue that run pass -y 1; to start a"
              " new one there pass -overwrite 1 (that run's checkpoints are kept, never resumed or removed by -keep, but one at a step"
              " the new run writes is replaced); or give this run another -o", dir, files, first);
    return 0;
}

static uint64_t checkpoint_dir_start(const char *dir, int resume, int overwrite, int may_start_fresh) {
    uint64_t run = 0;
    if (!checkpoint_dir_check(dir, resume, overwrite, may_start_fresh, &run)) {
        run = checkpoint_new_run_id();
        char path[1100], text[32];
        snprintf(path, sizeof(path), "%s/run_id", dir);
        snprintf(text, sizeof(text), "%016llx\n", (unsigned long long)run);
        write_small_file(dir, path, text);
    }
    DIR *d = opendir(dir);
    if (d == NULL) FATAL("cannot list the log directory '%s': %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int step, rank, tmp, ranks, kind = checkpoint_name_parse(e->d_name, &step, &rank, &tmp);
        uint64_t marker_run;
        char path[1100];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (kind == CKPT_NONE && strcmp(e->d_name, "run_id.tmp") != 0) continue;
        const char *why = kind == CKPT_NONE || tmp ? "the temporary file of a write that never finished"
                        : kind != CKPT_DONE && !checkpoint_done_read(dir, step, &marker_run, &ranks) && checkpoint_file_run(path) == run
                        ? "part of this run's incomplete checkpoint (no completion marker: its writer ended before the checkpoint was complete)"
                        : NULL;
        if (why == NULL) continue;
        if (unlink(path) != 0) FATAL("cannot remove '%s' (%s): %s", path, why, strerror(errno));
        printf("removed '%s': %s\n", path, why);
    }
    closedir(d);
    return run;
}

// -check 1: the run dir gets, said on stdout, with checkpoint_dir_start's refusals and the lock's,
// nothing written (dir absent: a new run there).
static void checkpoint_dir_plan(const char *dir, int resume, int overwrite, int may_start_fresh) {
    struct stat st;
    char lock[1100], holder[300] = "";
    if (stat(dir, &st) != 0) { printf("plan: a new run in '%s' (made at the start)\n", dir); return; }
    snprintf(lock, sizeof(lock), "%s/train.lock", dir);
    int fd = open(lock, O_RDONLY);
    if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        ssize_t got = read(fd, holder, sizeof(holder) - 1);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        FATAL("the log directory '%s' is in use by another run now (%s holds '%s'): this run would be refused", dir,
              holder, lock);
    }
    if (fd >= 0) close(fd); // and its shared lock with it
    uint64_t run;
    if (!checkpoint_dir_check(dir, resume, overwrite, may_start_fresh, &run)) {
        printf("plan: a new run in '%s'%s\n", dir, overwrite ? " beside another run's checkpoints (-overwrite 1)" : "");
        return;
    }
    int *steps, n = checkpoint_complete_steps(dir, run, &steps);
    unsigned long long id = run;
    if (n > 0)
        printf("plan: -y 1 resumes run %016llx of '%s' from step %d, its newest complete checkpoint (verified at the"
               " start; a damaged one gives way to the one before)\n", id, dir, steps[0]);
    else
        printf("plan: -y 1: run %016llx of '%s' has no complete checkpoint yet: it starts over%s\n", id, dir,
               may_start_fresh ? " from -init_from" : "");
    free(steps);
}

// ---- the checkpoint sequence across the ranks

// How the ranks of a run meet. write_state writes this rank's state file at path; write_model the
// model file (every rank calls it: the ranks gather the master weights, rank 0 writes path); max
// returns the largest v of all ranks (every rank calls it, waiting for the slowest rank's file I/O;
// with v 0 it is a barrier). train_llama_fp8.cu fills it with NCCL collectives,
// the host test with stand-in processes.
typedef struct {
    void *ctx;
    int rank, world;
    void (*write_state)(void *ctx, const char *path);
    void (*write_model)(void *ctx, const char *path);
    long long (*max)(void *ctx, long long v);
} CheckpointRanks;

// NULL if the file system of `dir` has room for `need` more bytes, else the problem (in msg).
static const char *checkpoint_space_problem(const char *dir, unsigned long long need, char *msg, size_t n) {
    struct statvfs v;
    if (statvfs(dir, &v) != 0) { snprintf(msg, n, "cannot query the free space of '%s': %s", dir, strerror(errno)); return msg; }
    unsigned long long have = (unsigned long long)v.f_bavail * v.f_frsize;
    if (have >= need) return NULL;
    snprintf(msg, n, "the disk of '%s' has %llu bytes (%.2f GB) free, the checkpoint needs %llu (%.2f GB): not writing it, the previous"
             " checkpoint is kept. Free space there (-keep K keeps only the K newest checkpoints)", dir, have, have / 1e9, need, need / 1e9);
    return msg;
}

// The checkpoint of `step` of run `run`, `need` bytes in all (every rank's files), complete on every
// rank when it returns; then (-keep K) the older ones go. Refused on every rank alike, before anything
// is written, when a rank's disk has no room for it. Each rank's files stay marked unfinished (removed
// if the process ends) until the marker is written; rank 0 writes the marker once every rank has its
// files in place, and prunes after it.
static void checkpoint_sequence(const CheckpointRanks *r, const char *dir, int step, uint64_t run, int keep, unsigned long long need) {
    char model[1100], state[1100], done[1100], problem[1400], text[64];
    checkpoint_path(model, sizeof(model), dir, CKPT_MODEL, step, 0);
    checkpoint_path(state, sizeof(state), dir, CKPT_STATE, step, r->rank);
    checkpoint_path(done, sizeof(done), dir, CKPT_DONE, step, 0);
    // a checkpoint of this step already there (one -y 1 passed over, now written again) goes, its
    // marker first, before any file of the new one lands: the agreement below waits for it
    if (r->rank == 0) checkpoint_remove(dir, step, "rewriting a checkpoint");
    const char *space = checkpoint_space_problem(dir, need, problem, sizeof(problem));
    if (r->max(r->ctx, space != NULL)) {
        if (space) FATAL("checkpoint of step %d: %s", step, space);
        FATAL("checkpoint of step %d: another rank's disk has no room for it (its message says how much); the previous checkpoint is kept", step);
    }
    // the state file first; with several GPUs rank 0 writes the model file after the gather, which no
    // rank joins before it has written its own state file
    r->write_state(r->ctx, state);
    stop_signal_unfinished(state, done);
    r->write_model(r->ctx, model);
    if (r->rank == 0) stop_signal_unfinished(model, done);
    r->max(r->ctx, 0); // every rank's files are in place
    if (r->rank == 0) {
        snprintf(text, sizeof(text), "run %016llx ranks %d\n", (unsigned long long)run, r->world);
        write_small_file(dir, done, text);
    }
    r->max(r->ctx, 0); // the marker is written: no rank's files are unfinished any more
    stop_signal_unfinished(NULL, NULL);
    if (r->rank == 0) checkpoint_prune(dir, run, keep, step);
}

// ---- choosing the checkpoint to resume

// What is wrong with checkpoint file `path` for run `run` (NULL: nothing; else in msg): missing,
// shorter than its header, not of `magic`, of an unknown version, of another run, or its checksum.
// Reads the whole file, so a corrupt one is found before anything is loaded onto a GPU.
static const char *checkpoint_file_problem(const char *path, int magic, uint64_t run, char *msg, size_t n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) { snprintf(msg, n, "'%s': %s", path, strerror(errno)); return msg; }
    int32_t h[MODEL_HEADER_INTS];
    const char *bad = NULL;
    if (fread(h, sizeof(int32_t), MODEL_HEADER_INTS, f) != MODEL_HEADER_INTS) bad = "is shorter than its header";
    else if (h[0] != magic) bad = magic == MODEL_MAGIC ? "is not a model file (its magic)" : "is not a state file (its magic)";
    else if (h[1] < 1 || h[1] > MODEL_VERSION) bad = "has a version this build does not read";
    else if (header_run_id(h) != run) {
        snprintf(msg, n, "'%s' belongs to run %016llx, not to this run %016llx (files of two runs mixed in one directory?)", path,
                 (unsigned long long)header_run_id(h), (unsigned long long)run);
        fclose(f);
        return msg;
    } else {
        size_t chunk = (size_t)4 << 20, got;
        char *buf = (char *)mallocCheck(chunk);
        uint64_t sum = checksum_of_header(h);
        while ((got = fread(buf, 1, chunk, f)) > 0) sum = checksum_of_version(h[1])(sum, buf, got);
        free(buf);
        if (ferror(f)) bad = "cannot be read";
        else if (sum != header_checksum_word(h)) bad = "is corrupt (checksum mismatch)";
    }
    fclose(f);
    if (bad) snprintf(msg, n, "'%s' %s", path, bad);
    return bad ? msg : NULL;
}

// What keeps this rank of `world` from resuming the checkpoint of `step` (NULL: nothing): rank 0 checks
// the marker's every state file is there and the model file; every rank the state files rank, rank +
// world, ...: its own where the checkpoint has this number of GPUs, and between them all the files of
// another number (a resume on another number of GPUs reads parts of each: llmc/reshard.h).
static const char *checkpoint_rank_problem(const char *dir, int step, uint64_t run, int rank, int world, char *msg, size_t n) {
    char model[1100], state[1100];
    uint64_t id;
    int ranks;
    if (!checkpoint_done_read(dir, step, &id, &ranks)) { snprintf(msg, n, "its completion marker is gone"); return msg; }
    for (int r = 0; rank == 0 && r < ranks; r++) {
        checkpoint_path(state, sizeof(state), dir, CKPT_STATE, step, r);
        if (access(state, F_OK) != 0) { snprintf(msg, n, "'%s' (of its %d ranks): %s", state, ranks, strerror(errno)); return msg; }
    }
    checkpoint_path(model, sizeof(model), dir, CKPT_MODEL, step, 0);
    if (rank == 0 && checkpoint_file_problem(model, MODEL_MAGIC, run, msg, n)) return msg;
    for (int r = rank; r < ranks; r += world) {
        checkpoint_path(state, sizeof(state), dir, CKPT_STATE, step, r);
        if (checkpoint_file_problem(state, STATE_MAGIC, run, msg, n)) return msg;
    }
    return NULL;
}

// The step to resume run `run` from: the newest complete checkpoint in dir whose files verify on every
// rank, or -1 if the run has none. One that does not is passed over, each rank naming its own file's
// problem on stderr and the main rank the step it tries next; when none does, the run is refused
// rather than started over.
static int checkpoint_pick(const CheckpointRanks *r, const char *dir, uint64_t run) {
    int *steps, n = checkpoint_complete_steps(dir, run, &steps), picked = -1;
    if (r->max(r->ctx, n) != -r->max(r->ctx, -n))
        FATAL("the ranks see different checkpoints in '%s' (this rank %d): do all ranks see the same -o directory?", dir, n);
    for (int i = 0; i < n && picked < 0; i++) {
        char msg[1400];
        const char *problem = checkpoint_rank_problem(dir, steps[i], run, r->rank, r->world, msg, sizeof(msg));
        if (problem) fprintf(stderr, "-y 1: rank %d cannot resume the checkpoint of step %d: %s\n", r->rank, steps[i], problem);
        if (!r->max(r->ctx, problem != NULL)) picked = steps[i];
        else if (r->rank == 0)
            printf("-y 1: passing over the checkpoint of step %d (it stays in '%s' for you to look at); %s\n", steps[i], dir,
                   i + 1 < n ? "trying the one before it" : "no older one is left");
    }
    free(steps);
    if (n > 0 && picked < 0)
        FATAL("-y 1: none of the %d complete checkpoints of this run in '%s' can be resumed (each problem is named above): not starting"
              " the run over. Move them away to start it from its beginning", n, dir);
    return picked;
}

#endif // LLMC_CHECKPOINT_H
