# SPDX-License-Identifier: Apache-2.0
# The job machine across tiers without sockets (tests/sim.c): its behaviour
# named case by case, and the composition matrix of topology, privacy,
# secure aggregation, compression and strategy.
set(_xf_sim_libs xf_jobm xf_coord xf_job xf_update xf_aggregate xf_kernels xf_privacy xf_policy
    xf_secagg xf_codec xf_storage)
xf_add_test(test_jobmachine SOURCES test_jobmachine.c sim.c sa_identity.c LIBS ${_xf_sim_libs} LABELS unit
            TIMEOUT 300)
xf_add_test(test_composition SOURCES test_composition.c sim.c sa_identity.c LIBS ${_xf_sim_libs} LABELS unit
            TIMEOUT 600)
