/* The web console's files (src/server/console/), compiled into the binary by
 * cmake/embed_assets.cmake. Private to server/ (console.c serves them). */
#ifndef CLLM_SERVER_CONSOLE_ASSETS_INT_H
#define CLLM_SERVER_CONSOLE_ASSETS_INT_H

#include <stddef.h>

typedef struct srv_asset {
    const char *name; /* path under console/, e.g. "index.html", "vendor/purify.min.js" */
    const unsigned char *data;
    size_t len; /* bytes (data has one extra 0 byte after them) */
} srv_asset;

extern const srv_asset srv_console_assets[]; /* [srv_console_n_assets], then a NULL entry */
extern const int srv_console_n_assets;

#endif
