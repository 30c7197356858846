/*
Host-only tests of the -ngpu launcher (llmc/launcher.h) and the stop signals (llmc/stop_signal.h):
the launch decision; the stop signals blocked in every thread; SIGHUP ignored at start (nohup) kept
ignored; and the real launcher, mg_launch_ranks, with 1, 3 and 8 stand-in ranks (this program run
again, taking the signals as the trainer does): each stop signal, a second one, SIGUSR2, a hangup
under nohup, and a rank that fails (exits 1 or is killed): the launcher exits 1 naming the rank and
its status or signal, the others exit at once without a message of their own (their partial files
removed), so the failed rank's error is the one a user reads.
Build and run: make dev/test/test_launcher_host && ./dev/test/test_launcher_host
*/
#define TESTING
#include "train_llama_fp8.cu" // mg_launch_ranks, mg_start_of, stop_signal_install, stop_report (the trainer's stop line)
#include <signal.h>
#include <pthread.h>
#include <ftw.h>
#include "dev/test/harness.h" // CHECK, run_test, run_expect_fatal

static char g_dir[64]; // each launch's files and output (out.txt), kept when a test fails

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st; (void)type; (void)ftw;
    return remove(path);
}

static void touch(const char *path) {
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
}

static void test_launch_decision(void) {
    const char *vars[] = {"LLAMA_FP8_RANK", "LLAMA_FP8_WORLD", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (int i = 0; i < 5; i++) unsetenv(vars[i]);
    struct { const char *var, *value; int ngpu, start, world; } cases[] = {
        {NULL, NULL, 0, MG_START_SINGLE, 1}, {NULL, NULL, 4, MG_START_LAUNCHER, 4},
        {"PMI_SIZE", "1", 2, MG_START_LAUNCHER, 2},               // srun --mpi=pmi2 -n 1 ./train_llama_fp8 -ngpu 2
        {"OMPI_COMM_WORLD_SIZE", "1", 8, MG_START_LAUNCHER, 8},   // mpirun -np 1 ... -ngpu 8
        {"PMI_SIZE", "1", 0, MG_START_SINGLE, 1},
        {"PMI_SIZE", "4", 0, MG_START_MPI, 4}, {"MV2_COMM_WORLD_SIZE", "2", 2, MG_START_MPI, 2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].var) setenv(cases[i].var, cases[i].value, 1);
        int world = -1, start = mg_start_of(cases[i].ngpu, &world);
        CHECK(start == cases[i].start && world == cases[i].world && mg_planned_world(cases[i].ngpu) == cases[i].world,
              "%s=%s -ngpu %d: start %d with %d ranks, want %d with %d", cases[i].var ? cases[i].var : "(none)", cases[i].value ? cases[i].value : "",
              cases[i].ngpu, start, world, cases[i].start, cases[i].world);
        if (cases[i].var) unsetenv(cases[i].var);
    }
}

// The ranks on this host before any start (-check's host memory line for -adam_offload): an MPI
// launcher's local count, else every rank; a local count above the world is ignored.
static void test_local_world(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS",
                          "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"};
    struct { const char *size_var, *size, *local_var, *local; int ngpu, want; } cases[] = {
        {NULL, NULL, NULL, NULL, 0, 1}, {NULL, NULL, NULL, NULL, 4, 4},
        {"OMPI_COMM_WORLD_SIZE", "16", "OMPI_COMM_WORLD_LOCAL_SIZE", "8", 0, 8}, // mpirun over 2 nodes of 8
        {"PMI_SIZE", "8", "MPI_LOCALNRANKS", "4", 0, 4},                          // MPICH's Hydra
        {"MV2_COMM_WORLD_SIZE", "4", "MV2_COMM_WORLD_LOCAL_SIZE", "2", 0, 2},
        {"PMI_SIZE", "4", NULL, NULL, 0, 4},                                      // no local count: all here
        {"OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "9", 0, 4},   // nonsense: all here
        {"OMPI_COMM_WORLD_SIZE", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "1", 2, 2},   // mpirun -np 1 ... -ngpu 2
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int k = 0; k < 6; k++) unsetenv(vars[k]);
        if (cases[i].size_var) setenv(cases[i].size_var, cases[i].size, 1);
        if (cases[i].local_var) setenv(cases[i].local_var, cases[i].local, 1);
        int got = mg_planned_local_world(cases[i].ngpu);
        CHECK(got == cases[i].want, "%s=%s %s=%s -ngpu %d: %d ranks on this host, want %d", cases[i].size_var ? cases[i].size_var : "(none)",
              cases[i].size ? cases[i].size : "", cases[i].local_var ? cases[i].local_var : "(none)", cases[i].local ? cases[i].local : "",
              cases[i].ngpu, got, cases[i].want);
    }
    for (int k = 0; k < 6; k++) unsetenv(vars[k]);
}

