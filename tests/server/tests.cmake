# tests/server/tests.cmake — ds4-server: unit tests of the request/response text layer
# (test_server: no model) and the end-to-end suite over loopback with the official `openai`
# and `anthropic` clients on the bundled tiny model (server.e2e, test_server.py), the disk KV
# cache across restarts (server.kv_cache, test_kv_cache.py) and the chat page in a real browser
# (server.chat_page, test_chat_page.py: headless chromium through selenium).
if(TARGET ds4_server_lib)
  ds4_test_dir(server ds4_server_lib)
endif()
if(TARGET ds4-server AND EXISTS ${CMAKE_SOURCE_DIR}/models/ds4-tiny.gguf)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME server.e2e
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_server.py
                     --server $<TARGET_FILE:ds4-server> --models ${CMAKE_SOURCE_DIR}/models)
    set_tests_properties(server.e2e PROPERTIES TIMEOUT 300 LABELS server)
    # --kv-cache-dir: save, restart, resume; corrupt / truncated / foreign files; SIGTERM.
    add_test(NAME server.kv_cache
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_kv_cache.py
                     --server $<TARGET_FILE:ds4-server> --models ${CMAKE_SOURCE_DIR}/models)
    set_tests_properties(server.kv_cache PROPERTIES TIMEOUT 120 LABELS server)
    # The chat page in headless chromium (selenium); skipped (77) when the browser cannot start.
    add_test(NAME server.chat_page
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_chat_page.py
                     --server $<TARGET_FILE:ds4-server> --models ${CMAKE_SOURCE_DIR}/models
                     --screenshot ${CMAKE_BINARY_DIR}/chat_page.png)
    set_tests_properties(server.chat_page PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS server)
  endif()
endif()
if(TARGET ds4-server)
  add_test(NAME server.help COMMAND $<TARGET_FILE:ds4-server> --help)
  set_tests_properties(server.help PROPERTIES PASS_REGULAR_EXPRESSION "--api-key.*--max-queue" LABELS server)
  # Bad flags and a missing model: one message, non-zero exit, no crash.
  add_test(NAME server.bad_flag COMMAND $<TARGET_FILE:ds4-server> --parallel 9)
  set_tests_properties(server.bad_flag PROPERTIES WILL_FAIL TRUE LABELS server)
  add_test(NAME server.missing_model COMMAND $<TARGET_FILE:ds4-server> -m /nonexistent.gguf --port 0)
  set_tests_properties(server.missing_model PROPERTIES WILL_FAIL TRUE LABELS server)
endif()
