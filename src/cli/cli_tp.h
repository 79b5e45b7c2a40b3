/* Tensor parallel from the command line: `--tensor-parallel-size N` (alias -tp),
 * `--enable-expert-parallel` (-ep: routed experts spread whole over the ranks instead of cut)
 * and `--pipeline-parallel-size 1` for generate, eval, bench, bench-forward and verify, handled
 * before the subcommand parses its own flags (main.c). */
#ifndef CLLM_CLI_CLI_TP_H
#define CLLM_CLI_CLI_TP_H

/* Removes the parallel flags from argv (argv[0] = subcommand) and sets up the run:
 *  - N = 1: nothing (no MPI even in an MPI build);
 *  - N > 1 under an MPI launcher: initializes dist/ and checks the launcher's size is N; ranks
 *    other than 0 write stdout to /dev/null; with no --threads given, each rank gets
 *    CPUs / N threads;
 *  - N > 1 not under a launcher: re-executes this command line through
 *    `mpirun -np N --oversubscribe --bind-to none [--allow-run-as-root] $CLLM_MPIRUN_ARGS`
 *    (does not return unless exec fails).
 * Returns 0 to go on, else the exit code (message printed). *argv is replaced by a copy. */
int cli_tp_setup(const char *cmd, int *argc, char ***argv);

/* The command's exit code under tensor parallel: a failing rank aborts all of them (so none
 * waits forever in a collective); 0 finalizes normally. Also prints the per-rank bytes after
 * `verify --config-only`. With CLLM_TP_STATS set, each rank prints its all-reduce / all-gather
 * counts, bytes and time on stderr. */
int cli_tp_finish(const char *cmd, const char *model_dir, int rc);

#endif
