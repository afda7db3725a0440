# SPDX-License-Identifier: Apache-2.0
# The optional features (XF_HTTP, XF_REPORT, XF_SYSTEMD) as the programs
# state them: `xfed version` lists them, and in a build that leaves one out
# its flags, config keys and commands are usage errors naming the option; in
# a build with them the same command lines get past the flags.
xf_add_test(test_features SOURCES test_features.c LIBS PkgConfig::JANSSON LABELS integration
            TIMEOUT 120)
add_dependencies(test_features xfed xfed-site xfed-coord)