// ---- stop signals in every thread (issue 30.11); SIGHUP ignored at start (issue 40.9)
static volatile int g_thread_unblocked = 0;

static void note_mask(void) {
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    for (int i = 0; i < NUM_STOP_SIGNALS; i++) if (!sigismember(&cur, STOP_SIGNALS[i])) g_thread_unblocked = 1;
}
static void *note_mask_thread(void *arg) { (void)arg; note_mask(); return NULL; }

// After stop_signal_install: a thread made later (as NCCL's and CUDA's are) and OpenMP's workers
// must have the stop signals blocked (else exit 2); a SIGTERM must still stop (else 3); then a
// SIGUSR2 carrying SIGHUP, as the launcher sends it, exits at once as SIGHUP would (129).
static void signal_threads_child(void *arg) {
    (void)arg;
    signal(SIGHUP, SIG_DFL); // as a terminal starts it, whatever started this suite (nohup leaves it ignored)
    stop_signal_install();
    pthread_t t;
    pthread_create(&t, NULL, note_mask_thread, NULL);
    pthread_join(t, NULL);
#pragma omp parallel num_threads(4)
    note_mask();
    if (g_thread_unblocked) { fprintf(stderr, "a thread started after stop_signal_install takes stop signals\n"); exit(2); }
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 500 && g_stop_signal == 0; i++) usleep(10000);
    if (g_stop_signal != SIGTERM) { fprintf(stderr, "SIGTERM did not stop: g_stop_signal %d\n", (int)g_stop_signal); exit(3); }
    union sigval v;
    v.sival_int = SIGHUP;
    sigqueue(getpid(), SIGUSR2, v);
    sleep(5);
    exit(4);
}

static void test_signal_threads(void) {
    char err[1024];
    int status = run_expect_fatal(signal_threads_child, NULL, err, sizeof(err));
    CHECK(status == 128 + SIGHUP, "exit %d, want %d (an exit now as SIGHUP): %s", status, 128 + SIGHUP, err);
}

// `nohup ./train_llama_fp8 ... &` starts the trainer with SIGHUP ignored: the hangup of a logout must
// not stop it, a SIGTERM still must. SIGHUP comes first: had it been taken, it would be the stop's
// signal and the SIGTERM after it a second signal (exit 143). Exit 2: the stop is not SIGTERM's.
static void sighup_ignored_child(void *arg) {
    (void)arg;
    signal(SIGHUP, SIG_IGN); // what nohup does before it execs the command
    stop_signal_install();
    kill(getpid(), SIGHUP);
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 500 && g_stop_signal == 0; i++) usleep(10000);
    if (g_stop_signal != SIGTERM) { fprintf(stderr, "stopped by %s, want SIGTERM (SIGHUP is ignored)\n", stop_signal_name(g_stop_signal)); exit(2); }
}

static void test_sighup_ignored_at_start(void) {
    char err[1024];
    int status = run_expect_fatal(sighup_ignored_child, NULL, err, sizeof(err));
    CHECK(status == 0 && err[0] == '\0', "SIGHUP ignored at start, then SIGHUP and SIGTERM: exit %d (want 0, stopped by SIGTERM): %s", status, err);
}

