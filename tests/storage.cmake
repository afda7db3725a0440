# SPDX-License-Identifier: Apache-2.0
# Storage: SQLite base (settings, migrations, transactions, backup) and the
# content-addressed blob store (round trip, integrity, crash safety).
xf_add_test(test_storage SOURCES test_storage.c LIBS xf_storage LABELS unit)
