# SPDX-License-Identifier: Apache-2.0
# The site's local state: the dataset registry and site.json (unit), and the
# real `xfed-site` binary run as an operator runs it (integration).
xf_add_test(test_site_registry SOURCES test_site_registry.c LIBS xf_site_state LABELS unit)
xf_add_test(test_site_cli SOURCES test_site_cli.c LIBS xf_base PkgConfig::JANSSON PkgConfig::SQLITE3
            LABELS integration)
add_dependencies(test_site_cli xfed-site xfed)
xf_add_fuzzer(fuzz_site_config LIBS xf_site_state)
