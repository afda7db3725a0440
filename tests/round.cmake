# SPDX-License-Identifier: Apache-2.0
# The round state machine and the coordinator's journal: unit tests with an
# injected clock and real SQLite files, no sockets.
xf_add_test(test_round SOURCES test_round.c LIBS xf_round LABELS unit)

# Datasets the sites announce, pending in the policy until adopted: the
# journal's record, the pick of an adoption and the one change that makes it.
xf_add_test(test_pending SOURCES test_pending.c LIBS xf_round LABELS unit)

# Checkpoint retention: what is pruned and what is always kept, on a real
# journal and blob store, and a prune killed half-way.
xf_add_test(test_retention SOURCES test_retention.c LIBS xf_round LABELS unit)
