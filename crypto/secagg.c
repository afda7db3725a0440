/* SPDX-License-Identifier: Apache-2.0 */
/* SecAgg+ (Bell, Bonawitz, Gascón, Lepoint, Raykova 2020) for a semi-honest
 * server: key adverts, Shamir shares of the self-mask seed and masking key
 * among graph neighbours, ChaCha20 masks mod 2^bits, and the aggregator's
 * unmasking. */
#include "crypto/secagg.h"

#include <sodium.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cursor.h"

#define KEY_BYTES 32
#define PIECE 2048 /* values masked per pass over the seeds: 8 KiB, stays in L1 */
#define WORDS_PER_BLOCK 16

_Static_assert(crypto_scalarmult_BYTES == KEY_BYTES, "X25519 sizes");
_Static_assert(crypto_scalarmult_SCALARBYTES == KEY_BYTES, "X25519 sizes");
_Static_assert(crypto_stream_chacha20_ietf_KEYBYTES == KEY_BYTES, "ChaCha20 key");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24, "XChaCha20 nonce");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == 16, "Poly1305 tag");
_Static_assert(XF_SECAGG_MAX_SITES <= XF_SHAMIR_MAX_SHARES, "site indices are share points");

/* Domain separation: the PRG nonces of the two kinds of mask, the label of
 * the graph's stream, and the associated-data prefix of share ciphertexts. */
static const uint8_t NONCE_SELF[12] = "xf-sa-self";
static const uint8_t NONCE_PAIR[12] = "xf-sa-pair";
static const uint8_t NONCE_GRAPH[12] = "xf-sa-graph";
static const char AD_LABEL[] = "xf-secagg share v1";

enum { KIND_SELF = 0, KIND_KEY = 1 };

/* ---- parameters and graph ---------------------------------------------------- */

xf_err xf_secagg_params_check(const xf_secagg_params *p, xf_errctx *ctx) {
  XF_ENSURE(p, ctx, XF_EINVAL, "secure aggregation: no parameters");
  XF_ENSURE(p->n >= 2 && p->n <= XF_SECAGG_MAX_SITES, ctx, XF_EINVAL,
            "secure aggregation: n = %u sites is outside 2..%u", p->n, XF_SECAGG_MAX_SITES);
  XF_ENSURE(p->threshold > 1 && p->threshold <= p->n, ctx, XF_EINVAL,
            "secure aggregation: threshold %u must be in 2..n (%u)", p->threshold, p->n);
  XF_ENSURE(p->bits >= 8 && p->bits <= 32, ctx, XF_EINVAL,
            "secure aggregation: bits = %u is outside 8..32", p->bits);
  XF_ENSURE(p->length >= 1 && p->length <= XF_SECAGG_MAX_LENGTH, ctx, XF_EINVAL,
            "secure aggregation: length %llu is outside 1..2^36", (unsigned long long)p->length);
  XF_ENSURE(
      p->degree == p->n - 1 || (p->degree % 2 == 0 && p->degree >= 2 && p->degree <= p->n - 2), ctx,
      XF_EINVAL, "secure aggregation: degree %u must be n - 1 (%u) or even in 2..n-2", p->degree,
      p->n - 1);
  return XF_OK;
}

/* Largest n for each even degree (see xf_secagg_default_degree), computed
 * exactly with rational arithmetic (docs/secure-aggregation.md). */
static const struct {
  uint32_t degree, n_max;
} DEGREE_TABLE[] = {{32, 76},   {34, 219},   {36, 627},   {38, 1788},
                    {40, 5094}, {42, 14492}, {44, 41182}, {46, XF_SECAGG_MAX_SITES}};

uint32_t xf_secagg_default_degree(uint32_t n) {
  if (n < 2 || n > XF_SECAGG_MAX_SITES) return 0;
  if (n <= XF_SECAGG_COMPLETE_MAX) return n - 1;
  for (size_t k = 0; k < sizeof(DEGREE_TABLE) / sizeof(DEGREE_TABLE[0]); k++)
    if (n <= DEGREE_TABLE[k].n_max)
      return DEGREE_TABLE[k].degree < n - 1 ? DEGREE_TABLE[k].degree : n - 1;
  return 0;
}

uint32_t xf_secagg_share_threshold(const xf_secagg_params *p) {
  uint64_t holders = (uint64_t)p->degree + 1;
  uint64_t t = ((uint64_t)p->threshold * holders + p->n - 1) / p->n;
  return t < 2 ? 2 : (uint32_t)t;
}

/* The round's name: a hash of every parameter, so that parties holding
 * different parameters fail to authenticate each other's shares rather than
 * compute garbage. */
static void round_context(const xf_secagg_params *p, uint8_t out[KEY_BYTES]) {
  crypto_generichash_state h;
  uint8_t fields[4 * 4 + 8];
  uint32_t v[4] = {p->n, p->threshold, p->bits, p->degree};
  for (size_t k = 0; k < 4; k++)
    for (size_t b = 0; b < 4; b++) fields[4 * k + b] = (uint8_t)(v[k] >> (24 - 8 * b));
  for (size_t b = 0; b < 8; b++) fields[16 + b] = (uint8_t)(p->length >> (56 - 8 * b));
  crypto_generichash_init(&h, NULL, 0, KEY_BYTES);
  crypto_generichash_update(&h, (const uint8_t *)"xf-secagg round v1", 18);
  crypto_generichash_update(&h, fields, sizeof(fields));
  crypto_generichash_update(&h, p->graph_seed, sizeof(p->graph_seed));
  crypto_generichash_final(&h, out, KEY_BYTES);
}

void xf_secagg_params_digest(const xf_secagg_params *p, uint8_t out[32]) { round_context(p, out); }

/* The ring order: ring[q] is the site (0-based) at position q and pos[i]
 * the position of site i, from a Fisher–Yates shuffle driven by the
 * ChaCha20-IETF stream of graph_seed with Lemire's unbiased bounded draws. */
typedef struct graph_stream {
  uint8_t block[64];
  uint32_t counter;
  size_t used;
  const uint8_t *key;
} graph_stream;

static uint32_t graph_word(graph_stream *g) {
  if (g->used == sizeof(g->block)) {
    memset(g->block, 0, sizeof(g->block));
    crypto_stream_chacha20_ietf_xor_ic(g->block, g->block, sizeof(g->block), NONCE_GRAPH,
                                       g->counter++, g->key);
    g->used = 0;
  }
  uint32_t v = (uint32_t)g->block[g->used] | (uint32_t)g->block[g->used + 1] << 8 |
               (uint32_t)g->block[g->used + 2] << 16 | (uint32_t)g->block[g->used + 3] << 24;
  g->used += 4;
  return v;
}

static uint32_t graph_uniform(graph_stream *g, uint32_t m) {
  uint64_t z = (uint64_t)graph_word(g) * m;
  if ((uint32_t)z < m) {
    uint32_t threshold = (uint32_t)(0 - m) % m;
    while ((uint32_t)z < threshold) z = (uint64_t)graph_word(g) * m;
  }
  return (uint32_t)(z >> 32);
}

