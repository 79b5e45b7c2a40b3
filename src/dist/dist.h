/* Multi-process collectives for tensor parallel (DESIGN.md dist/): one process per rank, all
 * running the same program on the same inputs (SPMD). Built over MPI when CLLM_MPI is on
 * (dist_mpi.c); otherwise a one-process implementation (dist_single.c) where every call is a
 * no-op on size 1, so a build without MPI runs exactly the code it ran before.
 *
 * Determinism: cllm_dist_allreduce_sum adds the ranks' partial vectors in rank order 0..N-1 for
 * every element (a reduce-scatter + allgather built from alltoall, each rank summing its chunk
 * itself), so the result is bitwise the same on every rank and from run to run for a given N,
 * whatever algorithm the MPI library would have picked for MPI_Allreduce.
 *
 * Failure: every collective waits in a polling loop of ours (dist_mpi.c), so a rank is never
 * stuck in MPI for good. A failure is declared, once per process, when a collective waited
 * longer than CLLM_TP_TIMEOUT_S seconds (default 60, 0 = off: a peer stopped or hung), when an
 * idle follower got no heartbeat from rank 0 for as long, when start-up (MPI_Init, the checks
 * after loading) took longer than CLLM_TP_STARTUP_TIMEOUT_S (default 600), when MPI
 * reports an error (a peer on another host died), or within ~0.2 s when a peer on this host
 * exits. From then on every collective returns CLLM_EIO at once, the failure hook runs (the
 * server answers 503) and the process has FAIL_EXIT_S (10 s) to end before it is exited with
 * 124; cli_tp_finish then aborts the job so mpirun ends the other ranks. */
#ifndef CLLM_DIST_DIST_H
#define CLLM_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* True when this process was started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or PMIX_RANK); works without initializing anything. */
bool cllm_dist_launched(void);
/* Size the launcher announced (1 when not launched). */
int cllm_dist_launched_size(void);

/* Timeouts and test hooks of a run (the CLI fills them from CLLM_TP_* through cli/options.c). */
typedef struct cllm_dist_opts {
    int timeout_s;         /* a collective or an idle follower waiting longer ends the job; 0 off */
    int startup_timeout_s; /* bound on start-up (MPI_Init, loading); 0 off */
    int stall_rank;        /* tests/dist/tp_hang.sh: this rank sleeps stall_s in its first */
    int stall_s;           /* cllm_dist_check_same_startup (when stall_s > 0) */
} cllm_dist_opts;
#define CLLM_DIST_OPTS_DEFAULT                                                                     \
    { 60, 600, -1, 0 }

/* Initializes MPI (once; later calls return CLLM_OK). In a build without MPI, or when not
 * launched, the process is rank 0 of 1. Registers finalization at exit. o: NULL = defaults. */
cllm_status cllm_dist_init(const cllm_dist_opts *o, cllm_error *err);
bool cllm_dist_active(void); /* initialized with size > 1 */
int cllm_dist_rank(void);
int cllm_dist_size(void);
const char *cllm_dist_impl(void); /* "mpi" or "single" */

/* buf[n] := sum over ranks of buf[n] (rank order; see above). */
cllm_status cllm_dist_allreduce_sum(float *buf, size_t n);
/* recv[size][bytes] := every rank's send[bytes], rank order. */
cllm_status cllm_dist_allgather(const void *send, size_t bytes, void *recv);
cllm_status cllm_dist_bcast(void *buf, size_t bytes, int root);
/* A follower waiting for rank 0's next engine step (root 0), which may be an idle hour away: no
 * timeout while rank 0's heartbeats come (cllm_dist_heartbeat_start); CLLM_TP_TIMEOUT_S
 * without one declares rank 0 hung; before the first one, CLLM_TP_STARTUP_TIMEOUT_S (default
 * 600 s) bounds the wait. A failure declared meanwhile ends it too. */
cllm_status cllm_dist_bcast_idle(void *buf, size_t bytes, int root);
/* Rank 0 of a job whose other ranks wait in cllm_dist_bcast_idle (serve, bench): from now to
 * the end of the process, one byte to every rank each second (from a thread of its own;
 * idempotent; a no-op elsewhere). */
void cllm_dist_heartbeat_start(void);
cllm_status cllm_dist_barrier(void);
/* Ends every rank (MPI_Abort) with the exit code; used when one rank fails alone. */
_Noreturn void cllm_dist_abort(int code);

/* The declared failure (see above), NULL while there is none. */
const char *cllm_dist_failure(void);
/* Called once, from the thread that declares the failure (a waiting collective or the monitor
 * thread), with its message; must return quickly. */
void cllm_dist_on_failure(void (*fn)(const char *msg));

/* Every rank passes its own value; CLLM_EINVAL with a message when any rank differs (the config
 * + shard plan hash exchanged at start: mismatched binaries or model files are refused). */
cllm_status cllm_dist_check_same(uint64_t value, const char *what, cllm_error *err);
/* The same at start-up, where ranks may be minutes apart (loading, prefaulting their slices):
 * bounded by CLLM_TP_STARTUP_TIMEOUT_S instead of CLLM_TP_TIMEOUT_S, and rank 0 names the
 * ranks that did not come. */
cllm_status cllm_dist_check_same_startup(uint64_t value, const char *what, cllm_error *err);

/* Expert parallel (--enable-expert-parallel): set before the model loads; read by the shard
 * plan of model/weights_tp.c (routed experts spread whole instead of cut). */
void cllm_dist_set_expert_parallel(bool on);
bool cllm_dist_expert_parallel(void);

/* Counters of the all-reduce calls of this process (for the per-token communication figure). */
typedef struct cllm_dist_stats {
    uint64_t allreduce_calls, allreduce_bytes; /* bytes = floats reduced * 4 */
    double allreduce_seconds;
    uint64_t allgather_calls, allgather_bytes;
    double allgather_seconds;
} cllm_dist_stats;
void cllm_dist_stats_get(cllm_dist_stats *out);
/* Seconds per all-reduce of n floats, averaged over iters back-to-back calls after a barrier
 * (pure communication: no compute to wait for); 0 on one process. Collective. */
double cllm_dist_bench_allreduce(size_t n, int iters);
/* The same for an all-gather of bytes per rank. */
double cllm_dist_bench_allgather(size_t bytes, int iters);

#endif
