/* dist.h over MPI (OpenMPI 4.1): MPI_COMM_WORLD, one rank per process. */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "dist/dist.h"
#include "dist/dist_int.h"

static bool inited;
static int g_rank, g_size = 1;
/* all-reduce scratch: [size][chunk] to send and receive */
static float *ar_send, *ar_recv;
static size_t ar_cap;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Faults. Every collective is started non-blocking and waited for here (wait_req), so a wait
 * can end without the peers: it returns CLLM_EIO once this process has declared a failure, and
 * declares one itself when it has waited longer than CLLM_TP_TIMEOUT_S (default 60; 0 = off)
 * for a peer that stopped, hung or livelocked. A monitor thread also declares one within
 * ~0.2 s when a peer on this host exits (its /proc entry is gone or a zombie): mpirun ends the
 * job about a second after a rank dies, which leaves the server on rank 0 that second to
 * answer its requests with 503 instead of dropping their connections. After a failure every
 * collective returns CLLM_EIO at once; the caller ends (cli_tp_finish aborts the job), and if
 * it has not within FAIL_EXIT_S the monitor exits the process with 124 (a bound, whatever the
 * caller does). Ranks compute the same work between collectives, so a legitimate timed wait
 * is load imbalance (short); the idle wait of a server follower for its next step is untimed. */
static int wd_timeout_s = 60;
#define FAIL_EXIT_S 10
static _Atomic int g_failed;
static char g_fail_msg[256];
static double g_fail_t;
static void (*g_fail_hook)(const char *msg);
static _Atomic long long g_finalizing_ms; /* MPI_Finalize under way since (0 = not) */
/* peers on this host, by pid (-1 elsewhere) */
static int *peer_pid;
static pid_t g_ppid; /* the launcher (mpirun or its daemon) that started this rank */

