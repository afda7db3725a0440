/* SPDX-License-Identifier: Apache-2.0 */
/* The dashboard's tokens and sessions, kept as hashes
 * (coordinator/dashtoken.h). */
#include <sodium.h>
#include <string.h>

#include "base/alloc.h"
#include "coordinator/dashtoken.h"

typedef struct held {
  unsigned char hash[crypto_generichash_BYTES];
  double expires;
  int role;
  bool session; /* else a token, unspent */
  bool used;    /* the slot holds one */
} held;

struct xf_dash_tokens {
  held slots[XF_DASH_HELD_MAX];
};

xf_dash_tokens *xf_dash_tokens_new(void) {
  if (sodium_init() < 0) return NULL;
  return xf_calloc(1, sizeof(xf_dash_tokens));
}

void xf_dash_tokens_free(xf_dash_tokens *t) {
  if (!t) return;
  sodium_memzero(t, sizeof(*t));
  xf_free(t);
}

/* The slot for a new entry: a free or ended one, else the one that ends
 * first. */
static held *room(xf_dash_tokens *t, double now) {
  held *soonest = &t->slots[0];
  for (size_t i = 0; i < XF_DASH_HELD_MAX; i++) {
    held *h = &t->slots[i];
    if (!h->used || h->expires <= now) return h;
    if (h->expires < soonest->expires) soonest = h;
  }
  return soonest;
}

/* A fresh secret: its text into hex and its hash into h. */
static void make_secret(held *h, char hex[XF_DASH_SECRET_HEX]) {
  unsigned char raw[32];
  randombytes_buf(raw, sizeof(raw));
  sodium_bin2hex(hex, XF_DASH_SECRET_HEX, raw, sizeof(raw));
  crypto_generichash(h->hash, sizeof(h->hash), raw, sizeof(raw), NULL, 0);
  sodium_memzero(raw, sizeof(raw));
}

/* The live entry whose secret is text, of the kind asked for; NULL when
 * text is not 64 hex digits or none matches. */
static held *find(xf_dash_tokens *t, const char *text, double now, bool session) {
  if (!text || strlen(text) != XF_DASH_SECRET_HEX - 1) return NULL;
  unsigned char raw[32], hash[crypto_generichash_BYTES];
  size_t n = 0;
  if (sodium_hex2bin(raw, sizeof(raw), text, XF_DASH_SECRET_HEX - 1, NULL, &n, NULL) != 0 ||
      n != sizeof(raw))
    return NULL;
  crypto_generichash(hash, sizeof(hash), raw, sizeof(raw), NULL, 0);
  sodium_memzero(raw, sizeof(raw));
  held *found = NULL;
  for (size_t i = 0; i < XF_DASH_HELD_MAX; i++) {
    held *h = &t->slots[i];
    /* Every slot is compared, in constant time, whatever matched before. */
    bool match = sodium_memcmp(h->hash, hash, sizeof(hash)) == 0;
    if (match && h->used && h->session == session && h->expires > now) found = h;
  }
  return found;
}

xf_err xf_dash_issue(xf_dash_tokens *t, double now, unsigned ttl_s, int role,
                     char token[XF_DASH_SECRET_HEX], double *expires, xf_errctx *err) {
  if (ttl_s == 0) ttl_s = XF_DASH_TTL_DEFAULT_S;
  XF_ENSURE(ttl_s <= XF_DASH_TTL_MAX_S, err, XF_ERANGE,
            "a dashboard token lasts at most %d seconds, not %u; ask for less",
            XF_DASH_TTL_MAX_S, ttl_s);
  held *h = room(t, now);
  memset(h, 0, sizeof(*h));
  make_secret(h, token);
  h->expires = now + ttl_s;
  h->role = role;
  h->used = true;
  *expires = h->expires;
  return XF_OK;
}

bool xf_dash_exchange(xf_dash_tokens *t, const char *token, double now,
                      char session[XF_DASH_SECRET_HEX], int *role, double *expires) {
  held *tok = find(t, token, now, false);
  if (!tok) return false;
  held spent = *tok;
  memset(tok, 0, sizeof(*tok)); /* spent: its slot is free */
  held *s = room(t, now);
  memset(s, 0, sizeof(*s));
  make_secret(s, session);
  s->expires = spent.expires;
  s->role = spent.role;
  s->session = true;
  s->used = true;
  *role = spent.role;
  *expires = spent.expires;
  return true;
}

bool xf_dash_session(xf_dash_tokens *t, const char *session, double now, int *role) {
  held *s = find(t, session, now, true);
  if (s) *role = s->role;
  return s != NULL;
}
