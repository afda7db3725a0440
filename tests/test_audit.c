/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the audit trail: append, list and export round trip, refusals,
 * and verification against an attacker who edits the database file directly
 * (editing, deleting, inserting and cutting off rows), with and without an
 * anchored head; two connections appending to one file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "policy/audit.h"

typedef struct scratch {
  char dir[512];
  char db_path[600];
  xf_db *db;
} scratch;

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s || xf_test_mkdtemp(s->dir, sizeof(s->dir), "audit") != 0) return -1;
  snprintf(s->db_path, sizeof(s->db_path), "%s/audit.db", s->dir);
  if (xf_audit_open(s->db_path, &s->db, NULL) != XF_OK) return -1;
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  xf_db_close(s->db);
  xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

static const char *const kinds[] = {"decision", "crossing", "policy_change", "refused_task"};

/* Appends rows first..last (seq i at time 1000 + i). */
static void append_rows(xf_db *db, int first, int last) {
  for (int i = first; i <= last; i++) {
    char subject[32], detail[96];
    snprintf(subject, sizeof(subject), "job-%d", i);
    snprintf(detail, sizeof(detail), "{\"site\": \"s%d\", \"allowed\": %s, \"i\": %d}", i,
             i % 2 ? "true" : "false", i);
    uint64_t seq = 0;
    xf_errctx err;
    assert_int_equal(xf_audit_append(db, 1000.0 + i, "coordinator", kinds[i % 4], subject, detail,
                                     &seq, &err),
                     XF_OK);
    assert_int_equal(seq, (uint64_t)i);
  }
}

/* The attacker: a plain SQLite connection to the file that first drops the
 * triggers, as anyone with write access to the file can. */
static sqlite3 *attacker(const scratch *s) {
  sqlite3 *c = NULL;
  assert_int_equal(sqlite3_open(s->db_path, &c), SQLITE_OK);
  assert_int_equal(sqlite3_exec(c,
                                "DROP TRIGGER IF EXISTS audit_no_update;"
                                "DROP TRIGGER IF EXISTS audit_no_delete;",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  return c;
}

static void attack(sqlite3 *c, const char *sql) {
  char *msg = NULL;
  if (sqlite3_exec(c, sql, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", sql, msg);
}

static xf_audit_verdict verify(const scratch *s, const xf_audit_anchor *anchor) {
  xf_audit_verdict v;
  xf_errctx err;
  assert_int_equal(xf_audit_verify_anchored(s->db, anchor, &v, &err), XF_OK);
  return v;
}

static void assert_fault(const xf_audit_verdict *v, xf_audit_fault fault, uint64_t seq,
                         const char *phrase) {
  if (v->fault != fault || v->seq != seq || !strstr(v->what, phrase))
    fail_msg("verdict %d at row %llu, \"%s\"; expected %d at row %llu naming \"%s\"", v->fault,
             (unsigned long long)v->seq, v->what, fault, (unsigned long long)seq, phrase);
}

/* ---- round trip ------------------------------------------------------------------ */

static void append_list_export_round_trip(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 3);

  xf_audit_row *rows = NULL;
  size_t n = 0;
  xf_errctx err;
  assert_int_equal(xf_audit_list(s->db, 0, 0, &rows, &n, &err), XF_OK);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(rows[i].seq, i + 1);
    assert_true(rows[i].at == 1001.0 + (double)i);
    assert_string_equal(rows[i].actor, "coordinator");
    assert_string_equal(rows[i].kind, kinds[(i + 1) % 4]);
    xf_digest d;
    char hex[XF_DIGEST_HEX];
    assert_int_equal(xf_audit_row_digest(&rows[i], &d), XF_OK);
    xf_digest_hex(&d, hex);
    assert_string_equal(hex, rows[i].digest);
    if (i == 0)
      assert_string_equal(rows[i].prev,
                          "0000000000000000000000000000000000000000000000000000000000000000");
    else
      assert_string_equal(rows[i].prev, rows[i - 1].digest);
  }
  /* Stored compact with sorted keys. */
  assert_string_equal(rows[0].detail, "{\"allowed\":true,\"i\":1,\"site\":\"s1\"}");

  xf_audit_anchor head;
  assert_int_equal(xf_audit_head(s->db, &head, &err), XF_OK);
  assert_int_equal(head.seq, 3);
  assert_string_equal(head.digest, rows[2].digest);

  xf_audit_row *some = NULL;
  size_t m = 0;
  assert_int_equal(xf_audit_list(s->db, 1002.0, 0, &some, &m, &err), XF_OK);
  assert_int_equal(m, 2);
  assert_int_equal(some[0].seq, 2);
  xf_audit_rows_free(some, m);
  assert_int_equal(xf_audit_list(s->db, 0, 1, &some, &m, &err), XF_OK);
  assert_int_equal(m, 1);
  assert_int_equal(some[0].seq, 1);
  xf_audit_rows_free(some, m);
  assert_int_equal(xf_audit_list(s->db, 5000.0, 0, &some, &m, &err), XF_OK);
  assert_int_equal(m, 0);
  assert_null(some);

  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(xf_audit_export(s->db, 1002.0, f, &err), XF_OK);
  assert_int_equal(fclose(f), 0);
  char *save = NULL;
  size_t lines = 0;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    const xf_audit_row *r = &rows[lines + 1];
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    if (!o) fail_msg("export line %zu is not JSON: %s", lines, je.text);
    assert_int_equal(json_integer_value(json_object_get(o, "seq")), (json_int_t)r->seq);
    assert_true(json_real_value(json_object_get(o, "at")) == r->at);
    assert_string_equal(json_string_value(json_object_get(o, "actor")), r->actor);
    assert_string_equal(json_string_value(json_object_get(o, "kind")), r->kind);
    assert_string_equal(json_string_value(json_object_get(o, "subject")), r->subject);
    assert_string_equal(json_string_value(json_object_get(o, "prev")), r->prev);
    assert_string_equal(json_string_value(json_object_get(o, "digest")), r->digest);
    json_t *detail = json_loads(r->detail, 0, NULL);
    assert_true(json_equal(json_object_get(o, "detail"), detail));
    json_decref(detail);
    json_decref(o);
    lines++;
  }
  assert_int_equal(lines, 2);
  free(text);
  xf_audit_rows_free(rows, n);
}

static void triggers_refuse_update_and_delete(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 2);
  xf_errctx err;
  assert_int_equal(xf_db_exec(s->db, "UPDATE audit SET actor = 'mallory'", &err), XF_EDB);
  assert_non_null(strstr(err.msg, "append-only"));
  assert_int_equal(xf_db_exec(s->db, "DELETE FROM audit WHERE seq = 2", &err), XF_EDB);
  assert_int_equal(verify(s, NULL).rows, 2);
}