static void declare_failure(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void declare_failure(const char *fmt, ...) {
    int exp = 0;
    if (!atomic_compare_exchange_strong(&g_failed, &exp, 1)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_fail_msg, sizeof(g_fail_msg), fmt, ap);
    va_end(ap);
    g_fail_t = now_s();
    atomic_store(&g_failed, 2); /* message complete */
    fprintf(stderr, "cllm: rank %d: %s\n", g_rank, g_fail_msg);
    if (g_fail_hook) g_fail_hook(g_fail_msg);
}

const char *cllm_dist_failure(void) {
    return atomic_load(&g_failed) == 2 ? g_fail_msg : NULL;
}

void cllm_dist_on_failure(void (*fn)(const char *msg)) {
    g_fail_hook = fn;
}

/* 'Z'/'X' state or no /proc entry: the process has ended. */
static bool pid_gone(int pid) {
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static void *monitor(void *arg) {
    for (;;) {
        usleep(200 * 1000);
        if (atomic_load(&g_failed)) {
            if (now_s() - g_fail_t > FAIL_EXIT_S) {
                fprintf(stderr, "cllm: rank %d: still running %d s after the failure; exiting\n",
                        g_rank, FAIL_EXIT_S);
                _exit(124);
            }
            continue;
        }
        long long fz = g_finalizing_ms;
        if (fz && wd_timeout_s > 0 && now_s() * 1e3 - (double)fz > wd_timeout_s * 1e3) {
            fprintf(stderr, "cllm: rank %d: MPI_Finalize waited over %d s; exiting\n", g_rank,
                    wd_timeout_s);
            _exit(124);
        }
        /* a launcher killed with SIGKILL cannot end its ranks: a healthy rank would otherwise
         * run its command to the end unattended (an orphaned 200000-token decode ran 17 min) */
        if (getppid() != g_ppid) {
            declare_failure("tensor parallel: the launcher (pid %d) that started this rank is gone",
                            (int)g_ppid);
            continue;
        }
        for (int r = 0; peer_pid && r < g_size; r++)
            if (r != g_rank && peer_pid[r] > 0 && pid_gone(peer_pid[r])) {
                declare_failure("tensor parallel: rank %d (pid %d) has exited", r, peer_pid[r]);
                break;
            }
    }
    return NULL;
}

/* Waits for a started collective. timed: under CLLM_TP_TIMEOUT_S. Spins (yielding) for the
 * first 2 ms, then polls with short sleeps so a waiting rank leaves its core to the peers it
 * waits for (a follower idle between requests costs no CPU). */
static cllm_status wait_req(MPI_Request *rq, bool timed, const char *what) {
    double t0 = now_s();
    for (;;) {
        int done = 0;
        if (MPI_Test(rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            declare_failure("tensor parallel: %s failed in MPI (a peer died or the network broke)",
                            what);
            return CLLM_EIO;
        }
        if (done) return CLLM_OK;
        if (atomic_load(&g_failed)) return CLLM_EIO;
        double w = now_s() - t0;
        if (timed && wd_timeout_s > 0 && w > wd_timeout_s) {
            declare_failure("tensor parallel: %s has waited over %d s for the other ranks (one "
                            "hung or died; CLLM_TP_TIMEOUT_S)",
                            what, wd_timeout_s);
            return CLLM_EIO;
        }
        if (w < 0.002)
            sched_yield();
        else
            usleep(w < 0.1 ? 50 : 1000);
    }
}

static void fin(void) {
    int f = 0;
    MPI_Finalized(&f);
    if (!f && atomic_load(&g_failed)) {
        /* a peer is gone: MPI_Finalize would wait for it; end the job instead */
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    g_finalizing_ms = (long long)(now_s() * 1e3);
    if (!f) MPI_Finalize();
    free(ar_send);
    free(ar_recv);
    ar_send = ar_recv = NULL;
}

cllm_status cllm_dist_init(cllm_error *err) {
    if (inited) return CLLM_OK;
    if (!cllm_dist_launched()) { /* a plain run: no MPI at all (no launcher, no cost) */
        inited = true;
        return CLLM_OK;
    }
    /* Ranks share their cores with their own thread pools (and on a small box with each other):
     * a rank waiting inside MPI yields instead of spinning, else it starves the rank it waits
     * for (measured on 2 cores: TP=2 decode 1.3 tok/s spinning, 29.6 tok/s yielding). Our own
     * waits (wait_req) poll; this covers the blocking calls left (init, finalize). A user
     * setting wins. */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    int prov = 0;
    /* SERIALIZED: one thread at a time, not necessarily the one that called init (the engine
     * runs forward calls on its own thread) */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov) != MPI_SUCCESS)
        return cllm_err_set(err, CLLM_EIO, "MPI_Init failed");
    if (prov < MPI_THREAD_SERIALIZED)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "this MPI library does not provide MPI_THREAD_SERIALIZED");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    /* errors come back to wait_req (a failure is declared and reported), not abort inside MPI */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const char *to = getenv("CLLM_TP_TIMEOUT_S");
    if (to) wd_timeout_s = atoi(to);
    atexit(fin);
    inited = true;
    if (g_size < 2) return CLLM_OK;
    /* who runs on this host, by pid: the monitor watches those (a peer elsewhere is covered by
     * the MPI error or the timeout) */
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = host; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    uint64_t mine[2] = {h, (uint64_t)getpid()}, *all = calloc((size_t)g_size * 2, sizeof(*all));
    peer_pid = calloc((size_t)g_size, sizeof(int));
    if (!all || !peer_pid ||
        MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(all);
        return cllm_err_set(err, CLLM_EIO, "tensor parallel: the start-up exchange failed");
    }
    for (int r = 0; r < g_size; r++) peer_pid[r] = all[2 * r] == h ? (int)all[2 * r + 1] : -1;
    free(all);
    g_ppid = getppid();
    pthread_t th;
    if (pthread_create(&th, NULL, monitor, NULL) == 0) pthread_detach(th);
    return CLLM_OK;
}

bool cllm_dist_active(void) {
    return g_size > 1;
}
int cllm_dist_rank(void) {
    return g_rank;
}
int cllm_dist_size(void) {
    return g_size;
}
const char *cllm_dist_impl(void) {
    return "mpi";
}

static cllm_status grow(size_t n) {
    if (n <= ar_cap) return CLLM_OK;
    float *a = realloc(ar_send, n * sizeof(float)), *b;
    if (!a) return CLLM_ENOMEM;
    ar_send = a;
    if (!(b = realloc(ar_recv, n * sizeof(float)))) return CLLM_ENOMEM;
    ar_recv = b;
    ar_cap = n;
    return CLLM_OK;
}

cllm_status cllm_dist_allreduce_sum(float *buf, size_t n) {
    if (g_size < 2 || n == 0) return CLLM_OK;
    if (atomic_load(&g_failed)) return CLLM_EIO;
    double t0 = now_s();
    size_t N = (size_t)g_size, chunk = (n + N - 1) / N;
    if (chunk > (size_t)INT32_MAX || grow(chunk * N) != CLLM_OK) return CLLM_ENOMEM;
    /* reduce-scatter: rank r receives every rank's part r and sums it in rank order */
    memcpy(ar_send, buf, n * sizeof(float));
    memset(ar_send + n, 0, (chunk * N - n) * sizeof(float));
    MPI_Request rq;
    if (MPI_Ialltoall(ar_send, (int)chunk, MPI_FLOAT, ar_recv, (int)chunk, MPI_FLOAT,
                      MPI_COMM_WORLD, &rq) != MPI_SUCCESS ||
        wait_req(&rq, true, "an all-reduce") != CLLM_OK)
        return CLLM_EIO;
    float *mine = ar_send; /* reuse the first chunk of the send buffer as the sum */
    for (size_t i = 0; i < chunk; i++) mine[i] = ar_recv[i];
    for (size_t r = 1; r < N; r++) {
        const float *p = ar_recv + r * chunk;
        for (size_t i = 0; i < chunk; i++) mine[i] += p[i];
    }
    if (MPI_Iallgather(mine, (int)chunk, MPI_FLOAT, ar_recv, (int)chunk, MPI_FLOAT, MPI_COMM_WORLD,
                       &rq) != MPI_SUCCESS ||
        wait_req(&rq, true, "an all-reduce") != CLLM_OK)
        return CLLM_EIO;
    memcpy(buf, ar_recv, n * sizeof(float));
    dist_stats.allreduce_calls++;
    dist_stats.allreduce_bytes += n * sizeof(float);
    dist_stats.allreduce_seconds += now_s() - t0;
    return CLLM_OK;
}

cllm_status cllm_dist_allgather(const void *send, size_t bytes, void *recv) {
    if (g_size < 2) {
        if (bytes && send != recv) memmove(recv, send, bytes);
        return CLLM_OK;
    }
    if (atomic_load(&g_failed)) return CLLM_EIO;
    if (bytes > (size_t)INT32_MAX) return CLLM_ENOMEM;
    double t0 = now_s();
    MPI_Request rq;
    if (MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD,
                       &rq) != MPI_SUCCESS ||
        wait_req(&rq, true, "an all-gather") != CLLM_OK)
        return CLLM_EIO;
    dist_stats.allgather_calls++;
    dist_stats.allgather_bytes += bytes * (size_t)g_size;
    dist_stats.allgather_seconds += now_s() - t0;
    return CLLM_OK;
}

