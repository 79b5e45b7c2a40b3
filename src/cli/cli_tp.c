/* See cli_tp.h. */
#include "cli/cli_tp.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/options.h"
#include "dist/dist.h"
#include "model/tp_shard.h"
#include "model/config.h"

static long g_tp = 1;
static char g_threads_buf[24];
static char g_threads_flag[] = "--threads";

static bool takes(const char *cmd) {
    static const char *const cmds[] = {"generate",      "eval",   "bench",
                                       "bench-forward", "verify", "serve"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(cmd, cmds[i])) return true;
    return false;
}

/* "--name V", "--name=V" or the alias; removes it and returns its value, NULL if absent. */
static const char *take_opt(int *argc, char **argv, const char *name, const char *alias,
                            bool *bad) {
    const char *val = NULL;
    size_t nl = strlen(name);
    for (int i = 1; i < *argc; i++) {
        int drop = 0;
        const char *a = argv[i];
        if ((!strcmp(a, name) || (alias && !strcmp(a, alias)))) {
            if (i + 1 >= *argc) {
                *bad = true;
                return NULL;
            }
            val = argv[i + 1];
            drop = 2;
        } else if (!strncmp(a, name, nl) && a[nl] == '=') {
            val = a + nl + 1;
            drop = 1;
        }
        if (drop) {
            memmove(argv + i, argv + i + drop, (size_t)(*argc - i - drop + 1) * sizeof(char *));
            *argc -= drop;
            i--;
        }
    }
    return val;
}

static long parse_n(const char *flag, const char *v) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 1 || n > 4096) {
        fprintf(stderr, "cllm: %s '%s': expected an integer in [1, 4096]\n", flag, v);
        return -1;
    }
    return n;
}

/* The original command line from /proc/self/cmdline (global flags included). */
static char **self_cmdline(int *n) {
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = 0;
    int cnt = 0;
    for (size_t i = 0; i < len; i++) cnt += buf[i] == 0;
    char **v = calloc((size_t)cnt + 1, sizeof(char *));
    if (!v) return NULL;
    int k = 0;
    for (size_t i = 0; i < len && k < cnt; i += strlen(buf + i) + 1) v[k++] = buf + i;
    *n = k;
    return v;
}

/* `cllm serve` re-launched: mpirun turns a SIGTERM or SIGINT into killing the job at once, so
 * this process stays as mpirun's parent and turns them into SIGUSR1, which mpirun forwards to
 * every rank: rank 0 drains (as on SIGTERM) and ends the followers. mpirun runs in its own
 * process group so a terminal's Ctrl-C reaches only this process; a second SIGINT sends
 * SIGTERM (the job is ended now). Exits with mpirun's exit status (returns 1 if it cannot
 * start it). */
static int supervise(char **av) {
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGCHLD);
    sigprocmask(SIG_BLOCK, &sigs, &old);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "cllm serve: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp("mpirun", av);
        fprintf(stderr, "cllm serve: cannot run mpirun (%s); install openmpi-bin\n",
                strerror(errno));
        _exit(127);
    }
    int n_int = 0;
    for (;;) {
        int sig = 0, st = 0;
        if (sigwait(&sigs, &sig) != 0) continue;
        if (sig == SIGCHLD) {
            pid_t w = waitpid(pid, &st, WNOHANG);
            /* the command ran as the job: this process ends with it, like the exec path */
            if (w == pid) exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            continue;
        }
        if (sig == SIGHUP) continue;
        if (sig == SIGINT && ++n_int > 1) {
            kill(pid, SIGTERM);
            continue;
        }
        kill(pid, SIGUSR1);
    }
}

static int relaunch(const char *cmd, long tp) {
    int n = 0;
    char **orig = self_cmdline(&n);
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (!orig || n < 1 || el <= 0) {
        fprintf(stderr,
                "cllm: --tensor-parallel-size %ld: cannot read this process's command "
                "line to re-launch it through mpirun; start it as mpirun -np %ld cllm ...\n",
                tp, tp);
        return 1;
    }
    exe[el] = 0;
    char np[24];
    snprintf(np, sizeof(np), "%ld", tp);
    const char *extra = cli_opts()->mpirun_args;
    char *extra_copy = extra ? strdup(extra) : NULL;
    char **av = calloc((size_t)n + 64, sizeof(char *));
    if (!av) return 1;
    int k = 0;
    av[k++] = "mpirun";
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = "--oversubscribe";
    av[k++] = "--bind-to";
    av[k++] = "none";
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    for (char *t = extra_copy ? strtok(extra_copy, " \t") : NULL; t && k < 48;
         t = strtok(NULL, " \t"))
        av[k++] = t;
    av[k++] = exe;
    for (int i = 1; i < n; i++) av[k++] = orig[i];
    av[k] = NULL;
    fflush(NULL);
    if (!strcmp(cmd, "serve")) return supervise(av);
    execvp("mpirun", av);
    fprintf(stderr,
            "cllm: --tensor-parallel-size %ld: cannot run mpirun (%s); install openmpi-bin or "
            "start cllm under mpirun -np %ld\n",
            tp, strerror(errno), tp);
    return 1;
}

