/* SPDX-License-Identifier: Apache-2.0 */
/* Secure aggregation (SecAgg+, Bell et al. 2020) against a semi-honest
 * server, on libsodium: the site side (xf_secagg_client) and the aggregator
 * side (xf_secagg_server) of one round, as pure state machines over byte
 * messages that the daemons carry. See docs/secure-aggregation.md. */
#ifndef XF_CRYPTO_SECAGG_H
#define XF_CRYPTO_SECAGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/shamir.h"

/* Largest cohort. Why: every party keeps O(n) public state (adverts, the
 * graph), and the default degree table ends here. */
#define XF_SECAGG_MAX_SITES 65536u
/* Largest vector: the ChaCha20-IETF block counter is 32 bits and a block
 * masks 16 values, so a stream covers 2^36 values. */
#define XF_SECAGG_MAX_LENGTH ((uint64_t)1 << 36)
/* Cohorts up to this size use the complete graph by default. */
#define XF_SECAGG_COMPLETE_MAX 64u

/* A site's advert: its share-encryption X25519 public key, then its masking
 * X25519 public key. All zero in an advert array: did not advertise. */
#define XF_SECAGG_ADVERT_BYTES 64
/* One encrypted pair of shares: 24-byte random nonce, then
 * XChaCha20-Poly1305 of (share of b || share of the masking key), each in
 * the 44-byte wire form of crypto/shamir.h, then the 16-byte tag. */
#define XF_SECAGG_SHARE_BYTES (24 + 2 * XF_SHAMIR_SHARE_BYTES + 16)
/* A reveal message: version (u8, 1), sender index (u32), entry count (u32),
 * then per entry the owner index (u32), the kind (u8: 0 = share of the
 * owner's self-mask seed b, 1 = share of its masking secret key) and the
 * 44-byte share. Integers big-endian. */
#define XF_SECAGG_REVEAL_HEADER_BYTES 9
#define XF_SECAGG_REVEAL_ENTRY_BYTES (4 + 1 + XF_SHAMIR_SHARE_BYTES)

typedef struct xf_secagg_params {
  uint32_t n;             /* sites in the round's cohort: 2..XF_SECAGG_MAX_SITES, indexed 1..n */
  uint32_t threshold;     /* t: 1 < t <= n, survivors needed to unmask */
  uint32_t bits;          /* arithmetic mod 2^bits, 8..32 */
  uint64_t length;        /* values in the vector: 1..XF_SECAGG_MAX_LENGTH */
  uint32_t degree;        /* neighbours of each site: n - 1 (complete graph) or even in 2..n-2 */
  uint8_t graph_seed[32]; /* public, fresh for every round: fixes the graph and names the round */
} xf_secagg_params;

/* XF_OK when p is a valid set of parameters, else XF_EINVAL naming the
 * field at fault in ctx (may be NULL). */
xf_err xf_secagg_params_check(const xf_secagg_params *p, xf_errctx *ctx) XF_WARN_UNUSED;

/* The round context: BLAKE2b-256 of every field of p. Every share key and
 * mask key of the round is bound to it. */
void xf_secagg_params_digest(const xf_secagg_params *p, uint8_t out[32]);

/* The degree the coordinator should choose for n sites: n - 1 (complete
 * graph) up to XF_SECAGG_COMPLETE_MAX sites, else the smallest even k for
 * which, with threshold t = ceil(n/2) and each site dropping independently
 * with probability 0.1, both n * P[Binomial(k, 0.9) <= k/2] <= 2^-20 (some
 * site's secret cannot be recovered) and n^2 0.1^k <= 2^-40 (the surviving
 * graph falls apart) hold: 32 up to 76 sites, 34 up to 219, ... 46 up to
 * 65,536 (about 1.4 log2(n) + 23). A fixed table, so both sides agree. 0 when n is
 * outside 2..XF_SECAGG_MAX_SITES. */
uint32_t xf_secagg_default_degree(uint32_t n);

/* t' = max(2, ceil(t (degree + 1) / n)): the Shamir threshold each site
 * shares its secrets with among the degree + 1 holders (its neighbours and
 * itself). Equal to t on the complete graph. p must be valid. */
uint32_t xf_secagg_share_threshold(const xf_secagg_params *p);

/* Whether sites i and j (1..n) are neighbours: symmetric, false for i == j
 * and for invalid input. Sites sit on a ring in an order drawn from
 * graph_seed and are neighbours when at most degree/2 apart (a Harary graph
 * with random labels, as Bell et al. use). O(n) time and memory per call
 * (false if that memory cannot be had): to list many neighbours use
 * xf_secagg_client_neighbours. */
bool xf_secagg_neighbours(const xf_secagg_params *p, uint32_t i, uint32_t j);

/* ---- site ------------------------------------------------------------------ */

typedef struct xf_secagg_client xf_secagg_client;

/* One encrypted pair of shares and the site it is for. */
typedef struct xf_secagg_share_msg {
  uint32_t to;
  uint8_t ciphertext[XF_SECAGG_SHARE_BYTES];
} xf_secagg_share_msg;

