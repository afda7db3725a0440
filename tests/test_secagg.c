/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of SecAgg+ (crypto/secagg.h): whole rounds simulated in process, with
 * the server routing every message, for complete and k-regular graphs, with
 * sites dropping at each phase; the refusals that protect a site's input;
 * chunked masking; the graph; and what the server sees of one site. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/secagg.h"
#include "codec/codec.h"

/* How a site takes part in a simulated round. */
typedef enum fate {
  LIVES,             /* every phase */
  NO_ADVERT,         /* never shows up */
  DROPS_AFTER_SHARE, /* its shares are routed (in U2), it sends no masked input */
  DROPS_AFTER_MASK,  /* sends its masked input (in U3), never reveals */
} fate;

typedef struct sim {
  xf_secagg_params p;
  fate *fates;          /* 1..n */
  xf_secagg_client **c; /* 1..n */
  xf_secagg_server *s;
  uint32_t **x; /* inputs, 1..n */
  uint32_t *u2, *u3;
  size_t n_u2, n_u3;
  uint32_t chunk; /* values per masked chunk */
} sim;

static uint32_t rand_below(uint32_t m) { return randombytes_uniform(m); }

static xf_secagg_params params(uint32_t n, uint32_t t, uint32_t bits, uint64_t length,
                               uint32_t degree) {
  xf_secagg_params p = {.n = n, .threshold = t, .bits = bits, .length = length, .degree = degree};
  randombytes_buf(p.graph_seed, sizeof(p.graph_seed));
  return p;
}

static uint32_t mask_of(uint32_t bits) { return bits == 32 ? UINT32_MAX : (1u << bits) - 1; }

static void sim_init(sim *m, const xf_secagg_params *p) {
  memset(m, 0, sizeof(*m));
  m->p = *p;
  m->fates = calloc(p->n + 1, sizeof(*m->fates));
  m->c = calloc(p->n + 1, sizeof(*m->c));
  m->x = calloc(p->n + 1, sizeof(*m->x));
  m->u2 = calloc(p->n, sizeof(*m->u2));
  m->u3 = calloc(p->n, sizeof(*m->u3));
  m->chunk = 1000;
  assert_int_equal(xf_secagg_server_new(p, &m->s, NULL), XF_OK);
  for (uint32_t i = 1; i <= p->n; i++) {
    assert_int_equal(xf_secagg_client_new(p, i, &m->c[i], NULL), XF_OK);
    m->x[i] = malloc(p->length * sizeof(uint32_t));
    randombytes_buf(m->x[i], p->length * sizeof(uint32_t));
    for (uint64_t k = 0; k < p->length; k++) m->x[i][k] &= mask_of(p->bits);
  }
}

static void sim_free(sim *m) {
  for (uint32_t i = 1; i <= m->p.n; i++) {
    xf_secagg_client_free(m->c[i]);
    free(m->x[i]);
  }
  xf_secagg_server_free(m->s);
  free(m->fates);
  free(m->c);
  free(m->x);
  free(m->u2);
  free(m->u3);
}

/* Phases 1 and 2: adverts, shares routed by the server, U2 to everyone. */
static void sim_share(sim *m) {
  uint32_t n = m->p.n;
  for (uint32_t i = 1; i <= n; i++) {
    if (m->fates[i] == NO_ADVERT) continue;
    uint8_t a[XF_SECAGG_ADVERT_BYTES];
    xf_secagg_client_advertise(m->c[i], a);
    assert_int_equal(xf_secagg_server_advert(m->s, i, a, NULL), XF_OK);
  }
  uint8_t *adverts = malloc((size_t)n * XF_SECAGG_ADVERT_BYTES);
  xf_secagg_server_adverts(m->s, adverts);
  /* The server collects every site's shares, then routes them. */
  xf_secagg_share_msg *msgs = malloc((size_t)n * m->p.degree * sizeof(*msgs));
  size_t *counts = calloc(n + 1, sizeof(*counts));
  for (uint32_t i = 1; i <= n; i++) {
    if (m->fates[i] == NO_ADVERT) continue;
    xf_errctx ctx;
    xf_errctx_clear(&ctx);
    if (xf_secagg_client_share(m->c[i], adverts, msgs + (size_t)(i - 1) * m->p.degree, m->p.degree,
                               &counts[i], &ctx) != XF_OK)
      fail_msg("site %u share: %s", i, ctx.msg);
  }
  for (uint32_t i = 1; i <= n; i++) {
    if (m->fates[i] == NO_ADVERT) continue;
    for (size_t k = 0; k < counts[i]; k++) {
      const xf_secagg_share_msg *msg = &msgs[(size_t)(i - 1) * m->p.degree + k];
      xf_errctx ctx;
      xf_errctx_clear(&ctx);
      assert_true(m->fates[msg->to] != NO_ADVERT);
      if (xf_secagg_client_receive(m->c[msg->to], i, msg->ciphertext, &ctx) != XF_OK)
        fail_msg("site %u receiving from %u: %s", msg->to, i, ctx.msg);
    }
    assert_int_equal(xf_secagg_server_shared(m->s, i, NULL), XF_OK);
  }
  free(counts);
  free(msgs);
  free(adverts);
  assert_int_equal(xf_secagg_server_routed(m->s, m->u2, &m->n_u2, NULL), XF_OK);
  for (size_t k = 0; k < m->n_u2; k++) {
    xf_errctx ctx;
    xf_errctx_clear(&ctx);
    if (xf_secagg_client_routed(m->c[m->u2[k]], m->u2, m->n_u2, &ctx) != XF_OK)
      fail_msg("site %u routed: %s", m->u2[k], ctx.msg);
  }
}

