# SPDX-License-Identifier: Apache-2.0
# The coordinator's private header (coordinator/daemon_internal.h) lists,
# per defining file, that file's functions: every function declared under a
# file's banner is defined in that file (tests/internal_header.sh). A
# fixture whose header declares under a.c a function that b.c defines is
# refused, naming the function and the file.
add_test(NAME coord_internal_header_sections_name_the_defining_files
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/internal_header.sh
                 ${PROJECT_SOURCE_DIR}/coordinator/daemon_internal.h
                 ${PROJECT_SOURCE_DIR}/coordinator)
set(_xf_bad_header ${CMAKE_CURRENT_BINARY_DIR}/internal-header-bad)
file(WRITE ${_xf_bad_header}/internal.h
     "typedef struct xf__thing xf__thing;\n"
     "/* ---- a.c: things ---- */\n"
     "void xf__thing_make(xf__thing *t);\n"
     "xf_err xf__thing_send(xf__thing *t,\n"
     "                      int n) XF_WARN_UNUSED;\n")
file(WRITE ${_xf_bad_header}/a.c
     "/* The things. */\n"
     "void xf__thing_make(xf__thing *t) {\n"
     "  (void)t;\n"
     "}\n"
     "/* Declared here, defined in b.c. */\n"
     "xf_err xf__thing_send(xf__thing *t, int n);\n")
file(WRITE ${_xf_bad_header}/b.c
     "xf_err xf__thing_send(xf__thing *t,\n"
     "                      int n) {\n"
     "  return 0;\n"
     "}\n")
add_test(NAME coord_internal_header_refuses_a_function_under_another_files_banner
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/internal_header.sh
                 ${_xf_bad_header}/internal.h ${_xf_bad_header})
set_tests_properties(coord_internal_header_refuses_a_function_under_another_files_banner PROPERTIES
  PASS_REGULAR_EXPRESSION "internal.h: xf__thing_send is declared under a.c, which does not define it")
set_tests_properties(coord_internal_header_sections_name_the_defining_files
                     coord_internal_header_refuses_a_function_under_another_files_banner
                     PROPERTIES LABELS unit)
# The runs module's own header (coordinator/host_internal.h: the run's
# fields, for host.c and host_frames.c) is held to the same rule.
add_test(NAME coord_host_header_sections_name_the_defining_files
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/internal_header.sh
                 ${PROJECT_SOURCE_DIR}/coordinator/host_internal.h
                 ${PROJECT_SOURCE_DIR}/coordinator)
set_tests_properties(coord_host_header_sections_name_the_defining_files PROPERTIES LABELS unit)
