# tests/kernels/tests.cmake — test_cpu_kernels: CPU kernels (every ISA path, thread counts,
# r = 1..8+) against quant's reference dots, bit for bit; the activation quantizers against
# quant's; and the thread pool.
if(NOT TARGET ds4_cpu_kernels AND EXISTS ${CMAKE_SOURCE_DIR}/backend/cpu/kernels.cmake)
  include(${CMAKE_SOURCE_DIR}/backend/cpu/kernels.cmake)
endif()
if(TARGET ds4_cpu_kernels)
  add_executable(test_cpu_kernels
                 ${CMAKE_CURRENT_LIST_DIR}/cpu_kernels_test.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/quantize_act_test.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/threadpool_test.cpp)
  target_link_libraries(test_cpu_kernels PRIVATE ds4_cpu_kernels GTest::gtest GTest::gtest_main)
  include(GoogleTest)
  gtest_discover_tests(test_cpu_kernels DISCOVERY_TIMEOUT 60)
endif()
