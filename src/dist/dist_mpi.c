/* dist.h over MPI (OpenMPI 4.1): MPI_COMM_WORLD, one rank per process. */
#include <mpi.h>
#include <pthread.h>
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

/* Hang watchdog: a rank that stops (hangs, SIGSTOP, a livelock) would leave the others in a
 * collective forever, and mpirun only notices ranks that exit. Each collective records when it
 * started; a thread checks once a second and, past CLLM_TP_TIMEOUT_S (default 60; 0 = off),
 * exits this rank with 124 so mpirun ends the job. Ranks compute the same work between
 * collectives, so a legitimate wait is short (load imbalance), never minutes. */
static _Atomic long long coll_since_ms; /* 0 = not in a collective */
static int wd_timeout_s = 60;

static void coll_begin(void) {
    coll_since_ms = (long long)(now_s() * 1e3);
}
static void coll_end(void) {
    coll_since_ms = 0;
}

static void *watchdog(void *arg) {
    for (;;) {
        sleep(1);
        long long t0 = coll_since_ms;
        if (t0 && now_s() * 1e3 - (double)t0 > wd_timeout_s * 1e3) {
            fprintf(stderr,
                    "cllm: rank %d: a collective has waited over %d s for the other ranks (one "
                    "hung or died); exiting (CLLM_TP_TIMEOUT_S)\n",
                    g_rank, wd_timeout_s);
            _exit(124);
        }
    }
    return NULL;
}

static void fin(void) {
    int f = 0;
    MPI_Finalized(&f);
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
     * a rank waiting in a collective yields instead of spinning, else it starves the rank it
     * waits for (measured on 2 cores: TP=2 decode 1.3 tok/s spinning, 29.6 tok/s yielding).
     * A user setting wins. */
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
    const char *to = getenv("CLLM_TP_TIMEOUT_S");
    if (to) wd_timeout_s = atoi(to);
    pthread_t wd;
    if (g_size > 1 && wd_timeout_s > 0 && pthread_create(&wd, NULL, watchdog, NULL) == 0)
        pthread_detach(wd);
    atexit(fin);
    inited = true;
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
    double t0 = now_s();
    size_t N = (size_t)g_size, chunk = (n + N - 1) / N;
    if (chunk > (size_t)INT32_MAX || grow(chunk * N) != CLLM_OK) return CLLM_ENOMEM;
    /* reduce-scatter: rank r receives every rank's part r and sums it in rank order */
    memcpy(ar_send, buf, n * sizeof(float));
    memset(ar_send + n, 0, (chunk * N - n) * sizeof(float));
    coll_begin();
    if (MPI_Alltoall(ar_send, (int)chunk, MPI_FLOAT, ar_recv, (int)chunk, MPI_FLOAT,
                     MPI_COMM_WORLD) != MPI_SUCCESS) {
        coll_end();
        return CLLM_EIO;
    }
    float *mine = ar_send; /* reuse the first chunk of the send buffer as the sum */
    for (size_t i = 0; i < chunk; i++) mine[i] = ar_recv[i];
    for (size_t r = 1; r < N; r++) {
        const float *p = ar_recv + r * chunk;
        for (size_t i = 0; i < chunk; i++) mine[i] += p[i];
    }
    int rc =
        MPI_Allgather(mine, (int)chunk, MPI_FLOAT, ar_recv, (int)chunk, MPI_FLOAT, MPI_COMM_WORLD);
    coll_end();
    if (rc != MPI_SUCCESS) return CLLM_EIO;
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
    if (bytes > (size_t)INT32_MAX) return CLLM_ENOMEM;
    double t0 = now_s();
    coll_begin();
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    coll_end();
    if (rc != MPI_SUCCESS) return CLLM_EIO;
    dist_stats.allgather_calls++;
    dist_stats.allgather_bytes += bytes * (size_t)g_size;
    dist_stats.allgather_seconds += now_s() - t0;
    return CLLM_OK;
}

cllm_status cllm_dist_bcast(void *buf, size_t bytes, int root) {
    if (g_size < 2) return CLLM_OK;
    if (bytes > (size_t)INT32_MAX) return CLLM_ENOMEM;
    coll_begin();
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    coll_end();
    return rc == MPI_SUCCESS ? CLLM_OK : CLLM_EIO;
}

cllm_status cllm_dist_barrier(void) {
    if (g_size < 2) return CLLM_OK;
    coll_begin();
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    coll_end();
    return rc == MPI_SUCCESS ? CLLM_OK : CLLM_EIO;
}

_Noreturn void cllm_dist_abort(int code) {
    if (g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

cllm_status cllm_dist_check_same(uint64_t value, const char *what, cllm_error *err) {
    if (g_size < 2) return CLLM_OK;
    uint64_t *all = malloc((size_t)g_size * sizeof(*all));
    if (!all) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    /* not under the watchdog: ranks reach this after loading their slices, which can take
     * minutes apart on a big model */
    cllm_status s = MPI_Allgather(&value, sizeof(value), MPI_BYTE, all, sizeof(value), MPI_BYTE,
                                  MPI_COMM_WORLD) == MPI_SUCCESS
                        ? CLLM_OK
                        : CLLM_EIO;
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
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < iters; i++) cllm_dist_allreduce_sum(v, n);
    double dt = (now_s() - t0) / iters;
    dist_stats = keep;
    free(v);
    return dt;
}