/* Phase 3: each masking site sends its vector in chunks; the server takes
 * the chunks of all sites in a shuffled order. */
static void sim_mask(sim *m) {
  uint64_t len = m->p.length, chunks = (len + m->chunk - 1) / m->chunk;
  size_t total = 0;
  uint64_t(*order)[2] = malloc(m->p.n * chunks * sizeof(*order));
  uint32_t **y = calloc(m->p.n + 1, sizeof(*y));
  for (uint32_t i = 1; i <= m->p.n; i++) {
    if (m->fates[i] != LIVES && m->fates[i] != DROPS_AFTER_MASK) continue;
    y[i] = malloc(len * sizeof(uint32_t));
    for (uint64_t c = 0; c < chunks; c++) {
      uint64_t off = c * m->chunk, cnt = len - off < m->chunk ? len - off : m->chunk;
      assert_int_equal(xf_secagg_client_mask(m->c[i], m->x[i] + off, off, cnt, y[i] + off, NULL),
                       XF_OK);
      order[total][0] = i;
      order[total++][1] = c;
    }
  }
  for (size_t k = total; k > 1; k--) {
    size_t r = rand_below((uint32_t)k);
    uint64_t t0 = order[k - 1][0], t1 = order[k - 1][1];
    order[k - 1][0] = order[r][0];
    order[k - 1][1] = order[r][1];
    order[r][0] = t0;
    order[r][1] = t1;
  }
  for (size_t k = 0; k < total; k++) {
    uint32_t i = (uint32_t)order[k][0];
    uint64_t off = order[k][1] * m->chunk, cnt = len - off < m->chunk ? len - off : m->chunk;
    assert_int_equal(xf_secagg_server_add_masked(m->s, i, off, cnt, y[i] + off, NULL), XF_OK);
  }
  for (uint32_t i = 1; i <= m->p.n; i++) free(y[i]);
  free(y);
  free(order);
}

/* Phase 4: U3 to the living, their reveals to the server. */
static void sim_reveal(sim *m) {
  assert_int_equal(xf_secagg_server_survivors(m->s, m->u3, &m->n_u3, NULL), XF_OK);
  size_t cap = xf_secagg_reveal_max_bytes(&m->p);
  uint8_t *msg = malloc(cap);
  for (size_t k = 0; k < m->n_u3; k++) {
    uint32_t i = m->u3[k];
    if (m->fates[i] != LIVES) continue;
    size_t len;
    xf_errctx ctx;
    xf_errctx_clear(&ctx);
    if (xf_secagg_client_unmask(m->c[i], m->u3, m->n_u3, msg, cap, &len, &ctx) != XF_OK)
      fail_msg("site %u unmask: %s", i, ctx.msg);
    if (xf_secagg_server_add_reveal(m->s, i, msg, len, &ctx) != XF_OK)
      fail_msg("server, reveal of site %u: %s", i, ctx.msg);
  }
  free(msg);
}

/* The sum of the inputs of the sites that delivered masked input. */
static void expected_sum(const sim *m, uint32_t *want) {
  memset(want, 0, m->p.length * sizeof(uint32_t));
  for (uint32_t i = 1; i <= m->p.n; i++)
    if (m->fates[i] == LIVES || m->fates[i] == DROPS_AFTER_MASK)
      for (uint64_t k = 0; k < m->p.length; k++) want[k] += m->x[i][k];
  for (uint64_t k = 0; k < m->p.length; k++) want[k] &= mask_of(m->p.bits);
}