/* Phase 1. A client for site `me` (1..n) in the round of p: draws the
 * share-encryption and masking X25519 key pairs and the 32-byte self-mask
 * seed b, all in sodium_malloc memory. *out is owned by the caller and
 * released with xf_secagg_client_free, which wipes every secret. XF_EINVAL
 * (bad parameters or index), XF_ENOMEM, XF_EINTERNAL (libsodium). */
xf_err xf_secagg_client_new(const xf_secagg_params *p, uint32_t me, xf_secagg_client **out,
                            xf_errctx *ctx) XF_WARN_UNUSED;
void xf_secagg_client_free(xf_secagg_client *c);

/* The two public keys, for the server to route to every site. */
void xf_secagg_client_advertise(const xf_secagg_client *c, uint8_t out[XF_SECAGG_ADVERT_BYTES]);

/* The client's neighbours, ascending, into out (cap entries; degree is
 * enough); *count is set to their number. XF_ERANGE when cap is too small. */
xf_err xf_secagg_client_neighbours(const xf_secagg_client *c, uint32_t *out, size_t cap,
                                   size_t *count) XF_WARN_UNUSED;

/* Phase 2. adverts holds n adverts (site i at (i-1) * ADVERT_BYTES; all
 * zero: did not advertise), and this site's own must be among them
 * unchanged. Splits b and the masking secret key t'-of-h among the h
 * holders (this site and its neighbours that advertised), each at the
 * holder's index, and encrypts each neighbour's pair of shares under a key
 * from X25519 of the encryption keys hashed with the round, with associated
 * data binding the round, sender and receiver. Writes one message per
 * advertised neighbour to out (cap entries; degree is enough), *count their
 * number. XF_ERANGE when h < t' or when cap is too small; XF_EINTEGRITY
 * when an advertised key is invalid (a low-order point) or our own advert
 * differs; XF_EINVAL when called out of order. */
xf_err xf_secagg_client_share(xf_secagg_client *c, const uint8_t *adverts, xf_secagg_share_msg *out,
                              size_t cap, size_t *count, xf_errctx *ctx) XF_WARN_UNUSED;

/* Phase 2, receiving: the shares neighbour `from` sent us. XF_EINTEGRITY
 * when the ciphertext does not authenticate for (round, from, us) or holds
 * shares that are not at our point; XF_EINVAL when from is not an
 * advertised neighbour; XF_EEXISTS when from's shares are already here. */
xf_err xf_secagg_client_receive(xf_secagg_client *c, uint32_t from,
                                const uint8_t ciphertext[XF_SECAGG_SHARE_BYTES],
                                xf_errctx *ctx) XF_WARN_UNUSED;

/* End of phase 2: U2, the sites whose shares the server routed (any order).
 * Must contain this site, at least t sites, and every neighbour in it must
 * have delivered its shares here; at least t' of this site's holders must
 * be in it. Derives the pairwise mask seeds s_ij for the neighbours in U2.
 * XF_ERANGE / XF_EINVAL / XF_EINTEGRITY with the reason in ctx. */
xf_err xf_secagg_client_routed(xf_secagg_client *c, const uint32_t *u2, size_t n_u2,
                               xf_errctx *ctx) XF_WARN_UNUSED;

/* Phase 3: y[k] = x[k] + PRG(b) + sum_{j in U2 neighbours, j > me} PRG(s_ij)
 * - sum_{j < me} PRG(s_ij) mod 2^bits for the values offset..offset+count-1
 * (x is read mod 2^bits; x and y may be the same array). PRG word v of a
 * seed is the v-th little-endian 32-bit word of its ChaCha20-IETF keystream,
 * so chunks give the same result in any order or size. XF_ERANGE when the
 * range passes `length`; XF_EINVAL before xf_secagg_client_routed. */
xf_err xf_secagg_client_mask(xf_secagg_client *c, const uint32_t *x, uint64_t offset,
                             uint64_t count, uint32_t *y, xf_errctx *ctx) XF_WARN_UNUSED;

/* The largest reveal message of a round with parameters p. */
size_t xf_secagg_reveal_max_bytes(const xf_secagg_params *p);

/* Phase 4: U3, the sites whose whole masked vectors the server holds (any
 * order). Reveals our share of b_j for each holder-owner j in U3 (neighbours
 * and ourselves) and our share of the masking key of each neighbour j in
 * U2 \ U3, as one reveal message in out (cap bytes), *len its size.
 * Refuses (XF_EDENIED, nothing written) when |U3| < t, when we are not in
 * U3, or when the answer would give one site's second secret after an
 * earlier call gave its first (b then key, or key then b: that would unmask
 * its input). XF_EINVAL for indices outside U2 or repeated; XF_ERANGE when
 * cap is too small. May be called again with the same U3. */
xf_err xf_secagg_client_unmask(xf_secagg_client *c, const uint32_t *survivors, size_t n_surv,
                               uint8_t *out, size_t cap, size_t *len,
                               xf_errctx *ctx) XF_WARN_UNUSED;

