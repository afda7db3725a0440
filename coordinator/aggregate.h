/* SPDX-License-Identifier: Apache-2.0 */
/* Server-side aggregation of a round: a streaming aggregator that folds each
 * site's update delta as its chunks arrive and reduces them to one delta, and
 * the server optimizer that applies that delta to the global model across
 * rounds, with its state saved to bytes for the round journal.
 * docs/aggregation.md is the reference for the formulas and bounds. */
#ifndef XF_COORDINATOR_AGGREGATE_H
#define XF_COORDINATOR_AGGREGATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"

/* Both objects work on host float arrays in plain C, not through
 * kernels/backend.h: the coordinator needs no compute device, the mean is
 * accumulated exactly in fixed point (the backend ops are float32), and the
 * arithmetic has to be the one written below, whatever backend is built.
 * Neither object is thread-safe; the coordinator drives them from its loop. */

/* ---- the aggregator ------------------------------------------------------- */

typedef struct xf_aggregator xf_aggregator;
/* One site's update while its values arrive. Owned by its aggregator; valid
 * from xf_aggregator_begin_update until xf_aggregator_end_update or
 * xf_aggregator_abort_update (whichever comes first) or xf_aggregator_free. */
typedef struct xf_agg_update xf_agg_update;

/* Largest update weight and largest total of weights: 2^53, so that every
 * weight and their sum are exact in a double. */
#define XF_AGG_WEIGHT_MAX (UINT64_C(1) << 53)

/* Mean-based kinds hold each value v in fixed point, as the integer
 * round(v * 2^XF_AGG_FIXED_BITS) (to nearest, ties to even), and sum
 * weight * that integer exactly in 128 bits, so that the sum is the same in
 * any order of commits. Values of magnitude XF_AGG_VALUE_LIMIT (2^23) or more
 * do not fit the 64-bit fixed value and are refused. Values with |v| >= 2^-17
 * are held exactly; smaller ones to within 2^-41. docs/aggregation.md gives
 * the error of the mean. */
#define XF_AGG_FIXED_BITS 40
#define XF_AGG_VALUE_LIMIT 0x1p23f

/* Creates the aggregator of one round for n_params parameters (> 0) under
 * strategy (copied; its kind and trim_fraction are used here).
 *
 * Memory:
 *  - mean-based kinds (fedavg, fedavgm, fedprox, fedadam, fedyogi,
 *    fedadagrad): 16 bytes per parameter for the exact running sum (a
 *    128-bit integer), plus for each update in flight a staging copy (4 bytes
 *    per parameter) and its arrival bitmap (1 bit per parameter), plus one
 *    released staging copy kept for the next update to reuse:
 *    (16 + 4.125 u + 4) bytes per parameter with u updates in flight, and
 *    never more staging copies than the most updates once in flight
 *    together. create zeroes the sum, touching
 *    all of it, so that creating the aggregator when the round opens takes
 *    its page faults off the path of the first update. robust_capacity is
 *    ignored.
 *  - robust kinds (median, trimmed_mean) hold every update until finish: at
 *    most robust_capacity (1..2^32-1) updates, committed and in flight
 *    together, 4.125 bytes per parameter each. A site past that is refused
 *    at begin_update. This is also why they cannot run under secure
 *    aggregation, which reveals only the sum.
 *
 * Returns XF_OK, XF_EINVAL (n_params 0, an unknown kind, robust_capacity 0 or
 * 2^32 or more, or trim_fraction outside [0, 0.5) for a robust kind) or
 * XF_ENOMEM. The caller owns *out and frees it with xf_aggregator_free; *out
 * is written only on success. */
