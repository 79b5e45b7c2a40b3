/* GPTQ; see gptq.h. */
#include "quant/gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* In-place Cholesky H = L L^T (lower). Returns -1 when not positive definite. */
static int chol(double *A, int n) {
    for (int j = 0; j < n; j++) {
        double d = A[(size_t)j * n + j];
        for (int k = 0; k < j; k++) d -= A[(size_t)j * n + k] * A[(size_t)j * n + k];
        if (!(d > 0)) return -1;
        d = sqrt(d);
        A[(size_t)j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double s = A[(size_t)i * n + j];
            for (int k = 0; k < j; k++) s -= A[(size_t)i * n + k] * A[(size_t)j * n + k];
            A[(size_t)i * n + j] = s / d;
        }
        for (int i = 0; i < j; i++) A[(size_t)i * n + j] = 0;
    }
    return 0;
}

cllm_status cllm_gptq_quantize(float *W, const float *H, double damp, cllm_qbuf *q, cllm_error *err) {
    int K = q->K, N = q->N, G = q->group;
    double *A = malloc((size_t)K * K * sizeof(double)), *Li = calloc((size_t)K * K, sizeof(double));
    float *scale = malloc((size_t)N * sizeof(float)), *e = malloc((size_t)N * sizeof(float));
    cllm_status st = CLLM_OK;
    if (!A || !Li || !scale || !e) {
        st = cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
        goto done;
    }
    double mean = 0;
    for (int i = 0; i < K; i++) mean += H[(size_t)i * K + i];
    mean /= K;
    if (!(mean > 0)) mean = 1;
    for (size_t i = 0; i < (size_t)K * K; i++) A[i] = H[i];
    for (int i = 0; i < K; i++) {
        if (A[(size_t)i * K + i] == 0) { /* dead input: never active in calibration */
            A[(size_t)i * K + i] = 1;
            for (int n = 0; n < N; n++) W[(size_t)n * K + i] = 0;
        }
        A[(size_t)i * K + i] += damp * mean;
    }
    if (chol(A, K)) {
        st = cllm_err_set(err, CLLM_ERANGE, "gptq: Hessian not positive definite (raise damping)");
        goto done;
    }
    /* Li = L^-1 (lower), Hinv = Li^T Li; then U = chol(Hinv)^T (upper). */
    for (int j = 0; j < K; j++) {
        Li[(size_t)j * K + j] = 1.0 / A[(size_t)j * K + j];
        for (int i = j + 1; i < K; i++) {
            double s = 0;
            for (int k = j; k < i; k++) s -= A[(size_t)i * K + k] * Li[(size_t)k * K + j];
            Li[(size_t)i * K + j] = s / A[(size_t)i * K + i];
        }
    }
    for (int i = 0; i < K; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = i; k < K; k++) s += Li[(size_t)k * K + i] * Li[(size_t)k * K + j];
            A[(size_t)i * K + j] = s;
            A[(size_t)j * K + i] = s;
        }
    if (chol(A, K)) {
        st = cllm_err_set(err, CLLM_ERANGE, "gptq: inverse Hessian not positive definite");
        goto done;
    }
    /* A = L2 lower with Hinv = L2 L2^T; U[i][j] = L2[j][i]. */
    for (int i = 0; i < K; i++) {
        if (i % G == 0)
            for (int n = 0; n < N; n++) {
                float amax = 0;
                for (int k = i; k < i + G; k++) amax = fmaxf(amax, fabsf(W[(size_t)n * K + k]));
                scale[n] = cllm_quant_set_group(q, i / G, n, amax);
            }
        double d = A[(size_t)i * K + i];
        for (int n = 0; n < N; n++) {
            float w = W[(size_t)n * K + i];
            float dq = cllm_quant_set_code(q, n, i, w, scale[n]);
            e[n] = (float)((w - dq) / d);
        }
        for (int j = i + 1; j < K; j++) {
            float u = (float)A[(size_t)j * K + i];
            for (int n = 0; n < N; n++) W[(size_t)n * K + j] -= e[n] * u;
        }
    }
done:
    free(A), free(Li), free(scale), free(e);
    return st;
}

struct cllm_gptq {
    int dummy;
};

cllm_status cllm_gptq_calibrate(const char *model_dir, const cllm_gptq_opts *o, cllm_gptq **out,
                                cllm_error *err) {
    (void)model_dir, (void)o;
    *out = NULL;
    return cllm_err_set(err, CLLM_EUNSUPPORTED, "--method gptq: calibration is not implemented yet");
}
const float *cllm_gptq_hessian(cllm_gptq *g, const char *base, int K, int *n_tok) {
    (void)g, (void)base, (void)K;
    *n_tok = 0;
    return NULL;
}
const char *cllm_gptq_summary(cllm_gptq *g) {
    (void)g;
    return "";
}
void cllm_gptq_free(cllm_gptq *g) { free(g); }
