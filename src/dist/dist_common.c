/* Parts of dist.h shared by both implementations: launcher detection and the statistics. */
#include <stdlib.h>

#include "dist/dist.h"
#include "dist/dist_int.h"

static const char *launch_env(void) {
    const char *e = getenv("OMPI_COMM_WORLD_SIZE");
    if (!e) e = getenv("PMI_SIZE");
    if (!e) e = getenv("PMIX_SIZE");
    return e;
}

bool cllm_dist_launched(void) {
    return launch_env() != NULL || getenv("PMIX_RANK") != NULL;
}

int cllm_dist_launched_size(void) {
    const char *e = launch_env();
    long v = e ? strtol(e, NULL, 10) : 1;
    return v >= 1 && v < 1 << 20 ? (int)v : 1;
}

cllm_dist_stats dist_stats;

void cllm_dist_stats_get(cllm_dist_stats *out) {
    *out = dist_stats;
}

static bool g_ep;

void cllm_dist_set_expert_parallel(bool on) {
    g_ep = on;
}

bool cllm_dist_expert_parallel(void) {
    return g_ep;
}
