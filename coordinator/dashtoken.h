/* SPDX-License-Identifier: Apache-2.0 */
/* The dashboard's access tokens and sessions (docs/dashboard.md): a token
 * the CLI gets over its mutual-TLS session, good once and for at most an
 * hour, is exchanged for a session of the same end, carried by a cookie.
 * Only BLAKE2b hashes of both are kept, in memory; the clock is the
 * caller's. Not safe for concurrent use (the coordinator's loop thread). */
#ifndef XF_COORDINATOR_DASHTOKEN_H
#define XF_COORDINATOR_DASHTOKEN_H

#include <stdbool.h>

#include "base/result.h"

/* 32 random bytes as hex, and its NUL. */
#define XF_DASH_SECRET_HEX 65
#define XF_DASH_TTL_DEFAULT_S 900
#define XF_DASH_TTL_MAX_S 3600
/* Tokens and sessions held at once; past that the one that ends first
 * makes room (a flood of requests cannot grow the coordinator). */
#define XF_DASH_HELD_MAX 256

typedef struct xf_dash_tokens xf_dash_tokens;

/* NULL when out of memory. */
xf_dash_tokens *xf_dash_tokens_new(void);
void xf_dash_tokens_free(xf_dash_tokens *t);

/* A new token for a user of `role` (the caller's own numbering, handed back
 * by exchange and session), good from now for ttl_s seconds (0: the
 * default): its text into token (the only copy; never logged) and its end
 * into *expires. XF_ERANGE for a ttl_s above XF_DASH_TTL_MAX_S. */
xf_err xf_dash_issue(xf_dash_tokens *t, double now, unsigned ttl_s, int role,
                     char token[XF_DASH_SECRET_HEX], double *expires,
                     xf_errctx *err) XF_WARN_UNUSED;

/* Spends a token: true when it was issued, is unspent and has not ended;
 * then a session ending when the token would have is made, its text goes
 * into session, its role into *role and its end into *expires. A token is
 * spent by its first exchange, whether or not the cookie reaches the
 * browser. */
bool xf_dash_exchange(xf_dash_tokens *t, const char *token, double now,
                      char session[XF_DASH_SECRET_HEX], int *role, double *expires);

/* True when session is a live session; its role into *role. */
bool xf_dash_session(xf_dash_tokens *t, const char *session, double now, int *role);

#endif
