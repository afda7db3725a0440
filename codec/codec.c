/* SPDX-License-Identifier: Apache-2.0 */
/* Update codecs: top-k selection, stochastic quantization, the wire format of
 * an encoded update and its checked decoder, the fixed-scale quantizer and
 * fp16/bf16 conversion. */
#include "codec/codec.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "base/rng.h"

static const uint8_t xf__magic[4] = {'X', 'F', 'U', 'C'};

enum { XF__DENSE = 0, XF__TOPK = 1 };

/* Streams of base/rng.h, so the rounding of an update and of a fixed-scale
 * vector drawn from one seed are unrelated. */
#define XF__STREAM_UPLINK 0x636f6465632d7570ULL /* "codec-up" */
#define XF__STREAM_SUBSET 0x636f6465632d7373ULL /* "codec-ss": the shared random subset */
#define XF__STREAM_FIXED 0x636f6465632d6678ULL  /* "codec-fx" */

/* A varint of an index below 2^32 takes at most 5 bytes. */
#define XF__VARINT_MAX 5

static inline void xf__put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t xf__le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint32_t xf__float_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof(b));
  return b;
}

static inline float xf__bits_float(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof(f));
  return f;
}

static size_t xf__varint_len(uint32_t v) {
  size_t len = 1;
  while (v >= 0x80) {
    v >>= 7;
    len++;
  }
  return len;
}