/* A whole round with the given fates; the sum must be exact. */
static void run_round(const xf_secagg_params *p, const fate *fates) {
  sim m;
  sim_init(&m, p);
  if (fates) memcpy(m.fates, fates, (p->n + 1) * sizeof(*fates));
  sim_share(&m);
  sim_mask(&m);
  sim_reveal(&m);
  uint32_t *sum = malloc(p->length * sizeof(uint32_t)),
           *want = malloc(p->length * sizeof(uint32_t));
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_secagg_server_finish(m.s, sum, &ctx) != XF_OK) fail_msg("finish: %s", ctx.msg);
  expected_sum(&m, want);
  assert_memory_equal(sum, want, p->length * sizeof(uint32_t));
  size_t dropped_u2 = 0;
  for (uint32_t i = 1; i <= p->n; i++) dropped_u2 += m.fates[i] == DROPS_AFTER_SHARE;
  print_message("n=%u t=%u bits=%u degree=%u length=%llu: |U2|=%zu |U3|=%zu, %llu PRG expansions\n",
                p->n, p->threshold, p->bits, p->degree, (unsigned long long)p->length, m.n_u2,
                m.n_u3, (unsigned long long)xf_secagg_server_prg_expansions(m.s));
  assert_int_equal(m.n_u3 + dropped_u2, m.n_u2);
  free(sum);
  free(want);
  sim_free(&m);
}

/* ---- whole rounds ---------------------------------------------------------------- */

/* The aggregate the daemons form: float updates (L2 norm <= clip) scaled by
 * their weight share, quantized on the shared scale of coordinator/
 * secagg_run.c, summed under masks with a dropout, dequantized. It equals
 * the plain weighted sum of the same updates within the stated error: one
 * step per contributing site per coordinate (stochastic rounding moves a
 * value by less than one step). */
static void secure_sum_of_quantized_updates_is_the_plain_sum_within_one_step_per_site(
    void **state) {
  (void)state;
  const uint32_t n = 6, bits = 24;
  const uint64_t len = 5000;
  const double clip = 1.0;
  xf_secagg_params p = params(n, 4, bits, len, n - 1);
  sim m;
  sim_init(&m, &p);
  xf_codec_fixed f = {.bits = bits, .bound = (uint32_t)((1u << (bits - 1)) - 1 - n)};
  f.step = clip / f.bound;
  float **upd = calloc(n + 1, sizeof(*upd));
  double scale[7] = {0, 0.3, 0.1, 0.2, 0.15, 0.05, 0.2};
  for (uint32_t i = 1; i <= n; i++) {
    upd[i] = malloc(len * sizeof(float));
    double sq = 0;
    for (uint64_t k = 0; k < len; k++) {
      upd[i][k] = (float)((double)rand_below(2000001) / 1e6 - 1.0);
      sq += (double)upd[i][k] * upd[i][k];
    }
    float shrink = (float)(clip / sqrt(sq)); /* L2 norm exactly clip */
    float *scaled = malloc(len * sizeof(float));
    for (uint64_t k = 0; k < len; k++) {
      upd[i][k] *= shrink;
      scaled[k] = (float)((double)upd[i][k] * scale[i]);
    }
    size_t clipped = 99;
    assert_int_equal(xf_codec_quantize_fixed(&f, scaled, len, 1000 + i, m.x[i], &clipped, NULL),
                     XF_OK);
    assert_int_equal(clipped, 0);
    free(scaled);
  }
  m.fates[4] = DROPS_AFTER_SHARE; /* one site vanishes before its masked input */
  sim_share(&m);
  sim_mask(&m);
  sim_reveal(&m);
  uint32_t *sum = malloc(len * sizeof(uint32_t));
  float *got = malloc(len * sizeof(float));
  assert_int_equal(xf_secagg_server_finish(m.s, sum, NULL), XF_OK);
  xf_codec_dequantize_fixed(&f, sum, len, got);
  double worst = 0, bound = (double)m.n_u3 * f.step;
  for (uint64_t k = 0; k < len; k++) {
    double want = 0;
    for (uint32_t i = 1; i <= n; i++)
      if (m.fates[i] == LIVES) want += (double)upd[i][k] * scale[i];
    double e = fabs((double)got[k] - want);
    if (e > worst) worst = e;
  }
  print_message("secure sum vs plain sum: worst error %.3g, bound %.3g (%zu sites x step %.3g)\n",
                worst, bound, m.n_u3, f.step);
  /* float32 rounding of the dequantized sum adds at most half an ulp of 1 */
  assert_true(worst <= bound + 0x1p-24);
  for (uint32_t i = 1; i <= n; i++) free(upd[i]);
  free(upd);
  free(sum);
  free(got);
  sim_free(&m);
}

static void round_sums_exactly_with_2_sites(void **state) {
  (void)state;
  xf_secagg_params p = params(2, 2, 16, 4099, 1);
  run_round(&p, NULL);
}

static void round_sums_exactly_with_5_sites(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 3, 20, 4099, xf_secagg_default_degree(5));
  run_round(&p, NULL);
}

static void round_sums_exactly_with_20_sites(void **state) {
  (void)state;
  xf_secagg_params p = params(20, 11, 32, 2053, xf_secagg_default_degree(20));
  run_round(&p, NULL);
}

