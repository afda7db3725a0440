/* SPDX-License-Identifier: Apache-2.0 */
/* The per-round cost of secure aggregation against a malicious aggregator
 * (signed keys and shares, certificates checked, the consistency round)
 * against the semi-honest protocol, for xfed-bench-secagg -s. */
#ifndef XF_BENCH_SECAGG_PROTOCOL_H
#define XF_BENCH_SECAGG_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

/* Runs one round of `sites` sites (threshold 0.66, the default degree,
 * `bits`, vectors of `length` values) both ways, in one thread, with real
 * P-256 certificates of a federation made under a scratch directory, and
 * prints one JSON object. Returns 0, or 1 with the reason on stderr. */
int xf_bench_secagg_protocol(uint32_t sites, uint32_t bits, uint64_t length);

#endif