// ---- the -ngpu launcher and its ranks (issues 30.2, 30.5, 40.9, 41)
#define STAND_IN_FLAG "--stand-in-rank"

static int wait_for_files(const char *dir, const char *prefix, int world) {
    for (int t = 0; t < 1500; t++) {
        int n = 0;
        for (int r = 0; r < world; r++) {
            char path[600];
            snprintf(path, sizeof(path), "%s/%s_%d", dir, prefix, r);
            n += access(path, F_OK) == 0;
        }
        if (n == world) return 1;
        usleep(10000);
    }
    return 0;
}

// A stand-in rank: this program, started by the real mg_launch_ranks as a trainer rank is. It takes
// the stop signals as the trainer does (stop_signal_install, first thing in main), says it is ready,
// "trains" until a stop arrives, then prints the trainer's stop line and exits with the trainer's
// status (stop_report: with mode "nodir", as -o ''). Mode "slow": its stop checkpoint never finishes
// (a partial file, then 30 s), so only a second signal ends it, removing the file. Mode "fail-exit-R"
// or "fail-kill-R": once every rank is ready, rank R fails (prints an error and exits 1, or is killed
// by SIGKILL, as by the OOM killer) while the others are writing a checkpoint (a partial file).
static void stand_in_rank(const char *mode, const char *dir) {
    stop_signal_install();
    int rank = atoi(getenv("LLAMA_FP8_RANK")), world = atoi(getenv("LLAMA_FP8_WORLD")), failing = -1;
    char path[600], how[8] = "";
    sscanf(mode, "fail-%7[a-z]-%d", how, &failing);
    if (failing >= 0 && rank != failing) {
        snprintf(path, sizeof(path), "%s/state_%d.bin.tmp", dir, rank);
        touch(path);
        stop_signal_partial(path);
    }
    snprintf(path, sizeof(path), "%s/ready_%d", dir, rank);
    touch(path);
    if (rank == failing) {
        wait_for_files(dir, "ready", world);
        if (strcmp(how, "kill") == 0) kill(getpid(), SIGKILL);
        fprintf(stderr, "error: stand-in rank %d failed\n", rank);
        exit(EXIT_FAILURE);
    }
    for (int i = 0; i < 3000 && g_stop_signal == 0; i++) usleep(10000);
    if (g_stop_signal == 0) _exit(99);
    if (strcmp(mode, "slow") == 0) {
        snprintf(path, sizeof(path), "%s/state_%d.bin.tmp", dir, rank);
        touch(path);
        stop_signal_partial(path);
        snprintf(path, sizeof(path), "%s/saving_%d", dir, rank);
        touch(path);
        sleep(30);
        _exit(98);
    }
    exit(stop_report(g_stop_signal, 3, 10, dir, strcmp(mode, "nodir") != 0, 3, 1));
}

typedef struct { const char *mode, *dir; int world, hup_ignored; } LauncherArgs;

// The launcher as a user starts it: SIGHUP at its default (a terminal) or ignored (nohup); in a
// process group of its own, so that a hangup can reach it and its ranks together, as a logout's does.
static void launcher_child(const LauncherArgs *a) {
    char out[600];
    snprintf(out, sizeof(out), "%s/out.txt", a->dir);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    setpgid(0, 0);
    signal(SIGHUP, a->hup_ignored ? SIG_IGN : SIG_DFL);
    char *argv[] = {(char *)"test_launcher_host", (char *)STAND_IN_FLAG, (char *)a->mode, (char *)a->dir, NULL};
    mg_launch_ranks(a->world, argv);
}

