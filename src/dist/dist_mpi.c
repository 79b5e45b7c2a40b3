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
 * is load imbalance (short); the idle wait of a server follower for its next step is bounded by
 * rank 0's heartbeats instead, and start-up by CLLM_TP_STARTUP_TIMEOUT_S. */
static int wd_timeout_s = 60;
/* Start-up (MPI_Init, the first exchanges, the waits while ranks load and prefault their slices,
 * which on a big model on a slow disk may be minutes apart): CLLM_TP_STARTUP_TIMEOUT_S (default
 * 600, 0 = off), with the late rank named where rank 0 can tell. */
static int st_timeout_s = 600;
static int stall_rank = -1, stall_s; /* cllm_dist_opts' test hook */
#define FAIL_EXIT_S 10
/* MPI_THREAD_SERIALIZED: the heartbeat thread of rank 0 and the thread running the model take
 * turns through this lock around every MPI call */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static void lk(void) {
    pthread_mutex_lock(&mpi_mu);
}
static void ulk(void) {
    pthread_mutex_unlock(&mpi_mu);
}
enum { TAG_HB = 7101, TAG_CHECK = 7102 };
/* Heartbeats (a server's followers wait idle for rank 0's next step, maybe for hours): rank 0
 * sends each other rank one byte every HB_PERIOD_S from hb_thread; a follower's idle wait
 * (cllm_dist_bcast_idle) receives them and declares rank 0 hung after CLLM_TP_TIMEOUT_S without
 * one (before the first one: the start-up timeout, rank 0 may still be loading). */
#define HB_PERIOD_S 1
static pthread_t hb_th;
static _Atomic int hb_state; /* 0 none, 1 running, 2 stop asked */
static MPI_Request *hb_tx;   /* rank 0: [size] last send to each rank */
static MPI_Request hb_rx = MPI_REQUEST_NULL;
static char hb_byte, hb_in;
static bool hb_seen; /* a follower got at least one */
static double hb_last;
static _Atomic int g_failed;
static char g_fail_msg[256];
static double g_fail_t;
static void (*g_fail_hook)(const char *msg);
static _Atomic long long g_finalizing_ms; /* MPI_Finalize under way since (0 = not) */
/* peers on this host, by pid (-1 elsewhere) */
static int *peer_pid;
static int *rank_pid; /* every rank's pid, wherever it runs (for messages) */
static pid_t g_ppid;  /* the launcher (mpirun or its daemon) that started this rank */

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

/* A follower's idle wait: takes every heartbeat that has come from rank 0 (they queue while
 * the rank computes). Called under the lock. */
static void hb_poll(void) {
    for (;;) {
        if (hb_rx == MPI_REQUEST_NULL &&
            MPI_Irecv(&hb_in, 1, MPI_BYTE, 0, TAG_HB, MPI_COMM_WORLD, &hb_rx) != MPI_SUCCESS)
            return;
        int got = 0;
        if (MPI_Test(&hb_rx, &got, MPI_STATUS_IGNORE) != MPI_SUCCESS || !got) return;
        hb_seen = true;
        hb_last = now_s();
    }
}

static int pid_of(int r) {
    return rank_pid && r >= 0 && r < g_size ? rank_pid[r] : -1;
}

/* Polling pause after w seconds of waiting: spins (yielding) for the first 2 ms, then sleeps a
 * little, so a waiting rank leaves its core to the peers it waits for (a follower idle between
 * requests costs no CPU). */
static void pause_for(double w) {
    if (w < 0.002)
        sched_yield();
    else
        usleep(w < 0.1 ? 50 : 1000);
}

typedef enum {
    W_TIMED,   /* CLLM_TP_TIMEOUT_S: ranks run the same work between collectives */
    W_STARTUP, /* CLLM_TP_STARTUP_TIMEOUT_S (with a margin: rank 0 names the late rank first) */
    W_IDLE,    /* a follower waiting for rank 0's next step: bounded by its heartbeats */
} wait_mode;