xf_err xf_aggregator_create(const xf_job_strategy *strategy, size_t n_params,
                            size_t robust_capacity, xf_aggregator **out,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Frees the aggregator, its updates in flight included (their handles become
 * invalid). NULL is allowed. */
void xf_aggregator_free(xf_aggregator *agg);

/* Starts the update of site_id, weighted by weight, 1..XF_AGG_WEIGHT_MAX:
 *  - mean-based kinds: the update's training records;
 *  - robust kinds: the votes the update stands for, which the caller decides
 *    and must not take from the site: 1 for one site's update, and for a
 *    regional aggregate the number of sites it was computed from, so that a
 *    region counts as its sites do (docs/aggregation.md, "Robust aggregation
 *    across regions"). Passing training records here would let a site buy
 *    influence over the median by claiming records.
 * Any number of updates may be in flight at once; their chunks may
 * interleave. Returns
 *   XF_EEXISTS  site_id already has an update in flight or committed this round;
 *   XF_EINVAL   weight 0 or above XF_AGG_WEIGHT_MAX, or the total would pass it;
 *   XF_ERANGE   a robust kind already holds robust_capacity updates;
 *   XF_ENOMEM.
 * On success *out is the update's handle (owned by agg); on failure nothing
 * changes. */
xf_err xf_aggregator_begin_update(xf_aggregator *agg, uint64_t site_id, uint64_t weight,
                                  xf_agg_update **out, xf_errctx *err) XF_WARN_UNUSED;

/* Stores values[0..count) as elements offset..offset+count of the update, in
 * any order of chunks and any split. values is borrowed for the call only.
 * Returns
 *   XF_ERANGE   the chunk reaches past n_params, or a value is NaN or infinite,
 *               or (mean-based kinds) of magnitude XF_AGG_VALUE_LIMIT or more;
 *               err names the first such value by its index;
 *   XF_EFORMAT  an element of the chunk has already arrived;
 *   XF_EINVAL   the update was already spoiled by an earlier failed fold.
 * A failed fold spoils the update: it counts no value as arrived, further
 * folds fail, and end_update discards it with XF_EFORMAT. The caller usually
 * aborts it. What a failed fold left in the staging copy is never read. */
xf_err xf_aggregator_fold(xf_agg_update *upd, size_t offset, const float *values,
                          size_t count, xf_errctx *err) XF_WARN_UNUSED;

/* Commits the update: every one of the n_params elements must have arrived
 * exactly once. For mean-based kinds this is when the update enters the
 * running sum, sum[i] += weight * round(value[i] * 2^40) in 128-bit integers
 * for i = 0..n_params-1. The addition is exact, so the sum depends only on
 * the set of committed (weight, update) pairs: not on the order of commits,
 * chunk sizes, chunk order, or how updates interleave. Returns XF_OK, or
 * XF_EFORMAT (elements missing, the first one named in err, or the update
 * spoiled by a failed fold) after discarding the update as abort would.
 * Either way the handle is invalid afterwards. */
xf_err xf_aggregator_end_update(xf_agg_update *upd, xf_errctx *err) XF_WARN_UNUSED;

/* Drops the update (its site went away mid-stream): every result of the
 * aggregator is exactly as if the update had never begun, bit for bit (a
 * mean-based aggregator may keep its staging copy for the next update), and
 * the site may begin again. The handle is invalid afterwards. NULL is
 * allowed. */
void xf_aggregator_abort_update(xf_agg_update *upd);

/* Updates committed so far, their total weight, and updates in flight. */
size_t xf_aggregator_committed(const xf_aggregator *agg);
uint64_t xf_aggregator_total_weight(const xf_aggregator *agg);
size_t xf_aggregator_in_flight(const xf_aggregator *agg);

/* Writes the round's aggregate delta to out[0..n_params):
 *  - mean-based kinds: the weighted mean,
 *    out[i] = (float)((double)sum[i] / (double)W * 2^-40), with W the total
 *    weight: the sum rounded to double, divided in double, scaled exactly,
 *    and rounded to float, within about half a float ulp of the exact mean
 *    of the fixed-point values (docs/aggregation.md);
 *  - median: per coordinate, the weighted median. The values are sorted by
 *    value (-0 before +0), ties by site id; with W the total weight, the
 *    result is the value at which the cumulative weight first exceeds W/2,
 *    or, where the cumulative weight is exactly W/2 after some value, the
 *    mean of that value and the next, computed in double. With unit weights
 *    this is the middle value, or the mean of the two middle ones for an
 *    even count;
 *  - trimmed_mean: per coordinate, k = floor(trim_fraction * W) units of
 *    weight cut from each end of the values sorted as for the median (an
 *    update straddling a cut keeps only its units inside it), and the
 *    weighted mean of the rest: sum of (kept units * value) over the kept
 *    updates in ascending order in double, divided by W - 2k. With unit
 *    weights: k values cut from each end and the rest averaged.
 * Every kind's result depends only on the set of committed (site id, weight,
 * update) triples, not on their order.
 * Needs at least one committed update and none in flight (XF_EINVAL
 * otherwise); XF_ENOMEM for robust kinds (a scratch of 8 bytes per committed
 * update). out is owned by the caller; the aggregator is unchanged, so
 * finish may be repeated. */
xf_err xf_aggregator_finish(const xf_aggregator *agg, float *out,
                            xf_errctx *err) XF_WARN_UNUSED;

/* ---- the server optimizer --------------------------------------------------- */

typedef struct xf_server_opt xf_server_opt;

/* Creates the server optimizer of a job for n_params parameters (> 0), with
 * the state the papers start from (docs/aggregation.md): no momentum (0) and,
 * for fedadam, fedyogi and fedadagrad, second moment v = tau^2. strategy is
 * copied. Returns XF_OK, XF_EINVAL (n_params 0, an unknown kind, or a
 * hyperparameter outside the range of job/jobspec.h) or XF_ENOMEM.
 * The caller owns *out and frees it with xf_server_opt_free. */
xf_err xf_server_opt_create(const xf_job_strategy *strategy, size_t n_params,
                            xf_server_opt **out, xf_errctx *err) XF_WARN_UNUSED;

/* NULL is allowed. */
void xf_server_opt_free(xf_server_opt *opt);

/* Applies one round's aggregate delta (from xf_aggregator_finish) to
 * global_params[0..n_params), in place, with w the parameters, D the delta,
 * eta = server_lr:
 *   fedavg, fedprox, median, trimmed_mean: w += eta D
 *   fedavgm:    v = momentum v + D;  w += eta v
 *   fedadam, fedyogi, fedadagrad: m = beta1 m + (1 - beta1) D;
 *               v per variant;  w += eta m / (sqrt(v) + tau)
 * Each element is computed in double from the stored float state and
 * rounded to float once per stored quantity; elements are independent, so
 * the result is a pure function of (state, w, D). Both arrays are borrowed. */
void xf_server_opt_step(xf_server_opt *opt, float *global_params, const float *mean_delta);

/* Rounds applied since creation (carried through save and load). */
uint64_t xf_server_opt_steps(const xf_server_opt *opt);

/* Serializes the whole state (kind, n_params, hyperparameters, rounds, the
 * momentum and second-moment vectors) with a BLAKE2b-256 digest at the end,
 * so that the coordinator can journal it each round and resume bit for bit.
 * *out is owned by the caller (xf_free), *len its size. XF_OK or XF_ENOMEM;
 * nothing is written on failure. */
xf_err xf_server_opt_save(const xf_server_opt *opt, uint8_t **out,
                          size_t *len) XF_WARN_UNUSED;

/* Restores opt from bytes written by xf_server_opt_save for the same kind,
 * n_params and hyperparameters. The bytes are read through a bounds-checked
 * cursor and checked in full before anything is changed: on failure opt is
 * left as it was. buf is borrowed. Returns
 *   XF_ETRUNCATED  buf ends early;
 *   XF_EINTEGRITY  the digest does not match (damaged bytes);
 *   XF_EFORMAT     not a saved state, an unknown version, another kind,
 *                  n_params or hyperparameter (named in err), trailing bytes,
 *                  or a state value that cannot occur (NaN, infinite, v < 0). */
xf_err xf_server_opt_load(xf_server_opt *opt, const uint8_t *buf, size_t len,
                          xf_errctx *err) XF_WARN_UNUSED;

#endif
