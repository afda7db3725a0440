# SPDX-License-Identifier: Apache-2.0
# The differential-privacy noise samplers: reproducibility of the generator,
# argument bounds, and statistical tests of every sampler at fixed seeds.
xf_add_test(test_noise SOURCES test_noise.c LIBS xf_privacy LABELS unit TIMEOUT 120)
