# tests/cuda/tests.cmake — test_cuda: the CUDA kernels (backend/cuda) against the CPU oracle,
# bit for bit, on a GPU. Labelled `cuda` (make test-cuda runs them); without a usable GPU each
# test skips, printing why, and ctest reports it as skipped.
if(TARGET ds4_cuda AND TARGET ds4_backend)
  add_executable(test_cuda ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_test.cpp
                         ${CMAKE_CURRENT_LIST_DIR}/ffn_ops_test.cpp)
  target_link_libraries(test_cuda PRIVATE ds4_cuda ds4_backend ds4_core GTest::gtest GTest::gtest_main)
  include(GoogleTest)
  gtest_discover_tests(test_cuda DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS cuda SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endif()
