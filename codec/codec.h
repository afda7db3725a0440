/* SPDX-License-Identifier: Apache-2.0 */
/* The update codecs: how a site's float32 update travels uplink (top-k with
 * error feedback, stochastic quantization with a per-chunk scale, or both),
 * the fixed-scale quantizer secure aggregation sums under masks, and the
 * fp16/bf16 form of the global model downlink. Wire format and reasons in
 * docs/compression.md. */
#ifndef XF_NET_CODEC_H
#define XF_NET_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

/* Header of every encoding: magic "XFUC", version, kind, bits, a zero byte,
 * n, k and the chunk size (docs/compression.md, "Wire format"). */
#define XF_CODEC_HEADER_BYTES 20
#define XF_CODEC_VERSION 1
/* Values per quantization chunk: each chunk has its own scale. 4096 keeps the
 * 8 bytes of a scale at 0.2% of a q8 chunk, and an outlier spoils the
 * resolution of 4096 values at most. */
#define XF_CODEC_CHUNK 4096
/* The largest n an encoding carries (n and indices travel as 32 bits). */
#define XF_CODEC_N_MAX UINT32_MAX

/* Uplink: what the job's compression.uplink asks for. */
typedef struct xf_codec_uplink {
  double topk_fraction; /* (0, 1]: keep the largest-|x| fraction (at least 1 value); 0 = off */
  uint32_t quant_bits;  /* 16, 8 or 4: stochastic rounding with a per-chunk scale; 0 = float32 */
} xf_codec_uplink;

/* The number of values top-k keeps of n: ceil(fraction * n), at least 1 and at
 * most n (a product within a relative 1e-9 of an integer counts as that
 * integer, so 0.07 * 100 keeps 7, not 8). n when top-k is off (fraction 0). */
size_t xf_codec_topk_count(double fraction, size_t n);

/* Encodes the n values at x (1 <= n <= XF_CODEC_N_MAX, all finite).
 *
 * @param residual  n floats, caller-owned, or NULL (allowed only when top-k is
 *                  off). When given it is error feedback (Stich et al. 2018;
 *                  Karimireddy et al. 2019): the encoder compresses
 *                  v = x + residual and, on success only, leaves in residual
 *                  what was not sent, v - decoded (coordinates top-k dropped
 *                  keep all of v), so that over rounds nothing is lost. Start
 *                  it at zeros. Without top-k it carries the rounding error.
 * @param seed      seeds the base/rng.h generator of the stochastic rounding
 *                  (the caller derives it from the job seed, round and site):
 *                  the same inputs and seed give the same bytes.
 * @param out       *out (xf_malloc'd, at most xf_codec_encoded_max bytes) is
 *                  owned by the caller; *out_len is its length.
 * XF_EINVAL for a fraction outside [0, 1] or NaN, bits other than 0, 4, 8 or
 * 16, n outside 1..XF_CODEC_N_MAX, top-k without a residual, or a value of
 * x + residual that is not finite (the message names its index); XF_ENOMEM.
 * On error *out is NULL and residual is unchanged. */
xf_err xf_codec_encode(const xf_codec_uplink *c, const float *x, size_t n, float *residual,
                       uint64_t seed, uint8_t **out, size_t *out_len,
                       xf_errctx *err) XF_WARN_UNUSED;

/* Decodes an encoded update of exactly n values into out (n floats,
 * overwritten; values not sent are 0). The input is untrusted: a malformed,
 * truncated, oversized or trailing encoding, an unknown version, kind or bit
 * width, an n other than the caller's, a scale that is not finite or a
 * negative step, a float32 value that is not finite, an index out of range,
 * not above the previous one or not minimally encoded, or a nonzero padding
 * nibble is XF_EFORMAT with a message naming the byte offset and what is
 * wrong; out is then unspecified. */
xf_err xf_codec_decode(const uint8_t *in, size_t len, size_t n, float *out,
                       xf_errctx *err) XF_WARN_UNUSED;

/* The same, and writes to bound (n floats, or NULL) the largest error each
 * decoded coordinate can have against the value the encoder was given for
 * it: the quantization step of its chunk plus two units in the last place of
 * the chunk's largest level (decoded levels are rounded to float32), rounded
 * up to a float; 0 for float32 values and for coordinates not sent (what
 * top-k did not send stays in the sender's residual, it is not an error of
 * the encoding). Stochastic rounding moves a value to one of its two
 * neighbouring levels, so |decoded - given| <= bound, and the error of a sum
 * of decoded updates is at most the sum of their bounds. */
