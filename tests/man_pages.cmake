# SPDX-License-Identifier: Apache-2.0
# The built man pages (deploy/mangen.c writes their options from --help)
# against every command's --help, and the coordinator's jobs-at-once limit
# in its help, man page and docs (tests/integration/man_pages.sh).
add_test(NAME man_pages_say_what_help_says
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/man_pages.sh ${PROJECT_BINARY_DIR})
set_tests_properties(man_pages_say_what_help_says PROPERTIES LABELS integration TIMEOUT 120)
