# SPDX-License-Identifier: Apache-2.0
# Installing and supervising the daemons: the installed systemd units pass
# `systemd-analyze verify` (tests/integration/units.sh, a few seconds).
add_test(NAME deploy_units_verify
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/units.sh ${PROJECT_BINARY_DIR})
set_tests_properties(deploy_units_verify PROPERTIES LABELS integration TIMEOUT 300)

# Readiness, the watchdog and the CRL reload as systemd would see them
# (tests/integration/supervise.sh): only in builds that notify systemd.
if(XF_SYSTEMD)
  add_test(NAME deploy_supervise_notify_and_reload
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/supervise.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(deploy_supervise_notify_and_reload PROPERTIES LABELS integration TIMEOUT 600)
endif()

# The Debian packages of this build and deploy/deps.list's profiles
# (tests/integration/packaging.sh): cpack makes the packages in a temporary
# directory and lintian finds nothing in them (about a minute on 2 cores);
# the quickstart's profiles hold what it runs and none of the suite's tools;
# README.md says what deploy/packages.sh does; the coordinator without
# Chart.js names the package that has it.
# A sanitized build's binaries need the sanitizers' runtimes, which no
# package of xfed depends on: only the other builds are packaged.
if(NOT XF_SANITIZE)
  add_test(NAME deploy_debs_pass_lintian_and_take_depends_from_the_run_profile
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/packaging.sh debs
                   ${PROJECT_BINARY_DIR})
  set_tests_properties(deploy_debs_pass_lintian_and_take_depends_from_the_run_profile
                       PROPERTIES LABELS integration TIMEOUT 600)
endif()
add_test(NAME install_deps_quickstart_profiles_leave_out_the_test_tools
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/packaging.sh profiles
                 ${PROJECT_BINARY_DIR})
set_tests_properties(install_deps_quickstart_profiles_leave_out_the_test_tools
                     PROPERTIES LABELS integration TIMEOUT 120)
add_test(NAME readme_and_packages_sh_agree_on_where_the_packages_go
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/packaging.sh readme ${PROJECT_BINARY_DIR})
set_tests_properties(readme_and_packages_sh_agree_on_where_the_packages_go
                     PROPERTIES LABELS integration TIMEOUT 60)
if(XF_HTTP)
  add_test(NAME dashboard_without_chartjs_names_the_debian_package
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/packaging.sh chartjs
                   ${PROJECT_BINARY_DIR})
  set_tests_properties(dashboard_without_chartjs_names_the_debian_package
                       PROPERTIES LABELS integration TIMEOUT 120)
endif()

# The Debian packages on a fresh Debian root (deploy/packages.sh): built with
# cpack in a build directory of their own, installed with dpkg -i in a
# bookworm made by mmdebstrap, a coordinator and two sites run a job from the
# units' command lines, then purged. Needs root and the package registry;
# about 2 minutes besides the Release build.
add_test(NAME deploy_packages_install_run_purge
         COMMAND bash ${PROJECT_SOURCE_DIR}/deploy/packages.sh
                 --build ${PROJECT_BINARY_DIR}/deploy/packages-build)
set_tests_properties(deploy_packages_install_run_purge PROPERTIES LABELS "integration;slow"
                     TIMEOUT 2400)

# The OCI image from those packages and the pod spec, started
# (tests/integration/container.sh): deploy/image.sh, `podman kube play
# deploy/pod.yaml` (a coordinator, an aggregator, two sites), a 2-round job
# through the image's xfed, everything removed after. Shares the packages'
# build directory with the test above. Skipped (77) where podman cannot run
# containers; about 2 minutes besides the Release build.
add_test(NAME deploy_container_pod_runs_a_job
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/container.sh
                 --build ${PROJECT_BINARY_DIR}/deploy/packages-build)
set_tests_properties(deploy_container_pod_runs_a_job PROPERTIES LABELS "integration;slow"
                     TIMEOUT 2400 SKIP_RETURN_CODE 77 RESOURCE_LOCK xfed_packages_build)
set_tests_properties(deploy_packages_install_run_purge PROPERTIES RESOURCE_LOCK xfed_packages_build)
