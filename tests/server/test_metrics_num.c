/* srv_metrics_num: /metrics sample values. Counts print as their digits (a 140 once printed as
 * 1.4e+02, valid Prometheus text but not what a person or a naive scraper expects); any other
 * value as the fewest digits that read back to the same double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"
#include "test.h"

static void check_num(double v, const char *want) {
    char out[40];
    srv_metrics_num(out, sizeof(out), v);
    CHECK(!strcmp(out, want));
    if (strcmp(out, want)) fprintf(stderr, "  %.17g printed as %s, want %s\n", v, out, want);
}

int main(void) {
    check_num(0, "0");
    check_num(7, "7");
    check_num(140, "140");
    check_num(1000000, "1000000");
    check_num(-20, "-20");
    check_num(9007199254740991.0, "9007199254740991");
    check_num(0.005, "0.005");
    check_num(2.5, "2.5");
    check_num(0.1 + 0.2, "0.30000000000000004");
    check_num(1e20, "1e+20");
    check_num(NAN, "NaN");
    check_num(INFINITY, "+Inf");
    check_num(-INFINITY, "-Inf");
    /* every value reads back exactly */
    const double vs[] = {1.0 / 3, 123456.789, 4.2e-9, 1e300, 12345678901234567890.0};
    for (size_t i = 0; i < sizeof(vs) / sizeof(*vs); i++) {
        char out[40];
        srv_metrics_num(out, sizeof(out), vs[i]);
        CHECK(strtod(out, NULL) == vs[i]);
    }
    return test_report("test_metrics_num");
}