/* Whether xf_secagg_client_unmask would reveal for U3, without revealing:
 * the same checks and refusals (XF_EDENIED, XF_EINVAL), nothing changed. */
xf_err xf_secagg_client_check_survivors(const xf_secagg_client *c, const uint32_t *survivors,
                                        size_t n_surv, xf_errctx *ctx) XF_WARN_UNUSED;

/* ---- aggregator -------------------------------------------------------------- */

typedef struct xf_secagg_server xf_secagg_server;

/* A server for the round of p. Holds the running sum (length words), the
 * adverts and graph (O(n)) and the revealed shares (O(n t')). *out is owned
 * by the caller, released with xf_secagg_server_free. */
xf_err xf_secagg_server_new(const xf_secagg_params *p, xf_secagg_server **out,
                            xf_errctx *ctx) XF_WARN_UNUSED;
void xf_secagg_server_free(xf_secagg_server *s);

/* Phase 1: site i's advert. XF_EEXISTS when i already advertised. */
xf_err xf_secagg_server_advert(xf_secagg_server *s, uint32_t i,
                               const uint8_t advert[XF_SECAGG_ADVERT_BYTES],
                               xf_errctx *ctx) XF_WARN_UNUSED;
/* The n adverts to send to every site (zero for sites that did not
 * advertise), n * XF_SECAGG_ADVERT_BYTES bytes. */
void xf_secagg_server_adverts(const xf_secagg_server *s, uint8_t *out);

/* Phase 2: site i's shares were all routed to their receivers (i joins U2).
 * XF_EINVAL when i did not advertise or U2 is already fixed. */
xf_err xf_secagg_server_shared(xf_secagg_server *s, uint32_t i, xf_errctx *ctx) XF_WARN_UNUSED;

/* Fixes U2 and writes it ascending to out (n entries), *count its size, for
 * xf_secagg_client_routed. XF_ERANGE when |U2| < t: the round fails. May be
 * called again; it returns the same set. */
xf_err xf_secagg_server_routed(xf_secagg_server *s, uint32_t *out, size_t *count,
                               xf_errctx *ctx) XF_WARN_UNUSED;

/* Phase 3: folds masked values offset..offset+count-1 of site i (in U2) into
 * the running sum. Chunks may come in any order; a value delivered twice is
 * refused (XF_EEXISTS) and the sum is unchanged on any error. XF_ERANGE for
 * values not below 2^bits or a range past `length`; XF_EINVAL when i is not
 * in U2 or U3 is fixed. Costs O(chunks of i) for the bookkeeping. */
xf_err xf_secagg_server_add_masked(xf_secagg_server *s, uint32_t i, uint64_t offset, uint64_t count,
                                   const uint32_t *y, xf_errctx *ctx) XF_WARN_UNUSED;

/* Fixes U3 (the sites of U2 that delivered their whole vector) and writes
 * it ascending to out (n entries), *count its size, for
 * xf_secagg_client_unmask. XF_ERANGE when |U3| < t; XF_EINTEGRITY when a
 * site delivered part of its vector (its partial input is in the sum and
 * cannot be taken out: the daemon must get the rest, e.g. by resending
 * sealed chunks, before calling this). May be called again. */
xf_err xf_secagg_server_survivors(xf_secagg_server *s, uint32_t *out, size_t *count,
                                  xf_errctx *ctx) XF_WARN_UNUSED;

/* Phase 4: a reveal message from site `from` (in U3). Every entry must be a
 * share held by `from` (its point is from) of the secret U3 calls for: b for
 * owners in U3, the masking key for owners in U2 \ U3, for `from` itself or
 * a neighbour. XF_EFORMAT / XF_ETRUNCATED for malformed bytes, XF_EDENIED
 * for a share of the wrong secret, XF_EEXISTS for a second message. */
xf_err xf_secagg_server_add_reveal(xf_secagg_server *s, uint32_t from, const uint8_t *msg,
                                   size_t len, xf_errctx *ctx) XF_WARN_UNUSED;

/* The result: sum[0..length) = sum over U3 of the sites' inputs mod 2^bits.
 * Reconstructs each survivor's b and subtracts PRG(b), reconstructs each
 * U2 \ U3 site's masking key and cancels its pairwise masks with its
 * neighbours in U3. XF_ERANGE naming the site and secret when fewer than t'
 * shares of it were revealed, or when |U3| < t; XF_EINTEGRITY when shares
 * disagree; XF_EINVAL before xf_secagg_server_survivors or after a
 * successful finish. sum is unspecified on error; the round then fails. */
xf_err xf_secagg_server_finish(xf_secagg_server *s, uint32_t *sum, xf_errctx *ctx) XF_WARN_UNUSED;

/* ChaCha20 streams of `length` words that the last finish expanded: |U3|
 * self masks plus one per (dropped site, surviving neighbour) pair. */
uint64_t xf_secagg_server_prg_expansions(const xf_secagg_server *s);

#endif
