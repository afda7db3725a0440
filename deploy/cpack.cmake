# SPDX-License-Identifier: Apache-2.0
# Debian packages from the install components (deploy/CMakeLists.txt):
#   cmake -S . -B build-pkg -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr
#   cmake --build build-pkg --target xfed xfed-coord xfed-site
#   (cd build-pkg && cpack -G DEB)
# (deploy/packages.sh does that, adding -DCMAKE_C_FLAGS=-g as Debian builds:
# the binaries are stripped, their debug symbols go to -dbgsym packages).
# The units name the binaries by their installed path, so the packages are
# made for the prefix the build was configured with: /usr for Debian.
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "Debian packages (cpack -G DEB) are made for the prefix ${CMAKE_INSTALL_PREFIX}; "
                 "configure with -DCMAKE_INSTALL_PREFIX=/usr for packages that install in /usr")
endif()

set(CPACK_PACKAGE_NAME xfed)
set(CPACK_PACKAGE_VENDOR xfed)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${XF_PACKAGE_CONTACT}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${XF_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Library dependencies from dpkg-shlibdeps (package dpkg-dev), except for
# the CUDA backend below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
# The binaries stripped, their debug symbols in PACKAGE-dbgsym (.ddeb), as
# Debian's dh_strip does.
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)

set(_xf_version "${XF_DEB_VERSION}")
set(CPACK_COMPONENTS_ALL cli coordinator site)

# The Depends and Recommends besides the libraries (dpkg-shlibdeps finds
# those) come from the `run` rows of deploy/deps.list, the list
# deploy/install-deps.sh installs from: RELATION depends:PKG,... or
# recommends:PKG,...
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/deps.list _xf_rows REGEX "^[^# \t]")
foreach(_row IN LISTS _xf_rows)
  string(REGEX MATCHALL "[^ \t]+" _f "${_row}")
  list(LENGTH _f _n)
  if(_n LESS 3)
    continue()
  endif()
  list(GET _f 0 _dep)
  list(GET _f 2 _rel)
  if(NOT _rel MATCHES "^(depends|recommends):(.+)$")
    continue()
  endif()
  set(_field ${CMAKE_MATCH_1})
  string(REPLACE "," ";" _debs "${CMAKE_MATCH_2}")
  foreach(_deb IN LISTS _debs)
    string(MAKE_C_IDENTIFIER "${_deb}" _id)
    list(APPEND _xf_${_field}_${_id} ${_dep})
  endforeach()
endforeach()
# xf_deb_relation(VAR FIELD DEB [MORE...]): VAR = FIELD's packages of DEB in
# deploy/deps.list, then MORE, joined as Debian joins them.
function(xf_deb_relation var field deb)
  string(MAKE_C_IDENTIFIER "${deb}" _id)
  set(_all ${_xf_${field}_${_id}} ${ARGN})
  list(JOIN _all ", " _joined)
  set(${var} "${_joined}" PARENT_SCOPE)
endfunction()

set(CPACK_DEBIAN_CLI_PACKAGE_NAME xfed)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_CLI_DESCRIPTION "command line of the xfed federated training platform\nThe xfed command: the federation's CA and certificates, jobs on the\ncoordinator, the residency policy, audit trails, dataset splits and the\ncentralized baseline. Includes its manual page and bash completion.")
xf_deb_relation(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS depends xfed)
xf_deb_relation(CPACK_DEBIAN_CLI_PACKAGE_RECOMMENDS recommends xfed)

# The daemons' packages create the xfed user and their state directories
# (maintainer scripts from debian/*.in), and their units are not started
# until the operator has put the certificates in place and enabled them.
function(xf_deb_scripts comp package state_dirs units purge_extra)
  set(XF_DEB_PACKAGE ${package})
  set(XF_DEB_STATE_DIRS "${state_dirs}")
  set(XF_DEB_UNITS "${units}")
  set(XF_DEB_PURGE_EXTRA "${purge_extra}")
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/debian/${comp})
  foreach(_script postinst prerm postrm)
    configure_file(${CMAKE_CURRENT_SOURCE_DIR}/debian/${_script}.in ${_dir}/${_script} @ONLY
                   FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                                    GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  endforeach()
  set(_extra ${_dir}/postinst ${_dir}/prerm ${_dir}/postrm)
  if(ARGN)
    string(REPLACE ";" "\n" _conffiles "${ARGN}")
    file(WRITE ${_dir}/conffiles "${_conffiles}\n")
    list(APPEND _extra ${_dir}/conffiles)
  endif()
  string(TOUPPER ${comp} _C)
  set(CPACK_DEBIAN_${_C}_PACKAGE_CONTROL_EXTRA ${_extra} PARENT_SCOPE)
  set(CPACK_DEBIAN_${_C}_PACKAGE_CONTROL_STRICT_PERMISSION ON PARENT_SCOPE)
endfunction()

set(CPACK_DEBIAN_COORDINATOR_PACKAGE_NAME xfed-coordinator)
xf_deb_relation(CPACK_DEBIAN_COORDINATOR_PACKAGE_DEPENDS depends xfed-coordinator)
xf_deb_relation(CPACK_DEBIAN_COORDINATOR_PACKAGE_RECOMMENDS recommends xfed-coordinator
                "xfed (= ${_xf_version})")
set(CPACK_DEBIAN_COORDINATOR_DESCRIPTION "xfed global coordinator and regional aggregator\nxfed-coord with the systemd units xfed-coordinator.service (the global\ncoordinator) and xfed-aggregator@REGION.service (a regional aggregator), and\nthe coordinator's settings in /etc/xfed/coordinator.json. Needs no CUDA.")
xf_deb_scripts(coordinator xfed-coordinator "/var/lib/xfed/coordinator"
               "xfed-coordinator.service xfed-aggregator@*.service"
               "/var/lib/xfed/aggregator-* /etc/xfed/aggregator-*.json"
               ${CMAKE_INSTALL_FULL_SYSCONFDIR}/xfed/coordinator.json)

set(CPACK_DEBIAN_SITE_PACKAGE_NAME xfed-site)
xf_deb_relation(CPACK_DEBIAN_SITE_PACKAGE_DEPENDS depends xfed-site)
xf_deb_relation(CPACK_DEBIAN_SITE_PACKAGE_RECOMMENDS recommends xfed-site)
set(CPACK_DEBIAN_SITE_PACKAGE_SUGGESTS "xfed-cuda (= ${_xf_version})")
set(CPACK_DEBIAN_SITE_DESCRIPTION "xfed site daemon\nxfed-site: the site's dataset registry, privacy ledger and residency rules,\nand the daemon that trains the coordinator's jobs on the site's data, with\nthe systemd unit xfed-site.service. Trains on the CPU; install xfed-cuda for\nNVIDIA GPUs.")
xf_deb_scripts(site xfed-site "/var/lib/xfed/site" "xfed-site.service" "")

# The CUDA backend, a module the site daemon loads when it finds a GPU
# (target xf_cuda, installed with component cuda). Its CUDA runtime and
# cuBLAS come from NVIDIA's CUDA toolkit, which Debian does not package in
# the versions the build uses: no shlibdeps for it.
if(TARGET xf_cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME xfed-cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "xfed-site (= ${_xf_version})")
  set(CPACK_DEBIAN_CUDA_DESCRIPTION "xfed CUDA backend for the site daemon\nlibxfed-cuda.so, which xfed-site loads when it finds an NVIDIA GPU. It needs\nthe NVIDIA driver and the CUDA runtime and cuBLAS libraries of NVIDIA's CUDA\ntoolkit, which this package does not depend on: install them from NVIDIA.")
endif()

include(CPack)