static cllm_status bcast(void *buf, size_t bytes, int root, bool timed) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed)) return CLLM_EIO;
    if (bytes > (size_t)INT32_MAX) return CLLM_ENOMEM;
    MPI_Request rq;
    if (MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
        return CLLM_EIO;
    return wait_req(&rq, timed, "a broadcast");
}

cllm_status cllm_dist_bcast(void *buf, size_t bytes, int root) {
    return bcast(buf, bytes, root, true);
}

cllm_status cllm_dist_bcast_idle(void *buf, size_t bytes, int root) {
    return bcast(buf, bytes, root, false);
}

cllm_status cllm_dist_barrier(void) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed)) return CLLM_EIO;
    MPI_Request rq;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &rq) != MPI_SUCCESS) return CLLM_EIO;
    return wait_req(&rq, true, "a barrier");
}

_Noreturn void cllm_dist_abort(int code) {
    if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

cllm_status cllm_dist_check_same(uint64_t value, const char *what, cllm_error *err) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed))
        return cllm_err_set(err, CLLM_EIO, "%s", cllm_dist_failure() ? g_fail_msg : "failed");
    uint64_t *all = malloc((size_t)g_size * sizeof(*all));
    if (!all) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    /* untimed: ranks reach this after loading their slices, which can take minutes apart on a
     * big model (a peer that dies meanwhile is still seen by the monitor) */
    MPI_Request rq;
    cllm_status s = MPI_Iallgather(&value, sizeof(value), MPI_BYTE, all, sizeof(value), MPI_BYTE,
                                   MPI_COMM_WORLD, &rq) == MPI_SUCCESS
                        ? wait_req(&rq, false, "the start-up check")
                        : CLLM_EIO;
    if (s != CLLM_OK)
        cllm_err_set(err, CLLM_EIO, "%s",
                     cllm_dist_failure() ? g_fail_msg : "tensor parallel: the exchange failed");
    if (s == CLLM_OK)
        for (int r = 1; r < g_size; r++)
            if (all[r] != all[0]) {
                s = cllm_err_set(err, CLLM_EINVAL,
                                 "%s differs between ranks: rank 0 has %016llx, rank %d has "
                                 "%016llx (mismatched binaries, models or options across ranks)",
                                 what, (unsigned long long)all[0], r, (unsigned long long)all[r]);
                break;
            }
    free(all);
    return s;
}

double cllm_dist_bench_allreduce(size_t n, int iters) {
    if (g_size < 2 || iters < 1) return 0.0;
    float *v = calloc(n ? n : 1, sizeof(float));
    if (!v) return -1.0;
    cllm_dist_stats keep = dist_stats;
    cllm_dist_barrier();
    double t0 = now_s();
    for (int i = 0; i < iters; i++) cllm_dist_allreduce_sum(v, n);
    double dt = (now_s() - t0) / iters;
    dist_stats = keep;
    free(v);
    return dt;
}