/* Waits for a started request, under the mode's bound. */
/* A gap of over a second between two polls means this process itself was stopped (SIGSTOP of
 * the whole job, a suspended machine): the time does not count as waiting for the others, else
 * every rank would time out the others when they all resume. Shifts *t0 (and the heartbeat
 * clock) by the gap. */
static void skip_stopped(double *prev, double t, double *t0) {
    double gap = t - *prev;
    *prev = t;
    if (gap <= 1.0) return;
    *t0 += gap;
    if (hb_seen) hb_last += gap;
}

static cllm_status wait_req(MPI_Request *rq, wait_mode mode, const char *what) {
    double t0 = now_s(), prev = t0;
    bool idle = mode == W_IDLE && g_rank != 0;
    for (;;) {
        int done = 0;
        lk();
        int e = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (idle && !done) hb_poll();
        ulk();
        if (e != MPI_SUCCESS) {
            declare_failure("tensor parallel: %s failed in MPI (a peer died or the network broke)",
                            what);
            return CLLM_EIO;
        }
        if (done) return CLLM_OK;
        if (atomic_load(&g_failed)) return CLLM_EIO;
        double t = now_s();
        skip_stopped(&prev, t, &t0);
        double w = t - t0;
        if (mode == W_TIMED && wd_timeout_s > 0 && w > wd_timeout_s) {
            declare_failure("tensor parallel: %s has waited over %d s for the other ranks (one "
                            "hung or died; CLLM_TP_TIMEOUT_S)",
                            what, wd_timeout_s);
            return CLLM_EIO;
        }
        if (mode == W_STARTUP && st_timeout_s > 0 && w > st_timeout_s * 1.1 + 5) {
            declare_failure("tensor parallel: %s: no answer from rank 0 (pid %d) after %.0f s "
                            "(a rank is still loading, or hung; CLLM_TP_STARTUP_TIMEOUT_S)",
                            what, pid_of(0), w);
            return CLLM_EIO;
        }
        if (idle && wd_timeout_s > 0) {
            if (!hb_seen && st_timeout_s > 0 && w > st_timeout_s * 1.1 + 5) {
                declare_failure("tensor parallel: rank 0 (pid %d) sent neither a step nor a "
                                "heartbeat in %.0f s after start-up (still loading, or hung; "
                                "CLLM_TP_STARTUP_TIMEOUT_S)",
                                pid_of(0), w);
                return CLLM_EIO;
            }
            double quiet = t - (hb_last > t0 ? hb_last : t0);
            if (hb_seen && quiet > wd_timeout_s) {
                declare_failure("tensor parallel: rank 0 (pid %d) sent no heartbeat for %.0f s "
                                "while this rank waited for its next step (rank 0 stopped or "
                                "hung; CLLM_TP_TIMEOUT_S)",
                                pid_of(0), quiet);
                return CLLM_EIO;
            }
        }
        pause_for(w);
    }
}

static void *hb_thread(void *arg) {
    (void)arg;
    while (atomic_load(&hb_state) == 1) {
        if (!atomic_load(&g_failed)) {
            lk();
            for (int r = 1; r < g_size; r++) {
                int done = 1;
                if (hb_tx[r] != MPI_REQUEST_NULL) MPI_Test(&hb_tx[r], &done, MPI_STATUS_IGNORE);
                /* one in flight per rank: a stopped peer does not pile them up */
                if (done) MPI_Isend(&hb_byte, 1, MPI_BYTE, r, TAG_HB, MPI_COMM_WORLD, &hb_tx[r]);
            }
            ulk();
        }
        for (int i = 0; i < 10 * HB_PERIOD_S && atomic_load(&hb_state) == 1; i++)
            usleep(100 * 1000);
    }
    return NULL;
}