static void bad_arguments_are_refused_and_name_the_field(void **state) {
  scratch *s = *state;
  xf_errctx err;
  struct {
    double at;
    const char *actor, *kind, *subject, *detail, *field;
  } cases[] = {
      {1, "c", "banana", "j", "{}", "kind"},
      {1, "c", "", "j", "{}", "kind"},
      {1, "c", "decision", "j", "{\"a\": ", "detail"},
      {1, "c", "decision", "j", "{\"a\": 1, \"a\": 2}", "detail"},
      {1, "c", "decision", "j", "", "detail"},
      {1, "c", "decision", "j", NULL, "detail"},
      {1, "", "decision", "j", "{}", "actor"},
      {1, NULL, "decision", "j", "{}", "actor"},
      {1, "c", "decision", "", "{}", "subject"},
      {1, "c", "decision", "\xff\xfe", "{}", "subject"},
      {NAN, "c", "decision", "j", "{}", "at"},
      {INFINITY, "c", "decision", "j", "{}", "at"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    xf_errctx_clear(&err);
    uint64_t seq = 77;
    xf_err rc = xf_audit_append(s->db, cases[i].at, cases[i].actor, cases[i].kind,
                                cases[i].subject, cases[i].detail, &seq, &err);
    if (rc != XF_EINVAL || strcmp(err.field, cases[i].field) != 0)
      fail_msg("case %zu: %s, field '%s' (%s); expected XF_EINVAL naming %s", i, xf_err_name(rc),
               err.field, err.msg, cases[i].field);
    assert_int_equal(seq, 77);
  }
  xf_audit_anchor head;
  assert_int_equal(xf_audit_head(s->db, &head, &err), XF_OK);
  assert_int_equal(head.seq, 0);
  /* Any JSON value is a detail, not only objects. */
  assert_int_equal(xf_audit_append(s->db, 1, "c", "job", "j", "[1, 2]", NULL, &err), XF_OK);
  assert_int_equal(xf_audit_append(s->db, 1, "c", "job", "j", "\"x\"", NULL, &err), XF_OK);
}

/* ---- verification ---------------------------------------------------------------- */

static void verify_finds_a_clean_chain_intact(void **state) {
  scratch *s = *state;
  xf_audit_verdict v = verify(s, NULL);
  assert_int_equal(v.fault, XF_AUDIT_INTACT);
  assert_int_equal(v.rows, 0);
  append_rows(s->db, 1, 5);
  v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "5 rows, chain intact");
  assert_int_equal(v.rows, 5);
  xf_audit_anchor head;
  xf_errctx err;
  assert_int_equal(xf_audit_head(s->db, &head, &err), XF_OK);
  assert_int_equal(v.head.seq, head.seq);
  assert_string_equal(v.head.digest, head.digest);
}