static void round_sums_exactly_with_100_sites_on_a_sparse_graph(void **state) {
  (void)state;
  xf_secagg_params p = params(100, 50, 20, 1031, xf_secagg_default_degree(100));
  assert_int_equal(p.degree, 34);
  assert_int_equal(xf_secagg_share_threshold(&p), 18);
  fate f[101] = {0};
  for (uint32_t i = 3; i <= 100; i += 10) f[i] = DROPS_AFTER_SHARE;
  f[7] = f[58] = DROPS_AFTER_MASK;
  f[99] = NO_ADVERT;
  run_round(&p, f);
}

/* Bell et al.: a site that drops before sending its masked input is in U2
 * but not U3: its pairwise masks are cancelled with its key and its input
 * is not in the sum. */
static void site_dropping_before_masking_is_left_out(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 3, 16, 777, 4);
  fate f[6] = {0};
  f[2] = DROPS_AFTER_SHARE;
  run_round(&p, f);
}

/* The acceptance case: 5 sites, one drops after sending its masked input. It
 * is in U3, the others reveal its b, and its input is in the sum. */
static void site_dropping_after_masking_is_counted(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 3, 16, 777, 4);
  fate f[6] = {0};
  f[4] = DROPS_AFTER_MASK;
  run_round(&p, f);
}

static void mixed_dropouts_with_20_sites(void **state) {
  (void)state;
  xf_secagg_params p = params(20, 10, 32, 3000, 19);
  fate f[21] = {0};
  f[1] = NO_ADVERT;
  f[5] = f[6] = f[20] = DROPS_AFTER_SHARE;
  f[9] = f[13] = DROPS_AFTER_MASK;
  run_round(&p, f);
  /* A sparse graph at 20 sites: degree 8, share threshold 5 of 9 holders,
   * so at most 4 of any site's neighbours may fail to reveal; with two
   * sites gone that always holds. (Six, as above, can leave a site with 4
   * of 5 shares: the round then fails, see too_few_reveals_...) */
  p = params(20, 10, 16, 3000, 8);
  fate g[21] = {0};
  g[6] = DROPS_AFTER_SHARE;
  g[13] = DROPS_AFTER_MASK;
  run_round(&p, g);
}

/* ---- failures ------------------------------------------------------------------------ */

static void too_few_survivors_fail_the_round(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 4, 16, 100, 4);
  sim m;
  sim_init(&m, &p);
  m.fates[2] = m.fates[3] = DROPS_AFTER_SHARE;
  sim_share(&m);
  sim_mask(&m);
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  uint32_t u3[5];
  size_t n_u3;
  assert_int_equal(xf_secagg_server_survivors(m.s, u3, &n_u3, &ctx), XF_ERANGE);
  assert_non_null(strstr(ctx.msg, "threshold is 4"));
  uint32_t sum[100];
  assert_int_equal(xf_secagg_server_finish(m.s, sum, &ctx), XF_EINVAL);
  /* A client told of three survivors refuses to reveal anything. */
  uint32_t three[3] = {1, 4, 5};
  uint8_t msg[1024];
  size_t len = 0;
  assert_int_equal(xf_secagg_client_unmask(m.c[1], three, 3, msg, sizeof(msg), &len, &ctx),
                   XF_EDENIED);
  assert_non_null(strstr(ctx.msg, "only 3 sites survived"));
  sim_free(&m);
}

/* Enough sites delivered, but too few revealed: finish names the site and
 * the secret it cannot recover. */
static void too_few_reveals_fail_finish_by_name(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 4, 16, 100, 4);
  sim m;
  sim_init(&m, &p);
  m.fates[4] = m.fates[5] = DROPS_AFTER_MASK;
  sim_share(&m);
  sim_mask(&m);
  sim_reveal(&m);
  uint32_t sum[100];
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_secagg_server_finish(m.s, sum, &ctx), XF_ERANGE);
  assert_non_null(strstr(ctx.msg, "cannot recover site 1's self-mask seed: 3 of the 4 shares"));
  sim_free(&m);
}

/* A server that first calls site 3 a survivor and then a dropout would get
 * both its b and its key, hence its input: every client refuses. */
static void client_refuses_to_reveal_both_secrets_of_a_site(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 3, 16, 64, 4);
  sim m;
  sim_init(&m, &p);
  sim_share(&m);
  sim_mask(&m);
  sim_reveal(&m);
  uint32_t without3[4] = {1, 2, 4, 5}, with3[5] = {1, 2, 3, 4, 5};
  uint8_t msg[2048];
  size_t len;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_secagg_client_unmask(m.c[1], without3, 4, msg, sizeof(msg), &len, &ctx),
                   XF_EDENIED);
  assert_non_null(strstr(ctx.msg, "site 3's masking key"));
  /* The same question again is answered. */
  assert_int_equal(xf_secagg_client_unmask(m.c[1], with3, 5, msg, sizeof(msg), &len, NULL), XF_OK);
  /* And the other way round, on a fresh round. */
  sim m2;
  sim_init(&m2, &p);
  sim_share(&m2);
  sim_mask(&m2);
  assert_int_equal(xf_secagg_client_unmask(m2.c[2], without3, 4, msg, sizeof(msg), &len, NULL),
                   XF_OK);
  assert_int_equal(xf_secagg_client_unmask(m2.c[2], with3, 5, msg, sizeof(msg), &len, &ctx),
                   XF_EDENIED);
  assert_non_null(strstr(ctx.msg, "site 3's self-mask seed"));
  /* A server asking for a share of the wrong kind gets refused too. */
  size_t cap = xf_secagg_reveal_max_bytes(&p);
  assert_int_equal(xf_secagg_client_unmask(m2.c[1], with3, 5, msg, cap, &len, NULL), XF_OK);
  sim_free(&m);
  sim_free(&m2);
}

