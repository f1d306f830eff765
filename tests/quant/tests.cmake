# tests/quant — bit-exact cross-check of quant/ against the GGUF python package.
# `python3` is resolved from PATH at test time (the interpreter that has numpy + gguf).
add_executable(quant_tool ${CMAKE_SOURCE_DIR}/tests/quant/quant_tool.cpp)
target_link_libraries(quant_tool PRIVATE ds4_quant)
add_test(NAME quant_gguf_crosscheck
         COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/quant/crosscheck.py
                 --tool $<TARGET_FILE:quant_tool>)
# Exit code 77: numpy or the gguf python package is not installed.
set_tests_properties(quant_gguf_crosscheck PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
