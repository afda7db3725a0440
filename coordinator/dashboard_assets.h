/* SPDX-License-Identifier: Apache-2.0 */
/* The dashboard's page files (coordinator/dashboard/), compiled in by
 * cmake/embed.cmake: each name with its bytes. */
#ifndef XF_COORDINATOR_DASHBOARD_ASSETS_H
#define XF_COORDINATOR_DASHBOARD_ASSETS_H

#include <stddef.h>

typedef struct xf__dash_asset {
  const char *name; /* "index.html", "app.js", "app.css" */
  const unsigned char *data;
  size_t len;
} xf__dash_asset;

extern const xf__dash_asset xf__dash_assets[];
extern const size_t xf__dash_n_assets;

#endif