static void tampered_share_ciphertexts_are_refused(void **state) {
  (void)state;
  xf_secagg_params p = params(100, 50, 16, 16, xf_secagg_default_degree(100));
  xf_secagg_client *c[101];
  uint8_t *adverts = malloc(100 * XF_SECAGG_ADVERT_BYTES);
  for (uint32_t i = 1; i <= 100; i++) {
    assert_int_equal(xf_secagg_client_new(&p, i, &c[i], NULL), XF_OK);
    xf_secagg_client_advertise(c[i], adverts + (i - 1) * XF_SECAGG_ADVERT_BYTES);
  }
  xf_secagg_share_msg msgs[34];
  size_t count;
  assert_int_equal(xf_secagg_client_share(c[1], adverts, msgs, 34, &count, NULL), XF_OK);
  assert_int_equal(count, 34);
  uint32_t to = msgs[0].to, nb[34];
  size_t n_nb;
  assert_int_equal(xf_secagg_client_neighbours(c[to], nb, 34, &n_nb), XF_OK);
  assert_int_equal(xf_secagg_client_share(c[to], adverts, msgs + 1, 33, &count, NULL), XF_ERANGE);
  xf_secagg_share_msg mine[34];
  assert_int_equal(xf_secagg_client_share(c[to], adverts, mine, 34, &count, NULL), XF_OK);
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  size_t places[] = {0, 23, 24, 60, XF_SECAGG_SHARE_BYTES - 1}; /* nonce, body, tag */
  for (size_t k = 0; k < sizeof(places) / sizeof(places[0]); k++) {
    msgs[0].ciphertext[places[k]] ^= 0x01;
    assert_int_equal(xf_secagg_client_receive(c[to], 1, msgs[0].ciphertext, &ctx), XF_EINTEGRITY);
    msgs[0].ciphertext[places[k]] ^= 0x01;
  }
  /* The right bytes under another sender's name. */
  uint32_t other = nb[0] == 1 ? nb[1] : nb[0];
  assert_int_equal(xf_secagg_client_receive(c[to], other, msgs[0].ciphertext, &ctx), XF_EINTEGRITY);
  /* A share meant for another site. */
  xf_secagg_share_msg theirs[34];
  assert_int_equal(xf_secagg_client_share(c[msgs[1].to], adverts, theirs, 34, &count, NULL), XF_OK);
  assert_int_equal(xf_secagg_client_receive(c[msgs[1].to], 1, msgs[0].ciphertext, NULL),
                   XF_EINTEGRITY);
  /* A site that is not a neighbour. */
  uint32_t stranger = 0;
  for (uint32_t j = 2; j <= 100 && !stranger; j++)
    if (j != to && !xf_secagg_neighbours(&p, to, j)) stranger = j;
  assert_true(stranger != 0);
  assert_int_equal(xf_secagg_client_receive(c[to], stranger, msgs[0].ciphertext, &ctx), XF_EINVAL);
  assert_non_null(strstr(ctx.msg, "not a neighbour"));
  assert_int_equal(xf_secagg_client_receive(c[to], 1, msgs[0].ciphertext, NULL), XF_OK);
  assert_int_equal(xf_secagg_client_receive(c[to], 1, msgs[0].ciphertext, NULL), XF_EEXISTS);
  for (uint32_t i = 1; i <= 100; i++) xf_secagg_client_free(c[i]);
  free(adverts);
}

static void sharing_needs_enough_advertised_neighbours(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 4, 16, 16, 4);
  xf_secagg_client *c[6];
  uint8_t adverts[5 * XF_SECAGG_ADVERT_BYTES] = {0};
  for (uint32_t i = 1; i <= 5; i++)
    assert_int_equal(xf_secagg_client_new(&p, i, &c[i], NULL), XF_OK);
  for (uint32_t i = 1; i <= 3; i++)
    xf_secagg_client_advertise(c[i], adverts + (i - 1) * XF_SECAGG_ADVERT_BYTES);
  xf_secagg_share_msg msgs[4];
  size_t count;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_secagg_client_share(c[1], adverts, msgs, 4, &count, &ctx), XF_ERANGE);
  assert_non_null(strstr(ctx.msg, "only 3 of site 1's 5 share holders advertised"));
  /* Our own advert must be there unchanged. */
  assert_int_equal(xf_secagg_client_share(c[4], adverts, msgs, 4, &count, NULL), XF_EINTEGRITY);
  for (uint32_t i = 1; i <= 5; i++) xf_secagg_client_free(c[i]);
}

