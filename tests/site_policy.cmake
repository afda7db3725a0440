# SPDX-License-Identifier: Apache-2.0
# The site's own residency rules (site/residency.h): the local check of a
# task's residency plan, its audit rows and the residency budget cap (unit).
xf_add_test(test_site_policy SOURCES test_site_policy.c
            LIBS xf_site_residency xf_site_state xf_policy xf_audit xf_job LABELS unit)
