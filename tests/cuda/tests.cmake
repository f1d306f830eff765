# tests/cuda/tests.cmake — test_cuda: the CUDA backend against the CPU oracle, bit for bit, on a
# GPU: every *_test.cpp here (the kernels, each op, and the whole forward pass through sessions
# and the Engine). Labelled `cuda` (make test-cuda runs them); without a usable GPU each test
# skips, printing why, and ctest reports it as skipped.
if(TARGET ds4_cuda AND TARGET ds4_engine)
  file(GLOB _cuda_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_test.cpp)
  add_executable(test_cuda ${_cuda_tests})
  target_link_libraries(test_cuda PRIVATE ds4_cuda ds4_engine ds4_backend ds4_core ds4_gguf_tool_lib
                        OpenSSL::Crypto GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_cuda PRIVATE DS4_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  include(GoogleTest)
  gtest_discover_tests(test_cuda DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS cuda SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  unset(_cuda_tests)
endif()