static inline uint8_t *xf__put_varint(uint8_t *p, uint32_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* Fails with XF_EFORMAT; the message and the error's field name the offset. */
static xf_err xf__bad(xf_errctx *err, size_t off, const char *fmt, ...) XF_PRINTF(3, 4);
static xf_err xf__bad(xf_errctx *err, size_t off, const char *fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  xf_fail(err, XF_EFORMAT, "encoded update, offset %zu: %s", off, what);
  xf_errctx_field(err, "offset %zu", off);
  return XF_EFORMAT;
}

/* ---- sizes -------------------------------------------------------------- */

/* Bytes of one quantized chunk of m values: its scale (float32 lo and step)
 * and its codes, whole bytes (a 4-bit chunk of odd length ends in a half
 * byte whose high nibble is zero). */
static size_t xf__chunk_bytes(size_t m, uint32_t bits) { return 8 + (m * bits + 7) / 8; }

/* Bytes of the value section for k values. */
static size_t xf__values_bytes(size_t k, uint32_t bits, size_t chunk) {
  if (bits == 0) return k * 4;
  size_t full = k / chunk, rest = k % chunk;
  return full * xf__chunk_bytes(chunk, bits) + (rest ? xf__chunk_bytes(rest, bits) : 0);
}

size_t xf_codec_topk_count(double fraction, size_t n) {
  if (!(fraction > 0) || fraction >= 1) return n;
  double p = fraction * (double)n;
  double r = nearbyint(p);
  double k = fabs(p - r) <= 1e-9 * (p > 1 ? p : 1) ? r : ceil(p);
  if (k < 1) k = 1;
  if (k > (double)n) k = (double)n;
  return (size_t)k;
}

static bool xf__bits_valid(uint32_t bits) {
  return bits == 0 || bits == 4 || bits == 8 || bits == 16;
}

static xf_err xf__check_uplink(const xf_codec_uplink *c, size_t n, xf_errctx *err) {
  XF_ENSURE(c, err, XF_EINVAL, "an update codec needs its settings");
  XF_ENSURE(c->topk_fraction >= 0 && c->topk_fraction <= 1, err, XF_EINVAL,
            "top-k fraction %g is outside (0, 1] (0 turns top-k off)", c->topk_fraction);
  XF_ENSURE(xf__bits_valid(c->quant_bits), err, XF_EINVAL,
            "quantization to %u bits; 16, 8 or 4 bits, or 0 for float32", c->quant_bits);
  XF_ENSURE(n >= 1 && n <= XF_CODEC_N_MAX, err, XF_EINVAL,
            "an update of %zu values; 1 to %u can be encoded", n, (unsigned)XF_CODEC_N_MAX);
  return XF_OK;
}

size_t xf_codec_encoded_max(const xf_codec_uplink *c, size_t n) {
  if (xf__check_uplink(c, n, NULL) != XF_OK) return 0;
  size_t k = xf_codec_topk_count(c->topk_fraction, n);
  /* Every delta is at most n - 1, so no varint is longer than that of n - 1. */
  size_t index_bytes = c->topk_fraction > 0 ? k * xf__varint_len((uint32_t)(n - 1)) : 0;
  return XF_CODEC_HEADER_BYTES + index_bytes + xf__values_bytes(k, c->quant_bits, XF_CODEC_CHUNK);
}

/* ---- top-k -------------------------------------------------------------- */

/* |v| as bits: for finite values the order of these integers is the order
 * of the magnitudes. */
static inline uint32_t xf__mag(float v) { return xf__float_bits(v) & 0x7fffffffu; }

/* Writes to idx, in increasing order, the k indices of the largest |v[i]|;
 * among equal magnitudes the lower indices win, so the choice is a function
 * of v alone. Radix selection on the magnitude bits (digits of 11, 11 and 9
 * bits): linear in n whatever the values, where quickselect degrades on the
 * many equal values a sparse update has. */
static void xf__topk(const float *v, size_t n, size_t k, uint32_t *idx) {
  static const unsigned shift[3] = {20, 9, 0}, width[3] = {11, 11, 9};
  uint32_t counts[1u << 11];
  uint32_t prefix = 0, mask = 0;
  size_t need = k; /* rank of the k-th largest among the values matching prefix */
  for (int pass = 0; pass < 3; pass++) {
    uint32_t digits = 1u << width[pass], dmask = digits - 1;
    memset(counts, 0, digits * sizeof(counts[0]));
    for (size_t i = 0; i < n; i++) {
      uint32_t b = xf__mag(v[i]);
      if ((b & mask) == prefix) counts[(b >> shift[pass]) & dmask]++;
    }
    uint32_t d = digits;
    size_t above = 0;
    while (d-- > 0) {
      if (above + counts[d] >= need) break;
      above += counts[d];
    }
    need -= above;
    prefix |= d << shift[pass];
    mask |= dmask << shift[pass];
  }
  /* prefix is the k-th largest magnitude; k - need magnitudes exceed it and
   * the first `need` equal to it (by index) complete the k. */
  size_t j = 0, ties = need;
  for (size_t i = 0; i < n && j < k; i++) {
    uint32_t b = xf__mag(v[i]);
    if (b > prefix || (b == prefix && ties > 0)) {
      if (b == prefix) ties--;
      idx[j++] = (uint32_t)i;
    }
  }
}

/* ---- quantization ------------------------------------------------------- */

/* Level q of a chunk: lo + q * step, rounded once to float32 (q * step is
 * exact in double) and kept finite. Encoder and decoder both use this, so the
 * encoder knows exactly what the receiver will see. */
static inline float xf__level(double lo, double step, uint32_t q) {
  double d = lo + (double)q * step;
  return (float)(d > FLT_MAX ? FLT_MAX : d);
}

/* The largest error a decoded value of the chunk can have (codec.h,
 * xf_codec_decode_bound): adjacent levels are at most step plus two units in
 * the last place of the largest level apart, since each level is within one
 * unit of lo + q * step. Rounded up to a float. */
static float xf__chunk_bound(float lo, float step, uint32_t top) {
  if (step == 0) return 0;
  float m = fmaxf(fabsf(xf__level(lo, step, 0)), fabsf(xf__level(lo, step, top)));
  int e;
  frexpf(m, &e); /* m < 2^e: every level's unit in the last place is at most 2^(e-24) */
  double ulp = fmax(ldexp(1.0, e - 24), 0x1p-149);
  double bound = (double)step + 2 * ulp;
  float f = (float)bound;
  if ((double)f < bound) f = nextafterf(f, INFINITY);
  return f;
}

/* 32 random bits per value, two from each 64-bit draw. */
typedef struct xf__coins {
  xf_rng rng;
  uint64_t word;
  bool half; /* the high half of word is still unused */
} xf__coins;

static inline uint32_t xf__coin32(xf__coins *c) {
  if (c->half) {
    c->half = false;
    return (uint32_t)(c->word >> 32);
  }
  c->word = xf_rng_next(&c->rng);
  c->half = true;
  return (uint32_t)c->word;
}

/* Encodes one chunk of m values (its scale, then its codes) at p and returns
 * the end. Affine scale: lo = min, step = (max - min) / (2^bits - 1), nudged
 * up until the top level reaches max, so every value lies between two levels
 * a <= v <= b. The value goes up to b when a 32-bit uniform r has
 * r (b - a) < (v - a) 2^32, that is with probability (v - a) / (b - a) up to
 * 2^-32 (far below the float32 rounding of a level), so the decoded value's
 * mean is v itself. left (may alias vals, or NULL) gets v - decoded. */
static uint8_t *xf__put_chunk(uint8_t *p, const float *vals, size_t m, uint32_t bits,
                              xf__coins *coins, float *left) {
  const uint32_t top = (1u << bits) - 1;
  float lo = vals[0], hi = vals[0];
  for (size_t i = 1; i < m; i++) { /* finite values: plain comparisons, not libm's fminf */
    lo = vals[i] < lo ? vals[i] : lo;
    hi = vals[i] > hi ? vals[i] : hi;
  }
  float step = 0;
  if (hi > lo) {
    step = (float)(((double)hi - (double)lo) / top);
    if (step == 0) step = 0x1p-149f;
    while (xf__level(lo, step, top) < hi) step = nextafterf(step, INFINITY);
  }
  xf__put_le32(p, xf__float_bits(lo));
  xf__put_le32(p + 4, xf__float_bits(step));
  p += 8;
  const double dlo = lo, dstep = step, inv = step > 0 ? 1.0 / dstep : 0;
  const float bottom = xf__level(dlo, dstep, 0);
  for (size_t i = 0; i < m; i++) {
    float v = vals[i], decoded = bottom;
    uint32_t q = 0;
    if (step > 0) {
      double t = ((double)v - dlo) * inv;
      q = t <= 0 ? 0 : t >= top - 1 ? top - 1 : (uint32_t)t;
      float a = xf__level(dlo, dstep, q), b = xf__level(dlo, dstep, q + 1);
      while (v < a && q > 0) {
        b = a;
        a = xf__level(dlo, dstep, --q);
      }
      while (v > b && q < top - 1) {
        a = b;
        b = xf__level(dlo, dstep, ++q + 1);
      }
      unsigned up = (double)xf__coin32(coins) * ((double)b - a) < ((double)v - a) * 0x1p32;
      const float pair[2] = {a, b}; /* an index, not a branch: up is a coin flip */
      q += up;
      decoded = pair[up];
    }
    if (left) left[i] = v - decoded;
    if (bits == 16) {
      p[2 * i] = (uint8_t)q;
      p[2 * i + 1] = (uint8_t)(q >> 8);
    } else if (bits == 8) {
      p[i] = (uint8_t)q;
    } else if (i % 2 == 0) {
      p[i / 2] = (uint8_t)q;
    } else {
      p[i / 2] |= (uint8_t)(q << 4);
    }
  }
  return p + (m * bits + 7) / 8;
}

/* ---- encode ------------------------------------------------------------- */

xf_err xf_codec_encode(const xf_codec_uplink *c, const float *x, size_t n, float *residual,
                       uint64_t seed, uint8_t **out, size_t *out_len, xf_errctx *err) {
  *out = NULL;
  *out_len = 0;
  XF_GUARD(xf__check_uplink(c, n, err));
  const bool topk = c->topk_fraction > 0;
  const uint32_t bits = c->quant_bits;
  XF_ENSURE(x, err, XF_EINVAL, "an update of %zu values needs its values", n);
  XF_ENSURE(residual || !topk, err, XF_EINVAL,
            "top-k needs a residual for error feedback (n floats, zeros at the start)");
  for (size_t i = 0; i < n; i++) {
    float v = residual ? x[i] + residual[i] : x[i];
    XF_ENSURE(isfinite(v), err, XF_EINVAL, "update value %zu is %s, not a finite number", i,
              isnan(v) ? "NaN" : "infinite");
  }
  const size_t k = xf_codec_topk_count(c->topk_fraction, n);

  /* Scratch: v = x + residual (n), then with top-k the values sent (k) and
   * their indices (k). */
  float *v = NULL, *vals = NULL;
  uint32_t *idx = NULL;
  if (residual) {
    size_t words = n + (topk ? 2 * k : 0);
    v = xf_mallocarray(words, sizeof(float));
    XF_ENSURE(v, err, XF_ENOMEM, "cannot allocate the scratch of a %zu-value update", n);
    for (size_t i = 0; i < n; i++) v[i] = x[i] + residual[i];
    if (topk) {
      vals = v + n;
      idx = (uint32_t *)(vals + k);
    }
  }
  size_t cap = xf_codec_encoded_max(c, n);
  uint8_t *buf = xf_malloc(cap);
  if (!buf) {
    xf_free(v);
    return xf_fail(err, XF_ENOMEM, "cannot allocate %zu bytes for an encoded update", cap);
  }

  uint8_t *p = buf;
  memcpy(p, xf__magic, 4);
  p[4] = XF_CODEC_VERSION;
  p[5] = topk ? XF__TOPK : XF__DENSE;
  p[6] = (uint8_t)bits;
  p[7] = 0;
  xf__put_le32(p + 8, (uint32_t)n);
  xf__put_le32(p + 12, (uint32_t)k);
  xf__put_le32(p + 16, bits ? XF_CODEC_CHUNK : 0);
  p += XF_CODEC_HEADER_BYTES;

  /* What is sent: with top-k the gathered values, which also receive what
   * was not sent of them; without, v (or x) itself, in place. */
  const float *send = residual ? v : x;
  float *left = residual ? v : NULL;
  if (topk) {
    xf__topk(v, n, k, idx);
    uint32_t prev = 0;
    for (size_t j = 0; j < k; j++) {
      p = xf__put_varint(p, j == 0 ? idx[0] : idx[j] - prev);
      prev = idx[j];
      vals[j] = v[idx[j]];
    }
    send = left = vals;
  }
  if (bits == 0) {
    for (size_t j = 0; j < k; j++) {
      xf__put_le32(p, xf__float_bits(send[j]));
      p += 4;
      if (left) left[j] = 0;
    }
  } else {
    xf__coins coins = {.half = false};
    xf_rng_seed(&coins.rng, seed, XF__STREAM_UPLINK);
    for (size_t j = 0; j < k; j += XF_CODEC_CHUNK) {
      size_t m = k - j < XF_CODEC_CHUNK ? k - j : XF_CODEC_CHUNK;
      p = xf__put_chunk(p, send + j, m, bits, &coins, left ? left + j : NULL);
    }
  }
  if (residual) {
    /* Coordinates not sent keep all of v; sent ones what rounding left. */
    memcpy(residual, v, n * sizeof(float));
    if (topk)
      for (size_t j = 0; j < k; j++) residual[idx[j]] = vals[j];
  }
  xf_free(v);

  size_t len = (size_t)(p - buf);
  uint8_t *shrunk = len < cap ? xf_realloc(buf, len) : NULL;
  *out = shrunk ? shrunk : buf; /* a failed shrink keeps the larger buffer */
  *out_len = len;
  return XF_OK;
}

/* ---- decode ------------------------------------------------------------- */

typedef struct xf__header {
  bool topk;
  uint32_t bits;
  uint32_t k;
  uint32_t chunk;
} xf__header;

static xf_err xf__read_header(xf_cursor *c, size_t n, xf__header *h, xf_errctx *err) {
  const uint8_t *p;
  if (xf_cursor_view(c, &p, XF_CODEC_HEADER_BYTES) != XF_OK)
    return xf__bad(err, c->len, "the header needs %d bytes, the encoding has %zu",
                   XF_CODEC_HEADER_BYTES, c->len);
  if (memcmp(p, xf__magic, 4) != 0)
    return xf__bad(err, 0, "the magic is not \"XFUC\": not an encoded update");
  if (p[4] != XF_CODEC_VERSION)
    return xf__bad(err, 4, "version %u; this build reads version %d", p[4], XF_CODEC_VERSION);
  if (p[5] != XF__DENSE && p[5] != XF__TOPK)
    return xf__bad(err, 5, "kind %u is neither dense (0) nor top-k (1)", p[5]);
  if (!xf__bits_valid(p[6]))
    return xf__bad(err, 6, "%u bits per value; 0 (float32), 4, 8 or 16 expected", p[6]);
  if (p[7] != 0) return xf__bad(err, 7, "the reserved byte is %u, not 0", p[7]);
  h->topk = p[5] == XF__TOPK;
  h->bits = p[6];
  uint32_t hn = xf__le32(p + 8);
  h->k = xf__le32(p + 12);
  h->chunk = xf__le32(p + 16);
  if (hn == 0) return xf__bad(err, 8, "an update of 0 values");
  if (hn != n) return xf__bad(err, 8, "the update has %u values, the receiver expects %zu", hn, n);
  if (!h->topk && h->k != hn)
    return xf__bad(err, 12, "a dense update of %u values sends %u of them", hn, h->k);
  if (h->topk && (h->k == 0 || h->k > hn))
    return xf__bad(err, 12, "top-k sends %u of %u values; 1 to %u expected", h->k, hn, hn);
  if (h->bits == 0 && h->chunk != 0)
    return xf__bad(err, 16, "chunk size %u for float32 values; 0 expected", h->chunk);
  if (h->bits != 0 && (h->chunk == 0 || h->chunk > XF_CODEC_CHUNK))
    return xf__bad(err, 16, "chunk size %u; 1 to %d expected", h->chunk, XF_CODEC_CHUNK);
  return XF_OK;
}

/* Reads one LEB128 varint: at most 5 bytes, minimally encoded, below 2^32. */
static xf_err xf__read_varint(xf_cursor *c, uint32_t *out, xf_errctx *err) {
  size_t start = c->off;
  uint64_t v = 0;
  for (int i = 0; i < XF__VARINT_MAX; i++) {
    uint8_t b;
    if (xf_cursor_u8(c, &b) != XF_OK)
      return xf__bad(err, c->off, "the index varint that starts at offset %zu is cut off", start);
    v |= (uint64_t)(b & 0x7f) << (7 * i);
    if (b & 0x80) continue;
    if (i > 0 && b == 0)
      return xf__bad(err, start, "the index varint is not minimally encoded");
    if (v > UINT32_MAX) return xf__bad(err, start, "the index varint exceeds 32 bits");
    *out = (uint32_t)v;
    return XF_OK;
  }
  return xf__bad(err, start, "the index varint is longer than %d bytes", XF__VARINT_MAX);
}

/* Reads the next index of a top-k encoding from its delta. */
static xf_err xf__next_index(xf_cursor *c, size_t j, uint32_t prev, uint32_t n, uint32_t *out,
                             xf_errctx *err) {
  size_t start = c->off;
  uint32_t d = 0; /* set by a successful read; GCC cannot tell */
  XF_GUARD(xf__read_varint(c, &d, err));
  if (j > 0 && d == 0)
    return xf__bad(err, start, "index %zu repeats index %u: indices must increase", j, prev);
  uint64_t i = j == 0 ? d : (uint64_t)prev + d;
  if (i >= n) return xf__bad(err, start, "index %zu is %llu, beyond the %u values", j,
                             (unsigned long long)i, n);
  *out = (uint32_t)i;
  return XF_OK;
}

/* Decodes the m values of one chunk at the cursor into dst (and bounds). */
static xf_err xf__read_chunk(xf_cursor *c, const xf__header *h, size_t m, float *dst,
                             float *bound, xf_errctx *err) {
  const uint8_t *p;
  size_t start = c->off;
  if (h->bits == 0) {
    if (xf_cursor_view(c, &p, m * 4) != XF_OK)
      return xf__bad(err, c->len, "the float32 values are cut off");
    for (size_t i = 0; i < m; i++) {
      float f = xf__bits_float(xf__le32(p + 4 * i));
      if (!isfinite(f)) return xf__bad(err, start + 4 * i, "a value is not a finite number");
      dst[i] = f;
      if (bound) bound[i] = 0;
    }
    return XF_OK;
  }
  if (xf_cursor_view(c, &p, xf__chunk_bytes(m, h->bits)) != XF_OK)
    return xf__bad(err, c->len, "the chunk that starts at offset %zu is cut off", start);
  float lo = xf__bits_float(xf__le32(p)), step = xf__bits_float(xf__le32(p + 4));
  if (!isfinite(lo)) return xf__bad(err, start, "the chunk's lowest level is not finite");
  if (!isfinite(step) || step < 0)
    return xf__bad(err, start + 4, "the chunk's step %g is not a finite number >= 0",
                   (double)step);
  const uint8_t *codes = p + 8;
  const double dlo = lo, dstep = step;
  if (h->bits == 16) {
    for (size_t i = 0; i < m; i++)
      dst[i] = xf__level(dlo, dstep, (uint32_t)codes[2 * i] | (uint32_t)codes[2 * i + 1] << 8);
  } else if (h->bits == 8) {
    for (size_t i = 0; i < m; i++) dst[i] = xf__level(dlo, dstep, codes[i]);
  } else {
    for (size_t i = 0; i < m; i++)
      dst[i] = xf__level(dlo, dstep, (codes[i / 2] >> (4 * (i % 2))) & 15u);
    if (m % 2 && codes[m / 2] >> 4)
      return xf__bad(err, start + 8 + m / 2, "the padding nibble of a 4-bit chunk is not 0");
  }
  if (bound) {
    float b = xf__chunk_bound(lo, step, (1u << h->bits) - 1);
    for (size_t i = 0; i < m; i++) bound[i] = b;
  }
  return XF_OK;
}

xf_err xf_codec_decode_bound(const uint8_t *in, size_t len, size_t n, float *out, float *bound,
                             xf_errctx *err) {
  XF_ENSURE(in || len == 0, err, XF_EINVAL, "an encoded update of %zu bytes needs its bytes",
            len);
  XF_ENSURE(out || n == 0, err, XF_EINVAL, "decoding needs room for %zu values", n);
  xf_cursor c = xf_cursor_make(in, len);
  xf__header h;
  XF_GUARD(xf__read_header(&c, n, &h, err));
  const size_t chunk = h.bits ? h.chunk : XF_CODEC_CHUNK;
  const size_t values = xf__values_bytes(h.k, h.bits, chunk);

  /* Top-k: check the indices once, so the sizes are known before out is
   * touched, then read them again beside the values. */
  const size_t index_start = c.off;
  if (h.topk) {
    if (xf_cursor_remaining(&c) < h.k + values)
      return xf__bad(err, c.off, "%u indices and %zu bytes of values need at least %zu "
                     "bytes, %zu remain", h.k, values, h.k + values, xf_cursor_remaining(&c));
    uint32_t prev = 0;
    for (size_t j = 0; j < h.k; j++) XF_GUARD(xf__next_index(&c, j, prev, (uint32_t)n, &prev, err));
  }
  if (xf_cursor_remaining(&c) < values)
    return xf__bad(err, len, "the values need %zu bytes from offset %zu, %zu remain", values,
                   c.off, xf_cursor_remaining(&c));
  if (xf_cursor_remaining(&c) > values)
    return xf__bad(err, c.off + values, "%zu bytes follow the end of the update",
                   xf_cursor_remaining(&c) - values);

  if (h.topk) {
    memset(out, 0, n * sizeof(float));
    if (bound) memset(bound, 0, n * sizeof(float));
  }
  xf_cursor ic = xf_cursor_make(in + index_start, c.off - index_start);
  float tmp[XF_CODEC_CHUNK], tmp_bound[XF_CODEC_CHUNK];
  uint32_t prev = 0;
  for (size_t j = 0; j < h.k; j += chunk) {
    size_t m = h.k - j < chunk ? h.k - j : chunk;
    if (!h.topk) {
      XF_GUARD(xf__read_chunk(&c, &h, m, out + j, bound ? bound + j : NULL, err));
      continue;
    }
    XF_GUARD(xf__read_chunk(&c, &h, m, tmp, bound ? tmp_bound : NULL, err));
    for (size_t i = 0; i < m; i++) {
      XF_GUARD(xf__next_index(&ic, j + i, prev, (uint32_t)n, &prev, err));
      out[prev] = tmp[i];
      if (bound) bound[prev] = tmp_bound[i];
    }
  }
  return XF_OK;
}

xf_err xf_codec_decode(const uint8_t *in, size_t len, size_t n, float *out, xf_errctx *err) {
  return xf_codec_decode_bound(in, len, n, out, NULL, err);
}

/* ---- fixed scale -------------------------------------------------------- */

static xf_err xf__check_fixed(const xf_codec_fixed *f, xf_errctx *err) {
  XF_ENSURE(f, err, XF_EINVAL, "fixed-scale quantization needs its parameters");
  XF_ENSURE(isfinite(f->step) && f->step > 0, err, XF_EINVAL,
            "fixed-scale step %g is not a finite number > 0", f->step);
  XF_ENSURE(f->bits >= 2 && f->bits <= 32, err, XF_EINVAL,
            "fixed-scale integers of %u bits; 2 to 32 expected", f->bits);
  uint64_t max = ((uint64_t)1 << (f->bits - 1)) - 1;
  XF_ENSURE(f->bound >= 1 && f->bound <= max, err, XF_EINVAL,
            "fixed-scale clipping bound %u; 1 to %llu for %u bits", f->bound,
            (unsigned long long)max, f->bits);
  return XF_OK;
}

static inline uint32_t xf__mask(uint32_t bits) {
  return bits == 32 ? UINT32_MAX : (uint32_t)((1u << bits) - 1);
}

xf_err xf_codec_quantize_fixed(const xf_codec_fixed *f, const float *x, size_t n, uint64_t seed,
                               uint32_t *out, size_t *clipped, xf_errctx *err) {
  if (clipped) *clipped = 0;
  XF_GUARD(xf__check_fixed(f, err));
  XF_ENSURE(n == 0 || (x && out), err, XF_EINVAL, "fixed-scale quantization of %zu values "
            "needs its input and output", n);
  xf_rng rng;
  xf_rng_seed(&rng, seed, XF__STREAM_FIXED);
  const uint32_t mask = xf__mask(f->bits);
  const double bound = f->bound;
  size_t beyond = 0;
  for (size_t i = 0; i < n; i++) {
    XF_ENSURE(isfinite(x[i]), err, XF_EINVAL, "value %zu is %s, not a finite number", i,
              isnan(x[i]) ? "NaN" : "infinite");
    double t = (double)x[i] / f->step;
    if (t > bound || t < -bound) {
      t = t > 0 ? bound : -bound;
      beyond++;
    }
    double fl = floor(t);
    int64_t z = (int64_t)fl;
    if (t > fl && xf_rng_uniform(&rng) < t - fl) z++;
    out[i] = (uint32_t)(uint64_t)z & mask;
  }
  if (clipped) *clipped = beyond;
  return XF_OK;
}

void xf_codec_dequantize_fixed(const xf_codec_fixed *f, const uint32_t *in, size_t n, float *out) {
  const uint32_t mask = xf__mask(f->bits);
  const uint64_t half = (uint64_t)1 << (f->bits - 1);
  for (size_t i = 0; i < n; i++) {
    uint64_t u = in[i] & mask;
    int64_t z = u >= half ? (int64_t)u - (int64_t)(2 * half) : (int64_t)u;
    out[i] = (float)((double)z * f->step);
  }
}

/* ---- downlink ----------------------------------------------------------- */

/* Rounds away the low `shift` bits of v, to nearest, ties to even. */
static inline uint32_t xf__round_shift(uint32_t v, unsigned shift) {
  uint32_t kept = v >> shift, rest = v & ((1u << shift) - 1), half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)));
}