int cli_tp_setup(const char *cmd, int *argc, char ***argvp) {
    if (!takes(cmd)) return 0;
    /* a copy with room for the injected --threads */
    char **argv = calloc((size_t)*argc + 4, sizeof(char *));
    if (!argv) {
        fprintf(stderr, "cllm %s: out of memory\n", cmd);
        return 1;
    }
    memcpy(argv, *argvp, (size_t)*argc * sizeof(char *));
    *argvp = argv;
    bool bad = false;
    const char *tv = take_opt(argc, argv, "--tensor-parallel-size", "-tp", &bad);
    const char *pv = take_opt(argc, argv, "--pipeline-parallel-size", "-pp", &bad);
    if (bad) {
        fprintf(stderr, "cllm %s: --tensor-parallel-size / --pipeline-parallel-size need a value\n",
                cmd);
        return 2;
    }
    bool ep = false;
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], "--enable-expert-parallel") || !strcmp(argv[i], "-ep")) {
            ep = true;
            memmove(argv + i, argv + i + 1, (size_t)(*argc - i) * sizeof(char *));
            (*argc)--;
            i--;
        }
    cllm_dist_set_expert_parallel(ep);
    long tp = tv ? parse_n("--tensor-parallel-size", tv) : 1;
    long pp = pv ? parse_n("--pipeline-parallel-size", pv) : 1;
    if (tp < 0 || pp < 0) return 2;
    if (pp != 1) {
        fprintf(stderr,
                "cllm %s: --pipeline-parallel-size %ld: pipeline parallelism is not supported "
                "(use --pipeline-parallel-size 1; --tensor-parallel-size splits the model)\n",
                cmd, pp);
        return 2;
    }
    g_tp = tp;
    if (!strcmp(cmd, "verify")) return 0; /* only prints the per-rank bytes (cli_tp_finish) */
    if (tp == 1) {
        if (cllm_dist_launched() && cllm_dist_launched_size() > 1) {
            fprintf(stderr,
                    "cllm %s: started by mpirun with %d ranks but --tensor-parallel-size is 1 "
                    "(pass --tensor-parallel-size %d)\n",
                    cmd, cllm_dist_launched_size(), cllm_dist_launched_size());
            return 2;
        }
        return 0;
    }
    if (strcmp(cllm_dist_impl(), "mpi") != 0) {
        fprintf(stderr,
                "cllm %s: --tensor-parallel-size %ld: this cllm was built without MPI "
                "(-DCLLM_MPI=OFF; apt install libopenmpi-dev and rebuild)\n",
                cmd, tp);
        return 2;
    }
    if (!cllm_dist_launched()) return relaunch(cmd, tp);
    if (cllm_dist_launched_size() != tp) {
        fprintf(stderr,
                "cllm %s: --tensor-parallel-size %ld but mpirun started %d ranks (use mpirun -np "
                "%ld)\n",
                cmd, tp, cllm_dist_launched_size(), tp);
        return 2;
    }
    if (!strcmp(cmd, "serve")) {
        /* MPI starts threads of its own in init: they must inherit these blocked, else a
         * signal cmd_serve waits for (rank 0) or ignores (the others) is delivered to one of
         * them and its default action ends the rank */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGHUP);
        sigaddset(&sigs, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    }
    cllm_error err = {0};
    if (cllm_dist_init(&cli_opts()->dist, &err) != CLLM_OK) {
        fprintf(stderr, "cllm %s: %s\n", cmd, err.msg);
        return 1;
    }
    if (cllm_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    bool has_threads = false;
    for (int i = 1; i < *argc; i++)
        has_threads |= !strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t") ||
                       !strncmp(argv[i], "--threads=", 10);
    if (!has_threads && strcmp(cmd, "eval") != 0) { /* eval defaults to 1 thread already */
        long per = sysconf(_SC_NPROCESSORS_ONLN) / tp;
        snprintf(g_threads_buf, sizeof(g_threads_buf), "%ld", per < 1 ? 1 : per);
        argv[(*argc)++] = g_threads_flag;
        argv[(*argc)++] = g_threads_buf;
        argv[*argc] = NULL;
    }
    return 0;
}