void cllm_dist_heartbeat_start(void) {
    if (g_size < 2 || g_rank != 0 || atomic_load(&hb_state)) return;
    hb_tx = malloc((size_t)g_size * sizeof(*hb_tx));
    if (!hb_tx) return;
    for (int r = 0; r < g_size; r++) hb_tx[r] = MPI_REQUEST_NULL;
    atomic_store(&hb_state, 1);
    if (pthread_create(&hb_th, NULL, hb_thread, NULL) != 0) atomic_store(&hb_state, 0);
}

/* Before MPI_Finalize: no thread but the caller's calls MPI any more. */
static void hb_stop(void) {
    if (atomic_load(&hb_state) == 1) {
        atomic_store(&hb_state, 2);
        pthread_join(hb_th, NULL);
    }
    for (int r = 0; hb_tx && r < g_size; r++) {
        int done = 1;
        if (hb_tx[r] != MPI_REQUEST_NULL) MPI_Test(&hb_tx[r], &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(&hb_tx[r]); /* completes on its own */
    }
    free(hb_tx);
    hb_tx = NULL;
    if (hb_rx != MPI_REQUEST_NULL) {
        MPI_Cancel(&hb_rx);
        MPI_Wait(&hb_rx, MPI_STATUS_IGNORE);
    }
}

/* Until MPI_Init and the first exchange are over (init_done): a rank that never started, or a
 * launcher that hung, would leave the others inside MPI_Init for good. */
static _Atomic int init_done;
static void *init_watch(void *arg) {
    (void)arg;
    double t0 = now_s();
    while (!atomic_load(&init_done)) {
        usleep(200 * 1000);
        if (st_timeout_s > 0 && now_s() - t0 > st_timeout_s && !atomic_load(&init_done)) {
            const char *r = getenv("OMPI_COMM_WORLD_RANK");
            fprintf(stderr,
                    "cllm: rank %s: MPI start-up has not finished after %d s (a rank did not "
                    "start, or the launcher hung; CLLM_TP_STARTUP_TIMEOUT_S)\n",
                    r ? r : "?", st_timeout_s);
            _exit(124);
        }
    }
    return NULL;
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
    if (!f) hb_stop();
    if (!f) MPI_Finalize();
    free(ar_send);
    free(ar_recv);
    ar_send = ar_recv = NULL;
}

cllm_status cllm_dist_init(const cllm_dist_opts *o, cllm_error *err) {
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
    if (o) {
        wd_timeout_s = o->timeout_s;
        st_timeout_s = o->startup_timeout_s;
        stall_rank = o->stall_rank;
        stall_s = o->stall_s;
    }
    /* MPI_Init and the first exchange wait for every rank to start: bounded */
    pthread_t iw;
    if (pthread_create(&iw, NULL, init_watch, NULL) == 0) pthread_detach(iw);
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
    atexit(fin);
    inited = true;
    if (g_size < 2) {
        atomic_store(&init_done, 1);
        return CLLM_OK;
    }
    /* who runs on this host, by pid: the monitor watches those (a peer elsewhere is covered by
     * the MPI error or the timeout) */
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = host; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    uint64_t mine[2] = {h, (uint64_t)getpid()}, *all = calloc((size_t)g_size * 2, sizeof(*all));
    peer_pid = calloc((size_t)g_size, sizeof(int));
    rank_pid = calloc((size_t)g_size, sizeof(int));
    if (!all || !peer_pid || !rank_pid ||
        MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(all);
        return cllm_err_set(err, CLLM_EIO, "tensor parallel: the start-up exchange failed");
    }
    atomic_store(&init_done, 1);
    for (int r = 0; r < g_size; r++) {
        rank_pid[r] = (int)all[2 * r + 1];
        peer_pid[r] = all[2 * r] == h ? rank_pid[r] : -1;
    }
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
    lk();
    int e = MPI_Ialltoall(ar_send, (int)chunk, MPI_FLOAT, ar_recv, (int)chunk, MPI_FLOAT,
                          MPI_COMM_WORLD, &rq);
    ulk();
    if (e != MPI_SUCCESS || wait_req(&rq, W_TIMED, "an all-reduce") != CLLM_OK) return CLLM_EIO;
    float *mine = ar_send; /* reuse the first chunk of the send buffer as the sum */
    for (size_t i = 0; i < chunk; i++) mine[i] = ar_recv[i];
    for (size_t r = 1; r < N; r++) {
        const float *p = ar_recv + r * chunk;
        for (size_t i = 0; i < chunk; i++) mine[i] += p[i];
    }
    lk();
    e = MPI_Iallgather(mine, (int)chunk, MPI_FLOAT, ar_recv, (int)chunk, MPI_FLOAT, MPI_COMM_WORLD,
                       &rq);
    ulk();
    if (e != MPI_SUCCESS || wait_req(&rq, W_TIMED, "an all-reduce") != CLLM_OK) return CLLM_EIO;
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
    lk();
    int e =
        MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &rq);
    ulk();
    if (e != MPI_SUCCESS || wait_req(&rq, W_TIMED, "an all-gather") != CLLM_OK) return CLLM_EIO;
    dist_stats.allgather_calls++;
    dist_stats.allgather_bytes += bytes * (size_t)g_size;
    dist_stats.allgather_seconds += now_s() - t0;
    return CLLM_OK;
}

