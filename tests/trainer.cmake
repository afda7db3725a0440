# SPDX-License-Identifier: Apache-2.0
# The external trainer contract (site/trainer.h) with a plain-Python trainer.
xf_add_test(test_trainer SOURCES test_trainer.c LIBS xf_site_trainer LABELS unit)