xf_err xf_codec_to_half(const float *x, size_t n, bool bf16, uint16_t *out) {
  for (size_t i = 0; i < n; i++) {
    uint32_t b = xf__float_bits(x[i]), mag = b & 0x7fffffffu;
    uint16_t sign = (uint16_t)(b >> 16 & 0x8000u);
    if (mag >= 0x7f800000u) return XF_EINVAL; /* NaN or infinity */
    uint32_t h;
    if (bf16) {
      h = xf__round_shift(mag, 16);
      if (h >= 0x7f80u) return XF_ERANGE;
    } else if (mag >= 0x477ff000u) { /* 65520: halfway to 2^16, rounds to infinity */
      return XF_ERANGE;
    } else if (mag >= 0x38800000u) { /* 2^-14 and up: a normal fp16 */
      h = xf__round_shift(mag - ((127u - 15u) << 23), 13);
    } else if (mag >= 0x33000000u) { /* 2^-25 up to 2^-14: subnormal in units of 2^-24 */
      uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
      h = xf__round_shift(m, 126 - e); /* m * 2^(e - 150) / 2^-24; rounding up may reach 2^-14 */
    } else {
      h = 0; /* below half the smallest subnormal; exactly half is a tie, to the even 0 */
    }
    out[i] = (uint16_t)(sign | h);
  }
  return XF_OK;
}

