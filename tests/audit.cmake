# SPDX-License-Identifier: Apache-2.0
# The audit trail: append, list and export round trip, and verification
# finding edited, inserted and deleted rows and (with an anchor) a cut end.
xf_add_test(test_audit SOURCES test_audit.c LIBS xf_audit LABELS unit TIMEOUT 60)
