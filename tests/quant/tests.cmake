# tests/quant — bit-exact cross-check of quant/ against the GGUF python package.
# `python3` is resolved from PATH at test time (the interpreter that has numpy + gguf).
add_executable(quant_tool ${CMAKE_SOURCE_DIR}/tests/quant/quant_tool.cpp)
target_link_libraries(quant_tool PRIVATE ds4_quant)
add_test(NAME quant_gguf_crosscheck
         COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/quant/crosscheck.py
                 --tool $<TARGET_FILE:quant_tool>)
# Exit code 77 (numpy or gguf missing) fails the test: scripts/setup.sh installs them.
set_tests_properties(quant_gguf_crosscheck PROPERTIES TIMEOUT 120)
