/* `cllm verify MODEL`: front end of model/verify.c. Exit 0 good, 1 problems found, 2 usage. */
#include <stdio.h>

#include "model/verify.h"
#include "cli/cli.h"
#include "cli/commands.h"

int cmd_verify(int argc, char **argv) {
    bool config_only = false, full = false, json = false;
    const cli_opt opts[] = {{"--config-only", NULL, CLI_FLAG, &config_only,
                             "check config.json and count parameters; no weights needed"},
                            {"--full", NULL, CLI_FLAG, &full,
                             "scan every value for NaN/Inf (default: a sample per tensor)"},
                            {"--json", NULL, CLI_FLAG, &json, "print the summary as JSON"},
                            {0}};
    const cli_spec spec = {
        "verify",
        "MODEL_DIR [options]",
        "Check a model directory: files, shard index, every tensor the config implies "
        "(shape, dtype), unexpected tensors, NaN/Inf, parameter counts.",
        opts,
        1,
        1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (cli_check_model_dir("verify", &pos[0])) return 1;
    cllm_verify_opts vo = {config_only, full, json};
    cllm_verify_result res;
    cllm_error err;
    if (cllm_verify(pos[0], &vo, stdout, &res, &err) != CLLM_OK) {
        fprintf(stderr, "cllm verify: %s\n", err.msg);
        return 1;
    }
    return res.n_problems ? 1 : 0;
}