void xf_codec_from_half(const uint16_t *in, size_t n, bool bf16, float *out) {
  for (size_t i = 0; i < n; i++) {
    uint32_t h = in[i], sign = (h & 0x8000u) << 16;
    if (bf16) {
      out[i] = xf__bits_float(h << 16);
      continue;
    }
    uint32_t e = h >> 10 & 0x1f, m = h & 0x3ff;
    if (e == 0x1f)
      out[i] = xf__bits_float(sign | 0x7f800000u | m << 13);
    else if (e == 0)
      out[i] = xf__bits_float(sign | xf__float_bits((float)m * 0x1p-24f)); /* exact */
    else
      out[i] = xf__bits_float(sign | (e + 127 - 15) << 23 | m << 13);
  }
}

/* ---- shared random subset ----------------------------------------------- */


static int xf__cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

xf_err xf_codec_random_subset(uint64_t seed, size_t n, size_t k, uint32_t *idx) {
  if (n == 0 || n > XF_CODEC_N_MAX || k == 0 || k > n) return XF_EINVAL;
  uint32_t *all = xf_mallocarray(n, sizeof(uint32_t));
  if (!all) return XF_ENOMEM;
  for (size_t i = 0; i < n; i++) all[i] = (uint32_t)i;
  xf_rng rng;
  xf_rng_seed(&rng, seed, XF__STREAM_SUBSET);
  /* A partial Fisher-Yates: the first k slots are a uniform k-subset. */
  for (size_t i = 0; i < k; i++) {
    size_t j = i + (size_t)xf_rng_below(&rng, (uint64_t)(n - i));
    uint32_t t = all[i];
    all[i] = all[j];
    all[j] = t;
  }
  memcpy(idx, all, k * sizeof(uint32_t));
  xf_free(all);
  qsort(idx, k, sizeof(uint32_t), xf__cmp_u32);
  return XF_OK;
}

