# The dependency rule (docs/ARCHITECTURE.md), checked on every #include line.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME layering_includes
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check_layering.py ${CMAKE_SOURCE_DIR})
add_test(NAME layering_self_test
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check_layering.py --self-test)