// Starts the launcher with `world` stand-in ranks in g_dir/launch_TAG (dir: that path) and waits
// until every rank is ready. Returns the launcher's pid, also its process group's id.
static pid_t launcher_start(const char *mode, int world, int hup_ignored, const char *tag, char *dir, size_t dirlen) {
    snprintf(dir, dirlen, "%s/launch_%s", g_dir, tag);
    mkdir(dir, 0755);
    LauncherArgs a = {mode, dir, world, hup_ignored};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) launcher_child(&a);
    setpgid(pid, pid); // also here: the signals below may come before the child's own setpgid
    CHECK(wait_for_files(dir, "ready", world), "%s: not every one of %d ranks got ready", tag, world);
    return pid;
}

// Waits up to wait_s seconds for the launcher; returns its exit status (256 + signal if a signal
// ended it, -1 if it did not end: then it and its ranks are killed); out: what it and its ranks printed.
static int launcher_end(pid_t pid, const char *dir, double wait_s, char *out, size_t outlen) {
    int st = 0, done = 0, status = -1;
    for (int t = 0; t < (int)(wait_s * 100) && !done; t++) {
        if (waitpid(pid, &st, WNOHANG) == pid) done = 1;
        else usleep(10000);
    }
    if (!done) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        usleep(100000); // the ranks, killed with it, may still be printing
    } else {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 256 + WTERMSIG(st);
    }
    char path[300];
    snprintf(path, sizeof(path), "%s/out.txt", dir);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    return status;
}

// Starts the launcher, sends it sigs (the second once every rank is saving) and ends it (launcher_end).
static int launch_and_signal(const char *mode, int world, const int *sigs, int nsigs, double wait_s, char *out, size_t outlen, const char *tag) {
    char dir[200];
    pid_t pid = launcher_start(mode, world, 0, tag, dir, sizeof(dir));
    kill(pid, sigs[0]);
    if (nsigs > 1 && wait_for_files(dir, "saving", world)) kill(pid, sigs[1]);
    return launcher_end(pid, dir, wait_s, out, outlen);
}

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static const int WORLDS[] = {1, 3, 8};

static void test_launcher_signals(void) {
    static char out[16384];
    struct { int sig; const char *name; } stops[] = {{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}, {SIGHUP, "SIGHUP"}, {SIGUSR1, "SIGUSR1"}};
    for (int i = 0; i < 4; i++) {
        // one stop signal to the launcher: every rank stops under that signal's name, with a checkpoint: exit 0
        int world = WORLDS[i % 3];
        char want[64], tag[32];
        snprintf(want, sizeof(want), "stopped by %s after step 3 of 10. To continue", stops[i].name);
        snprintf(tag, sizeof(tag), "stop_%s", stops[i].name);
        int status = launch_and_signal("dir", world, &stops[i].sig, 1, 20.0, out, sizeof(out), tag);
        CHECK(status == 0 && count_of(out, want) == world && !strstr(out, "second signal"),
              "%s to the launcher of %d ranks: exit %d (want 0), %d ranks said '%s':\n%s", stops[i].name, world, status, count_of(out, want), want, out);
        // without a log directory nothing is saved: exit 128 + signal, from every rank and the launcher
        world = WORLDS[(i + 1) % 3];
        snprintf(want, sizeof(want), "stopped by %s after step 3 of 10: no checkpoint written", stops[i].name);
        snprintf(tag, sizeof(tag), "nodir_%s", stops[i].name);
        status = launch_and_signal("nodir", world, &stops[i].sig, 1, 20.0, out, sizeof(out), tag);
        CHECK(status == 128 + stops[i].sig && count_of(out, want) == world && !strstr(out, "second signal") && !strstr(out, "exited with status"),
              "%s to the launcher of %d ranks, -o '': exit %d (want %d), %d ranks said '%s':\n%s", stops[i].name, world, status, 128 + stops[i].sig,
              count_of(out, want), want, out);
    }
    // SIGUSR2: exit now
    int usr2 = SIGUSR2;
    int status = launch_and_signal("dir", 8, &usr2, 1, 20.0, out, sizeof(out), "usr2");
    CHECK(status == 128 + SIGUSR2 && count_of(out, "second signal: exiting now") == 8, "SIGUSR2 to the launcher of 8 ranks: exit %d (want %d):\n%s",
          status, 128 + SIGUSR2, out);
    // a second SIGTERM (or SIGINT) while the ranks write their checkpoint: exit now, the partial files removed
    int twice[][2] = {{SIGTERM, SIGTERM}, {SIGINT, SIGINT}, {SIGUSR1, SIGHUP}};
    const char *tags[] = {"term_term", "int_int", "usr1_hup"};
    for (int i = 0; i < 3; i++) {
        // SIGUSR1 never counts as the second: SIGHUP after it is the first stop, so the slow ranks go on
        int world = WORLDS[i], expect_exit = i < 2;
        status = launch_and_signal("slow", world, twice[i], 2, expect_exit ? 20.0 : 1.5, out, sizeof(out), tags[i]);
        char partial[300];
        snprintf(partial, sizeof(partial), "%s/launch_%s/state_%d.bin.tmp", g_dir, tags[i], world - 1);
        int left = access(partial, F_OK) == 0;
        if (expect_exit)
            CHECK(status == 128 + twice[i][1] && count_of(out, "second signal: exiting now") == world && count_of(out, "removed the partial file") == world
                  && !left, "%s twice to the launcher of %d ranks: exit %d (want %d), the last rank's partial file %s:\n%s", tags[i], world, status,
                  128 + twice[i][1], left ? "left" : "removed", out);
        else
            CHECK(status == -1 && !strstr(out, "second signal"), "SIGUSR1 then SIGHUP to the launcher of %d ranks: exit %d (want none within 1.5 s: the ranks still saving):\n%s",
                  world, status, out);
    }
}

