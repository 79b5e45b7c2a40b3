/* `cllm cpuinfo`: detected CPU features, kernel tier, threads and memory, for bug reports. */
#include <stdio.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/mem.h"
#include "cli/cli.h"
#include "cli/commands.h"

int cmd_cpuinfo(int argc, char **argv) {
    const cli_opt opts[] = {{0}};
    const cli_spec spec = {"cpuinfo",
                           "",
                           "Print detected CPU features, the kernel tier in use "
                           "(CLLM_ISA=ref|avx2|avx512|neon forces one), cores and memory.",
                           opts,
                           0,
                           0};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    char feat[256];
    cllm_cpu_describe(feat, sizeof(feat));
    printf("features: %s\nkernel tier: %s\nonline cpus: %ld\nmemory: %.1f GiB total, %.1f GiB "
           "available\n",
           feat, cllm_cpu_tier_name(cllm_cpu_tier()), sysconf(_SC_NPROCESSORS_ONLN),
           (double)cllm_mem_total() / 1073741824.0, (double)cllm_mem_available() / 1073741824.0);
    return 0;
}