static void verify_names_an_edited_row(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 5);
  sqlite3 *c = attacker(s);
  attack(c, "UPDATE audit SET detail = '{\"allowed\":false,\"i\":3,\"site\":\"s3\"}' WHERE seq = 3");
  sqlite3_close(c);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_EDITED, 3, "row 3 was edited");
  assert_int_equal(v.rows, 2);
}

static void verify_names_an_edited_link(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 4);
  sqlite3 *c = attacker(s);
  attack(c, "UPDATE audit SET prev = 'zz' WHERE seq = 2");
  sqlite3_close(c);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_EDITED, 2, "row 2 was edited");
}

static void verify_names_a_deleted_middle_row(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 5);
  sqlite3 *c = attacker(s);
  attack(c, "DELETE FROM audit WHERE seq = 3");
  sqlite3_close(c);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_DELETED, 3, "row 3 was deleted");

  c = attacker(s);
  attack(c, "DELETE FROM audit WHERE seq = 1");
  sqlite3_close(c);
  v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_DELETED, 1, "row 1 was deleted");
}

static void verify_names_a_deleted_row_when_the_rest_were_renumbered(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 5);
  sqlite3 *c = attacker(s);
  attack(c, "DELETE FROM audit WHERE seq = 3;"
            "UPDATE audit SET seq = 3 WHERE seq = 4;"
            "UPDATE audit SET seq = 4 WHERE seq = 5;");
  sqlite3_close(c);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_DELETED, 3, "row 3 was deleted");
}

/* Shifts rows 3..4 up by one and puts a forged row 3 between rows 2 and 3,
 * linked to row 2 and with a valid digest of its own. */
static void forge_row_3(const scratch *s, sqlite3 *c) {
  xf_audit_row *rows = NULL;
  size_t n = 0;
  xf_errctx err;
  assert_int_equal(xf_audit_list(s->db, 0, 2, &rows, &n, &err), XF_OK);
  assert_int_equal(n, 2);
  xf_audit_row forged = {.seq = 3, .at = 1002.5, .actor = "coordinator", .kind = "decision",
                         .subject = "job-x", .detail = "{\"allowed\":true,\"site\":\"evil\"}"};
  memcpy(forged.prev, rows[1].digest, XF_DIGEST_HEX);
  xf_digest d;
  assert_int_equal(xf_audit_row_digest(&forged, &d), XF_OK);
  xf_digest_hex(&d, forged.digest);
  xf_audit_rows_free(rows, n);

  attack(c, "UPDATE audit SET seq = 5 WHERE seq = 4; UPDATE audit SET seq = 4 WHERE seq = 3;");
  char sql[512];
  snprintf(sql, sizeof(sql),
           "INSERT INTO audit VALUES (3, %.17g, '%s', '%s', '%s', '%s', '%s', '%s')", forged.at,
           forged.actor, forged.kind, forged.subject, forged.detail, forged.prev, forged.digest);
  attack(c, sql);
}

static void verify_names_a_forged_row_inserted_between_two(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 4);
  sqlite3 *c = attacker(s);
  forge_row_3(s, c);
  sqlite3_close(c);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_INSERTED, 3, "row 3 was inserted");
}

/* The same, with the renumbered rows re-hashed under their new seq (their
 * prev left as it was): the link of row 4 gives the insertion away. */
