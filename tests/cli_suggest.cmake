# SPDX-License-Identifier: Apache-2.0
# Misspelt commands, verbs and flags of xfed, xfed-site and xfed-coord get a
# usage error with the nearest known word (base/text.h). One table row per
# mistake in test_cli_suggest.c.
xf_add_test(test_cli_suggest SOURCES test_cli_suggest.c LABELS integration TIMEOUT 120)
add_dependencies(test_cli_suggest xfed xfed-site xfed-coord)