static void print_rank_bytes(const char *dir, long tp) {
    cllm_config c;
    cllm_error err = {0};
    if (cllm_config_load(dir, &c, &err) != CLLM_OK) {
        fprintf(stderr, "cllm verify: %s\n", err.msg);
        return;
    }
    printf("tensor parallel %ld%s (bf16 weights, text model without MTP/vision):\n", tp,
           cllm_dist_expert_parallel() ? ", expert parallel" : "");
    for (long r = 0; r < tp; r++) {
        cllm_shard s;
        if (cllm_shard_plan(&c, (int)r, (int)tp, 1, cllm_dist_expert_parallel(), &s, &err) !=
            CLLM_OK) {
            printf("  refused: %s\n", err.msg);
            break;
        }
        uint64_t tot, rep;
        cllm_shard_rank_bytes(&c, &s, 2, &tot, &rep);
        printf("  rank %ld: %.3f GB (%llu bytes; replicated %.3f GB)\n", r, tot / 1e9,
               (unsigned long long)tot, rep / 1e9);
    }
    cllm_config_free(&c);
}

/* Peak resident set of this process in kB (VmHWM), -1 if unknown. */
static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

/* One stderr line per rank: what tensor parallel cost in communication this run. */
static void print_stats(void) {
    cllm_dist_stats st;
    cllm_dist_stats_get(&st);
    fprintf(stderr,
            "tp rank %d/%d: all-reduce %llu calls, %.3f MB, %.3f s (%.1f us/call); all-gather "
            "%llu calls, %llu bytes (%.0f B/call), %.3f s (%.1f us/call)\n",
            cllm_dist_rank(), cllm_dist_size(), (unsigned long long)st.allreduce_calls,
            st.allreduce_bytes / 1e6, st.allreduce_seconds,
            st.allreduce_calls ? st.allreduce_seconds * 1e6 / (double)st.allreduce_calls : 0.0,
            (unsigned long long)st.allgather_calls, (unsigned long long)st.allgather_bytes,
            st.allgather_calls ? (double)st.allgather_bytes / (double)st.allgather_calls : 0.0,
            st.allgather_seconds,
            st.allgather_calls ? st.allgather_seconds * 1e6 / (double)st.allgather_calls : 0.0);
    /* the same collective alone: 1 token and a 64-token chunk of a 2048-wide hidden state */
    double t1 = cllm_dist_bench_allreduce(2048, 200),
           t64 = cllm_dist_bench_allreduce(2048 * 64, 20);
    fprintf(stderr, "tp rank %d/%d: peak RSS %.3f GB\n", cllm_dist_rank(), cllm_dist_size(),
            peak_rss_kb() / 1e6);
    fprintf(stderr,
            "tp rank %d/%d: all-reduce alone: 8 KB (1 token x 2048) %.1f us, 512 KB (64 tokens) "
            "%.1f us\n",
            cllm_dist_rank(), cllm_dist_size(), t1 * 1e6, t64 * 1e6);
    /* the lm_head's exchange per token: one (logit, id) pair per rank for greedy, 40 for top-k
     * 40, or the rank's slice of a 248320-token row when the sampler needs it whole */
    size_t row = (248320 + (size_t)cllm_dist_size() - 1) / (size_t)cllm_dist_size() * 4;
    double g1 = cllm_dist_bench_allgather(8, 200), g40 = cllm_dist_bench_allgather(320, 200),
           gr = cllm_dist_bench_allgather(row, 50);
    fprintf(stderr,
            "tp rank %d/%d: all-gather alone: 8 B/rank (greedy) %.1f us, 320 B/rank (top-40) "
            "%.1f us, %zu B/rank (a 248320-token row) %.1f us\n",
            cllm_dist_rank(), cllm_dist_size(), g1 * 1e6, g40 * 1e6, row, gr * 1e6);
}

int cli_tp_finish(const char *cmd, const char *model_dir, int rc) {
    if (cllm_dist_active() && cli_opts()->tp_stats) print_stats();
    if (!strcmp(cmd, "verify") && g_tp > 1 && model_dir && rc == 0)
        print_rank_bytes(model_dir, g_tp);
    if (cllm_dist_active() && rc != 0) {
        fflush(NULL);
        cllm_dist_abort(rc);
    }
    return rc;
}
