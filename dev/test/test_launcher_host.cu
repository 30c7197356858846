/*
Host-only tests of the -ngpu launcher (llmc/launcher.h) and the stop signals (llmc/stop_signal.h):
the launch decision, the stop signals blocked in every thread, and the real launcher, mg_launch_ranks,
with stand-in ranks (this program run again, taking the signals as the trainer does).
Build and run: make dev/test/test_launcher_host && ./dev/test/test_launcher_host
*/
#define TESTING
#include "train_llama_fp8.cu" // mg_launch_ranks, mg_start_of, stop_signal_install, stop_report (the trainer's stop line)
#include <signal.h>
#include <pthread.h>
#include "dev/test/harness.h" // CHECK, run_test, run_expect_fatal

static char g_dir[64];

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

// ---- stop signals in every thread (issue 30.11)
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

// ---- the -ngpu launcher and its ranks under stop signals (issues 30.2 and 30.5)
#define STAND_IN_FLAG "--stand-in-rank"

// A stand-in rank: this program, started by the real mg_launch_ranks as a trainer rank is. It takes
// the stop signals as the trainer does (stop_signal_install, first thing in main), says it is ready,
// "trains" until a stop arrives, then prints the trainer's stop line and exits with the trainer's
// status (stop_report: with mode "nodir", as -o ''). Mode "slow": its stop checkpoint never finishes
// (a partial file, then 30 s), so only a second signal ends it, removing the file.
static void stand_in_rank(const char *mode, const char *dir) {
    stop_signal_install();
    int rank = atoi(getenv("LLAMA_FP8_RANK"));
    char path[600];
    snprintf(path, sizeof(path), "%s/ready_%d", dir, rank);
    touch(path);
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

typedef struct { const char *mode, *dir; int world; } LauncherArgs;

static void launcher_child(const LauncherArgs *a) {
    char out[600];
    snprintf(out, sizeof(out), "%s/out.txt", a->dir);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    char *argv[] = {(char *)"test_trainer_host", (char *)STAND_IN_FLAG, (char *)a->mode, (char *)a->dir, NULL};
    mg_launch_ranks(a->world, argv);
}

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

// Starts the launcher with `world` stand-in ranks, sends it sigs (the second once every rank is
// saving), and returns its exit status (256 + signal if a signal ended it, -1 if it did not end
// within wait_s seconds: then it is killed); out: what it and its ranks printed.
static int launch_and_signal(const char *mode, int world, const int *sigs, int nsigs, double wait_s, char *out, size_t outlen, const char *tag) {
    char dir[200];
    snprintf(dir, sizeof(dir), "%s/launch_%s", g_dir, tag);
    mkdir(dir, 0755);
    LauncherArgs a = {mode, dir, world};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) launcher_child(&a);
    int status = -1;
    if (wait_for_files(dir, "ready", world)) {
        kill(pid, sigs[0]);
        if (nsigs > 1 && wait_for_files(dir, "saving", world)) kill(pid, sigs[1]);
    }
    int st = 0, done = 0;
    for (int t = 0; t < (int)(wait_s * 100) && !done; t++) {
        if (waitpid(pid, &st, WNOHANG) == pid) done = 1;
        else usleep(10000);
    }
    if (!done) { kill(pid, SIGKILL); waitpid(pid, &st, 0); }
    else status = WIFEXITED(st) ? WEXITSTATUS(st) : 256 + WTERMSIG(st);
    usleep(100000); // ranks killed with the launcher (PR_SET_PDEATHSIG) may still be printing
    char path[300];
    snprintf(path, sizeof(path), "%s/out.txt", dir);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    return status;
}

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static void test_launcher_signals(void) {
    static char out[16384];
    struct { int sig; const char *name; } stops[] = {{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}, {SIGHUP, "SIGHUP"}, {SIGUSR1, "SIGUSR1"}};
    for (int i = 0; i < 4; i++) {
        // one stop signal to the launcher: every rank stops under that signal's name, with a checkpoint: exit 0
        char want[64], tag[32];
        snprintf(want, sizeof(want), "stopped by %s after step 3 of 10. To continue", stops[i].name);
        snprintf(tag, sizeof(tag), "stop_%s", stops[i].name);
        int status = launch_and_signal("dir", 2, &stops[i].sig, 1, 20.0, out, sizeof(out), tag);
        CHECK(status == 0 && count_of(out, want) == 2 && !strstr(out, "second signal"),
              "%s to the launcher: exit %d (want 0), %d ranks said '%s':\n%s", stops[i].name, status, count_of(out, want), want, out);
        // without a log directory nothing is saved: exit 128 + signal, from every rank and the launcher
        snprintf(want, sizeof(want), "stopped by %s after step 3 of 10: no checkpoint written", stops[i].name);
        snprintf(tag, sizeof(tag), "nodir_%s", stops[i].name);
        status = launch_and_signal("nodir", 2, &stops[i].sig, 1, 20.0, out, sizeof(out), tag);
        CHECK(status == 128 + stops[i].sig && count_of(out, want) == 2 && !strstr(out, "second signal") && !strstr(out, "exited with status"),
              "%s to the launcher, -o '': exit %d (want %d), %d ranks said '%s':\n%s", stops[i].name, status, 128 + stops[i].sig,
              count_of(out, want), want, out);
    }
    // SIGUSR2: exit now
    int usr2 = SIGUSR2;
    int status = launch_and_signal("dir", 2, &usr2, 1, 20.0, out, sizeof(out), "usr2");
    CHECK(status == 128 + SIGUSR2 && count_of(out, "second signal: exiting now") == 2, "SIGUSR2 to the launcher: exit %d (want %d):\n%s", status,
          128 + SIGUSR2, out);
    // a second SIGTERM (or SIGINT) while the ranks write their checkpoint: exit now, the partial files removed
    int twice[][2] = {{SIGTERM, SIGTERM}, {SIGINT, SIGINT}, {SIGUSR1, SIGHUP}};
    const char *tags[] = {"term_term", "int_int", "usr1_hup"};
    for (int i = 0; i < 3; i++) {
        // SIGUSR1 never counts as the second: SIGHUP after it is the first stop, so the slow ranks go on
        int expect_exit = i < 2;
        status = launch_and_signal("slow", 2, twice[i], 2, expect_exit ? 20.0 : 1.5, out, sizeof(out), tags[i]);
        char dir[200], partial[300];
        snprintf(dir, sizeof(dir), "%s/launch_%s", g_dir, tags[i]);
        snprintf(partial, sizeof(partial), "%s/state_0.bin.tmp", dir);
        int left = access(partial, F_OK) == 0;
        if (expect_exit)
            CHECK(status == 128 + twice[i][1] && count_of(out, "second signal: exiting now") == 2 && count_of(out, "removed the partial file") == 2 && !left,
                  "%s twice: exit %d (want %d), partial file %s:\n%s", tags[i], status, 128 + twice[i][1], left ? "left" : "removed", out);
        else
            CHECK(status == -1 && !strstr(out, "second signal"), "SIGUSR1 then SIGHUP: exit %d (want none within 1.5 s: the ranks still saving):\n%s",
                  status, out);
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], STAND_IN_FLAG) == 0) stand_in_rank(argv[2], argv[3]); // started by test_launcher_signals
    snprintf(g_dir, sizeof(g_dir), "/tmp/llama_fp8_launcher_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    run_test("launch: one MPI rank in the environment (srun -n 1) leaves -ngpu N to the launcher", test_launch_decision);
    run_test("stop signals: blocked in every thread started later, taken by the stop thread", test_signal_threads);
    run_test("-ngpu launcher: SIGTERM, SIGINT, SIGHUP, SIGUSR1 stop every rank by name; exit 0, or 128 + signal with -o ''; SIGUSR2 and a second signal exit now",
             test_launcher_signals);
    printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed);
    return g_tests_failed == 0 ? 0 : 1;
}
