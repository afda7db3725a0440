# SPDX-License-Identifier: Apache-2.0
# The site's decisions, with no sockets (unit): the checks of offers and goes
# (site/offer.h) against a registry, ledger and local rules the tests set; a
# task's phases as a table, a task offered again, and the transitions of
# docs/site-machine.md against the table (site/sitemachine.h); the rounds of
# secure aggregation (site/siteagg.h).
xf_add_test(test_site_offer SOURCES test_site_offer.c LIBS xf_site_machine LABELS unit)
xf_add_test(test_site_machine SOURCES test_site_machine.c LIBS xf_site_machine LABELS unit)
# The site's task set (site/taskset.h): which tasks it holds, in which order,
# and the actions each event asks of the daemon.
xf_add_test(test_site_tasks SOURCES test_site_tasks.c LIBS xf_site_machine LABELS unit)
# The site's rounds of secure aggregation (site/siteagg.h), with the fuzz
# targets' stand-in identity (tests/fuzz/fuzz_secagg.h).
xf_add_test(test_site_agg SOURCES test_site_agg.c LIBS xf_site_machine LABELS unit)
