# SPDX-License-Identifier: Apache-2.0
# The dataset module (data/): readers, writers, splits; fuzz targets for the
# IDX, CSV and NumPy parsers and the tabular column schema.
xf_add_test(test_dataset SOURCES test_dataset.c LIBS xf_data LABELS unit)
xf_add_fuzzer(fuzz_idx LIBS xf_data)
xf_add_fuzzer(fuzz_csv LIBS xf_data)
xf_add_test(test_tabular SOURCES test_tabular.c LIBS xf_data LABELS unit)
# Tabular data: the column schema, CSV read with it, and the NumPy readers.
xf_add_fuzzer(fuzz_schema LIBS xf_data)
xf_add_fuzzer(fuzz_schema_csv LIBS xf_data)
xf_add_fuzzer(fuzz_npy LIBS xf_data)
# Pooled normalization statistics (data/colstats.h) and the reader of their
# files.
xf_add_test(test_colstats SOURCES test_colstats.c LIBS xf_data_stats LABELS unit)
xf_add_fuzzer(fuzz_colstats LIBS xf_data_stats)
# The tabular example (deploy/data/make-credit.py) through `xfed data split`
# and `xfed-site dataset add`.
add_test(NAME tabular_data COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/tabular_data.sh
         ${PROJECT_BINARY_DIR})
set_tests_properties(tabular_data PROPERTIES LABELS "integration" TIMEOUT 300)
# Pooled statistics through `xfed-site dataset stats` at three sites and
# `xfed data stats merge`, with every refusal.
add_test(NAME colstats COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/colstats.sh
         ${PROJECT_BINARY_DIR})
set_tests_properties(colstats PROPERTIES LABELS "integration" TIMEOUT 300)
