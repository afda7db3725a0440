/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded sentences: messages for people built up clause by clause in a
 * fixed buffer, cut (never overrun) where the buffer ends. */
#ifndef XF_BASE_TEXT_H
#define XF_BASE_TEXT_H

#include <stddef.h>

#include "base/result.h"

/* Appends "; " and the formatted clause to the NUL-terminated buf of len
 * bytes (the clause alone when buf is empty). Nothing is appended when
 * fewer than 3 bytes are left; a clause that does not fit is cut. */
void xf_text_append(char *buf, size_t len, const char *fmt, ...) XF_PRINTF(3, 4);

#endif
