/* SPDX-License-Identifier: Apache-2.0 */
/* What the `xfed policy` verbs share: their flags, the local database or the
 * coordinator they act on, and reading the JSON answers. The changes, push,
 * pull and the reading verbs are cli/cmd_policy.c (which defines these); what
 * the policy decides, check and test, is cli/cmd_policy_check.c. */
#ifndef XF_CLI_POLICY_INTERNAL_H
#define XF_CLI_POLICY_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "net/document.h"
#include "net/xfed.pb-c.h"
#include "policy/policy.h"
#include "storage/db.h"

/* Policy documents, rules and case files: the bound keeps a wrong path (a
 * dataset, a model) out of memory, and is what one message to the
 * coordinator may carry (a 60,000-site document is about 11 MiB). */
#define POLICY_FILE_MAX XF_DOCUMENT_MAX

/* Every flag any policy command takes; each command names the ones it
 * accepts. The connection flags (cli/client.h) are taken by every command:
 * without --db it acts on the coordinator. */
typedef struct xf__policy_args {
  const char *db, *author, *reason, *name, *jurisdiction, *region, *site, *classification,
      *tag, *file, *json_rule, *id, *out, *coordinator_region;
  bool has_version, has_epsilon, force, all;
  long version;
  double epsilon;
  xf_client_flags conn;
  int n_pos;
  char **pos; /* positional arguments */
} xf__policy_args;

/* Parses argv with the flags named in `allowed` (comma-separated long
 * names) and the connection flags, and expects between min_pos and max_pos
 * positional arguments; returns an exit status (XF_EXIT_OK to go on). */
int xf__policy_parse_args(xf_cli *cli, int argc, char **argv, const char *allowed, int min_pos,
                          int max_pos, const char *pos_usage, xf__policy_args *a);
/* A flag that must be present and non-empty: a usage error otherwise. */
int xf__policy_require(xf_cli *cli, const char *value, const char *flag);
/* Opens the --db database into *db (the caller closes it); `create` for
 * changes, while reading commands refuse a file that does not exist. */
int xf__policy_open_db(xf_cli *cli, const xf__policy_args *a, bool create, xf_db **db);
/* A policy document, rule or case file, whole, at most POLICY_FILE_MAX
 * bytes; the caller frees *text with xf_free. */
xf_err xf__policy_read_text(const char *path, char **text, xf_errctx *err);
/* One PolicyRequest; on success the caller owns *answer (xf_envelope_free).
 * With denial_decides, XF_EDENIED is the policy's answer, not a refused
 * certificate. */
int xf__policy_request(xf_cli *cli, xf_client *c, Xfed__PolicyRequest *req, bool denial_decides,
                       Xfed__Envelope **answer);
/* The database's current version, loaded into *p (the caller frees it). */
int xf__policy_load_current(xf_cli *cli, xf_db *db, xf_policy **p);
/* The current version of the local database (--db) or of the coordinator. */
int xf__policy_load(xf_cli *cli, const xf__policy_args *a, xf_policy **p);

/* A member of a JSON answer: a string ("" when absent), an integer (0). */
static inline const char *jstr(const json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

static inline long long jint(const json_t *o, const char *key) {
  return (long long)json_integer_value(json_object_get(o, key));
}

#endif
