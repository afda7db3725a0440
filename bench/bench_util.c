/* SPDX-License-Identifier: Apache-2.0 */
/* The benchmarks' clock and machine description. */
#include "bench/bench_util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double xf_bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void xf_bench_cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    char *v = strchr(line, ':');
    if (!v) break;
    v += 1 + (v[1] == ' ');
    v[strcspn(v, "\n")] = '\0';
    snprintf(buf, n, "%s", v);
    break;
  }
  fclose(f);
}
