/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed version`: what this build is, which backends it can open (cuda
 * when its module is found; it is not loaded for this), and which of the
 * optional features it was built with (docs/development.md, "Options"). */
#include <stdio.h>

#include <jansson.h>

#include "cli/cli.h"
#include "kernels/backend.h"
#include "net/notify.h"

#ifndef XF_VERSION
#define XF_VERSION "unknown"
#endif

/* The optional features, each with the build option that leaves it out. */
typedef struct feature {
  const char *name, *option;
  bool built;
} feature;

int xf_cmd_version(xf_cli *cli, int argc, char **argv) {
  (void)argv;
  if (argc > 1) return xf_cli_usage(cli, "takes no arguments");
  const feature features[] = {
#ifdef XF_HAVE_HTTP
      {"http", "XF_HTTP", true},
#else
      {"http", "XF_HTTP", false},
#endif
#ifdef XF_HAVE_REPORT
      {"report", "XF_REPORT", true},
#else
      {"report", "XF_REPORT", false},
#endif
      {"systemd", "XF_SYSTEMD", xf_notify_supported()},
  };
  size_t n = sizeof(features) / sizeof(features[0]);
  const char *cuda = xf_backend_cuda_built() ? "found" : "not found";
  if (cli->json) {
    json_t *with = json_array(), *without = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(features[i].built ? with : without, json_string(features[i].name));
    json_t *o = json_pack("{s:s,s:[s,s*],s:o,s:o}", "version", XF_VERSION, "backends", "cpu",
                          xf_backend_cuda_built() ? "cuda" : NULL, "features", with, "without",
                          without);
    json_dumpf(o, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(o);
  } else {
    printf("xfed %s (cpu backend; cuda backend module %s)\n", XF_VERSION, cuda);
    printf("features:");
    size_t built = 0;
    for (size_t i = 0; i < n; i++)
      if (features[i].built) printf(" %s", features[i].name), built++;
    if (!built) printf(" none");
    const char *sep = "; built without:";
    for (size_t i = 0; i < n; i++)
      if (!features[i].built) {
        printf("%s %s (%s=OFF)", sep, features[i].name, features[i].option);
        sep = ",";
      }
    putchar('\n');
  }
  return XF_EXIT_OK;
}
