/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed version`: what this build is and which backends it can open (cuda
 * when its module is found; it is not loaded for this). */
#include <jansson.h>

#include "cli/cli.h"
#include "kernels/backend.h"

#ifndef XF_VERSION
#define XF_VERSION "unknown"
#endif

int xf_cmd_version(xf_cli *cli, int argc, char **argv) {
  (void)argv;
  if (argc > 1) return xf_cli_usage(cli, "takes no arguments");
  const char *cuda = xf_backend_cuda_built() ? "found" : "not found";
  if (cli->json) {
    json_t *o = json_pack("{s:s,s:[s,s*]}", "version", XF_VERSION, "backends", "cpu",
                          xf_backend_cuda_built() ? "cuda" : NULL);
    json_dumpf(o, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(o);
  } else {
    printf("xfed %s (cpu backend; cuda backend module %s)\n", XF_VERSION, cuda);
  }
  return XF_EXIT_OK;
}