static void server_refuses_bad_masked_input_and_reveals(void **state) {
  (void)state;
  xf_secagg_params p = params(5, 3, 16, 100, 4);
  sim m;
  sim_init(&m, &p);
  m.fates[5] = DROPS_AFTER_SHARE;
  sim_share(&m);
  uint32_t y[100];
  assert_int_equal(xf_secagg_client_mask(m.c[1], m.x[1], 0, 100, y, NULL), XF_OK);
  assert_int_equal(xf_secagg_client_mask(m.c[1], m.x[1], 50, 51, y, NULL), XF_ERANGE);
  assert_int_equal(xf_secagg_server_add_masked(m.s, 1, 0, 60, y, NULL), XF_OK);
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_secagg_server_add_masked(m.s, 1, 40, 30, y + 40, &ctx), XF_EEXISTS);
  assert_non_null(strstr(ctx.msg, "twice"));
  uint32_t big[2] = {1u << 16, 0};
  assert_int_equal(xf_secagg_server_add_masked(m.s, 1, 60, 2, big, NULL), XF_ERANGE);
  assert_int_equal(xf_secagg_server_add_masked(m.s, 1, 99, 2, y, NULL), XF_ERANGE);
  uint32_t u3[5];
  size_t n_u3;
  /* Site 1 has delivered 60 of 100 values: the survivors cannot be fixed. */
  assert_int_equal(xf_secagg_server_survivors(m.s, u3, &n_u3, &ctx), XF_EINTEGRITY);
  assert_non_null(strstr(ctx.msg, "site 1 delivered only part"));
  assert_int_equal(xf_secagg_server_add_masked(m.s, 1, 60, 40, y + 60, NULL), XF_OK);
  for (uint32_t i = 2; i <= 4; i++) {
    assert_int_equal(xf_secagg_client_mask(m.c[i], m.x[i], 0, 100, y, NULL), XF_OK);
    assert_int_equal(xf_secagg_server_add_masked(m.s, i, 0, 100, y, NULL), XF_OK);
  }
  assert_int_equal(xf_secagg_server_survivors(m.s, u3, &n_u3, NULL), XF_OK);
  assert_int_equal(n_u3, 4);
  assert_int_equal(xf_secagg_server_add_masked(m.s, 5, 0, 1, y, NULL), XF_EINVAL);
  uint8_t msg[1024];
  size_t len;
  assert_int_equal(xf_secagg_client_unmask(m.c[1], u3, n_u3, msg, sizeof(msg), &len, NULL), XF_OK);
  assert_int_equal(len, XF_SECAGG_REVEAL_HEADER_BYTES + 5 * XF_SECAGG_REVEAL_ENTRY_BYTES);
  /* Truncated, the wrong sender, a share of the wrong kind. */
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 1, msg, 5, NULL), XF_ETRUNCATED);
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 1, msg, len - 1, NULL), XF_EFORMAT);
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 2, msg, len, NULL), XF_EFORMAT);
  uint8_t bad[1024];
  memcpy(bad, msg, len);
  bad[XF_SECAGG_REVEAL_HEADER_BYTES + 4] ^= 1; /* first entry: b -> key */
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 1, bad, len, &ctx), XF_EDENIED);
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 1, msg, len, NULL), XF_OK);
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 1, msg, len, NULL), XF_EEXISTS);
  assert_int_equal(xf_secagg_server_add_reveal(m.s, 5, msg, len, NULL), XF_EINVAL);
  sim_free(&m);
}

/* ---- masking, graph, privacy ------------------------------------------------------------ */

