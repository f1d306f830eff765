# tests/gguf/tests.cmake — GGUF test tools and checks beyond the unit tests:
#  - gguf_make_corpus: (re)writes the committed malformed-file seed corpus (tests/gguf/corpus);
#    the corpus itself is checked by test_unit_gguf (Corpus.* tests);
#  - gguf_dump + crosscheck.py: our reader/writer against the `gguf` Python package;
#  - the libFuzzer targets in tests/fuzz when DS4_FUZZ=ON (clang only).
if(TARGET ds4_gguf)
  add_executable(gguf_make_corpus ${CMAKE_CURRENT_LIST_DIR}/make_corpus.cpp)
  target_link_libraries(gguf_make_corpus PRIVATE ds4_gguf)
  target_include_directories(gguf_make_corpus PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit/gguf)
  target_compile_definitions(gguf_make_corpus PRIVATE DS4_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

  find_package(nlohmann_json QUIET)
  find_package(Python3 COMPONENTS Interpreter)
  if(TARGET nlohmann_json::nlohmann_json)
    add_executable(gguf_dump ${CMAKE_CURRENT_LIST_DIR}/gguf_dump.cpp)
    target_link_libraries(gguf_dump PRIVATE ds4_gguf nlohmann_json::nlohmann_json)
    if(Python3_Interpreter_FOUND)
      add_test(NAME gguf_python_crosscheck
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/crosscheck.py
                       --dump $<TARGET_FILE:gguf_dump>
                       --workdir ${CMAKE_BINARY_DIR}/gguf_crosscheck)
      set_tests_properties(gguf_python_crosscheck PROPERTIES TIMEOUT 120 LABELS gguf)
    endif()
  endif()
endif()

if(DS4_FUZZ)
  add_subdirectory(${CMAKE_SOURCE_DIR}/tests/fuzz ${CMAKE_BINARY_DIR}/fuzz)
endif()
