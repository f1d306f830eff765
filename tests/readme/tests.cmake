# tests/readme/tests.cmake — the README stays true: its Quick start block is what `make run`
# (scripts/run_default.sh) prints on the bundled model, and the README opens with the two
# set-up commands. The continuation is greedy and the engine batch/thread invariant, so the text
# is the same on every machine; the speed figures are not compared.
if(TARGET ds4)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/models/ds4-tiny.gguf)
    add_test(NAME readme.quick_start
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_quick_start.py
                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
    set_tests_properties(readme.quick_start PROPERTIES TIMEOUT 120 LABELS readme)
  endif()
endif()