static void verify_names_an_inserted_row_when_the_rest_were_rehashed(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 4);
  sqlite3 *c = attacker(s);
  forge_row_3(s, c);
  xf_audit_row *rows = NULL;
  size_t n = 0;
  xf_errctx err;
  assert_int_equal(xf_audit_list(s->db, 0, 0, &rows, &n, &err), XF_OK);
  assert_int_equal(n, 5);
  for (size_t i = 3; i < 5; i++) {
    xf_digest d;
    char hex[XF_DIGEST_HEX], sql[200];
    assert_int_equal(xf_audit_row_digest(&rows[i], &d), XF_OK);
    xf_digest_hex(&d, hex);
    snprintf(sql, sizeof(sql), "UPDATE audit SET digest = '%s' WHERE seq = %llu", hex,
             (unsigned long long)rows[i].seq);
    attack(c, sql);
  }
  xf_audit_rows_free(rows, n);
  sqlite3_close(c);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_INSERTED, 3, "row 3 was inserted: row 4 links to row 2");
}

static void a_cut_off_end_is_found_only_with_an_anchor(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 4);
  xf_audit_anchor anchor;
  xf_errctx err;
  assert_int_equal(xf_audit_head(s->db, &anchor, &err), XF_OK);
  assert_int_equal(anchor.seq, 4);
  xf_audit_verdict v = verify(s, &anchor);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "4 rows, chain intact");

  sqlite3 *c = attacker(s);
  attack(c, "DELETE FROM audit WHERE seq = 4");
  sqlite3_close(c);

  v = verify(s, NULL); /* the shorter chain is a valid chain */
  assert_fault(&v, XF_AUDIT_INTACT, 0, "3 rows, chain intact");
  v = verify(s, &anchor);
  assert_fault(&v, XF_AUDIT_TRUNCATED, 4, "rows 4 to 4 were cut off");
  assert_int_equal(v.rows, 3);

  /* Re-appending a different row 4 does not satisfy the anchor either. */
  assert_int_equal(xf_audit_append(s->db, 2000, "mallory", "decision", "job-4", "{}", NULL, &err),
                   XF_OK);
  v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "4 rows");
  v = verify(s, &anchor);
  assert_fault(&v, XF_AUDIT_EDITED, 4, "does not carry the anchored digest");

  xf_audit_anchor bad = {.seq = 1, .digest = "nope"};
  assert_int_equal(xf_audit_verify_anchored(s->db, &bad, &v, &err), XF_EINVAL);
}

/* ---- concurrency and memory ------------------------------------------------------ */

static void two_writers_on_one_file_keep_one_chain(void **state) {
  scratch *s = *state;
  xf_db *other = NULL;
  xf_errctx err;
  assert_int_equal(xf_audit_open(s->db_path, &other, &err), XF_OK);
  for (int i = 0; i < 20; i++) {
    uint64_t seq = 0;
    assert_int_equal(xf_audit_append(i % 2 ? other : s->db, 100.0 + i, i % 2 ? "site-b" : "site-a",
                                     "crossing", "job-1", "{\"round\": 1}", &seq, &err),
                     XF_OK);
    assert_int_equal(seq, (uint64_t)i + 1);
  }
  xf_db_close(other);
  xf_audit_verdict v = verify(s, NULL);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "20 rows, chain intact");
}

static void list_frees_everything_when_allocation_fails(void **state) {
  scratch *s = *state;
  append_rows(s->db, 1, 20);
  for (long k = 0;; k++) {
    xf_audit_row *rows = NULL;
    size_t n = 0;
    xf_errctx err;
    xf_alloc_fail_after(k);
    xf_err rc = xf_audit_list(s->db, 0, 0, &rows, &n, &err);
    xf_alloc_fail_reset();
    if (rc == XF_OK) {
      assert_int_equal(n, 20);
      xf_audit_rows_free(rows, n);
      break;
    }
    assert_int_equal(rc, XF_ENOMEM);
    assert_null(rows);
    assert_int_equal(n, 0);
    assert_true(k < 1000);
  }
}

/* ---- reading a trail offline ---------------------------------------------------------- */