static void chunked_masking_in_any_order_equals_one_shot(void **state) {
  (void)state;
  xf_secagg_params p = params(100, 50, 32, 10007, xf_secagg_default_degree(100));
  sim m;
  sim_init(&m, &p);
  sim_share(&m);
  uint32_t *one = malloc(p.length * 4), *pieces = malloc(p.length * 4),
           *inplace = malloc(p.length * 4);
  assert_int_equal(xf_secagg_client_mask(m.c[42], m.x[42], 0, p.length, one, NULL), XF_OK);
  /* Cut at random points, masked from the last piece to the first. */
  uint64_t cuts[40];
  size_t n = 0;
  cuts[n++] = 0;
  for (int k = 0; k < 30; k++) cuts[n++] = rand_below((uint32_t)p.length);
  cuts[n++] = p.length;
  for (size_t a = 0; a < n; a++)
    for (size_t b = a + 1; b < n; b++)
      if (cuts[b] < cuts[a]) {
        uint64_t t = cuts[a];
        cuts[a] = cuts[b];
        cuts[b] = t;
      }
  for (size_t k = n - 1; k > 0; k--)
    assert_int_equal(xf_secagg_client_mask(m.c[42], m.x[42] + cuts[k - 1], cuts[k - 1],
                                           cuts[k] - cuts[k - 1], pieces + cuts[k - 1], NULL),
                     XF_OK);
  assert_memory_equal(one, pieces, p.length * 4);
  memcpy(inplace, m.x[42], p.length * 4);
  assert_int_equal(xf_secagg_client_mask(m.c[42], inplace, 0, p.length, inplace, NULL), XF_OK);
  assert_memory_equal(one, inplace, p.length * 4);
  free(one);
  free(pieces);
  free(inplace);
  sim_free(&m);
}

static void graph_is_symmetric_regular_and_agreed(void **state) {
  (void)state;
  assert_int_equal(xf_secagg_default_degree(1), 0);
  assert_int_equal(xf_secagg_default_degree(2), 1);
  assert_int_equal(xf_secagg_default_degree(64), 63);
  assert_int_equal(xf_secagg_default_degree(65), 32);
  assert_int_equal(xf_secagg_default_degree(100), 34);
  assert_int_equal(xf_secagg_default_degree(1000), 38);
  assert_int_equal(xf_secagg_default_degree(65536), 46);
  assert_int_equal(xf_secagg_default_degree(65537), 0);
  uint32_t degrees[][2] = {{100, 34}, {30, 6}, {7, 2}, {12, 11}};
  for (size_t d = 0; d < sizeof(degrees) / sizeof(degrees[0]); d++) {
    xf_secagg_params p = params(degrees[d][0], 2, 16, 1, degrees[d][1]);
    uint32_t n = p.n, k = p.degree;
    uint8_t *adj = calloc((size_t)(n + 1) * (n + 1), 1);
    for (uint32_t i = 1; i <= n; i++) {
      xf_secagg_client *c;
      assert_int_equal(xf_secagg_client_new(&p, i, &c, NULL), XF_OK);
      uint32_t nb[128];
      size_t cnt;
      assert_int_equal(xf_secagg_client_neighbours(c, nb, 128, &cnt), XF_OK);
      assert_int_equal(cnt, k);
      for (size_t a = 0; a < cnt; a++) {
        assert_true(nb[a] != i && nb[a] >= 1 && nb[a] <= n);
        if (a) assert_true(nb[a] > nb[a - 1]);
        adj[i * (n + 1) + nb[a]] = 1;
      }
      xf_secagg_client_free(c);
    }
    for (uint32_t i = 1; i <= n; i++)
      for (uint32_t j = 1; j <= n; j++) {
        assert_int_equal(adj[i * (n + 1) + j], adj[j * (n + 1) + i]);
        assert_int_equal(adj[i * (n + 1) + j], xf_secagg_neighbours(&p, i, j));
      }
    /* Another seed, another graph (the sparse ones large enough that the
     * same neighbours by chance are out of the question). */
    if (k < n - 1 && n >= 30) {
      xf_secagg_params q = p;
      q.graph_seed[0] ^= 1;
      size_t differ = 0;
      for (uint32_t j = 2; j <= n; j++)
        differ += xf_secagg_neighbours(&q, 1, j) != adj[(n + 1) + j];
      assert_true(differ > 0);
    }
    free(adj);
  }
  xf_secagg_params bad = params(10, 5, 16, 1, 5); /* odd, not n - 1 */
  assert_int_equal(xf_secagg_params_check(&bad, NULL), XF_EINVAL);
  assert_false(xf_secagg_neighbours(&bad, 1, 2));
}

static void bad_parameters_are_refused(void **state) {
  (void)state;
  xf_secagg_params good = params(10, 5, 16, 100, 9), p;
  assert_int_equal(xf_secagg_params_check(&good, NULL), XF_OK);
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  p = good;
  p.n = 1;
  assert_int_equal(xf_secagg_params_check(&p, NULL), XF_EINVAL);
  p = good;
  p.threshold = 1;
  assert_int_equal(xf_secagg_params_check(&p, NULL), XF_EINVAL);
  p = good;
  p.threshold = 11;
  assert_int_equal(xf_secagg_params_check(&p, NULL), XF_EINVAL);
  p = good;
  p.bits = 7;
  assert_int_equal(xf_secagg_params_check(&p, &ctx), XF_EINVAL);
  assert_non_null(strstr(ctx.msg, "bits"));
  p = good;
  p.bits = 33;
  assert_int_equal(xf_secagg_params_check(&p, NULL), XF_EINVAL);
  p = good;
  p.length = 0;
  assert_int_equal(xf_secagg_params_check(&p, NULL), XF_EINVAL);
  p = good;
  p.degree = 10;
  assert_int_equal(xf_secagg_params_check(&p, NULL), XF_EINVAL);
  xf_secagg_client *c;
  assert_int_equal(xf_secagg_client_new(&good, 11, &c, NULL), XF_EINVAL);
  assert_int_equal(xf_secagg_client_new(&good, 0, &c, NULL), XF_EINVAL);
}

