#!/usr/bin/python3
"""A model of the engine's choice of k at B = 1 (src/engine/sched_spec.c), to compare chooser
rules where the host is too noisy to measure a few percent end to end.

Steps cost true_t[1 + k] plain steps plus k head passes; the host's pace swings between 1x and
2x every 20-80 steps with lognormal jitter per step; each draft position is accepted with
probability alpha until the first rejection. The chooser sees only what the engine sees: step
times in seconds (turned into units of the pace as sched_spec_record does, medians of the last
5 samples per size) and the accept counts (decayed row and engine estimates). Prints own-k
throughput relative to plain decode, in true cost, for the old rules (probe after 32 idle steps,
a plain step every 16) and the current ones (SPEC_NEAR probes, the plain interval from the
gain), beside the best fixed k.

    /usr/bin/python3 tools/sim/spec_chooser.py [--seeds 24]

A model, not the engine: it mirrors the formulas (step_units' interpolation, the pace, the
priors and decays, the probes, SPEC_PLAIN_*), not the code; keep it in step by hand."""
import argparse, math, random

R = 5  # SPEC_COST_R


def med(v):
    v = sorted(v)
    m = len(v)
    return v[m // 2] if m % 2 else 0.5 * (v[m // 2 - 1] + v[m // 2])


class Chooser:
    def __init__(self, true_t, true_pass, alpha, seed, new_rules, K=3):
        self.true_t, self.true_pass, self.alpha, self.K, self.new = true_t, true_pass, alpha, K, new_rules
        self.rng = random.Random(seed)
        self.n, self.r, self.t = {}, {}, {}
        self.pass_r, self.pass_t, self.pace, self.prev_T = [], 0.0, 0.0, 0
        self.hits = self.trials = 0.0
        self.streak, self.plain_every = 0, 16
        self.hostf, self.hostleft = 1.0, 0

    # -- estimates (row_alpha, prior) --
    def prior(self):
        return (self.hits + 0.5 * 2.0) / (self.trials + 2.0)

    def row_alpha(self, e):
        return (e['h'] + self.prior() * 2.0) / (e['n'] + 2.0)

    # -- cost model (step_units, sched_spec_record, draft_time) --
    def units(self, T):
        t = self.t
        if t.get(T, 0) > 0:
            return t[T]
        lo, hi = T - 1, T + 1
        while lo >= 1 and t.get(lo, 0) <= 0:
            lo -= 1
        while hi <= 8 and t.get(hi, 0) <= 0:
            hi += 1
        if lo >= 1 and hi <= 8:
            return t[lo] + (t[hi] - t[lo]) * (T - lo) / (hi - lo)
        if lo >= 1:
            slope, l2 = t[lo] * 0.1 / (1 + 0.1 * (lo - 1)), lo - 1
            while l2 >= 1 and t.get(l2, 0) <= 0:
                l2 -= 1
            if l2 >= 1 and (t[lo] - t[l2]) / (lo - l2) > slope:
                slope = (t[lo] - t[l2]) / (lo - l2)
            return t[lo] + slope * (T - lo)
        if hi <= 8:
            return t[hi] * (1 + 0.1 * (T - 1)) / (1 + 0.1 * (hi - 1))
        return 1 + 0.1 * (T - 1)

    def ring(self, T, x):
        self.n[T] = self.n.get(T, 0) + 1
        i = self.n[T] - 2
        if i < 0:
            return
        r = self.r.setdefault(T, [])
        if len(r) < R:
            r.append(x)
        else:
            r[i % R] = x
        self.t[T] = med(r)

    def record(self, T, sec, draft_s, passes):
        if self.n.get(T, 0) == 0:
            self.n[T] = 1
            return
        known = self.t.get(T, 0)
        if self.pace <= 0:
            self.pace = sec / self.units(T)
        if T != self.prev_T or self.n[T] < 3:
            self.ring(T, sec / self.pace)
        if passes > 0:
            self.pass_r = (self.pass_r + [draft_s / passes / self.pace])[-R:]
            self.pass_t = med(self.pass_r)
        if known > 0:
            self.pace = sec / known
        self.prev_T = T

    def step_time(self, T):
        return self.units(T) * (self.pace if self.pace > 0 else 1.0)

    def draft_time(self, k):
        p = self.pace if self.pace > 0 else 1.0
        return k * p * (self.pass_t if self.pass_t > 0 else 0.08 * self.units(1)) if k else 0.0

    # -- the choice (sched_spec_begin_step, probe_idle, the explore in sched_spec_plan) --
    def probe_idle(self, e, a):
        if self.n.get(2, 0) <= R and a >= 0.3:
            return 4
        if self.new and (1 + a) / (self.step_time(2) + self.draft_time(1)) >= 0.92 / self.step_time(1):
            return 4
        return 32

    def choose(self, e):
        if self.streak >= self.plain_every:
            self.streak = 0
            return 0
        if self.n.get(1, 0) < 2:
            return 0
        a = self.row_alpha(e)
        plain = best = 1 / self.step_time(1)
        k = 0
        for j in range(1, self.K + 1):
            r = sum(a ** i for i in range(j + 1)) / (self.step_time(1 + j) + self.draft_time(j))
            if r > best:
                best, k = r, j
        if k and self.new:
            self.plain_every = max(16, min(64, int(100 * (1 - plain / best))))
        if k == 0 and e['idle'] >= self.probe_idle(e, a):
            k = 1
        self.streak = self.streak + 1 if k else 0
        if k and k < self.K and self.n.get(2 + k, 0) <= R:
            e['exp'] += 1
            if e['exp'] >= 4:
                k, e['exp'] = k + 1, 0
        return k

    def host(self):
        if self.hostleft <= 0:
            self.hostf = 2.0 if self.hostf == 1.0 else 1.0
            self.hostleft = self.rng.randint(20, 80)
        self.hostleft -= 1
        return self.hostf * math.exp(self.rng.gauss(0, 0.08))

    def run(self, requests=20, ntok=128, fixed=None):
        toks, cost = 0, 0.0
        for _ in range(requests):
            e, out = {'h': 0.0, 'n': 0.0, 'idle': 0, 'exp': 0}, 0
            while out < ntok:
                k = min(fixed if fixed is not None else self.choose(e), ntok - out - 1)
                hf = self.host()
                self.record(1 + k, self.true_t[1 + k] * hf, k * self.true_pass * hf, k)
                cost += self.true_t[1 + k] + k * self.true_pass
                if k == 0:
                    out += 1
                    e['h'] *= 0.97
                    e['n'] *= 0.97
                    e['idle'] += 1
                    continue
                j = 0
                while j < k and self.rng.random() < self.alpha:
                    j += 1
                out += j + 1
                e['h'], e['n'] = 0.95 * e['h'] + j, 0.95 * e['n'] + j + (j < k)
                self.hits, self.trials = 0.99 * self.hits + j, 0.99 * self.trials + j + (j < k)
                e['idle'] = 0
            toks += out
        return toks / cost


CURVES = {  # step cost of 1..4 tokens in plain steps, head pass per draft
    'zen3 (1.37/1.75/2.1, pass 0.16)': ({1: 1.0, 2: 1.37, 3: 1.75, 4: 2.1}, 0.16),
    'cheap (1.1/1.2/1.3, pass 0.16)': ({1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}, 0.16),
    'mid (1.25/1.5/1.75, pass 0.16)': ({1: 1.0, 2: 1.25, 3: 1.5, 4: 1.75}, 0.16),
    'dear (1.9/2.8/3.7, pass 0.16)': ({1: 1.0, 2: 1.9, 3: 2.8, 4: 3.7}, 0.16),
}

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--seeds', type=int, default=24)
    ap.add_argument('--alphas', default='0.3,0.5,0.65,0.8,0.9')
    args = ap.parse_args()
    mean = lambda f: sum(f(sd) for sd in range(args.seeds)) / args.seeds
    print('| step costs | acceptance | old rules | current | best fixed k |')
    print('|---|---|---|---|---|')
    for name, (tt, ps) in CURVES.items():
        for a in map(float, args.alphas.split(',')):
            old = mean(lambda sd: Chooser(tt, ps, a, sd, False).run())
            new = mean(lambda sd: Chooser(tt, ps, a, sd, True).run())
            fx = max([1.0] + [mean(lambda sd: Chooser(tt, ps, a, sd, True).run(fixed=k)) for k in (1, 2, 3)])
            print(f'| {name} | {a} | {old:.3f} | {new:.3f} | {fx:.3f} |', flush=True)