/* The whole file, for comparing bytes before and after. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* A plain copy of one file, as `cp` makes it. */
static void copy_file(const char *from, const char *to) {
  size_t n;
  char *buf = slurp(from, &n);
  FILE *f = fopen(to, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  free(buf);
}

static bool exists(const char *dir, const char *name) {
  char path[700];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

static void readonly_verify_leaves_the_file_as_it_was(void **state) {
  scratch *s = *state;
  assert_int_equal(xf_audit_keeper_start(s->db, 5000, NULL), XF_OK);
  append_rows(s->db, 1, 12);
  assert_int_equal(xf_audit_keeper_stop(s->db, 5001, NULL), XF_OK);
  xf_db_close(s->db); /* the daemon's clean stop: the -wal is folded in and gone */
  s->db = NULL;
  assert_false(exists(s->dir, "audit.db-wal"));
  struct stat before, after;
  assert_int_equal(stat(s->db_path, &before), 0);
  size_t n0, n1;
  char *bytes0 = slurp(s->db_path, &n0);
  xf_db *db = NULL;
  xf_audit_trail_info info;
  xf_errctx err = {0};
  assert_int_equal(xf_audit_open_readonly(s->db_path, &db, &info, &err), XF_OK);
  assert_int_equal(info.kind, XF_AUDIT_TRAIL_STANDALONE);
  assert_true(info.kept);
  assert_false(info.running);
  assert_true(info.file.wal_mode);
  xf_audit_verdict v;
  assert_int_equal(xf_audit_verify(db, &v, &err), XF_OK);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "12 rows, chain intact");
  /* A write is refused: the connection is read-only. */
  assert_int_not_equal(xf_audit_append(db, 6000, "x", "decision", "y", "{}", NULL, &err), XF_OK);
  xf_db_close(db);
  assert_int_equal(stat(s->db_path, &after), 0);
  char *bytes1 = slurp(s->db_path, &n1);
  assert_int_equal(n0, n1);
  assert_memory_equal(bytes0, bytes1, n0);
  assert_int_equal(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  assert_int_equal(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  /* Nothing appeared beside it either. */
  assert_false(exists(s->dir, "audit.db-wal"));
  assert_false(exists(s->dir, "audit.db-shm"));
  free(bytes0);
  free(bytes1);
}

static void plain_copy_of_a_running_trail_is_refused(void **state) {
  scratch *s = *state;
  assert_int_equal(xf_audit_keeper_start(s->db, 5000, NULL), XF_OK);
  append_rows(s->db, 1, 7); /* in the -wal only: no checkpoint since the start */
  char copy[700], copy_wal[720], wal[620];
  snprintf(copy, sizeof(copy), "%s/copy.db", s->dir);
  copy_file(s->db_path, copy);
  xf_db *db = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_audit_open_readonly(copy, &db, NULL, &err), XF_ETRUNCATED);
  assert_null(db);
  assert_non_null(strstr(err.msg, "without its -wal file"));
  assert_non_null(strstr(err.msg, "xfed-coord backup"));
  /* The live file, its -wal beside it, is read through the -wal and left
   * as it was: no checkpoint moves the rows into the main file. */
  snprintf(wal, sizeof(wal), "%s-wal", s->db_path);
  size_t m0, w0, m1, w1;
  char *main0 = slurp(s->db_path, &m0), *wal0 = slurp(wal, &w0);
  assert_int_equal(xf_audit_open_readonly(s->db_path, &db, NULL, &err), XF_OK);
  xf_audit_verdict live;
  assert_int_equal(xf_audit_verify(db, &live, &err), XF_OK);
  assert_fault(&live, XF_AUDIT_INTACT, 0, "7 rows, chain intact");
  xf_db_close(db);
  char *main1 = slurp(s->db_path, &m1), *wal1 = slurp(wal, &w1);
  assert_int_equal(m0, m1);
  assert_memory_equal(main0, main1, m0);
  assert_int_equal(w0, w1);
  assert_memory_equal(wal0, wal1, w0);
  free(main0);
  free(main1);
  free(wal0);
  free(wal1);
  /* With the -wal copied beside it, the rows are there. */
  snprintf(copy_wal, sizeof(copy_wal), "%s-wal", copy);
  copy_file(wal, copy_wal);
  assert_int_equal(xf_audit_open_readonly(copy, &db, NULL, &err), XF_OK);
  xf_audit_verdict v;
  assert_int_equal(xf_audit_verify(db, &v, &err), XF_OK);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "7 rows, chain intact");
  xf_db_close(db);
}

static void a_checkpointed_copy_holds_the_rows_up_to_the_mark(void **state) {
  scratch *s = *state;
  assert_int_equal(xf_audit_keeper_start(s->db, 5000, NULL), XF_OK);
  append_rows(s->db, 1, 5);
  assert_int_equal(xf_audit_keeper_mark(s->db, 5002, NULL), XF_OK); /* a job's end */
  xf_db *db = NULL;
  xf_errctx err = {0};
  /* The main file now holds the rows: read it as if nothing were beside it. */
  char copy[700];
  snprintf(copy, sizeof(copy), "%s/copy.db", s->dir);
  copy_file(s->db_path, copy);
  sqlite3 *raw = NULL;
  assert_int_equal(sqlite3_open_v2(copy, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(raw, "SELECT count(*) FROM audit", -1, &st, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int(st, 0), 5);
  sqlite3_finalize(st);
  sqlite3_close(raw);
  /* Still a copy of a running daemon's file: refused as incomplete. */
  char copy2[700];
  snprintf(copy2, sizeof(copy2), "%s/copy2.db", s->dir);
  copy_file(s->db_path, copy2);
  assert_int_equal(xf_audit_open_readonly(copy2, &db, NULL, &err), XF_ETRUNCATED);
  assert_non_null(strstr(err.msg, "1970-01-01 01:23:22 UTC"));
}

static void backup_of_a_running_trail_verifies_whole(void **state) {
  scratch *s = *state;
  assert_int_equal(xf_audit_keeper_start(s->db, 5000, NULL), XF_OK);
  append_rows(s->db, 1, 9);
  char backup[700];
  snprintf(backup, sizeof(backup), "%s/backup.db", s->dir);
  xf_errctx err = {0};
  assert_int_equal(xf_db_backup(s->db, backup, &err), XF_OK);
  xf_db *db = NULL;
  xf_audit_trail_info info;
  assert_int_equal(xf_audit_open_readonly(backup, &db, &info, &err), XF_OK);
  assert_false(info.file.wal_mode); /* one self-contained file */
  xf_audit_verdict v;
  assert_int_equal(xf_audit_verify(db, &v, &err), XF_OK);
  assert_fault(&v, XF_AUDIT_INTACT, 0, "9 rows, chain intact");
  xf_db_close(db);
}

static void a_file_that_is_not_a_trail_is_refused(void **state) {
  scratch *s = *state;
  char text[700], other[700];
  snprintf(text, sizeof(text), "%s/notes.txt", s->dir);
  FILE *f = fopen(text, "w");
  assert_non_null(f);
  fputs("these are not the rows you are looking for\n", f);
  fclose(f);
  xf_db *db = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_audit_open_readonly(text, &db, NULL, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "is not an SQLite database"));
  snprintf(other, sizeof(other), "%s/other.db", s->dir);
  sqlite3 *raw = NULL;
  assert_int_equal(sqlite3_open(other, &raw), SQLITE_OK);
  assert_int_equal(sqlite3_exec(raw, "CREATE TABLE policy_version (version INTEGER)", NULL, NULL,
                                NULL),
                   SQLITE_OK);
  sqlite3_close(raw);
  assert_int_equal(xf_audit_open_readonly(other, &db, NULL, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "not an audit trail"));
  assert_non_null(strstr(err.msg, "policy_version"));
  char missing[700];
  snprintf(missing, sizeof(missing), "%s/missing.db", s->dir);
  assert_int_equal(xf_audit_open_readonly(missing, &db, NULL, &err), XF_ENOENT);
  assert_false(exists(s->dir, "missing.db"));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, scratch_setup, scratch_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(append_list_export_round_trip),
      T(triggers_refuse_update_and_delete),
      T(bad_arguments_are_refused_and_name_the_field),
      T(verify_finds_a_clean_chain_intact),
      T(verify_names_an_edited_row),
      T(verify_names_an_edited_link),
      T(verify_names_a_deleted_middle_row),
      T(verify_names_a_deleted_row_when_the_rest_were_renumbered),
      T(verify_names_a_forged_row_inserted_between_two),
      T(verify_names_an_inserted_row_when_the_rest_were_rehashed),
      T(a_cut_off_end_is_found_only_with_an_anchor),
      T(two_writers_on_one_file_keep_one_chain),
      T(list_frees_everything_when_allocation_fails),
      T(readonly_verify_leaves_the_file_as_it_was),
      T(plain_copy_of_a_running_trail_is_refused),
      T(a_checkpointed_copy_holds_the_rows_up_to_the_mark),
      T(backup_of_a_running_trail_verifies_whole),
      T(a_file_that_is_not_a_trail_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