static xf_err graph_build(const xf_secagg_params *p, uint32_t **ring_out, uint32_t **pos_out) {
  uint32_t *ring = xf_mallocarray(p->n, sizeof(*ring));
  uint32_t *pos = xf_mallocarray(p->n, sizeof(*pos));
  if (!ring || !pos) {
    xf_free(ring);
    xf_free(pos);
    return XF_ENOMEM;
  }
  graph_stream g = {.counter = 0, .used = sizeof(g.block), .key = p->graph_seed};
  for (uint32_t q = 0; q < p->n; q++) ring[q] = q;
  for (uint32_t q = p->n - 1; q > 0; q--) {
    uint32_t r = graph_uniform(&g, q + 1), tmp = ring[q];
    ring[q] = ring[r];
    ring[r] = tmp;
  }
  for (uint32_t q = 0; q < p->n; q++) pos[ring[q]] = q;
  *ring_out = ring;
  *pos_out = pos;
  return XF_OK;
}

/* Sites i, j are 1-based. */
static bool graph_adjacent(const xf_secagg_params *p, const uint32_t *pos, uint32_t i, uint32_t j) {
  if (i == j) return false;
  if (p->degree == p->n - 1) return true;
  uint32_t a = pos[i - 1], b = pos[j - 1];
  uint32_t d = a > b ? a - b : b - a;
  if (d > p->n - d) d = p->n - d;
  return d <= p->degree / 2;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* The degree neighbours of site i, ascending, into out. */
static void graph_neighbours(const xf_secagg_params *p, const uint32_t *ring, const uint32_t *pos,
                             uint32_t i, uint32_t *out) {
  size_t k = 0;
  if (p->degree == p->n - 1) {
    for (uint32_t j = 1; j <= p->n; j++)
      if (j != i) out[k++] = j;
    return;
  }
  uint32_t q = pos[i - 1];
  for (uint32_t d = 1; d <= p->degree / 2; d++) {
    out[k++] = ring[(q + d) % p->n] + 1;
    out[k++] = ring[(q + p->n - d) % p->n] + 1;
  }
  qsort(out, k, sizeof(*out), cmp_u32);
}

bool xf_secagg_neighbours(const xf_secagg_params *p, uint32_t i, uint32_t j) {
  if (xf_secagg_params_check(p, NULL) != XF_OK) return false;
  if (i < 1 || j < 1 || i > p->n || j > p->n || i == j) return false;
  if (p->degree == p->n - 1) return true;
  uint32_t *ring, *pos;
  if (graph_build(p, &ring, &pos) != XF_OK) return false;
  bool r = graph_adjacent(p, pos, i, j);
  xf_free(ring);
  xf_free(pos);
  return r;
}

/* Index of v in the ascending list, or -1. */
static long find_sorted(const uint32_t *list, size_t n, uint32_t v) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (list[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && list[lo] == v ? (long)lo : -1;
}

/* ---- key agreement ------------------------------------------------------------- */

static bool is_zero(const uint8_t *b, size_t n) { return sodium_is_zero(b, n) == 1; }

/* A 32-byte key from X25519 of (sk, pk_other), bound to the round, a label
 * and both public keys in the order of their sites' indices, so that both
 * ends (and the server, for a dropped site's masking key) derive the same
 * key. XF_EINTEGRITY for a low-order public key. */
static xf_err derive_pair_key(const char *label, const uint8_t round[KEY_BYTES],
                              const uint8_t sk[KEY_BYTES], const uint8_t *pk_low,
                              const uint8_t *pk_high, const uint8_t *pk_other,
                              uint8_t out[KEY_BYTES]) {
  uint8_t dh[KEY_BYTES];
  if (crypto_scalarmult(dh, sk, pk_other) != 0) {
    sodium_memzero(dh, sizeof(dh));
    return XF_EINTEGRITY;
  }
  crypto_generichash_state h;
  crypto_generichash_init(&h, round, KEY_BYTES, KEY_BYTES);
  crypto_generichash_update(&h, (const uint8_t *)label, strlen(label));
  crypto_generichash_update(&h, dh, sizeof(dh));
  crypto_generichash_update(&h, pk_low, KEY_BYTES);
  crypto_generichash_update(&h, pk_high, KEY_BYTES);
  crypto_generichash_final(&h, out, KEY_BYTES);
  sodium_memzero(dh, sizeof(dh));
  sodium_memzero(&h, sizeof(h));
  return XF_OK;
}

static void share_ad(const uint8_t round[KEY_BYTES], uint32_t from, uint32_t to,
                     uint8_t ad[sizeof(AD_LABEL) - 1 + KEY_BYTES + 8]) {
  memcpy(ad, AD_LABEL, sizeof(AD_LABEL) - 1);
  memcpy(ad + sizeof(AD_LABEL) - 1, round, KEY_BYTES);
  uint8_t *q = ad + sizeof(AD_LABEL) - 1 + KEY_BYTES;
  for (size_t b = 0; b < 4; b++) {
    q[b] = (uint8_t)(from >> (24 - 8 * b));
    q[4 + b] = (uint8_t)(to >> (24 - 8 * b));
  }
}
#define AD_BYTES (sizeof(AD_LABEL) - 1 + KEY_BYTES + 8)

/* ---- masks ----------------------------------------------------------------------- */

/* One keystream to add (sign +1) or subtract (-1). */
typedef struct mask_seed {
  uint8_t key[KEY_BYTES];
  const uint8_t *nonce;
  int sign;
} mask_seed;

static inline uint32_t le32(uint32_t v) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return __builtin_bswap32(v);
#else
  return v;
#endif
}

/* y[0..count) += sign * words offset..offset+count-1 of each seed's stream
 * (mod 2^32), count <= PIECE. ks holds PIECE + WORDS_PER_BLOCK words. */
static void apply_seeds(const mask_seed *seeds, size_t n_seeds, uint64_t offset, size_t count,
                        uint32_t *y, uint32_t *ks) {
  uint64_t block = offset / WORDS_PER_BLOCK;
  size_t skip = (size_t)(offset % WORDS_PER_BLOCK);
  size_t words = (skip + count + WORDS_PER_BLOCK - 1) / WORDS_PER_BLOCK * WORDS_PER_BLOCK;
  for (size_t s = 0; s < n_seeds; s++) {
    memset(ks, 0, words * 4);
    crypto_stream_chacha20_ietf_xor_ic((uint8_t *)ks, (const uint8_t *)ks, words * 4,
                                       seeds[s].nonce, (uint32_t)block, seeds[s].key);
    const uint32_t *w = ks + skip;
    if (seeds[s].sign > 0)
      for (size_t k = 0; k < count; k++) y[k] += le32(w[k]);
    else
      for (size_t k = 0; k < count; k++) y[k] -= le32(w[k]);
  }
}

static inline uint32_t bits_mask(uint32_t bits) {
  return bits == 32 ? UINT32_MAX : ((uint32_t)1 << bits) - 1;
}

/* ---- client ------------------------------------------------------------------------ */

enum client_phase { C_NEW, C_SHARED, C_ROUTED };

/* Per-neighbour state (public). */
enum { N_ADVERTISED = 1, N_RECEIVED = 2, N_ROUTED = 4, N_REVEALED_SELF = 8, N_REVEALED_KEY = 16 };

/* Everything secret, in one sodium_malloc region. */
typedef struct client_secrets {
  uint8_t enc_sk[KEY_BYTES];
  uint8_t mask_sk[KEY_BYTES];
  uint8_t self_seed[KEY_BYTES];
  xf_shamir_share own_self; /* our share of our own b (that of our key is never revealed) */
} client_secrets;

struct xf_secagg_client {
  xf_secagg_params p;
  uint32_t me, tshare;
  uint8_t round[KEY_BYTES];
  uint8_t enc_pk[KEY_BYTES], mask_pk[KEY_BYTES];
  enum client_phase phase;
  uint32_t n_nbr;
  uint32_t *nbr; /* ascending */
  uint8_t (*nbr_advert)[XF_SECAGG_ADVERT_BYTES];
  uint8_t *nbr_state;
  client_secrets *sec;   /* sodium_malloc */
  xf_shamir_share *recv; /* sodium_malloc: 2 per neighbour (b, key) */
  mask_seed *seeds;      /* sodium_malloc: self + one per routed neighbour */
  size_t n_seeds;
  uint32_t *ks; /* sodium_malloc: keystream scratch */
};

void xf_secagg_client_free(xf_secagg_client *c) {
  if (!c) return;
  if (c->sec) sodium_free(c->sec);
  if (c->recv) sodium_free(c->recv);
  if (c->seeds) sodium_free(c->seeds);
  if (c->ks) sodium_free(c->ks);
  xf_free(c->nbr);
  xf_free(c->nbr_advert);
  xf_free(c->nbr_state);
  xf_free(c);
}

xf_err xf_secagg_client_new(const xf_secagg_params *p, uint32_t me, xf_secagg_client **out,
                            xf_errctx *ctx) {
  XF_ENSURE(out, ctx, XF_EINVAL, "secure aggregation: no output handle");
  *out = NULL;
  XF_GUARD(xf_secagg_params_check(p, ctx));
  XF_ENSURE(me >= 1 && me <= p->n, ctx, XF_EINVAL, "site index %u is outside 1..%u", me, p->n);
  if (sodium_init() < 0) return xf_fail(ctx, XF_EINTERNAL, "libsodium cannot start");
  xf_secagg_client *c = xf_calloc(1, sizeof(*c));
  if (!c) return xf_fail(ctx, XF_ENOMEM, "no memory for a secure-aggregation client");
  c->p = *p;
  c->me = me;
  c->tshare = xf_secagg_share_threshold(p);
  c->n_nbr = p->degree;
  round_context(p, c->round);
  uint32_t *ring = NULL, *pos = NULL;
  c->nbr = xf_mallocarray(c->n_nbr, sizeof(*c->nbr));
  c->nbr_advert = xf_mallocarray(c->n_nbr, sizeof(*c->nbr_advert));
  c->nbr_state = xf_calloc(c->n_nbr, 1);
  c->sec = sodium_malloc(sizeof(*c->sec));
  c->recv = sodium_allocarray(2 * (size_t)c->n_nbr, sizeof(*c->recv));
  c->seeds = sodium_allocarray((size_t)c->n_nbr + 1, sizeof(*c->seeds));
  c->ks = sodium_allocarray(PIECE + WORDS_PER_BLOCK, sizeof(*c->ks));
  if (!c->nbr || !c->nbr_advert || !c->nbr_state || !c->sec || !c->recv || !c->seeds || !c->ks ||
      graph_build(p, &ring, &pos) != XF_OK) {
    xf_secagg_client_free(c);
    return xf_fail(ctx, XF_ENOMEM, "no memory for a secure-aggregation client of %u sites", p->n);
  }
  graph_neighbours(p, ring, pos, me, c->nbr);
  xf_free(ring);
  xf_free(pos);
  memset(c->sec, 0, sizeof(*c->sec));
  randombytes_buf(c->sec->enc_sk, KEY_BYTES);
  randombytes_buf(c->sec->mask_sk, KEY_BYTES);
  randombytes_buf(c->sec->self_seed, KEY_BYTES);
  crypto_scalarmult_base(c->enc_pk, c->sec->enc_sk);
  crypto_scalarmult_base(c->mask_pk, c->sec->mask_sk);
  c->phase = C_NEW;
  *out = c;
  return XF_OK;
}

void xf_secagg_client_advertise(const xf_secagg_client *c, uint8_t out[XF_SECAGG_ADVERT_BYTES]) {
  memcpy(out, c->enc_pk, KEY_BYTES);
  memcpy(out + KEY_BYTES, c->mask_pk, KEY_BYTES);
}

xf_err xf_secagg_client_neighbours(const xf_secagg_client *c, uint32_t *out, size_t cap,
                                   size_t *count) {
  if (!c || !count || (cap && !out)) return XF_EINVAL;
  *count = c->n_nbr;
  if (cap < c->n_nbr) return XF_ERANGE;
  memcpy(out, c->nbr, c->n_nbr * sizeof(*out));
  return XF_OK;
}

/* The share key between us and neighbour slot k (X25519 of the encryption
 * keys). */
static xf_err client_share_key(const xf_secagg_client *c, size_t k, uint8_t key[KEY_BYTES]) {
  const uint8_t *theirs = c->nbr_advert[k];
  bool we_low = c->me < c->nbr[k];
  return derive_pair_key("share", c->round, c->sec->enc_sk, we_low ? c->enc_pk : theirs,
                         we_low ? theirs : c->enc_pk, theirs, key);
}

xf_err xf_secagg_client_share(xf_secagg_client *c, const uint8_t *adverts, xf_secagg_share_msg *out,
                              size_t cap, size_t *count, xf_errctx *ctx) {
  XF_ENSURE(c && adverts && count && (out || cap == 0), ctx, XF_EINVAL,
            "secagg share: NULL argument");
  XF_ENSURE(c->phase == C_NEW, ctx, XF_EINVAL, "secagg share: site %u has already shared", c->me);
  uint8_t mine[XF_SECAGG_ADVERT_BYTES];
  xf_secagg_client_advertise(c, mine);
  XF_ENSURE(memcmp(adverts + (size_t)(c->me - 1) * XF_SECAGG_ADVERT_BYTES, mine, sizeof(mine)) == 0,
            ctx, XF_EINTEGRITY, "secagg share: the adverts do not hold site %u's own keys", c->me);
  uint32_t holders = 1, sent = 0;
  for (uint32_t k = 0; k < c->n_nbr; k++) {
    const uint8_t *a = adverts + (size_t)(c->nbr[k] - 1) * XF_SECAGG_ADVERT_BYTES;
    c->nbr_state[k] = 0;
    if (is_zero(a, XF_SECAGG_ADVERT_BYTES)) continue;
    memcpy(c->nbr_advert[k], a, XF_SECAGG_ADVERT_BYTES);
    c->nbr_state[k] = N_ADVERTISED;
    holders++;
  }
  if (holders < c->tshare)
    return xf_fail(ctx, XF_ERANGE,
                   "secagg share: only %u of site %u's %u share holders advertised; the share "
                   "threshold is %u",
                   holders, c->me, c->n_nbr + 1, c->tshare);
  *count = holders - 1;
  XF_ENSURE(cap >= holders - 1, ctx, XF_ERANGE, "secagg share: room for %zu messages, %u needed",
            cap, holders - 1);

  uint32_t *xs = xf_mallocarray(holders, sizeof(*xs));
  xf_shamir_share *sh = sodium_allocarray(2 * (size_t)holders, sizeof(*sh));
  xf_err rc = XF_OK;
  if (!xs || !sh) {
    rc = xf_fail(ctx, XF_ENOMEM, "secagg share: no memory for %u shares", holders);
    goto out;
  }
  xs[0] = c->me;
  for (uint32_t k = 0, h = 1; k < c->n_nbr; k++)
    if (c->nbr_state[k] & N_ADVERTISED) xs[h++] = c->nbr[k];
  rc = xf_shamir_split_at(c->sec->self_seed, c->tshare, xs, holders, sh, ctx);
  if (rc == XF_OK)
    rc = xf_shamir_split_at(c->sec->mask_sk, c->tshare, xs, holders, sh + holders, ctx);
  if (rc != XF_OK) goto out;
  c->sec->own_self = sh[0];

  for (uint32_t k = 0, h = 1; k < c->n_nbr && rc == XF_OK; k++) {
    if (!(c->nbr_state[k] & N_ADVERTISED)) continue;
    uint8_t key[KEY_BYTES], plain[2 * XF_SHAMIR_SHARE_BYTES], ad[AD_BYTES];
    if (client_share_key(c, k, key) != XF_OK) {
      rc =
          xf_fail(ctx, XF_EINTEGRITY, "secagg share: site %u advertised an invalid key", c->nbr[k]);
    } else {
      xf_shamir_share_encode(&sh[h], plain);
      xf_shamir_share_encode(&sh[holders + h], plain + XF_SHAMIR_SHARE_BYTES);
      share_ad(c->round, c->me, c->nbr[k], ad);
      xf_secagg_share_msg *m = &out[sent++];
      m->to = c->nbr[k];
      randombytes_buf(m->ciphertext, 24);
      crypto_aead_xchacha20poly1305_ietf_encrypt(m->ciphertext + 24, NULL, plain, sizeof(plain), ad,
                                                 sizeof(ad), NULL, m->ciphertext, key);
    }
    sodium_memzero(key, sizeof(key));
    sodium_memzero(plain, sizeof(plain));
    h++;
  }
  if (rc == XF_OK) c->phase = C_SHARED;

out:
  if (sh) sodium_free(sh);
  xf_free(xs);
  if (rc != XF_OK && out && cap) sodium_memzero(out, cap * sizeof(*out));
  return rc;
}

xf_err xf_secagg_client_receive(xf_secagg_client *c, uint32_t from,
                                const uint8_t ciphertext[XF_SECAGG_SHARE_BYTES], xf_errctx *ctx) {
  XF_ENSURE(c && ciphertext, ctx, XF_EINVAL, "secagg receive: NULL argument");
  XF_ENSURE(c->phase == C_SHARED, ctx, XF_EINVAL,
            "secagg receive: site %u takes shares only between sharing and routing", c->me);
  long k = find_sorted(c->nbr, c->n_nbr, from);
  XF_ENSURE(k >= 0, ctx, XF_EINVAL, "secagg receive: site %u is not a neighbour of site %u", from,
            c->me);
  XF_ENSURE(c->nbr_state[k] & N_ADVERTISED, ctx, XF_EINVAL,
            "secagg receive: site %u did not advertise keys", from);
  XF_ENSURE(!(c->nbr_state[k] & N_RECEIVED), ctx, XF_EEXISTS,
            "secagg receive: site %u's shares are already here", from);
  uint8_t key[KEY_BYTES], plain[2 * XF_SHAMIR_SHARE_BYTES], ad[AD_BYTES];
  xf_shamir_share s[2];
  xf_err rc = XF_OK;
  share_ad(c->round, from, c->me, ad);
  if (client_share_key(c, (size_t)k, key) != XF_OK ||
      crypto_aead_xchacha20poly1305_ietf_decrypt(plain, NULL, NULL, ciphertext + 24,
                                                 XF_SECAGG_SHARE_BYTES - 24, ad, sizeof(ad),
                                                 ciphertext, key) != 0)
    rc = xf_fail(ctx, XF_EINTEGRITY,
                 "secagg receive: the shares from site %u do not authenticate for this round and "
                 "site %u",
                 from, c->me);
  else if (xf_shamir_share_decode(plain, &s[0]) != XF_OK ||
           xf_shamir_share_decode(plain + XF_SHAMIR_SHARE_BYTES, &s[1]) != XF_OK ||
           s[0].x != c->me || s[1].x != c->me)
    rc = xf_fail(ctx, XF_EINTEGRITY, "secagg receive: site %u sent shares that are not for site %u",
                 from, c->me);
  if (rc == XF_OK) {
    c->recv[2 * k] = s[0];
    c->recv[2 * k + 1] = s[1];
    c->nbr_state[k] |= N_RECEIVED;
  }
  sodium_memzero(key, sizeof(key));
  sodium_memzero(plain, sizeof(plain));
  sodium_memzero(s, sizeof(s));
  return rc;
}

/* A set of site indices (1..n, no repeats) as flags in a fresh array of n + 1
 * bytes; *out owned by the caller (xf_free). */
static xf_err index_set(const xf_secagg_params *p, const uint32_t *list, size_t n, const char *what,
                        uint8_t **out, xf_errctx *ctx) {
  XF_ENSURE(list || n == 0, ctx, XF_EINVAL, "%s: NULL list", what);
  uint8_t *set = xf_calloc((size_t)p->n + 1, 1);
  if (!set) return xf_fail(ctx, XF_ENOMEM, "%s: no memory", what);
  for (size_t k = 0; k < n; k++) {
    if (list[k] < 1 || list[k] > p->n || set[list[k]]) {
      xf_free(set);
      return xf_fail(ctx, XF_EINVAL, "%s: site %u is outside 1..%u or listed twice", what, list[k],
                     p->n);
    }
    set[list[k]] = 1;
  }
  *out = set;
  return XF_OK;
}

xf_err xf_secagg_client_routed(xf_secagg_client *c, const uint32_t *u2, size_t n_u2,
                               xf_errctx *ctx) {
  XF_ENSURE(c, ctx, XF_EINVAL, "secagg routed: NULL client");
  XF_ENSURE(c->phase == C_SHARED, ctx, XF_EINVAL,
            "secagg routed: site %u must share first, and learns U2 once", c->me);
  uint8_t *set;
  XF_GUARD(index_set(&c->p, u2, n_u2, "secagg routed", &set, ctx));
  xf_err rc = XF_OK;
  uint32_t holders = 1;
  if (!set[c->me])
    rc = xf_fail(ctx, XF_EINVAL, "secagg routed: site %u is not in U2", c->me);
  else if (n_u2 < c->p.threshold)
    rc = xf_fail(ctx, XF_ERANGE, "secagg routed: |U2| = %zu is below the threshold %u", n_u2,
                 c->p.threshold);
  for (uint32_t k = 0; k < c->n_nbr && rc == XF_OK; k++) {
    if (!set[c->nbr[k]]) continue;
    if (!(c->nbr_state[k] & N_RECEIVED))
      rc = xf_fail(ctx, XF_EINTEGRITY,
                   "secagg routed: neighbour %u is in U2 but its shares never reached site %u",
                   c->nbr[k], c->me);
    holders++;
  }
  if (rc == XF_OK && holders < c->tshare)
    rc = xf_fail(ctx, XF_ERANGE,
                 "secagg routed: %u of site %u's share holders are in U2, below the share "
                 "threshold %u",
                 holders, c->me, c->tshare);
  if (rc == XF_OK) {
    mask_seed *sd = &c->seeds[0];
    memcpy(sd->key, c->sec->self_seed, KEY_BYTES);
    sd->nonce = NONCE_SELF;
    sd->sign = 1;
    size_t n = 1;
    for (uint32_t k = 0; k < c->n_nbr && rc == XF_OK; k++) {
      if (!set[c->nbr[k]]) continue;
      const uint8_t *theirs = c->nbr_advert[k] + KEY_BYTES;
      bool we_low = c->me < c->nbr[k];
      sd = &c->seeds[n++];
      if (derive_pair_key("mask", c->round, c->sec->mask_sk, we_low ? c->mask_pk : theirs,
                          we_low ? theirs : c->mask_pk, theirs, sd->key) != XF_OK)
        rc = xf_fail(ctx, XF_EINTEGRITY, "secagg routed: site %u advertised an invalid masking key",
                     c->nbr[k]);
      sd->nonce = NONCE_PAIR;
      sd->sign = we_low ? 1 : -1;
      c->nbr_state[k] |= N_ROUTED;
    }
    c->n_seeds = n;
  }
  if (rc == XF_OK)
    c->phase = C_ROUTED;
  else {
    sodium_memzero(c->seeds, ((size_t)c->n_nbr + 1) * sizeof(*c->seeds));
    for (uint32_t k = 0; k < c->n_nbr; k++) c->nbr_state[k] &= (uint8_t)~N_ROUTED;
  }
  xf_free(set);
  return rc;
}

xf_err xf_secagg_client_mask(xf_secagg_client *c, const uint32_t *x, uint64_t offset,
                             uint64_t count, uint32_t *y, xf_errctx *ctx) {
  XF_ENSURE(c && (count == 0 || (x && y)), ctx, XF_EINVAL, "secagg mask: NULL argument");
  XF_ENSURE(c->phase == C_ROUTED, ctx, XF_EINVAL,
            "secagg mask: site %u masks only after learning U2", c->me);
  XF_ENSURE(offset <= c->p.length && count <= c->p.length - offset, ctx, XF_ERANGE,
            "secagg mask: values %llu..%llu pass the vector's length %llu",
            (unsigned long long)offset, (unsigned long long)(offset + count),
            (unsigned long long)c->p.length);
  uint32_t m = bits_mask(c->p.bits);
  for (uint64_t done = 0; done < count;) {
    size_t piece = count - done < PIECE ? (size_t)(count - done) : PIECE;
    uint32_t *yp = y + done;
    if (yp != x + done) memcpy(yp, x + done, piece * sizeof(*yp));
    apply_seeds(c->seeds, c->n_seeds, offset + done, piece, yp, c->ks);
    for (size_t k = 0; k < piece; k++) yp[k] &= m;
    done += piece;
  }
  sodium_memzero(c->ks, (PIECE + WORDS_PER_BLOCK) * sizeof(*c->ks));
  return XF_OK;
}

size_t xf_secagg_reveal_max_bytes(const xf_secagg_params *p) {
  return XF_SECAGG_REVEAL_HEADER_BYTES + ((size_t)p->degree + 1) * XF_SECAGG_REVEAL_ENTRY_BYTES;
}

static void put_u32(uint8_t *q, uint32_t v) {
  for (size_t b = 0; b < 4; b++) q[b] = (uint8_t)(v >> (24 - 8 * b));
}

/* Whether the client may reveal for U3 (its flags in u3, survivors the
 * list): XF_OK with the entries of the reveal in *entries, or the refusal. */
static xf_err unmask_allowed(const xf_secagg_client *c, const uint32_t *survivors, size_t n_surv,
                             const uint8_t *u3, size_t *entries_out, xf_errctx *ctx) {
  xf_err rc = XF_OK;
  size_t entries = 1;
  if (n_surv < c->p.threshold)
    rc = xf_fail(ctx, XF_EDENIED,
                 "secagg unmask: refusing to reveal: only %zu sites survived, the threshold is %u",
                 n_surv, c->p.threshold);
  else if (!u3[c->me])
    rc = xf_fail(ctx, XF_EDENIED, "secagg unmask: site %u is not among the survivors", c->me);
  for (size_t k = 0; k < n_surv && rc == XF_OK; k++) {
    if (survivors[k] == c->me) continue;
    long slot = find_sorted(c->nbr, c->n_nbr, survivors[k]);
    /* A survivor must be in U2; we only know U2 on our neighbourhood. */
    if (slot >= 0 && !(c->nbr_state[slot] & N_ROUTED))
      rc = xf_fail(ctx, XF_EINVAL, "secagg unmask: survivor %u was not in U2", survivors[k]);
  }
  for (uint32_t k = 0; k < c->n_nbr && rc == XF_OK; k++) {
    uint8_t st = c->nbr_state[k];
    if (!(st & N_ROUTED)) continue;
    entries++;
    bool survived = u3[c->nbr[k]];
    if ((survived && (st & N_REVEALED_KEY)) || (!survived && (st & N_REVEALED_SELF)))
      rc = xf_fail(ctx, XF_EDENIED,
                   "secagg unmask: refusing to reveal site %u's %s share: its %s share was "
                   "revealed before, and both would unmask its input",
                   c->nbr[k], survived ? "self-mask seed" : "masking key",
                   survived ? "masking key" : "self-mask seed");
  }
  *entries_out = entries;
  return rc;
}

xf_err xf_secagg_client_check_survivors(const xf_secagg_client *c, const uint32_t *survivors,
                                        size_t n_surv, xf_errctx *ctx) {
  XF_ENSURE(c, ctx, XF_EINVAL, "secagg survivors: NULL client");
  XF_ENSURE(c->phase == C_ROUTED, ctx, XF_EINVAL, "secagg survivors: site %u has not learnt U2",
            c->me);
  uint8_t *u3;
  XF_GUARD(index_set(&c->p, survivors, n_surv, "secagg survivors", &u3, ctx));
  size_t entries;
  xf_err rc = unmask_allowed(c, survivors, n_surv, u3, &entries, ctx);
  xf_free(u3);
  return rc;
}

xf_err xf_secagg_client_unmask(xf_secagg_client *c, const uint32_t *survivors, size_t n_surv,
                               uint8_t *out, size_t cap, size_t *len, xf_errctx *ctx) {
  XF_ENSURE(c && len && (out || cap == 0), ctx, XF_EINVAL, "secagg unmask: NULL argument");
  XF_ENSURE(c->phase == C_ROUTED, ctx, XF_EINVAL, "secagg unmask: site %u has not learnt U2",
            c->me);
  uint8_t *u3;
  XF_GUARD(index_set(&c->p, survivors, n_surv, "secagg unmask", &u3, ctx));
  size_t entries = 1;
  xf_err rc = unmask_allowed(c, survivors, n_surv, u3, &entries, ctx);
  size_t need = XF_SECAGG_REVEAL_HEADER_BYTES + entries * XF_SECAGG_REVEAL_ENTRY_BYTES;
  *len = need;
  if (rc == XF_OK && cap < need)
    rc = xf_fail(ctx, XF_ERANGE, "secagg unmask: the reveal needs %zu bytes, room for %zu", need,
                 cap);
  if (rc == XF_OK) {
    uint8_t *q = out;
    *q++ = 1;
    put_u32(q, c->me);
    put_u32(q + 4, (uint32_t)entries);
    q += 8;
    put_u32(q, c->me);
    q[4] = KIND_SELF;
    xf_shamir_share_encode(&c->sec->own_self, q + 5);
    q += XF_SECAGG_REVEAL_ENTRY_BYTES;
    for (uint32_t k = 0; k < c->n_nbr; k++) {
      if (!(c->nbr_state[k] & N_ROUTED)) continue;
      bool survived = u3[c->nbr[k]];
      put_u32(q, c->nbr[k]);
      q[4] = survived ? KIND_SELF : KIND_KEY;
      xf_shamir_share_encode(&c->recv[2 * k + (survived ? 0 : 1)], q + 5);
      q += XF_SECAGG_REVEAL_ENTRY_BYTES;
      c->nbr_state[k] |= survived ? N_REVEALED_SELF : N_REVEALED_KEY;
    }
  }
  xf_free(u3);
  return rc;
}

/* ---- server -------------------------------------------------------------------------- */

enum { S_ADVERTISED = 1, S_SHARED = 2, S_SURVIVED = 4, S_REVEALED = 8 };

/* Delivered ranges of one site's vector, [lo, hi), disjoint and sorted,
 * adjacent ranges merged: one range once everything arrived in any order. */
typedef struct range_set {
  uint64_t (*r)[2];
  size_t n, cap;
} range_set;

struct xf_secagg_server {
  xf_secagg_params p;
  uint32_t tshare;
  uint8_t round[KEY_BYTES];
  uint32_t *ring, *pos;
  uint8_t (*adverts)[XF_SECAGG_ADVERT_BYTES];
  uint8_t *state;       /* per site, S_* flags */
  range_set *delivered; /* per site */
  uint32_t *sum;        /* length words */
  bool u2_fixed, u3_fixed, finished;
  size_t n_u2, n_u3;
  xf_shamir_share *shares; /* sodium_malloc: tshare per site, the revealed ones */
  uint32_t *n_shares;      /* per site */
  uint64_t expansions;
};

void xf_secagg_server_free(xf_secagg_server *s) {
  if (!s) return;
  if (s->delivered)
    for (uint32_t i = 0; i < s->p.n; i++) xf_free(s->delivered[i].r);
  xf_free(s->delivered);
  if (s->shares) sodium_free(s->shares);
  xf_free(s->n_shares);
  xf_free(s->ring);
  xf_free(s->pos);
  xf_free(s->adverts);
  xf_free(s->state);
  xf_free(s->sum);
  xf_free(s);
}

xf_err xf_secagg_server_new(const xf_secagg_params *p, xf_secagg_server **out, xf_errctx *ctx) {
  XF_ENSURE(out, ctx, XF_EINVAL, "secure aggregation: no output handle");
  *out = NULL;
  XF_GUARD(xf_secagg_params_check(p, ctx));
  if (sodium_init() < 0) return xf_fail(ctx, XF_EINTERNAL, "libsodium cannot start");
  xf_secagg_server *s = xf_calloc(1, sizeof(*s));
  if (!s) return xf_fail(ctx, XF_ENOMEM, "no memory for a secure-aggregation server");
  s->p = *p;
  s->tshare = xf_secagg_share_threshold(p);
  round_context(p, s->round);
  s->adverts = xf_calloc(p->n, sizeof(*s->adverts));
  s->state = xf_calloc((size_t)p->n + 1, 1);
  s->delivered = xf_calloc(p->n, sizeof(*s->delivered));
  s->sum = xf_calloc(p->length, sizeof(*s->sum));
  s->shares = sodium_allocarray((size_t)p->n * s->tshare, sizeof(*s->shares));
  s->n_shares = xf_calloc(p->n, sizeof(*s->n_shares));
  if (!s->adverts || !s->state || !s->delivered || !s->sum || !s->shares || !s->n_shares ||
      graph_build(p, &s->ring, &s->pos) != XF_OK) {
    xf_secagg_server_free(s);
    return xf_fail(ctx, XF_ENOMEM,
                   "no memory for a secure-aggregation server (%llu values, %u sites)",
                   (unsigned long long)p->length, p->n);
  }
  *out = s;
  return XF_OK;
}

static xf_err check_site(const xf_secagg_server *s, uint32_t i, const char *what, xf_errctx *ctx) {
  XF_ENSURE(i >= 1 && i <= s->p.n, ctx, XF_EINVAL, "%s: site %u is outside 1..%u", what, i, s->p.n);
  return XF_OK;
}

xf_err xf_secagg_server_advert(xf_secagg_server *s, uint32_t i,
                               const uint8_t advert[XF_SECAGG_ADVERT_BYTES], xf_errctx *ctx) {
  XF_ENSURE(s && advert, ctx, XF_EINVAL, "secagg advert: NULL argument");
  XF_GUARD(check_site(s, i, "secagg advert", ctx));
  XF_ENSURE(!s->u2_fixed, ctx, XF_EINVAL, "secagg advert: site %u advertised after U2 was fixed",
            i);
  XF_ENSURE(!(s->state[i] & S_ADVERTISED), ctx, XF_EEXISTS,
            "secagg advert: site %u advertised twice", i);
  XF_ENSURE(!is_zero(advert, KEY_BYTES) && !is_zero(advert + KEY_BYTES, KEY_BYTES), ctx, XF_EFORMAT,
            "secagg advert: site %u advertised a zero key", i);
  memcpy(s->adverts[i - 1], advert, XF_SECAGG_ADVERT_BYTES);
  s->state[i] |= S_ADVERTISED;
  return XF_OK;
}

void xf_secagg_server_adverts(const xf_secagg_server *s, uint8_t *out) {
  memcpy(out, s->adverts, (size_t)s->p.n * XF_SECAGG_ADVERT_BYTES);
}

xf_err xf_secagg_server_shared(xf_secagg_server *s, uint32_t i, xf_errctx *ctx) {
  XF_ENSURE(s, ctx, XF_EINVAL, "secagg shared: NULL server");
  XF_GUARD(check_site(s, i, "secagg shared", ctx));
  XF_ENSURE(!s->u2_fixed, ctx, XF_EINVAL, "secagg shared: site %u's shares came after U2 was fixed",
            i);
  XF_ENSURE(s->state[i] & S_ADVERTISED, ctx, XF_EINVAL, "secagg shared: site %u did not advertise",
            i);
  if (!(s->state[i] & S_SHARED)) s->n_u2++;
  s->state[i] |= S_SHARED;
  return XF_OK;
}

static size_t list_sites(const xf_secagg_server *s, uint8_t flag, uint32_t *out) {
  size_t n = 0;
  for (uint32_t i = 1; i <= s->p.n; i++)
    if (s->state[i] & flag) out[n++] = i;
  return n;
}

xf_err xf_secagg_server_routed(xf_secagg_server *s, uint32_t *out, size_t *count, xf_errctx *ctx) {
  XF_ENSURE(s && out && count, ctx, XF_EINVAL, "secagg routed: NULL argument");
  *count = 0;
  XF_ENSURE(s->n_u2 >= s->p.threshold, ctx, XF_ERANGE,
            "secagg: only %zu sites' shares were routed, the threshold is %u: the round fails",
            s->n_u2, s->p.threshold);
  s->u2_fixed = true;
  *count = list_sites(s, S_SHARED, out);
  return XF_OK;
}

/* Adds [lo, hi) to the set, merging neighbours; XF_EEXISTS on overlap. */
static xf_err range_add(range_set *rs, uint64_t lo, uint64_t hi) {
  size_t k = 0;
  while (k < rs->n && rs->r[k][1] <= lo) k++; /* first range ending after lo */
  if (k < rs->n && rs->r[k][0] < hi) return XF_EEXISTS;
  bool left = k > 0 && rs->r[k - 1][1] == lo, right = k < rs->n && rs->r[k][0] == hi;
  if (left && right) {
    rs->r[k - 1][1] = rs->r[k][1];
    memmove(&rs->r[k], &rs->r[k + 1], (rs->n - k - 1) * sizeof(rs->r[0]));
    rs->n--;
  } else if (left) {
    rs->r[k - 1][1] = hi;
  } else if (right) {
    rs->r[k][0] = lo;
  } else {
    if (rs->n == rs->cap) {
      size_t cap = rs->cap ? 2 * rs->cap : 4;
      void *r = xf_realloc(rs->r, cap * sizeof(rs->r[0]));
      if (!r) return XF_ENOMEM;
      rs->r = r;
      rs->cap = cap;
    }
    memmove(&rs->r[k + 1], &rs->r[k], (rs->n - k) * sizeof(rs->r[0]));
    rs->r[k][0] = lo;
    rs->r[k][1] = hi;
    rs->n++;
  }
  return XF_OK;
}

xf_err xf_secagg_server_add_masked(xf_secagg_server *s, uint32_t i, uint64_t offset, uint64_t count,
                                   const uint32_t *y, xf_errctx *ctx) {
  XF_ENSURE(s && (y || count == 0), ctx, XF_EINVAL, "secagg masked input: NULL argument");
  XF_GUARD(check_site(s, i, "secagg masked input", ctx));
  XF_ENSURE(s->u2_fixed && (s->state[i] & S_SHARED), ctx, XF_EINVAL,
            "secagg masked input: site %u is not in U2 (or U2 is not fixed yet)", i);
  XF_ENSURE(!s->u3_fixed, ctx, XF_EINVAL,
            "secagg masked input: site %u's input came after the survivors were fixed", i);
  XF_ENSURE(offset <= s->p.length && count <= s->p.length - offset, ctx, XF_ERANGE,
            "secagg masked input: site %u's values %llu..%llu pass the length %llu", i,
            (unsigned long long)offset, (unsigned long long)(offset + count),
            (unsigned long long)s->p.length);
  if (count == 0) return XF_OK;
  uint32_t over = 0, m = bits_mask(s->p.bits);
  for (uint64_t k = 0; k < count; k++) over |= y[k] & ~m;
  XF_ENSURE(over == 0, ctx, XF_ERANGE,
            "secagg masked input: site %u sent values of more than %u bits", i, s->p.bits);
  xf_err rc = range_add(&s->delivered[i - 1], offset, offset + count);
  if (rc == XF_EEXISTS)
    return xf_fail(ctx, rc, "secagg masked input: site %u sent values in %llu..%llu twice", i,
                   (unsigned long long)offset, (unsigned long long)(offset + count));
  if (rc != XF_OK) return xf_fail(ctx, rc, "secagg masked input: no memory");
  uint32_t *sum = s->sum + offset;
  for (uint64_t k = 0; k < count; k++) sum[k] += y[k];
  return XF_OK;
}

xf_err xf_secagg_server_survivors(xf_secagg_server *s, uint32_t *out, size_t *count,
                                  xf_errctx *ctx) {
  XF_ENSURE(s && out && count, ctx, XF_EINVAL, "secagg survivors: NULL argument");
  *count = 0;
  XF_ENSURE(s->u2_fixed, ctx, XF_EINVAL, "secagg survivors: U2 is not fixed yet");
  if (!s->u3_fixed) {
    size_t n = 0;
    for (uint32_t i = 1; i <= s->p.n; i++) {
      const range_set *rs = &s->delivered[i - 1];
      if (rs->n == 0) continue;
      XF_ENSURE(rs->n == 1 && rs->r[0][0] == 0 && rs->r[0][1] == s->p.length, ctx, XF_EINTEGRITY,
                "secagg survivors: site %u delivered only part of its masked vector; its partial "
                "input cannot be removed from the sum: get the rest first",
                i);
      n++;
    }
    XF_ENSURE(n >= s->p.threshold, ctx, XF_ERANGE,
              "secagg: only %zu sites sent their masked input, the threshold is %u: the round "
              "fails",
              n, s->p.threshold);
    for (uint32_t i = 1; i <= s->p.n; i++)
      if (s->delivered[i - 1].n) s->state[i] |= S_SURVIVED;
    s->n_u3 = n;
    s->u3_fixed = true;
  }
  *count = list_sites(s, S_SURVIVED, out);
  return XF_OK;
}

static bool holder_of(const xf_secagg_server *s, uint32_t holder, uint32_t owner) {
  return holder == owner || graph_adjacent(&s->p, s->pos, holder, owner);
}

xf_err xf_secagg_server_add_reveal(xf_secagg_server *s, uint32_t from, const uint8_t *msg,
                                   size_t len, xf_errctx *ctx) {
  XF_ENSURE(s && msg, ctx, XF_EINVAL, "secagg reveal: NULL argument");
  XF_GUARD(check_site(s, from, "secagg reveal", ctx));
  XF_ENSURE(s->u3_fixed && !s->finished, ctx, XF_EINVAL,
            "secagg reveal: site %u's reveal came before the survivors were fixed or after the end",
            from);
  XF_ENSURE(s->state[from] & S_SURVIVED, ctx, XF_EINVAL, "secagg reveal: site %u is not a survivor",
            from);
  XF_ENSURE(!(s->state[from] & S_REVEALED), ctx, XF_EEXISTS,
            "secagg reveal: site %u revealed twice", from);
  xf_cursor cur = xf_cursor_make(msg, len);
  uint8_t version;
  uint32_t sender, entries;
  XF_ENSURE(xf_cursor_u8(&cur, &version) == XF_OK && xf_cursor_u32be(&cur, &sender) == XF_OK &&
                xf_cursor_u32be(&cur, &entries) == XF_OK,
            ctx, XF_ETRUNCATED, "secagg reveal: site %u's message ends in its header", from);
  XF_ENSURE(version == 1 && sender == from, ctx, XF_EFORMAT,
            "secagg reveal: site %u's message has version %u and sender %u", from, version, sender);
  XF_ENSURE(entries <= s->p.degree + 1 &&
                xf_cursor_remaining(&cur) == (size_t)entries * XF_SECAGG_REVEAL_ENTRY_BYTES,
            ctx, XF_EFORMAT, "secagg reveal: site %u's message holds %u entries in %zu bytes", from,
            entries, xf_cursor_remaining(&cur));
  /* Check every entry before keeping any, so a bad message changes nothing. */
  uint32_t *owners = xf_mallocarray((size_t)entries + 1, sizeof(*owners));
  if (!owners) return xf_fail(ctx, XF_ENOMEM, "secagg reveal: no memory");
  xf_cursor check = cur;
  xf_err rc = XF_OK;
  for (uint32_t e = 0; e < entries && rc == XF_OK; e++) {
    uint32_t owner;
    uint8_t kind;
    const uint8_t *bytes;
    xf_shamir_share sh;
    if (xf_cursor_u32be(&check, &owner) != XF_OK || xf_cursor_u8(&check, &kind) != XF_OK ||
        xf_cursor_view(&check, &bytes, XF_SHAMIR_SHARE_BYTES) != XF_OK ||
        xf_shamir_share_decode(bytes, &sh) != XF_OK) {
      rc = xf_fail(ctx, XF_EFORMAT, "secagg reveal: site %u's entry %u is malformed", from, e);
      break;
    }
    owners[e] = owner;
    if (owner < 1 || owner > s->p.n || !(s->state[owner] & S_SHARED) ||
        !holder_of(s, from, owner) || sh.x != from)
      rc = xf_fail(ctx, XF_EDENIED, "secagg reveal: site %u sent a share of site %u it cannot hold",
                   from, owner);
    else if (kind != ((s->state[owner] & S_SURVIVED) ? KIND_SELF : KIND_KEY))
      rc = xf_fail(ctx, XF_EDENIED,
                   "secagg reveal: site %u sent a share of site %u's %s, which this round must not "
                   "learn",
                   from, owner, kind == KIND_SELF ? "self-mask seed" : "masking key");
    for (uint32_t f = 0; f < e && rc == XF_OK; f++)
      if (owners[f] == owner)
        rc = xf_fail(ctx, XF_EFORMAT, "secagg reveal: site %u sent two shares of site %u", from,
                     owner);
    sodium_memzero(&sh, sizeof(sh));
  }
  for (uint32_t e = 0; e < entries && rc == XF_OK; e++) {
    uint32_t owner;
    uint8_t kind;
    const uint8_t *bytes;
    xf_shamir_share sh;
    if (xf_cursor_u32be(&cur, &owner) != XF_OK || xf_cursor_u8(&cur, &kind) != XF_OK ||
        xf_cursor_view(&cur, &bytes, XF_SHAMIR_SHARE_BYTES) != XF_OK ||
        xf_shamir_share_decode(bytes, &sh) != XF_OK) {
      rc = xf_fail(ctx, XF_EINTERNAL, "secagg reveal: entry %u changed while read", e);
      break;
    }
    if (s->n_shares[owner - 1] < s->tshare)
      s->shares[(size_t)(owner - 1) * s->tshare + s->n_shares[owner - 1]++] = sh;
    sodium_memzero(&sh, sizeof(sh));
  }
  if (rc == XF_OK) s->state[from] |= S_REVEALED;
  xf_free(owners);
  return rc;
}

xf_err xf_secagg_server_finish(xf_secagg_server *s, uint32_t *sum, xf_errctx *ctx) {
  XF_ENSURE(s && sum, ctx, XF_EINVAL, "secagg finish: NULL argument");
  XF_ENSURE(s->u3_fixed && !s->finished, ctx, XF_EINVAL,
            "secagg finish: the survivors are not fixed yet, or the round already finished");
  XF_ENSURE(s->n_u3 >= s->p.threshold, ctx, XF_ERANGE,
            "secagg finish: only %zu sites survived, the threshold is %u", s->n_u3, s->p.threshold);
  /* Seeds to remove: one per survivor, and one per (dropped site, surviving
   * neighbour). */
  size_t n_seeds = s->n_u3;
  for (uint32_t j = 1; j <= s->p.n; j++) {
    if ((s->state[j] & S_SHARED) && !(s->state[j] & S_SURVIVED))
      for (uint32_t i = 1; i <= s->p.n; i++)
        if ((s->state[i] & S_SURVIVED) && graph_adjacent(&s->p, s->pos, i, j)) n_seeds++;
  }
  mask_seed *seeds = sodium_allocarray(n_seeds, sizeof(*seeds));
  uint32_t *ks = sodium_allocarray(PIECE + WORDS_PER_BLOCK, sizeof(*ks));
  uint8_t *secret = sodium_malloc(KEY_BYTES);
  xf_err rc = XF_OK;
  if (!seeds || !ks || !secret) {
    rc = xf_fail(ctx, XF_ENOMEM, "secagg finish: no secure memory for %zu seeds", n_seeds);
    goto out;
  }
  size_t n = 0;
  for (uint32_t j = 1; j <= s->p.n && rc == XF_OK; j++) {
    if (!(s->state[j] & S_SHARED)) continue;
    bool survived = s->state[j] & S_SURVIVED;
    const char *what = survived ? "self-mask seed" : "masking key";
    if (s->n_shares[j - 1] < s->tshare) {
      rc = xf_fail(ctx, XF_ERANGE,
                   "secagg finish: cannot recover site %u's %s: %u of the %u shares needed were "
                   "revealed; the round fails",
                   j, what, s->n_shares[j - 1], s->tshare);
      break;
    }
    rc = xf_shamir_combine(&s->shares[(size_t)(j - 1) * s->tshare], s->tshare, s->tshare, secret,
                           ctx);
    if (rc != XF_OK) {
      rc = xf_fail(ctx, rc, "secagg finish: site %u's %s does not reconstruct", j, what);
      break;
    }
    if (survived) {
      memcpy(seeds[n].key, secret, KEY_BYTES);
      seeds[n].nonce = NONCE_SELF;
      seeds[n++].sign = -1;
      continue;
    }
    uint8_t pk[KEY_BYTES];
    crypto_scalarmult_base(pk, secret);
    if (memcmp(pk, s->adverts[j - 1] + KEY_BYTES, KEY_BYTES) != 0) {
      rc = xf_fail(ctx, XF_EINTEGRITY,
                   "secagg finish: site %u's recovered masking key does not match its advert", j);
      break;
    }
    for (uint32_t i = 1; i <= s->p.n && rc == XF_OK; i++) {
      if (!(s->state[i] & S_SURVIVED) || !graph_adjacent(&s->p, s->pos, i, j)) continue;
      const uint8_t *pk_i = s->adverts[i - 1] + KEY_BYTES, *pk_j = s->adverts[j - 1] + KEY_BYTES;
      if (derive_pair_key("mask", s->round, secret, i < j ? pk_i : pk_j, i < j ? pk_j : pk_i, pk_i,
                          seeds[n].key) != XF_OK)
        rc = xf_fail(ctx, XF_EINTEGRITY, "secagg finish: site %u advertised an invalid masking key",
                     i);
      seeds[n].nonce = NONCE_PAIR;
      seeds[n++].sign = i < j ? -1 : 1; /* site i added it when j > i */
    }
  }
  if (rc != XF_OK) goto out;
  uint32_t m = bits_mask(s->p.bits);
  memcpy(sum, s->sum, s->p.length * sizeof(*sum));
  for (uint64_t done = 0; done < s->p.length;) {
    size_t piece = s->p.length - done < PIECE ? (size_t)(s->p.length - done) : PIECE;
    apply_seeds(seeds, n, done, piece, sum + done, ks);
    for (size_t k = 0; k < piece; k++) sum[done + k] &= m;
    done += piece;
  }
  s->expansions = n;
  s->finished = true;
out:
  if (seeds) sodium_free(seeds);
  if (ks) sodium_free(ks);
  if (secret) sodium_free(secret);
  return rc;
}

uint64_t xf_secagg_server_prg_expansions(const xf_secagg_server *s) {
  return s ? s->expansions : 0;
}
