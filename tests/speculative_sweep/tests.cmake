# tests/speculative_sweep/tests.cmake — issue #5's identity sweep with the shipped tiny models
# (identity_sweep_test.cpp): every data/prompts prompt x 512 tokens x the policy combinations
# of policy_matrix.h, DSpark greedy == plain greedy. gtest_discover_tests makes one ctest entry
# per shard (channel x 4 prompts; 1 engine thread each) so `ctest -j2` fills both cores.
if(TARGET ds4_engine AND TARGET nlohmann_json::nlohmann_json)
  add_executable(test_speculative_sweep ${CMAKE_CURRENT_LIST_DIR}/identity_sweep_test.cpp)
  target_link_libraries(test_speculative_sweep PRIVATE ds4_engine nlohmann_json::nlohmann_json GTest::gtest
                                                GTest::gtest_main)
  target_compile_definitions(test_speculative_sweep PRIVATE DS4_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  include(GoogleTest)
  gtest_discover_tests(test_speculative_sweep DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES
                       PROPERTIES TIMEOUT 600 LABELS speculative_sweep)
endif()
