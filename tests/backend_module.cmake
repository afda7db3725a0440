# SPDX-License-Identifier: Apache-2.0
# The cuda module is loaded only on request, refused with its reason, and
# never mapped by the programs that do not train.
xf_add_test(test_backend_module SOURCES test_backend_module.c LIBS xf_kernels LABELS unit
            TIMEOUT 300)
add_dependencies(test_backend_module xfed xfed-coord xfed-site)
