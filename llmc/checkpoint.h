/*
Checkpoint names in the log directory and the directory-level operations on them: the files of
step S are model_SSSSSSSS.bin and state_SSSSSSSS_RRRRR.bin (one per rank); which complete
checkpoints a directory holds, the latest one, and -keep's pruning. What the files hold is
train_llama_fp8.cu's (write_sections, state_fields).
Plain C, header-only; also compiles as C++ under nvcc.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void checkpoint_paths(const char *dir, int step, int rank, char *model_path, char *state_path) {
    snprintf(model_path, 1024, "%s/model_%08d.bin", dir, step);
    snprintf(state_path, 1024, "%s/state_%08d_%05d.bin", dir, step, rank);
}

// The steps of dir's complete checkpoints (a model file, written last), newest first, at most max.
static int checkpoint_steps(const char *dir, int *steps, int max) {
    char pattern[1100], want_model[1024], want_state[1024];
    snprintf(pattern, sizeof(pattern), "%s/model_*.bin", dir);
    glob_t g;
    int n = 0;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc && n < max; i++) {
        int step;
        const char *base = strrchr(g.gl_pathv[i], '/');
        if (sscanf(base ? base + 1 : g.gl_pathv[i], "model_%d.bin", &step) != 1 || step < 0) continue;
        checkpoint_paths(dir, step, 0, want_model, want_state);
        if (strcmp(want_model, g.gl_pathv[i]) == 0) steps[n++] = step; // not e.g. a user's model_best.bin
    }
    globfree(&g);
    for (int i = 1; i < n; i++) // newest first
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) { int t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t; }
    return n;
}

// -keep K: once the checkpoint of step `newest` is complete on every rank, removes from dir the
// checkpoints older than it beyond the K - 1 newest of those: this rank's state files of those steps
// (of unfinished checkpoints too), and on rank 0 the model files. Checkpoints of later steps (another
// run's) are left alone. Every rank sees the same kept steps (only older files go), so they agree.
static void prune_checkpoints(const char *dir, int keep, int rank, int newest) {
    static int steps[100000];
    if (keep <= 0) return;
    int n = checkpoint_steps(dir, steps, 100000), kept = 1, oldest_kept = newest;
    char pattern[1100], model_path[1024], state_path[1024];
    for (int i = 0; i < n; i++) {
        if (steps[i] >= newest) continue;
        if (kept < keep) { kept++; oldest_kept = steps[i]; continue; }
        checkpoint_paths(dir, steps[i], 0, model_path, state_path);
        if (rank == 0 && unlink(model_path) != 0) fprintf(stderr, "warning: -keep %d: cannot remove '%s': %s\n", keep, model_path, strerror(errno));
    }
    snprintf(pattern, sizeof(pattern), "%s/state_*_%05d.bin", dir, rank);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        int step, r;
        const char *base = strrchr(g.gl_pathv[i], '/');
        if (sscanf(base ? base + 1 : g.gl_pathv[i], "state_%d_%d.bin", &step, &r) != 2 || step >= oldest_kept) continue;
        checkpoint_paths(dir, step, rank, model_path, state_path);
        if (strcmp(state_path, g.gl_pathv[i]) == 0 && unlink(state_path) != 0)
            fprintf(stderr, "warning: -keep %d: cannot remove '%s': %s\n", keep, state_path, strerror(errno));
    }
    globfree(&g);
}

// The latest step with both a model and a rank-0 state file in dir, or -1.
static int latest_checkpoint(const char *dir) {
    int best = -1;
    char model_path[1024], state_path[1024], cmd[1200];
    glob_t g;
    snprintf(cmd, sizeof(cmd), "%s/state_*_00000.bin", dir);
    if (glob(cmd, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int step;
            const char *base = strrchr(g.gl_pathv[i], '/');
            if (sscanf(base ? base + 1 : g.gl_pathv[i], "state_%d_00000.bin", &step) != 1) continue;
            checkpoint_paths(dir, step, 0, model_path, state_path);
            if (access(model_path, R_OK) == 0 && step > best) best = step;
        }
        globfree(&g);
    }
    return best;
}

#endif // LLMC_CHECKPOINT_H
