# tests/cli_dump — `ds4 --dump-tokens` / `--dump-logprobs` end to end on models/ds4-tiny.gguf.
if(TARGET ds4 AND TARGET ds4-tok-pieces)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME cli.dump_tokens_logprobs
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_dump.py
                     ${CMAKE_SOURCE_DIR} $<TARGET_FILE:ds4> $<TARGET_FILE:ds4-tok-pieces>
                     ${CMAKE_BINARY_DIR}/tests/cli_dump)
    set_tests_properties(cli.dump_tokens_logprobs PROPERTIES TIMEOUT 120 LABELS cli)
  endif()
endif()
