/* Small deterministic RNG for bench-serve (splitmix64 seeding xoshiro256**), plus the gamma
 * and uniform draws the load shapes need. Header-only; one lg_rng per generator, no globals. */
#ifndef CLLM_LOADGEN_RNG_H
#define CLLM_LOADGEN_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct lg_rng {
    uint64_t s[4];
} lg_rng;

static inline uint64_t lg_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void lg_rng_seed(lg_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = lg_splitmix(&seed);
}

static inline uint64_t lg_rng_next(lg_rng *r) {
    uint64_t *s = r->s, x = s[1] * 5, res = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}

/* Uniform in [0, 1). */
static inline double lg_rng_unit(lg_rng *r) {
    return (double)(lg_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [lo, hi]. */
static inline long lg_rng_range(lg_rng *r, long lo, long hi) {
    if (hi <= lo) return lo;
    return lo + (long)(lg_rng_next(r) % (uint64_t)(hi - lo + 1));
}

static inline double lg_rng_normal(lg_rng *r) {
    double u1 = lg_rng_unit(r), u2 = lg_rng_unit(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma(shape k, scale theta) by Marsaglia-Tsang; k < 1 via the k+1 boost. */
static inline double lg_rng_gamma(lg_rng *r, double k, double theta) {
    if (k <= 0) return 0;
    if (k < 1) {
        double u = lg_rng_unit(r);
        if (u < 1e-300) u = 1e-300;
        return lg_rng_gamma(r, k + 1.0, theta) * pow(u, 1.0 / k);
    }
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = lg_rng_normal(r), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = lg_rng_unit(r);
        if (u < 1 - 0.0331 * x * x * x * x) return d * v * theta;
        if (log(u) < 0.5 * x * x + d * (1 - v + log(v))) return d * v * theta;
    }
}

#endif
