# tests/cli/tests.cmake — end-to-end checks of the `ds4` and `ds4-bench` binaries on a tiny
# random model generated once by a fixture (ds4-gguf generate --profile tiny --quant q2).
if(TARGET ds4 AND TARGET ds4-bench AND TARGET ds4-gguf)
  set(DS4_CLI_WORK ${CMAKE_BINARY_DIR}/tests/cli)
  set(DS4_CLI_MODEL ${DS4_CLI_WORK}/ds4-tiny-random.gguf)
  file(MAKE_DIRECTORY ${DS4_CLI_WORK})
  add_test(NAME cli.generate_model
           COMMAND $<TARGET_FILE:ds4-gguf> generate --profile tiny --quant q2 --seed 1
                   -o ${DS4_CLI_MODEL})
  set_tests_properties(cli.generate_model PROPERTIES FIXTURES_SETUP ds4_cli_model)
  foreach(check oneshot deterministic repl unknown_flag help missing_model ctx_too_small
                ctx_too_big not_gguf bench bench_fill bench_dump dspark_policy dspark_calibrate backend)
    add_test(NAME cli.${check}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_checks.sh ${check} $<TARGET_FILE:ds4>
                     $<TARGET_FILE:ds4-bench> ${DS4_CLI_MODEL} ${CMAKE_SOURCE_DIR}
                     ${DS4_CLI_WORK}/${check})
    set_tests_properties(cli.${check} PROPERTIES FIXTURES_REQUIRED ds4_cli_model TIMEOUT 120
                                                 LABELS cli)
  endforeach()
  set_tests_properties(cli.bench_fill PROPERTIES LABELS "cli;bench")
endif()
