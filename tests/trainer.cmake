# SPDX-License-Identifier: Apache-2.0
# The external trainer contract (site/trainer.h) with a plain-Python trainer.
xf_add_test(test_trainer SOURCES test_trainer.c LIBS xf_site_trainer LABELS unit)
# What a trainer hands back: result.json and trained.npy.
xf_add_fuzzer(fuzz_trainer_result LIBS xf_site_trainer)
# A federation with an external trainer at one site (tests/integration/
# trainer.sh): the contract with a plain-Python trainer and the refusal of
# record-level privacy for a trainer declared none; in `slow`, the PyTorch
# trainer of deploy/trainers (skipped, exit 77, without python3-torch).
add_test(NAME trainer_federation
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/trainer.sh ${PROJECT_BINARY_DIR} contract)
set_tests_properties(trainer_federation PROPERTIES LABELS integration TIMEOUT 900)
add_test(NAME trainer_federation_torch
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/trainer.sh ${PROJECT_BINARY_DIR} torch)
set_tests_properties(trainer_federation_torch PROPERTIES LABELS "integration;slow" TIMEOUT 1800
                     SKIP_RETURN_CODE 77)
# The PyTorch trainer's module for every layer kind against xfed's own
# evaluation (tests/integration/torch_layers.sh): a few seconds, so in the
# default suite; skipped, exit 77, without python3-torch.
add_test(NAME trainer_torch_layers_compute_xfeds_logits
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/torch_layers.sh ${PROJECT_BINARY_DIR})
set_tests_properties(trainer_torch_layers_compute_xfeds_logits PROPERTIES LABELS integration
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
