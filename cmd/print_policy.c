/* SPDX-License-Identifier: Apache-2.0 */
/* A policy's versions as `xfed policy log` and `xfed-site policy log` print
 * them (cmd/print.h). */
#include <jansson.h>
#include <stdio.h>

#include "cmd/print.h"
#include "policy/policy.h"

static const char *jstr(const json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

static long long jint(const json_t *o, const char *key) {
  return (long long)json_integer_value(json_object_get(o, key));
}

void xf_cli_policy_versions_print(xf_cli *cli, json_t *versions) {
  char when[32];
  size_t i;
  json_t *e;
  if (cli->json) {
    json_t *arr = json_array();
    json_array_foreach(versions, i, e) {
      double at = json_number_value(json_object_get(e, "at"));
      json_array_append_new(arr, json_pack("{s:I,s:f,s:s,s:s,s:s}", "version",
                                           (json_int_t)jint(e, "version"), "at", at, "time",
                                           xf_cli_utc_text(at, when), "author", jstr(e, "author"),
                                           "reason", jstr(e, "reason")));
    }
    xf_cli_print_json(json_pack("{s:o}", "versions", arr));
  } else {
    printf("%-8s %-20s %-16s %s\n", "VERSION", "TIME (UTC)", "AUTHOR", "REASON");
    json_array_foreach(versions, i, e) {
      printf("%-8lld %-20s %-16s %s\n", jint(e, "version"),
             xf_cli_utc_text(json_number_value(json_object_get(e, "at")), when), jstr(e, "author"),
             jstr(e, "reason"));
    }
  }
  json_decref(versions);
}

void xf_cli_policy_log_print(xf_cli *cli, const xf_policy_version_info *log, size_t n) {
  json_t *versions = json_array();
  for (size_t i = 0; versions && i < n; i++)
    json_array_append_new(versions, json_pack("{s:I,s:f,s:s,s:s}", "version",
                                              (json_int_t)log[i].version, "at", log[i].at,
                                              "author", log[i].author, "reason",
                                              log[i].reason));
  xf_cli_policy_versions_print(cli, versions);
}
