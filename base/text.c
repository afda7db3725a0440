/* SPDX-License-Identifier: Apache-2.0 */
#include "base/text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void xf_text_append(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strnlen(buf, len);
  if (used + 3 >= len) return;
  if (used) {
    memcpy(buf + used, "; ", 3);
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

size_t xf_text_distance(const char *a, const char *b) {
  size_t la = strnlen(a, XF_TEXT_WORD_MAX + 1), lb = strnlen(b, XF_TEXT_WORD_MAX + 1);
  if (la > XF_TEXT_WORD_MAX || lb > XF_TEXT_WORD_MAX) return SIZE_MAX;
  /* Three rows of the dynamic programme: i - 2, i - 1 and i. */
  size_t rows[3][XF_TEXT_WORD_MAX + 1];
  for (size_t j = 0; j <= lb; j++) rows[0][j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t *cur = rows[i % 3], *prev = rows[(i - 1) % 3], *prev2 = rows[(i + 1) % 3];
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t d = prev[j] + 1;                                /* delete */
      if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;            /* insert */
      if (prev[j - 1] + cost < d) d = prev[j - 1] + cost;    /* substitute */
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          prev2[j - 2] + 1 < d)
        d = prev2[j - 2] + 1;                                /* swap */
      cur[j] = d;
    }
  }
  return rows[la % 3][lb];
}

void xf_text_nearest_start(xf_text_nearest *n, const char *typed) {
  n->typed = typed;
  n->best = NULL;
  n->best_distance = SIZE_MAX;
}

void xf_text_nearest_offer(xf_text_nearest *n, const char *candidate) {
  if (!candidate || !n->typed) return;
  size_t d = xf_text_distance(n->typed, candidate);
  if (d == 0 || d == SIZE_MAX) return; /* the word itself is no suggestion */
  size_t lt = strlen(n->typed), lc = strlen(candidate);
  size_t longer = lt > lc ? lt : lc;
  if (d > 2 || 3 * d > longer) return;
  if (d < n->best_distance) {
    n->best = candidate;
    n->best_distance = d;
  }
}

const char *xf_text_nearest_best(const xf_text_nearest *n) { return n->best; }