/* Pearson's statistic of the low bytes of v against uniform, and of two
 * such histograms against each other. 370 is above the 0.9999 quantile of
 * chi-square with 255 degrees of freedom (about 355). */
static void byte_hist(const uint32_t *v, size_t n, unsigned *h) {
  memset(h, 0, 256 * sizeof(*h));
  for (size_t k = 0; k < n; k++) h[v[k] & 0xff]++;
}

static double chi2_uniform(const unsigned *h, size_t n) {
  double e = (double)n / 256, s = 0;
  for (int b = 0; b < 256; b++) s += (h[b] - e) * (h[b] - e) / e;
  return s;
}

/* What the server holds of one site alone is its masked vector: for an
 * all-zero input and for a highly structured one (a ramp), the values are
 * uniform mod 2^bits and their histograms agree, and the mask y - x has no
 * zeros beyond chance. */
static void masked_vector_is_uniform_whatever_the_input(void **state) {
  (void)state;
  enum { LEN = 1 << 16 };
  xf_secagg_params p = params(3, 2, 16, LEN, 2);
  uint32_t *ya = malloc(LEN * 4), *yb = malloc(LEN * 4);
  for (int round = 0; round < 2; round++) {
    sim m;
    randombytes_buf(p.graph_seed, sizeof(p.graph_seed));
    sim_init(&m, &p);
    for (uint32_t k = 0; k < LEN; k++) m.x[1][k] = round == 0 ? 0 : k & 0xffff;
    sim_share(&m);
    assert_int_equal(xf_secagg_client_mask(m.c[1], m.x[1], 0, LEN, round == 0 ? ya : yb, NULL),
                     XF_OK);
    uint32_t *y = round == 0 ? ya : yb;
    size_t zeros = 0;
    for (uint32_t k = 0; k < LEN; k++) {
      assert_true(y[k] < (1u << 16));
      zeros += ((y[k] - m.x[1][k]) & 0xffff) == 0;
    }
    assert_true(zeros < 10); /* expected 1 */
    sim_free(&m);
  }
  static unsigned ha[256], hb[256];
  byte_hist(ya, LEN, ha);
  byte_hist(yb, LEN, hb);
  double two = 0;
  for (int b = 0; b < 256; b++)
    if (ha[b] + hb[b]) two += ((double)ha[b] - hb[b]) * ((double)ha[b] - hb[b]) / (ha[b] + hb[b]);
  double ca = chi2_uniform(ha, LEN), cb = chi2_uniform(hb, LEN);
  print_message("chi2 of masked low bytes: zero input %.1f, ramp %.1f, two-sample %.1f (df 255)\n",
                ca, cb, two);
  assert_true(ca < 370 && cb < 370 && two < 370);
  /* And the high byte (bits 8..15) too, for the ramp whose high byte is
   * anything but uniform per position. */
  for (uint32_t k = 0; k < LEN; k++) yb[k] >>= 8;
  byte_hist(yb, LEN, hb);
  assert_true(chi2_uniform(hb, LEN) < 370);
  free(ya);
  free(yb);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_sums_exactly_with_2_sites),
      cmocka_unit_test(secure_sum_of_quantized_updates_is_the_plain_sum_within_one_step_per_site),
      cmocka_unit_test(round_sums_exactly_with_5_sites),
      cmocka_unit_test(round_sums_exactly_with_20_sites),
      cmocka_unit_test(round_sums_exactly_with_100_sites_on_a_sparse_graph),
      cmocka_unit_test(site_dropping_before_masking_is_left_out),
      cmocka_unit_test(site_dropping_after_masking_is_counted),
      cmocka_unit_test(mixed_dropouts_with_20_sites),
      cmocka_unit_test(too_few_survivors_fail_the_round),
      cmocka_unit_test(too_few_reveals_fail_finish_by_name),
      cmocka_unit_test(client_refuses_to_reveal_both_secrets_of_a_site),
      cmocka_unit_test(tampered_share_ciphertexts_are_refused),
      cmocka_unit_test(sharing_needs_enough_advertised_neighbours),
      cmocka_unit_test(server_refuses_bad_masked_input_and_reveals),
      cmocka_unit_test(chunked_masking_in_any_order_equals_one_shot),
      cmocka_unit_test(graph_is_symmetric_regular_and_agreed),
      cmocka_unit_test(bad_parameters_are_refused),
      cmocka_unit_test(masked_vector_is_uniform_whatever_the_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
