/* Process and host metrics for /metrics, read from /proc at scrape time, so a dashboard can alert
 * on the hardware without a node exporter next to the server.
 *
 * Process metrics use the names of the Prometheus client libraries' process collector
 * (process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_start_time_seconds, process_open_fds, process_max_fds), which vLLM also exports, so
 * the stock panels work. Host metrics are cllm_host_* (not node_*, which would clash with a real
 * node exporter's series): CPU seconds by mode summed over CPUs, the CPU count, memory total and
 * available, the 1-minute load. Anything /proc does not give is left out, never guessed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "server/srv_int.h"

static void metric(srv_buf *b, const char *name, const char *type, const char *help,
                   const char *labels, double v) {
    char num[40];
    srv_metrics_num(num, sizeof(num), v);
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s%s%s%s %s\n", name, help, name, type, name,
                   labels ? "{" : "", labels ? labels : "", labels ? "}" : "", num);
}

static char *slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n ? buf : NULL;
}

/* Seconds since the epoch when the system booted (/proc/stat btime), 0 if unknown. */
static double boot_time(void) {
    static char buf[16384];
    if (!slurp("/proc/stat", buf, sizeof(buf))) return 0;
    const char *p = strstr(buf, "\nbtime ");
    return p ? strtod(p + 7, NULL) : 0;
}

static void process_metrics(srv_buf *b) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        metric(b, "process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.", NULL,
               (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
                   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6);
    char buf[4096];
    long page = sysconf(_SC_PAGESIZE), tck = sysconf(_SC_CLK_TCK);
    unsigned long long vsz = 0, rss = 0;
    if (slurp("/proc/self/statm", buf, sizeof(buf)) && sscanf(buf, "%llu %llu", &vsz, &rss) == 2) {
        metric(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", NULL,
               (double)vsz * (double)page);
        metric(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", NULL,
               (double)rss * (double)page);
    }
    /* field 22 of /proc/self/stat, counted after the ')' that ends the command name */
    const char *p = slurp("/proc/self/stat", buf, sizeof(buf)) ? strrchr(buf, ')') : NULL;
    double bt = boot_time();
    if (p && bt > 0 && tck > 0) {
        int field = 2;
        for (p++; *p && field < 22; p++)
            if (*p == ' ') field++;
        if (field == 22)
            metric(b, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.", NULL,
                   bt + strtod(p, NULL) / (double)tck);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long n = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') n++;
        closedir(d);
        metric(b, "process_open_fds", "gauge", "Number of open file descriptors.", NULL,
               (double)(n > 0 ? n - 1 : 0)); /* minus the directory stream's own */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        metric(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.", NULL,
               (double)rl.rlim_cur);
}

static void host_cpu(srv_buf *b) {
    char buf[512];
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    bool got = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    unsigned long long v[8] = {0};
    if (!got || strncmp(buf, "cpu ", 4) ||
        sscanf(buf + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) < 4)
        return;
    long tck = sysconf(_SC_CLK_TCK);
    if (tck <= 0) return;
    static const char *const modes[8] = {"user",   "nice", "system",  "idle",
                                         "iowait", "irq",  "softirq", "steal"};
    srv_buf_adds(b, "# HELP cllm_host_cpu_seconds_total Host CPU time by mode, summed over CPUs "
                    "(/proc/stat).\n# TYPE cllm_host_cpu_seconds_total counter\n");
    for (int i = 0; i < 8; i++) {
        char num[40];
        srv_metrics_num(num, sizeof(num), (double)v[i] / (double)tck);
        srv_buf_printf(b, "cllm_host_cpu_seconds_total{mode=\"%s\"} %s\n", modes[i], num);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n > 0) metric(b, "cllm_host_cpus", "gauge", "Online CPUs of the host.", NULL, (double)n);
}

static void host_memory(srv_buf *b) {
    static char buf[8192];
    if (!slurp("/proc/meminfo", buf, sizeof(buf))) return;
    const char *t = strstr(buf, "MemTotal:"), *a = strstr(buf, "MemAvailable:");
    if (t)
        metric(b, "cllm_host_memory_total_bytes", "gauge", "Host memory (MemTotal).", NULL,
               strtod(t + 9, NULL) * 1024.0);
    if (a)
        metric(b, "cllm_host_memory_available_bytes", "gauge",
               "Host memory available for new allocations (MemAvailable).", NULL,
               strtod(a + 13, NULL) * 1024.0);
    double la[1];
    if (getloadavg(la, 1) == 1)
        metric(b, "cllm_host_load1", "gauge", "Host load average over 1 minute.", NULL, la[0]);
}

void srv_metrics_process(srv_buf *b) {
    process_metrics(b);
    host_cpu(b);
    host_memory(b);
}
