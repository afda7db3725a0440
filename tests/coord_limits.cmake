# SPDX-License-Identifier: Apache-2.0
# The coordinator's bounds on its peers, with the real xfed-coord (at 700
# descriptors) and the real xfed CLI on loopback: ClientHellos dripped over
# 500 connections closed at the handshake deadline or dropped for newer ones
# while `xfed job list` answers, from one address up to its unauthenticated
# cap, 750 idle connections meeting the unauthenticated total, dropped while
# the CLI answers, a 4 MiB prefix before the hello refused at once,
# and 100 sessions holding 4 MiB frames kept within the buffer budget and
# closed by the progress rule. About 45 s on 2 cores.
xf_add_test(test_coord_limits SOURCES test_coord_limits.c LIBS xf_conn Threads::Threads
            LABELS integration TIMEOUT 600)
add_dependencies(test_coord_limits xfed-coord xfed)
