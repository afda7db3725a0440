/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded sentences: messages for people built up clause by clause in a
 * fixed buffer, cut (never overrun) where the buffer ends; and the nearest
 * known word to a misspelt one, for "did you mean" hints. */
#ifndef XF_BASE_TEXT_H
#define XF_BASE_TEXT_H

#include <stddef.h>

#include "base/result.h"

/* Appends "; " and the formatted clause to the NUL-terminated buf of len
 * bytes (the clause alone when buf is empty). Nothing is appended when
 * fewer than 3 bytes are left; a clause that does not fit is cut. */
void xf_text_append(char *buf, size_t len, const char *fmt, ...) XF_PRINTF(3, 4);

/* The edit distance between a and b: insertions, deletions, substitutions
 * and swaps of two neighbouring characters, one each (optimal string
 * alignment). Words longer than XF_TEXT_WORD_MAX bytes are at distance
 * SIZE_MAX from everything. */
#define XF_TEXT_WORD_MAX 64
size_t xf_text_distance(const char *a, const char *b);

/* The search for the known word nearest a misspelt one: start it with the
 * word typed, offer every candidate, then read the best. A candidate counts
 * when it is within 2 edits and the edits are at most a third of the longer
 * word's length ("jbo" -> "job", "lsit" -> "list", "--rounsd" -> "--rounds",
 * but not "ls" -> "list"); the first of equally near candidates wins. The
 * struct borrows the strings it is given. */
typedef struct xf_text_nearest {
  const char *typed;
  const char *best; /* NULL until a candidate counts */
  size_t best_distance;
} xf_text_nearest;

void xf_text_nearest_start(xf_text_nearest *n, const char *typed);
void xf_text_nearest_offer(xf_text_nearest *n, const char *candidate);
/* The nearest candidate that counts, or NULL. */
const char *xf_text_nearest_best(const xf_text_nearest *n);

#endif
