/* `cllm verify`: the checks people script by hand before serving a checkpoint. See verify.h. */
#include "model/verify.h"

#include "model/gguf.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "base/strmap.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/qformat.h"

#define SAMPLE_PER_TENSOR 4096

typedef struct vctx {
    const cllm_ckpt *ck;
    const cllm_verify_opts *opts;
    FILE *out;
    cllm_verify_result *res;
    cllm_strmap seen; /* names the plan claimed; keys borrowed from the checkpoint */
    unsigned qfmt;    /* CLLM_QUANT_* flags of quantization_config */
} vctx;

static void problem(vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(vctx *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(v->out, "problem: ");
    vfprintf(v->out, fmt, ap);
    fprintf(v->out, "\n");
    va_end(ap);
    v->res->n_problems++;
}

/* Counts non-finite values; every value when full, else an evenly strided sample. */
static void scan(vctx *v, const cllm_tensor *t) {
    if (!cllm_dtype_is_float(t->dtype) || t->dtype == CLLM_DT_F8_E5M2 || !t->n_elems) return;
    uint64_t n = t->n_elems, step = 1;
    if (!v->opts->full_scan && n > SAMPLE_PER_TENSOR) step = n / SAMPLE_PER_TENSOR;
    uint64_t bad = 0, first_bad = 0, count = 0;
    for (uint64_t i = 0; i < n; i += step) {
        double x = cllm_tensor_elem(t, i);
        count++;
        if (!isfinite(x)) {
            if (!bad) first_bad = i;
            bad++;
        }
    }
    if (step > 1) { /* always look at the last element too */
        count++;
        if (!isfinite(cllm_tensor_elem(t, n - 1)) && !bad++) first_bad = n - 1;
    }
    v->res->values_scanned += count;
    v->res->nonfinite += bad;
    if (bad)
        problem(v,
                "%s: tensor '%s' has %llu NaN/Inf of %llu values checked (first at element %llu)",
                t->file, t->name, (unsigned long long)bad, (unsigned long long)count,
                (unsigned long long)first_bad);
}

static void check_spec(void *ctx, const cllm_tensor_spec *s) {
    vctx *v = ctx;
    uint64_t n = cllm_tensor_spec_elems(s);
    v->res->n_tensors_expected++;
    if (!v->ck) { /* config only: count what the config implies */
        v->res->params_by_group[s->group] += n;
        v->res->active_by_group[s->group] += n * (uint64_t)s->active_num / (uint64_t)s->active_den;
        return;
    }
    const cllm_tensor *t = cllm_ckpt_get(v->ck, s->name);
    size_t nl = strlen(s->name);
    if (!t && s->n_dims == 2 && nl > 7 && !strcmp(s->name + nl - 7, ".weight")) {
        /* GPTQ or compressed-tensors quantized Linear (model/qformat.h): check its tensors
         * instead of P.weight */
        char base[160], name[192];
        snprintf(base, sizeof(base), "%.*s", (int)(nl - 7), s->name);
        snprintf(name, sizeof(name), "%s.qweight", base);
        bool gptq = cllm_ckpt_get(v->ck, name) != NULL;
        snprintf(name, sizeof(name), "%s.weight_packed", base);
        if (gptq || cllm_ckpt_get(v->ck, name)) {
            cllm_qweight q;
            cllm_error qe = {0};
            if (cllm_qformat_bind_any(v->ck, base, (int)s->shape[0], (int)s->shape[1], v->qfmt,
                                      NULL, NULL, &q, &qe) != CLLM_OK)
                problem(v, "%s", qe.msg);
            else if (gptq && (v->qfmt & CLLM_QFORMAT_GPTQ_SYM) &&
                     cllm_qformat_check_sym_zeros(&q, v->qfmt, base, &qe) != CLLM_OK)
                problem(v, "%s", qe.msg);
            static const char *const parts[2][5] = {{"qweight", "qzeros", "scales", "g_idx", NULL},
                                                    {"weight_packed", "weight_zero_point",
                                                     "weight_scale", "weight_shape",
                                                     "weight_g_idx"}};
            for (int i = 0; i < 5; i++) {
                if (!parts[!gptq][i]) continue;
                snprintf(name, sizeof(name), "%s.%s", base, parts[!gptq][i]);
                const cllm_tensor *p = cllm_ckpt_get(v->ck, name);
                if (!p) continue;
                if (cllm_strmap_put(&v->seen, p->name, strlen(p->name), (void *)p) < 0)
                    problem(v, "out of memory while checking '%s'", p->name);
                if (i == 2) scan(v, p); /* scales: NaN/Inf */
            }
            v->res->n_tensors_found++;
            v->res->params_by_group[s->group] += n;
            v->res->active_by_group[s->group] +=
                n * (uint64_t)s->active_num / (uint64_t)s->active_den;
            return;
        }
    }
    if (!t) {
        if (!s->optional) problem(v, "tensor '%s' is missing", s->name);
        return;
    }
    if (cllm_strmap_put(&v->seen, t->name, strlen(t->name), (void *)t) < 0)
        problem(v, "out of memory while checking '%s'", t->name);
    v->res->n_tensors_found++;
    v->res->params_by_group[s->group] += n;
    v->res->active_by_group[s->group] += n * (uint64_t)s->active_num / (uint64_t)s->active_den;
    bool shape_ok = t->n_dims == s->n_dims;
    for (int i = 0; shape_ok && i < s->n_dims; i++) shape_ok = t->shape[i] == s->shape[i];
    if (!shape_ok) {
        char a[160], e[160];
        cllm_shape_str(t->shape, t->n_dims, a, sizeof(a));
        cllm_shape_str(s->shape, s->n_dims, e, sizeof(e));
        problem(v, "%s: tensor '%s' has shape %s, config implies %s", t->file, t->name, a, e);
    }
    /* F64 only as a GGUF's norms and A_log come out (model/gguf_ckpt.h: exact inverses) */
    if ((!cllm_dtype_is_float(t->dtype) && !t->kq_type) ||
        (t->dtype == CLLM_DT_F64 && !cllm_gguf_is_path(t->file)))
        problem(v, "%s: tensor '%s' has dtype %s, expected BF16, F16, F32 or F8_E4M3", t->file,
                t->name, cllm_dtype_name(t->dtype));
    scan(v, t);
}

typedef struct extra_ctx {
    vctx *v;
    uint64_t bytes_by_dtype[CLLM_DT_COUNT];
    size_t n_by_dtype[CLLM_DT_COUNT];
} extra_ctx;

static void check_extra(void *ctx, const cllm_tensor *t) {
    extra_ctx *x = ctx;
    x->bytes_by_dtype[t->dtype] += t->nbytes;
    x->n_by_dtype[t->dtype]++;
    if (!cllm_strmap_get(&x->v->seen, t->name, strlen(t->name)))
        problem(x->v, "%s: unexpected tensor '%s' (not implied by config.json)", t->file, t->name);
}

static void fmt_params(char *buf, size_t cap, uint64_t n) {
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.2fM", (double)n / 1e6);
    else
        snprintf(buf, cap, "%llu", (unsigned long long)n);
}

static cllm_expert_layout detect_layout(vctx *v, const cllm_config *cfg, const cllm_ckpt *ck) {
    for (int l = 0; l < cfg->n_layers; l++) {
        if (!cfg->layer_is_moe[l]) continue;
        char n[160];
        cllm_error qe = {0};
        snprintf(n, sizeof(n), "%slayers.%d.mlp.experts", cfg->weight_prefix, l);
        if (cllm_qformat_check_fused_experts(ck, n, &qe) != CLLM_OK) problem(v, "%s", qe.msg);
        snprintf(n, sizeof(n), "%slayers.%d.mlp.experts.gate_up_proj", cfg->weight_prefix, l);
        return cllm_ckpt_get(ck, n) ? CLLM_EXPERTS_FUSED : CLLM_EXPERTS_PER_EXPERT;
    }
    return CLLM_EXPERTS_FUSED;
}

static void print_summary(const cllm_config *cfg, const cllm_verify_opts *opts, FILE *out,
                          const cllm_verify_result *res, const extra_ctx *x, const char *dir) {
    char a[32], b[32];
    if (opts->json) {
        fprintf(out,
                "{\"model\":\"%s\",\"model_type\":\"%s\",\"problems\":%zu,\"tensors_expected\":%zu,"
                "\"tensors_found\":%zu,\"params_total\":%llu,\"params_active\":%llu,\"groups\":{",
                dir, cfg->model_type, res->n_problems, res->n_tensors_expected,
                res->n_tensors_found, (unsigned long long)res->params_total,
                (unsigned long long)res->params_active);
        int first = 1;
        for (int g = 0; g < CLLM_TG_COUNT; g++) {
            if (!res->params_by_group[g]) continue;
            fprintf(out, "%s\"%s\":{\"params\":%llu,\"active\":%llu}", first ? "" : ",",
                    cllm_tensor_group_name((cllm_tensor_group)g),
                    (unsigned long long)res->params_by_group[g],
                    (unsigned long long)res->active_by_group[g]);
            first = 0;
        }
        fprintf(out, "},\"values_scanned\":%llu,\"nonfinite\":%llu}\n",
                (unsigned long long)res->values_scanned, (unsigned long long)res->nonfinite);
        return;
    }
    fprintf(out, "model: %s (%s, %d layers: %d linear_attention + %d full_attention%s)\n", dir,
            cfg->model_type, cfg->n_layers, cllm_config_count_layers(cfg, CLLM_LAYER_LINEAR_ATTN),
            cllm_config_count_layers(cfg, CLLM_LAYER_FULL_ATTN),
            cfg->mtp_num_hidden_layers ? ", + MTP" : "");
    fprintf(out, "%-16s %16s %16s\n", "group", "params", "active/token");
    for (int g = 0; g < CLLM_TG_COUNT; g++) {
        if (!res->params_by_group[g]) continue;
        fmt_params(a, sizeof(a), res->params_by_group[g]);
        fmt_params(b, sizeof(b), res->active_by_group[g]);
        fprintf(out, "%-16s %16s %16s\n", cllm_tensor_group_name((cllm_tensor_group)g), a, b);
    }
    uint64_t text = res->params_total - res->params_by_group[CLLM_TG_MTP] -
                    res->params_by_group[CLLM_TG_VISION];
    fmt_params(a, sizeof(a), res->params_total);
    fmt_params(b, sizeof(b), res->params_active);
    char t[32], m[32], v[32];
    fmt_params(t, sizeof(t), text);
    fmt_params(m, sizeof(m), res->params_by_group[CLLM_TG_MTP]);
    fmt_params(v, sizeof(v), res->params_by_group[CLLM_TG_VISION]);
    fprintf(out, "total params: %s (text %s + mtp %s + vision %s); active per token (text): %s\n",
            a, t, m, v, b);
    if (x)
        fprintf(out, "tensors: %zu found of %zu implied\n", res->n_tensors_found,
                res->n_tensors_expected);
    else
        fprintf(out, "tensors implied by the config: %zu (weights not checked: --config-only)\n",
                res->n_tensors_expected);
    if (x) {
        fprintf(out, "bytes by dtype:");
        for (int d = 0; d < CLLM_DT_COUNT; d++)
            if (x->n_by_dtype[d])
                fprintf(out, " %s %.3f GB (%zu tensors)", cllm_dtype_name((cllm_dtype)d),
                        (double)x->bytes_by_dtype[d] / 1e9, x->n_by_dtype[d]);
        fprintf(out, "\nNaN/Inf scan (%s): %llu values checked, %llu non-finite\n",
                opts->full_scan ? "full" : "sampled", (unsigned long long)res->values_scanned,
                (unsigned long long)res->nonfinite);
    }
    fprintf(out, "%s\n", res->n_problems ? "FAILED" : "OK");
}

cllm_status cllm_verify(const char *dir, const cllm_verify_opts *opts, FILE *out,
                        cllm_verify_result *res, cllm_error *err) {
    memset(res, 0, sizeof(*res));
    cllm_config cfg;
    cllm_status st = cllm_config_load(dir, &cfg, err);
    if (st) return st;
    vctx v = {NULL, opts, out, res, {0}, 0};
    cllm_ckpt *ck = NULL;
    extra_ctx x;
    memset(&x, 0, sizeof(x));
    x.v = &v;
    if (!opts->config_only) {
        st = cllm_ckpt_open(dir, true, &ck, err);
        if (st) goto done;
        for (size_t i = 0; i < ck->n_problems; i++) problem(&v, "%s", ck->problems[i]);
        if (cllm_strmap_init(&v.seen, ck->n_tensors)) {
            st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
            goto done;
        }
        v.ck = ck;
    }
    cllm_error qe = {0};
    if (cllm_qformat_check_config(dir, &v.qfmt, &qe) != CLLM_OK) problem(&v, "%s", qe.msg);
    cllm_expert_layout layout = ck ? detect_layout(&v, &cfg, ck) : CLLM_EXPERTS_FUSED;
    cllm_tensor_plan(&cfg, layout, true, true, check_spec, &v);
    /* MTP/vision are optional: their parameters count only where present (or config-only). */
    for (int g = 0; g < CLLM_TG_COUNT; g++) {
        res->params_total += res->params_by_group[g];
        if (g != CLLM_TG_MTP && g != CLLM_TG_VISION) res->params_active += res->active_by_group[g];
    }
    if (ck) cllm_ckpt_foreach(ck, check_extra, &x);
    print_summary(&cfg, opts, out, res, ck ? &x : NULL, dir);
done:
    cllm_strmap_free(&v.seen);
    cllm_ckpt_close(ck);
    cllm_config_free(&cfg);
    return st;
}
