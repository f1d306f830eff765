# tests/speculative/tests.cmake — test_speculative (tests/speculative/*_test.cpp, linked to ds4_engine by
# tests/CMakeLists.txt) generates its tiny target models through the ds4-gguf library.
if(TARGET test_speculative AND TARGET ds4_gguf_tool_lib)
  target_link_libraries(test_speculative PRIVATE ds4_gguf_tool_lib)
endif()
# The C++ drafter against an independent float reference (tests/speculative/dspark_ref.py: torch +
# tools/reference primitives): ring rows, biased logits, drafts, confidence logits.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND AND TARGET ds4-gguf AND TARGET ds4-dspark-gguf)
  add_test(NAME spec_dspark_reference
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/speculative/dspark_ref.py
                   $<TARGET_FILE:ds4-gguf> $<TARGET_FILE:ds4-dspark-gguf> ${CMAKE_BINARY_DIR}/spec_ref)
  set_tests_properties(spec_dspark_reference PROPERTIES TIMEOUT 300)
endif()
