/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine's transition table (coordinator/jobm_table.h): every
 * phase reachable, every row well formed and alone for its (phase, event),
 * and docs/job-machine.md's table of moves the same as the machine's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#include "coordinator/jobm_table.h"

#define N_PHASES (XF_JOBM_CANCELLED + 1)
#define ALL_PHASES (XF_JOBM_PHASE_BIT(N_PHASES) - 1)

static char dir[256];

static int group_setup(void **state) {
  (void)state;
  return xf_test_mkdtemp(dir, sizeof(dir), "jobm-table") == 0 ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(dir);
  return 0;
}

/* moves[p][e]: the phases event e may take phase p to (0: none listed). */
typedef unsigned moves[N_PHASES][XF_JOBM_EV_COUNT];

static void table_moves(moves out) {
  memset(out, 0, sizeof(moves));
  size_t n;
  const xf_jobm_transition *t = xf_jobm_transitions(&n);
  for (size_t i = 0; i < n; i++)
    for (int p = 0; p < N_PHASES; p++)
      if (t[i].phases & XF_JOBM_PHASE_BIT(p)) out[p][t[i].event] |= t[i].next;
}

static int phase_named(const char *s) {
  for (int p = 0; p < N_PHASES; p++)
    if (strcmp(xf_jobm_phase_name((xf_jobm_phase)p), s) == 0) return p;
  return -1;
}

static int event_named(const char *s) {
  for (int e = 0; e < XF_JOBM_EV_COUNT; e++)
    if (strcmp(xf_jobm_event_name((xf_jobm_event)e), s) == 0) return e;
  return -1;
}

/* Cuts a table row into its cells (trimmed, in place); how many. */
static size_t cells(char *line, char **cell, size_t max) {
  size_t n = 0;
  char *s = line;
  if (*s == '|') s++;
  while (n < max && *s) {
    char *end = strchr(s, '|');
    if (!end) break;
    *end = '\0';
    while (*s == ' ') s++;
    char *t = end;
    while (t > s && t[-1] == ' ') *--t = '\0';
    cell[n++] = s;
    s = end + 1;
  }
  return n;
}

/* Reads the doc's table of moves (the one headed phase | event | next).
 * 0, or -1 with why. */
static int doc_moves(const char *path, moves out, char *why, size_t cap) {
  memset(out, 0, sizeof(moves));
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(why, cap, "cannot open %s", path);
    return -1;
  }
  char line[1024];
  bool in_table = false, seen = false;
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *cell[8];
    size_t n = line[0] == '|' ? cells(line, cell, 8) : 0;
    if (!in_table) {
      in_table = n >= 3 && strcmp(cell[0], "phase") == 0 && strcmp(cell[1], "event") == 0 &&
                 strcmp(cell[2], "next") == 0;
      seen |= in_table;
      continue;
    }
    if (n == 0) break; /* the table's end */
    if (n < 3 || strncmp(cell[0], "---", 3) == 0) continue;
    int p = phase_named(cell[0]), e = event_named(cell[1]);
    if (p < 0 || e < 0) {
      snprintf(why, cap, "row %s | %s: no such %s", cell[0], cell[1], p < 0 ? "phase" : "event");
      rc = -1;
      break;
    }
    if (out[p][e]) {
      snprintf(why, cap, "row %s | %s twice", cell[0], cell[1]);
      rc = -1;
      break;
    }
    for (char *tok = strtok(cell[2], ","); tok; tok = strtok(NULL, ",")) {
      while (*tok == ' ') tok++;
      int q = phase_named(tok);
      if (q < 0) {
        snprintf(why, cap, "row %s | %s: no such next phase %s", cell[0], cell[1], tok);
        rc = -1;
        break;
      }
      out[p][e] |= XF_JOBM_PHASE_BIT(q);
    }
  }
  fclose(f);
  if (rc == 0 && !seen) {
    snprintf(why, cap, "%s has no table headed phase | event | next", path);
    rc = -1;
  }
  return rc;
}

/* The phases of mask, as the doc writes them ("-" for none). */
static const char *phases_named(unsigned mask, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int p = 0; p < N_PHASES; p++)
    if (mask & XF_JOBM_PHASE_BIT(p))
      snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? ", " : "",
               xf_jobm_phase_name((xf_jobm_phase)p));
  return buf[0] ? buf : "-";
}

/* 0 when the doc's moves are the table's, else -1 with the first difference. */
static int doc_agrees(const char *path, char *why, size_t cap) {
  moves doc, table;
  if (doc_moves(path, doc, why, cap) != 0) return -1;
  table_moves(table);
  for (int p = 0; p < N_PHASES; p++)
    for (int e = 0; e < XF_JOBM_EV_COUNT; e++) {
      if (doc[p][e] == table[p][e]) continue;
      char d[160], m[160];
      snprintf(why, cap, "%s | %s: the doc says next %s, the machine %s",
               xf_jobm_phase_name((xf_jobm_phase)p), xf_jobm_event_name((xf_jobm_event)e),
               phases_named(doc[p][e], d, sizeof(d)), phases_named(table[p][e], m, sizeof(m)));
      return -1;
    }
  return 0;
}

static const char *doc_path(char *buf, size_t cap) {
  const char *src = getenv("XF_SOURCE_DIR");
  if (!src) fail_msg("XF_SOURCE_DIR is not set; run the test through ctest");
  snprintf(buf, cap, "%s/docs/job-machine.md", src);
  return buf;
}