// nohup ./train_llama_fp8 -ngpu N ... &, then a logout: the hangup reaches the launcher and every rank
// (here: its process group), and must stop none of them; a SIGTERM after it stops the run as usual
// (had the hangup been taken, it would be the stop's signal, and the SIGTERM the launcher's second).
// Without nohup the same hangup alone stops every rank once, by SIGHUP, with a checkpoint.
static void test_launcher_nohup(void) {
    static char out[16384];
    struct { int world, hup_ignored; const char *stop; } cases[] = {{1, 1, "SIGTERM"}, {8, 1, "SIGTERM"}, {3, 0, "SIGHUP"}};
    for (int i = 0; i < 3; i++) {
        char dir[200], tag[32], want[80];
        snprintf(tag, sizeof(tag), "hangup_%d_%d", cases[i].world, cases[i].hup_ignored);
        pid_t pid = launcher_start("dir", cases[i].world, cases[i].hup_ignored, tag, dir, sizeof(dir));
        kill(-pid, SIGHUP);
        if (cases[i].hup_ignored) kill(pid, SIGTERM);
        int status = launcher_end(pid, dir, 20.0, out, sizeof(out));
        snprintf(want, sizeof(want), "stopped by %s after step 3 of 10. To continue", cases[i].stop);
        CHECK(status == 0 && count_of(out, want) == cases[i].world && count_of(out, "stopped by") == cases[i].world && !strstr(out, "second signal"),
              "%d ranks, SIGHUP %s: a hangup to all%s: exit %d (want 0), %d ranks said '%s':\n%s", cases[i].world,
              cases[i].hup_ignored ? "ignored at start" : "at its default", cases[i].hup_ignored ? ", then SIGTERM to the launcher" : "", status,
              count_of(out, want), want, out);
    }
}

// Whether every line of text starts with one of the prefixes; else names the first that does not.
static int lines_all_of(const char *text, const char *const *prefixes, int n, char *bad, size_t badlen) {
    for (const char *line = text; *line; ) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        int known = 0;
        for (int k = 0; k < n; k++) known |= strncmp(line, prefixes[k], strlen(prefixes[k])) == 0 && len >= strlen(prefixes[k]);
        if (!known) { snprintf(bad, badlen, "%.*s", (int)len, line); return 0; }
        line += len + (end != NULL);
    }
    return 1;
}