static cllm_status bcast(void *buf, size_t bytes, int root, wait_mode mode) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed)) return CLLM_EIO;
    if (bytes > (size_t)INT32_MAX) return CLLM_ENOMEM;
    MPI_Request rq;
    lk();
    int e = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &rq);
    ulk();
    return e != MPI_SUCCESS ? CLLM_EIO : wait_req(&rq, mode, "a broadcast");
}

cllm_status cllm_dist_bcast(void *buf, size_t bytes, int root) {
    return bcast(buf, bytes, root, W_TIMED);
}

cllm_status cllm_dist_bcast_idle(void *buf, size_t bytes, int root) {
    return bcast(buf, bytes, root, root == 0 ? W_IDLE : W_TIMED);
}

cllm_status cllm_dist_barrier(void) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed)) return CLLM_EIO;
    MPI_Request rq;
    lk();
    int e = MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    ulk();
    return e != MPI_SUCCESS ? CLLM_EIO : wait_req(&rq, W_TIMED, "a barrier");
}

_Noreturn void cllm_dist_abort(int code) {
    if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static cllm_status differs(const uint64_t *all, const char *what, cllm_error *err) {
    for (int r = 1; r < g_size; r++)
        if (all[r] != all[0])
            return cllm_err_set(err, CLLM_EINVAL,
                                "%s differs between ranks: rank 0 has %016llx, rank %d has "
                                "%016llx (mismatched binaries, models or options across ranks)",
                                what, (unsigned long long)all[0], r, (unsigned long long)all[r]);
    return CLLM_OK;
}

static cllm_status failed_err(cllm_error *err) {
    const char *f = cllm_dist_failure();
    return cllm_err_set(err, CLLM_EIO, "%s", f ? f : "tensor parallel: the exchange failed");
}

cllm_status cllm_dist_check_same(uint64_t value, const char *what, cllm_error *err) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed)) return failed_err(err);
    uint64_t *all = malloc((size_t)g_size * sizeof(*all));
    if (!all) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    MPI_Request rq;
    lk();
    int e = MPI_Iallgather(&value, sizeof(value), MPI_BYTE, all, sizeof(value), MPI_BYTE,
                           MPI_COMM_WORLD, &rq);
    ulk();
    cllm_status s = e == MPI_SUCCESS ? wait_req(&rq, W_TIMED, what) : CLLM_EIO;
    s = s != CLLM_OK ? failed_err(err) : differs(all, what, err);
    free(all);
    return s;
}

/* Rank 0 takes every rank's value point to point, so when one does not come it can say which
 * rank is late; then it broadcasts them all. */