xf_err xf_codec_decode_bound(const uint8_t *in, size_t len, size_t n, float *out, float *bound,
                             xf_errctx *err) XF_WARN_UNUSED;

/* An upper bound of the encoded size of n values under c, for buffers and for
 * the protocol's checks of an announced update size; 0 when c or n is not
 * valid for xf_codec_encode. */
size_t xf_codec_encoded_max(const xf_codec_uplink *c, size_t n);

/* ---- fixed scale, for secure aggregation -------------------------------- */

/* Every site of a round maps its values with the same scale, so that masked
 * integers summed mod 2^bits decode to the sum of the updates. */
typedef struct xf_codec_fixed {
  double step;    /* > 0 and finite: the value of one integer unit */
  uint32_t bits;  /* 2..32: integers travel mod 2^bits */
  uint32_t bound; /* 1..2^(bits-1) - 1: values are clipped to [-bound, bound] units */
} xf_codec_fixed;

/* Maps x[i] / step, clipped to [-bound, bound], to an integer by stochastic
 * rounding (unbiased for unclipped values: E[z * step] = x[i]) and writes it
 * mod 2^bits (two's complement) to out[i]. The caller picks bound so that the
 * sum over sites cannot reach 2^(bits-1). *clipped (may be NULL) gets the
 * number of values beyond bound units. seed as for xf_codec_encode. XF_EINVAL
 * for parameters out of range or a value that is not finite; out is then
 * unspecified. */
xf_err xf_codec_quantize_fixed(const xf_codec_fixed *f, const float *x, size_t n, uint64_t seed,
                               uint32_t *out, size_t *clipped, xf_errctx *err) XF_WARN_UNUSED;

/* The inverse: each in[i] mod 2^bits is read as a signed integer in
 * [-2^(bits-1), 2^(bits-1)) and multiplied by step. It works as well on a sum
 * of quantized vectors mod 2^bits (what unmasking yields) as long as the true
 * sum stays inside that range. f must be valid for xf_codec_quantize_fixed. */
void xf_codec_dequantize_fixed(const xf_codec_fixed *f, const uint32_t *in, size_t n, float *out);

/* ---- packing masked integers ---------------------------------------------- */

/* Bytes that n values of `bits` bits take packed: ceil(n * bits / 8). */
size_t xf_codec_packed_bytes(size_t n, uint32_t bits);

/* Packs n values, each below 2^bits (1 <= bits <= 32; higher bits are
 * dropped), little-endian bit order, into out (xf_codec_packed_bytes bytes;
 * the padding bits of the last byte are zero). Masked values mod 2^bits are
 * uniform, so this is their whole cost on the wire. */
void xf_codec_pack_bits(const uint32_t *in, size_t n, uint32_t bits, uint8_t *out);

/* The inverse. Untrusted input: XF_EFORMAT when len is not exactly
 * xf_codec_packed_bytes(n, bits) or a padding bit is set. */
xf_err xf_codec_unpack_bits(const uint8_t *in, size_t len, size_t n, uint32_t bits,
                            uint32_t *out, xf_errctx *err) XF_WARN_UNUSED;

/* ---- shared random subset, for secure aggregation ---------------------------- */

/* Under secure aggregation every site of a round must send the same
 * coordinates, so top-k is replaced by a random subset that all derive from
 * the round's seed: writes to idx, ascending, k distinct indices of 0..n-1
 * (1 <= k <= n <= XF_CODEC_N_MAX), a uniform draw that is a function of seed
 * alone. XF_EINVAL for k or n out of range, XF_ENOMEM. */
xf_err xf_codec_random_subset(uint64_t seed, size_t n, size_t k, uint32_t *idx) XF_WARN_UNUSED;

/* ---- downlink ------------------------------------------------------------ */

/* The global model as IEEE fp16 (bf16 false) or bfloat16 (bf16 true), round to
 * nearest, ties to even; values below the smallest subnormal round to a signed
 * zero. XF_EINVAL for NaN or an infinity, XF_ERANGE for a finite value that
 * would round to infinity (fp16: |x| >= 65520); out is then unspecified. */
xf_err xf_codec_to_half(const float *x, size_t n, bool bf16, uint16_t *out) XF_WARN_UNUSED;

/* Back to float32, exactly (every fp16 and bf16 value is a float32). */
void xf_codec_from_half(const uint16_t *in, size_t n, bool bf16, float *out);

#endif
