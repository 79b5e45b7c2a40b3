/* Private to src/dist/. */
#ifndef CLLM_DIST_DIST_INT_H
#define CLLM_DIST_DIST_INT_H

#include "dist/dist.h"

extern cllm_dist_stats dist_stats;

#endif