cllm_status cllm_dist_check_same_startup(uint64_t value, const char *what, cllm_error *err) {
    if (g_size < 2) return CLLM_OK;
    if (atomic_load(&g_failed)) return failed_err(err);
    uint64_t *all = calloc((size_t)g_size, sizeof(*all));
    MPI_Request *rq = malloc((size_t)g_size * sizeof(*rq));
    if (!all || !rq) {
        free(all);
        free(rq);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    cllm_status s = CLLM_OK;
    all[0] = value;
    /* fault injection for tests/dist/tp_hang.sh (CLLM_TP_TEST_STALL=RANK:SECONDS): that rank
     * stalls here once */
    static bool stalled;
    if (stall_s > 0 && !stalled && stall_rank == g_rank) {
        stalled = true;
        sleep((unsigned)stall_s);
    }
    if (g_rank == 0) {
        rq[0] = MPI_REQUEST_NULL;
        lk();
        for (int r = 1; r < g_size; r++)
            if (MPI_Irecv(&all[r], 1, MPI_UINT64_T, r, TAG_CHECK, MPI_COMM_WORLD, &rq[r]) !=
                MPI_SUCCESS)
                s = CLLM_EIO;
        ulk();
        double t0 = now_s(), prev = t0;
        while (s == CLLM_OK) {
            int left = 0;
            lk();
            for (int r = 1; r < g_size; r++) {
                int d = 1;
                if (rq[r] != MPI_REQUEST_NULL &&
                    MPI_Test(&rq[r], &d, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                    s = CLLM_EIO;
                left += !d;
            }
            ulk();
            if (s != CLLM_OK || !left) break;
            double t = now_s();
            skip_stopped(&prev, t, &t0);
            double w = t - t0;
            if (atomic_load(&g_failed)) {
                s = CLLM_EIO;
            } else if (st_timeout_s > 0 && w > st_timeout_s) {
                char late[160] = "";
                size_t n = 0;
                for (int r = 1; r < g_size && n + 32 < sizeof(late); r++)
                    if (rq[r] != MPI_REQUEST_NULL)
                        n += (size_t)snprintf(late + n, sizeof(late) - n, "%s%d (pid %d)",
                                              n ? ", " : "", r, pid_of(r));
                declare_failure("tensor parallel: rank%s %s did not reach %s within %d s of rank "
                                "0 (still loading, or hung; CLLM_TP_STARTUP_TIMEOUT_S)",
                                left > 1 ? "s" : "", late, what, st_timeout_s);
                s = CLLM_EIO;
            }
            pause_for(w);
        }
    } else {
        lk();
        int e = MPI_Isend(&value, 1, MPI_UINT64_T, 0, TAG_CHECK, MPI_COMM_WORLD, &rq[0]);
        ulk();
        s = e == MPI_SUCCESS ? wait_req(&rq[0], W_STARTUP, what) : CLLM_EIO;
    }
    if (s == CLLM_OK) {
        MPI_Request b;
        lk();
        int e = MPI_Ibcast(all, g_size, MPI_UINT64_T, 0, MPI_COMM_WORLD, &b);
        ulk();
        s = e == MPI_SUCCESS ? wait_req(&b, W_STARTUP, what) : CLLM_EIO;
    }
    s = s != CLLM_OK ? failed_err(err) : differs(all, what, err);
    free(all);
    free(rq);
    return s;
}

double cllm_dist_bench_allgather(size_t bytes, int iters) {
    if (g_size < 2 || iters < 1) return 0.0;
    unsigned char *v = calloc((bytes ? bytes : 1) * (size_t)(g_size + 1), 1);
    if (!v) return -1.0;
    cllm_dist_stats keep = dist_stats;
    cllm_dist_barrier();
    double t0 = now_s();
    for (int i = 0; i < iters; i++) cllm_dist_allgather(v, bytes, v + bytes);
    double dt = (now_s() - t0) / iters;
    dist_stats = keep;
    free(v);
    return dt;
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
