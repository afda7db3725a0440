/* SPDX-License-Identifier: Apache-2.0 */
/* What every benchmark program needs to time itself and to say where it
 * ran: a monotonic clock and the CPU model, and the removal of its scratch
 * directory. */
#ifndef XF_BENCH_UTIL_H
#define XF_BENCH_UTIL_H

#include <stddef.h>

/* Seconds on the monotonic clock (an arbitrary origin: take differences). */
double xf_bench_now(void);

/* The CPU's model name from /proc/cpuinfo into buf (n bytes), or "unknown". */
void xf_bench_cpu_model(char *buf, size_t n);

/* Removes path and everything below it, never following symbolic links: a
 * benchmark's scratch directory. */
void xf_bench_remove_tree(const char *path);

#endif
