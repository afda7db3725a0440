# SPDX-License-Identifier: Apache-2.0
# The connection layer: mutually authenticated TLS 1.3 over loopback TCP with
# real certificates, frames, tensor streams, refusals, limits, heartbeats,
# backpressure and the CRL reload.
xf_add_test(test_conn SOURCES test_conn.c LIBS xf_conn LABELS integration TIMEOUT 120)
