# SPDX-License-Identifier: Apache-2.0
# The differential-privacy noise samplers: reproducibility of the generator,
# argument bounds, statistical tests of every sampler at fixed seeds, the
# grid sampler's bound and memory failures, and the plan's delta charge for it.
xf_add_test(test_noise SOURCES test_noise.c LIBS xf_privacy LABELS unit TIMEOUT 120)
