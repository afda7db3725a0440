# SPDX-License-Identifier: Apache-2.0
# What the programs say when a user gets something wrong, against a running
# federation with its metrics and dashboard ports (tests/integration/
# messages.sh; under a minute on 2 cores).
if(XF_HTTP)
  add_test(NAME messages_name_the_mistake_and_the_fix
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/messages.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(messages_name_the_mistake_and_the_fix PROPERTIES LABELS integration
                       TIMEOUT 600)
endif()
