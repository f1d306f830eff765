# tests/tools/tests.cmake — `ds4-gguf` end-to-end checks: inspect --json against the `gguf`
# Python package on generated tiny files (q2 and q4, sparse), and the --help text.
if(TARGET ds4-gguf)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME tools.inspect_vs_gguf_py_q2
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_inspect.py
                     $<TARGET_FILE:ds4-gguf> ${CMAKE_BINARY_DIR}/tests/tools/q2
                     --profile tiny --quant q2 --seed 3 --fill random)
    add_test(NAME tools.inspect_vs_gguf_py_q4_sparse
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_inspect.py
                     $<TARGET_FILE:ds4-gguf> ${CMAKE_BINARY_DIR}/tests/tools/q4
                     --profile tiny --quant q4 --seed 4 --sparse-experts 4 --fill random)
    set_tests_properties(tools.inspect_vs_gguf_py_q2 tools.inspect_vs_gguf_py_q4_sparse
                         PROPERTIES TIMEOUT 120 LABELS tools)
  endif()
  add_test(NAME tools.ds4_gguf_help COMMAND $<TARGET_FILE:ds4-gguf> generate --help)
  set_tests_properties(tools.ds4_gguf_help PROPERTIES PASS_REGULAR_EXPRESSION "--sparse-experts")
  add_test(NAME tools.ds4_gguf_inspect_missing COMMAND $<TARGET_FILE:ds4-gguf> inspect /nonexistent.gguf)
  set_tests_properties(tools.ds4_gguf_inspect_missing PROPERTIES WILL_FAIL TRUE)
endif()

# `ds4-greedy-gen` (tools/greedy-gen): shard / thread / prefix invariance of its rows and
# exit code 2 on bad input, on the shipped tiny model.
if(TARGET ds4-greedy-gen)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/models/ds4-tiny.gguf)
    add_test(NAME tools.greedy_gen
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_greedy_gen.py
                     $<TARGET_FILE:ds4-greedy-gen> ${CMAKE_SOURCE_DIR}/models/ds4-tiny.gguf
                     ${CMAKE_BINARY_DIR}/tests/tools/greedy_gen)
    set_tests_properties(tools.greedy_gen PROPERTIES TIMEOUT 120 LABELS tools)
  endif()
endif()

# tools/bench_plots.py (the CUDA sweep's figures and summary, docs/CUDA.md "Measuring") on a
# synthetic sweep folder; skipped (exit 77) where matplotlib is not installed.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME tools.bench_plots
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_bench_plots.py
                   ${CMAKE_SOURCE_DIR}/tools/bench_plots.py ${CMAKE_BINARY_DIR}/tests/tools/bench_plots)
  set_tests_properties(tools.bench_plots PROPERTIES TIMEOUT 120 LABELS tools SKIP_RETURN_CODE 77)
endif()

# tools/ncu_kernel_table.py (a decoded token's device time per kernel from ncu's CSV, docs/CUDA.md
# "Measuring") on synthetic ncu output; needs no GPU and no Python package.
if(Python3_Interpreter_FOUND)
  add_test(NAME tools.ncu_kernel_table
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_ncu_kernel_table.py
                   ${CMAKE_SOURCE_DIR}/tools/ncu_kernel_table.py ${CMAKE_BINARY_DIR}/tests/tools/ncu_kernel_table)
  set_tests_properties(tools.ncu_kernel_table PROPERTIES TIMEOUT 60 LABELS tools)
endif()

# scripts/cuda_ab.sh (the A/B of the working tree's CUDA code against an earlier revision on one
# GPU machine, docs/CUDA.md): its GPU-free modes, prepare and overlay, in a scratch repository.
find_package(Git QUIET)
if(Python3_Interpreter_FOUND AND GIT_FOUND)
  add_test(NAME tools.cuda_ab
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_cuda_ab.py
                   ${CMAKE_SOURCE_DIR}/scripts/cuda_ab.sh ${CMAKE_BINARY_DIR}/tests/tools/cuda_ab)
  set_tests_properties(tools.cuda_ab PROPERTIES TIMEOUT 60 LABELS tools)
endif()
