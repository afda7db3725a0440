/* SPDX-License-Identifier: Apache-2.0 */
/* An audit trail's rows and a verification's verdict as `xfed audit` and
 * `xfed-site audit` print them (cmd/print.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/print.h"
#include "policy/audit.h"

/* A row as export writes it: the object for --json and the table. */
static json_t *row_json(const xf_audit_row *r) {
  json_t *detail = json_loads(r->detail, JSON_DECODE_ANY, NULL);
  return json_pack("{s:I,s:f,s:s,s:s,s:s,s:o,s:s,s:s}", "seq", (json_int_t)r->seq, "at", r->at,
                   "actor", r->actor, "kind", r->kind, "subject", r->subject, "detail",
                   detail ? detail : json_string(r->detail), "prev", r->prev, "digest",
                   r->digest);
}

static const char *jstr(const json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

/* The table's DETAIL is at most this many characters; --json has it all. */
#define DETAIL_WIDTH 120

/* buf = text, cut to DETAIL_WIDTH characters ending in "..." when longer. */
static void put_cut(char *buf, size_t n, const char *text) {
  size_t len = strlen(text), room = n - 1 < DETAIL_WIDTH ? n - 1 : DETAIL_WIDTH;
  if (len <= room) {
    memcpy(buf, text, len + 1);
    return;
  }
  memcpy(buf, text, room - 3);
  memcpy(buf + room - 3, "...", 4);
}

/* The DETAIL of a row: an object's scalar members as key=value in their
 * order (empty ones left out), its nested members (a whole admission, a decision) by name after
 * "+"; anything else (a string, a tampered row's text) as it is. Cut to
 * DETAIL_WIDTH characters. */
static void detail_summary(const json_t *detail, char *buf, size_t n) {
  if (json_is_string(detail)) {
    put_cut(buf, n, json_string_value(detail));
    return;
  }
  if (!json_is_object(detail)) {
    char *text = json_dumps(detail, JSON_COMPACT | JSON_ENCODE_ANY);
    put_cut(buf, n, text ? text : "");
    free(text); /* jansson's */
    return;
  }
  char line[1024] = "", nested[512] = "";
  size_t used = 0, nused = 0;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)detail, k, v) {
    int w;
    if (json_is_object(v) || json_is_array(v)) {
      w = snprintf(nested + nused, sizeof(nested) - nused, "%s%s", nused ? "," : " +", k);
      if (w > 0 && (size_t)w < sizeof(nested) - nused) nused += (size_t)w;
      continue;
    }
    if (json_is_null(v) || (json_is_string(v) && !*json_string_value(v))) continue;
    char *scalar = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    const char *text = scalar ? scalar : json_string_value(v);
    w = snprintf(line + used, sizeof(line) - used, "%s%s=%s", used ? " " : "", k,
                 text ? text : "");
    free(scalar); /* jansson's */
    if (w > 0 && (size_t)w < sizeof(line) - used) used += (size_t)w;
  }
  if (nused && used + nused < sizeof(line)) memcpy(line + used, nested, nused + 1);
  put_cut(buf, n, line);
}

void xf_cli_audit_rows_print_json(xf_cli *cli, json_t *rows) {
  if (cli->json) {
    xf_cli_print_json(json_pack("{s:o}", "rows", rows));
    return;
  }
  char when[32];
  printf("%-6s %-20s %-18s %-24s %-20s %s\n", "SEQ", "TIME (UTC)", "KIND", "ACTOR", "SUBJECT",
         "DETAIL");
  size_t i;
  json_t *r;
  json_array_foreach(rows, i, r) {
    char detail[DETAIL_WIDTH + 1];
    detail_summary(json_object_get(r, "detail"), detail, sizeof(detail));
    printf("%-6lld %-20s %-18s %-24s %-20s %s\n",
           (long long)json_integer_value(json_object_get(r, "seq")),
           xf_cli_utc_text(json_number_value(json_object_get(r, "at")), when), jstr(r, "kind"),
           jstr(r, "actor"), jstr(r, "subject"), detail);
  }
  json_decref(rows);
}

void xf_cli_audit_rows_print(xf_cli *cli, const xf_audit_row *list, size_t n) {
  json_t *rows = json_array();
  for (size_t i = 0; rows && i < n; i++) json_array_append_new(rows, row_json(&list[i]));
  xf_cli_audit_rows_print_json(cli, rows);
}

int xf_cli_audit_verdict_print(xf_cli *cli, const xf_audit_verdict *v, const char *trail) {
  bool intact = v->fault == XF_AUDIT_INTACT;
  if (cli->json) {
    json_t *o = json_pack("{s:b,s:s,s:I,s:I,s:s,s:{s:I,s:s}}", "intact", intact, "fault",
                          xf_audit_fault_name(v->fault), "rows", (json_int_t)v->rows, "seq",
                          (json_int_t)v->seq, "what", v->what, "head", "seq",
                          (json_int_t)v->head.seq, "digest", v->head.digest);
    if (o && trail) json_object_set_new(o, "trail", json_string(trail));
    xf_cli_print_json(o);
  } else if (intact) {
    if (trail) printf("%s: ", trail);
    printf("%s\n", v->what);
    printf("head: row %llu, digest %s (keep it elsewhere to detect a cut end later)\n",
           (unsigned long long)v->head.seq, v->head.digest);
  } else {
    if (trail) printf("%s: ", trail);
    printf("TAMPERED at row %llu (%s): %s\n", (unsigned long long)v->seq,
           xf_audit_fault_name(v->fault), v->what);
  }
  return intact ? XF_EXIT_OK : XF_EXIT_ERROR;
}
