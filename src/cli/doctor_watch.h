/* `cllm doctor --watch N` (cli/doctor_watch.c). */
#ifndef CLLM_CLI_DOCTOR_WATCH_H
#define CLLM_CLI_DOCTOR_WATCH_H

#include <stdio.h>

#include "doctor/doctor.h"

/* Runs the inspection every every_s seconds (rounds > 0: that many, else until killed); prints
 * a status line per round and ALERT / RECOVERED lines for checks critical for o->sustain_s.
 * Returns the exit level: 2 if any alert was raised, else 1 if a round warned, else 0. */
int cli_doctor_watch(const dr_opts *o, double every_s, long rounds, FILE *out);

#endif
