# SPDX-License-Identifier: Apache-2.0
# The site's decisions on offers and goes (site/offer.h), with no sockets: a
# registry, ledger and local rules the tests set, and offers as the wire
# carries them (unit).
xf_add_test(test_site_offer SOURCES test_site_offer.c LIBS xf_site_machine LABELS unit)