static void every_phase_is_reachable_from_the_phases_a_machine_starts_in(void **state) {
  (void)state;
  moves t;
  table_moves(t);
  unsigned reached = XF_JOBM_PHASE_BIT(XF_JOBM_WAITING) | XF_JOBM_PHASE_BIT(XF_JOBM_PAUSED) |
                     XF_JOBM_PHASE_BIT(XF_JOBM_EVALUATING);
  for (unsigned before = 0; before != reached;) {
    before = reached;
    for (int p = 0; p < N_PHASES; p++)
      if (reached & XF_JOBM_PHASE_BIT(p))
        for (int e = 0; e < XF_JOBM_EV_COUNT; e++) reached |= t[p][e];
  }
  for (int p = 0; p < N_PHASES; p++)
    if (!(reached & XF_JOBM_PHASE_BIT(p)))
      fail_msg("no move leads to %s", xf_jobm_phase_name((xf_jobm_phase)p));
}

static void every_row_names_real_phases_and_events_and_every_step_moves(void **state) {
  (void)state;
  size_t n;
  const xf_jobm_transition *t = xf_jobm_transitions(&n);
  assert_true(n > 0);
  for (size_t i = 0; i < n; i++) {
    assert_true((unsigned)t[i].event < XF_JOBM_EV_COUNT);
    const char *ev = xf_jobm_event_name(t[i].event);
    assert_string_not_equal(ev, "unknown");
    if (t[i].phases == 0 || (t[i].phases & ~ALL_PHASES))
      fail_msg("row %zu (%s) is for no phase, or for one that is not", i, ev);
    if (t[i].next & ~ALL_PHASES) fail_msg("row %zu (%s) lands in no real phase", i, ev);
    /* A step is a move; a row with two next phases needs a handler to choose. */
    if (t[i].event >= XF_JOBM_EV_FIRST_STEP && t[i].next == 0)
      fail_msg("step %s (row %zu) moves nowhere", ev, i);
    if ((t[i].next & (t[i].next - 1)) && !t[i].run)
      fail_msg("row %zu (%s) has several next phases and no handler to choose", i, ev);
  }
  /* The caller's events move the phase by their steps alone, but cancel. */
  for (size_t i = 0; i < n; i++)
    if (t[i].event < XF_JOBM_EV_FIRST_STEP && t[i].next && t[i].event != XF_JOBM_EV_CANCEL)
      fail_msg("row %zu: %s moves the phase itself", i, xf_jobm_event_name(t[i].event));
}

static void no_two_rows_take_the_same_event_in_the_same_phase(void **state) {
  (void)state;
  size_t n;
  const xf_jobm_transition *t = xf_jobm_transitions(&n);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (t[i].event == t[j].event && (t[i].phases & t[j].phases))
        fail_msg("rows %zu and %zu both take %s in phases 0x%x", i, j,
                 xf_jobm_event_name(t[i].event), t[i].phases & t[j].phases);
}

static void the_docs_table_of_moves_is_the_machines(void **state) {
  (void)state;
  char path[512], why[512] = "";
  if (doc_agrees(doc_path(path, sizeof(path)), why, sizeof(why)) != 0) fail_msg("%s", why);
}

/* Writes the doc with `from` (a whole line) replaced by `to` ("" drops it). */
static void perturbed_doc(const char *out, const char *from, const char *to) {
  char path[512];
  FILE *in = fopen(doc_path(path, sizeof(path)), "r");
  FILE *o = fopen(out, "w");
  assert_non_null(in);
  assert_non_null(o);
  char line[1024];
  bool found = false;
  while (fgets(line, sizeof(line), in)) {
    if (strcmp(line, from) == 0) {
      found = true;
      fputs(to, o);
    } else {
      fputs(line, o);
    }
  }
  fclose(in);
  fclose(o);
  if (!found) fail_msg("the doc has no line %s", from);
}

static void a_doc_whose_moves_differ_from_the_machines_fails_the_check(void **state) {
  (void)state;
  static const char *const line =
      "| confirming | train | training | every carrier answered and enough accepted: `GO` |\n";
  static const struct {
    const char *to, *says;
  } cases[] = {
      {"| confirming | train | unmasking | GO |\n", "confirming | train"},      /* wrong next */
      {"", "confirming | train"},                                              /* a move left out */
      {"| confirming | train | training, done | GO |\n", "confirming | train"}, /* one too many */
      {"| confirming | open | training | GO |\n", "confirming | open"},         /* no such move */
      {"| confirming | tran | training | GO |\n", "no such event"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char copy[320], why[512] = "";
    snprintf(copy, sizeof(copy), "%s/job-machine-%zu.md", dir, i);
    perturbed_doc(copy, line, cases[i].to);
    assert_int_equal(doc_agrees(copy, why, sizeof(why)), -1);
    if (!strstr(why, cases[i].says))
      fail_msg("case %zu: %s does not say %s", i, why, cases[i].says);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_phase_is_reachable_from_the_phases_a_machine_starts_in),
      cmocka_unit_test(every_row_names_real_phases_and_events_and_every_step_moves),
      cmocka_unit_test(no_two_rows_take_the_same_event_in_the_same_phase),
      cmocka_unit_test(the_docs_table_of_moves_is_the_machines),
      cmocka_unit_test(a_doc_whose_moves_differ_from_the_machines_fails_the_check),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