/* ---- packing masked integers -------------------------------------------- */

size_t xf_codec_packed_bytes(size_t n, uint32_t bits) {
  return (size_t)(((uint64_t)n * bits + 7) / 8);
}

void xf_codec_pack_bits(const uint32_t *in, size_t n, uint32_t bits, uint8_t *out) {
  uint64_t acc = 0;
  unsigned have = 0;
  uint64_t mask = bits == 32 ? 0xffffffffu : ((uint64_t)1 << bits) - 1;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    acc |= ((uint64_t)in[i] & mask) << have;
    have += bits;
    while (have >= 8) {
      out[o++] = (uint8_t)acc;
      acc >>= 8;
      have -= 8;
    }
  }
  if (have) out[o] = (uint8_t)acc;
}

xf_err xf_codec_unpack_bits(const uint8_t *in, size_t len, size_t n, uint32_t bits,
                            uint32_t *out, xf_errctx *err) {
  XF_ENSURE(bits >= 1 && bits <= 32, err, XF_EINVAL, "%u bits per value", (unsigned)bits);
  XF_ENSURE(len == xf_codec_packed_bytes(n, bits), err, XF_EFORMAT,
            "%zu packed bytes for %zu values of %u bits, not %zu", len, n, (unsigned)bits,
            xf_codec_packed_bytes(n, bits));
  uint64_t acc = 0, mask = bits == 32 ? 0xffffffffu : ((uint64_t)1 << bits) - 1;
  unsigned have = 0;
  size_t p = 0;
  for (size_t i = 0; i < n; i++) {
    while (have < bits) {
      acc |= (uint64_t)in[p++] << have;
      have += 8;
    }
    out[i] = (uint32_t)(acc & mask);
    acc >>= bits;
    have -= bits;
  }
  XF_ENSURE(acc == 0, err, XF_EFORMAT, "packed values end with nonzero padding bits");
  return XF_OK;
}
