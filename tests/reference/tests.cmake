# tests/reference — C++ engine vs the PyTorch reference (goldens from
# tools/reference/make_goldens.py, committed under tests/reference/goldens/).
if(TARGET ds4_engine AND TARGET ds4_gguf_tool_lib)
  add_executable(test_reference_parity ${CMAKE_CURRENT_LIST_DIR}/parity_test.cpp)
  target_link_libraries(test_reference_parity PRIVATE ds4_engine ds4_gguf_tool_lib
                        GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_reference_parity PRIVATE
                             DS4_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                             DS4_BINARY_DIR="${CMAKE_BINARY_DIR}")
  include(GoogleTest)
  gtest_discover_tests(test_reference_parity DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "DS4_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endif()
# Not a test: the engine side of tools/reference/engine_vs_reference_ppl.py.
if(TARGET ds4_engine)
  add_executable(ds4-engine-nll ${CMAKE_CURRENT_LIST_DIR}/engine_nll.cpp)
  target_link_libraries(ds4-engine-nll PRIVATE ds4_engine)
endif()
