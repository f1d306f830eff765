# tests/bench_spec/tests.cmake — smoke checks of `ds4-bench-spec` and scripts/bench_spec.sh
# (issue #5) on a random tiny target + random drafter generated once by a fixture: 1 prompt
# per channel, 16 tokens, every policy; the benchmark must exit 0 and report identity. `oracle`:
# the --oracle rows (with the drafter's, and alone without a drafter).
if(TARGET ds4-bench-spec AND TARGET ds4-gguf AND TARGET ds4-dspark-gguf)
  set(DS4_BSPEC_WORK ${CMAKE_BINARY_DIR}/tests/bench_spec)
  file(MAKE_DIRECTORY ${DS4_BSPEC_WORK})
  add_test(NAME bench_spec.generate_models
           COMMAND bash -c "set -e; '$<TARGET_FILE:ds4-gguf>' generate --profile tiny --quant q2 --seed 1 -o '${DS4_BSPEC_WORK}/target.gguf' >/dev/null; '$<TARGET_FILE:ds4-dspark-gguf>' generate --target '${DS4_BSPEC_WORK}/target.gguf' --seed 3 -o '${DS4_BSPEC_WORK}/drafter.gguf' >/dev/null")
  set_tests_properties(bench_spec.generate_models PROPERTIES FIXTURES_SETUP ds4_bspec_models
                                                             TIMEOUT 120)
  foreach(check smoke bad_flags calibrate script repeat oracle)
    add_test(NAME bench_spec.${check}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/smoke.sh ${check} $<TARGET_FILE:ds4-bench-spec>
                     ${DS4_BSPEC_WORK}/target.gguf ${DS4_BSPEC_WORK}/drafter.gguf
                     ${CMAKE_SOURCE_DIR} ${DS4_BSPEC_WORK}/${check})
    set_tests_properties(bench_spec.${check} PROPERTIES FIXTURES_REQUIRED ds4_bspec_models
                                                        TIMEOUT 180 LABELS bench)
  endforeach()
endif()
