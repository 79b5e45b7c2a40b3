/* Subcommand entry points; the table lives in src/main.c. Each returns 0 ok, 1 failure, 2 usage. */
#ifndef CLLM_CLI_COMMANDS_H
#define CLLM_CLI_COMMANDS_H

int cmd_verify(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_cpuinfo(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench_forward(int argc, char **argv);
int cmd_bench_vision(int argc, char **argv);
int cmd_bench_grammar(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_serve(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);

#endif
