# SPDX-License-Identifier: Apache-2.0
# A packager's builds, Release and dpkg-buildflags' hardened flags, with no
# warning, and the unit tests of the latter (deploy/packager-builds.sh). Two
# full builds: `slow`.
if(XF_CUDA)
  set(_xf_packager_cuda ON)
else()
  set(_xf_packager_cuda OFF)
endif()
add_test(NAME packager_builds COMMAND bash ${PROJECT_SOURCE_DIR}/deploy/packager-builds.sh)
set_tests_properties(packager_builds PROPERTIES LABELS "slow" TIMEOUT 5400
  ENVIRONMENT "XF_CUDA=${_xf_packager_cuda}")
