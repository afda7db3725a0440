# SPDX-License-Identifier: Apache-2.0
# The site daemon: the real `xfed-site run` against a fake coordinator in the
# test process (xf_listen and the session layer, real certificates, TLS on
# loopback): announce, training, refusals, resumed uploads, queued and held
# tasks with TaskGo, secure aggregation's signed keys and a refusal of keys
# relayed under the wrong certificate, cancel, SIGTERM.
xf_add_test(test_site_daemon SOURCES test_site_daemon.c
            LIBS xf_conn xf_pki xf_kernels xf_data xf_job xf_secagg xf_secagg_x509 PkgConfig::JANSSON
            LABELS integration TIMEOUT 300)
add_dependencies(test_site_daemon xfed-site)

# The site daemon's private header (site/daemon_internal.h) lists, per
# defining file, that file's functions (tests/internal_header.sh).
add_test(NAME site_internal_header_sections_name_the_defining_files
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/internal_header.sh
                 ${PROJECT_SOURCE_DIR}/site/daemon_internal.h
                 ${PROJECT_SOURCE_DIR}/site)
set_tests_properties(site_internal_header_sections_name_the_defining_files PROPERTIES LABELS unit)