// A rank fails (exits 1, or is killed as by the OOM killer) while the others write a checkpoint: the
// launcher must exit 1 naming the rank and its status or signal, and stop the others at once (SIGUSR2,
// no checkpoint: they could not finish one without the failed rank); they remove their partial files
// and say nothing of their own, so the failed rank's error is the one a user reads.
static void test_launcher_rank_fails(void) {
    static char out[16384];
    struct { int world, rank; const char *how; } cases[] = {{1, 0, "exit"}, {1, 0, "kill"}, {3, 1, "exit"}, {3, 2, "kill"}, {8, 7, "exit"}, {8, 0, "kill"}};
    for (int i = 0; i < 6; i++) {
        int world = cases[i].world, r = cases[i].rank, killed = strcmp(cases[i].how, "kill") == 0;
        char dir[200], tag[32], mode[32], said[96], error[64];
        snprintf(tag, sizeof(tag), "fail_%s_%d_of_%d", cases[i].how, r, world);
        snprintf(mode, sizeof(mode), "fail-%s-%d", cases[i].how, r);
        pid_t pid = launcher_start(mode, world, 0, tag, dir, sizeof(dir));
        // before the launcher's SIGKILL of the ranks that did not stop
        int status = launcher_end(pid, dir, MG_KILL_GRACE_S - 1.0, out, sizeof(out));
        if (killed) snprintf(said, sizeof(said), "multi-GPU launcher: rank %d was killed by signal %d", r, SIGKILL);
        else snprintf(said, sizeof(said), "multi-GPU launcher: rank %d exited with status 1 after", r);
        snprintf(error, sizeof(error), "error: stand-in rank %d failed", r);
        int left = 0;
        for (int k = 0; k < world; k++) {
            char partial[300];
            snprintf(partial, sizeof(partial), "%s/state_%d.bin.tmp", dir, k);
            left += k != r && access(partial, F_OK) == 0;
        }
        const char *allowed[] = {"multi-GPU: starting ", said, "multi-GPU launcher: all ", "removed the partial file ", error};
        char bad[256] = "(none)";
        CHECK(status == 1 && count_of(out, said) == 1 && count_of(out, error) == !killed && left == 0 && count_of(out, "removed the partial file") == world - 1
              && lines_all_of(out, allowed, 5, bad, sizeof(bad)),
              "rank %d of %d %s: launcher exit %d (want 1), a line not expected: '%s', '%s' said %d times (want once), %d partial files left:\n%s",
              r, world, killed ? "killed by SIGKILL" : "exits 1", status, bad, said, count_of(out, said), left, out);
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], STAND_IN_FLAG) == 0) stand_in_rank(argv[2], argv[3]); // started by mg_launch_ranks here
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_launcher_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    run_test("launch: one MPI rank in the environment (srun -n 1) leaves -ngpu N to the launcher", test_launch_decision);
    run_test("launch: the ranks on this host before the start (an MPI launcher's local count, else all)", test_local_world);
    run_test("stop signals: blocked in every thread started later, taken by the stop thread", test_signal_threads);
    run_test("stop signals: SIGHUP ignored at start (nohup) stays ignored, SIGTERM still stops", test_sighup_ignored_at_start);
    run_test("-ngpu launcher (1, 3, 8 ranks): SIGTERM, SIGINT, SIGHUP, SIGUSR1 stop every rank by name; exit 0, or 128 + signal with -o ''; SIGUSR2 and a second signal exit now",
             test_launcher_signals);
    run_test("-ngpu launcher (1, 3, 8 ranks) under nohup: a hangup to every process stops none; without nohup it stops all once", test_launcher_nohup);
    run_test("-ngpu launcher (1, 3, 8 ranks): a rank that exits 1 or is killed ends the job with exit 1, naming it; the others stop quietly at once",
             test_launcher_rank_fails);
    if (g_tests_failed == 0) nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    else printf("the launches' files and output are in %s\n", g_dir);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
