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
# The f32-activation numerics (EngineOptions::f32_activations) op by op.
if(TARGET ds4_backend)
  add_executable(test_reference_f32 ${CMAKE_CURRENT_LIST_DIR}/f32_activations_test.cpp)
  target_link_libraries(test_reference_f32 PRIVATE ds4_backend GTest::gtest GTest::gtest_main)
  include(GoogleTest)
  gtest_discover_tests(test_reference_f32 DISCOVERY_TIMEOUT 60)
endif()
# Not a test: the engine side of tools/reference/engine_vs_reference_ppl.py.
if(TARGET ds4_engine)
  add_executable(ds4-engine-nll ${CMAKE_CURRENT_LIST_DIR}/engine_nll.cpp)
  target_link_libraries(ds4-engine-nll PRIVATE ds4_engine)
endif()
# Decision-replay parity (issue 4): the engine's discrete decisions (expert ids, indexer
# selections and queries, rounded KV / compressed / indexer rows) are traced by
# ds4-decision-trace and replayed and verified by tools/reference/decision_replay.py, which
# then asserts argmax equality at every position and a tight max |Δlogit|.
if(TARGET ds4_engine AND TARGET ds4_gguf_tool_lib)
  add_executable(ds4-decision-trace ${CMAKE_CURRENT_LIST_DIR}/decision_trace.cpp)
  target_link_libraries(ds4-decision-trace PRIVATE ds4_engine ds4_gguf_tool_lib
                        nlohmann_json::nlohmann_json)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME reference_decision_replay
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/reference/decision_replay.py
                     --trace-bin $<TARGET_FILE:ds4-decision-trace> --check)
    set_tests_properties(reference_decision_replay PROPERTIES TIMEOUT 600)
  endif()
endif()
