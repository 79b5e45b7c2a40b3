/* dist.h for a build without MPI: one process, rank 0 of 1; collectives are identities. */
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

cllm_status cllm_dist_init(const cllm_dist_opts *o, cllm_error *err) {
    if (cllm_dist_launched() && cllm_dist_launched_size() > 1)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "started by an MPI launcher with %d ranks, but this cllm was built "
                            "without MPI (-DCLLM_MPI=OFF)",
                            cllm_dist_launched_size());
    return CLLM_OK;
}
bool cllm_dist_active(void) {
    return false;
}
int cllm_dist_rank(void) {
    return 0;
}
int cllm_dist_size(void) {
    return 1;
}
const char *cllm_dist_impl(void) {
    return "single";
}
cllm_status cllm_dist_allreduce_sum(float *buf, size_t n) {
    return CLLM_OK;
}
cllm_status cllm_dist_allgather(const void *send, size_t bytes, void *recv) {
    if (bytes && send != recv) memmove(recv, send, bytes);
    return CLLM_OK;
}
cllm_status cllm_dist_bcast(void *buf, size_t bytes, int root) {
    return CLLM_OK;
}
cllm_status cllm_dist_bcast_idle(void *buf, size_t bytes, int root) {
    return CLLM_OK;
}
const char *cllm_dist_failure(void) {
    return NULL;
}
void cllm_dist_on_failure(void (*fn)(const char *msg)) {
    (void)fn;
}
cllm_status cllm_dist_barrier(void) {
    return CLLM_OK;
}
_Noreturn void cllm_dist_abort(int code) {
    exit(code);
}
cllm_status cllm_dist_check_same(uint64_t value, const char *what, cllm_error *err) {
    return CLLM_OK;
}
cllm_status cllm_dist_check_same_startup(uint64_t value, const char *what, cllm_error *err) {
    return CLLM_OK;
}
void cllm_dist_heartbeat_start(void) {}
double cllm_dist_bench_allgather(size_t bytes, int iters) {
    return 0.0;
}
double cllm_dist_bench_allreduce(size_t n, int iters) {
    return 0.0;
}
