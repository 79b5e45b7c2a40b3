/* libFuzzer target: SSE framing as bench-serve reads it (loadgen/sse.c). The input is a byte
 * stream plus split points: feeding it whole and feeding it in the fuzzer-chosen pieces must give
 * the same events (same payloads, same order) and the same verdict; a small line cap must be an
 * error, never an overflow. Layout: byte 0 = number of split points k (mod 16), then k bytes of
 * split offsets (scaled to the stream), then the stream. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/sse.h"

typedef struct rec {
    char *buf;
    size_t len, cap;
    int n;
} rec;

static bool on_ev(void *ctx, const char *d, size_t n) {
    rec *r = ctx;
    if (r->len + n + 8 > r->cap) {
        size_t c = (r->len + n + 8) * 2;
        char *b = realloc(r->buf, c);
        if (!b) return false;
        r->buf = b;
        r->cap = c;
    }
    memcpy(r->buf + r->len, &n, sizeof(n)); /* length-prefixed: "a\n" + "b" != "a" + "\nb" */
    r->len += sizeof(n);
    memcpy(r->buf + r->len, d, n);
    r->len += n;
    r->n++;
    return true;
}

static bool run(const uint8_t *s, size_t n, const size_t *cuts, int k, size_t cap, rec *r) {
    lg_sse p;
    lg_sse_init(&p, cap, on_ev, r);
    bool ok = true;
    size_t at = 0;
    for (int i = 0; i <= k && ok; i++) {
        size_t end = i < k ? cuts[i] : n;
        if (end < at) end = at;
        ok = lg_sse_feed(&p, (const char *)s + at, end - at);
        at = end;
    }
    if (ok) ok = lg_sse_finish(&p);
    lg_sse_free(&p);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int k = data[0] % 16;
    if (size < 1 + (size_t)k) return 0;
    const uint8_t *s = data + 1 + k;
    size_t n = size - 1 - (size_t)k, cuts[16];
    for (int i = 0; i < k; i++) cuts[i] = n * data[1 + i] / 255;
    for (int i = 1; i < k; i++) /* ascending */
        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            size_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    size_t caps[2] = {1 << 20, 16};
    for (int c = 0; c < 2; c++) {
        rec a = {0}, b = {0};
        bool oa = run(s, n, NULL, 0, caps[c], &a), ob = run(s, n, cuts, k, caps[c], &b);
        if (oa != ob || a.n != b.n || a.len != b.len || (a.len && memcmp(a.buf, b.buf, a.len)))
            abort();
        free(a.buf);
        free(b.buf);
    }
    return 0;
}
