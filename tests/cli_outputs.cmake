# SPDX-License-Identifier: Apache-2.0
# Every command that writes a file (xfed, xfed-site, xfed-coord), run as its
# user runs it onto a symbolic link, a FIFO, a device node, a directory:
# refused with exit 1 and left as it was (base/file.h's rule). One table
# row per command in test_cli_outputs.c.
xf_add_test(test_cli_outputs SOURCES test_cli_outputs.c LIBS xf_audit LABELS integration TIMEOUT 300)
add_dependencies(test_cli_outputs xfed xfed-site xfed-coord)
