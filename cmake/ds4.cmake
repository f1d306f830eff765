# Helpers shared by every folder's CMakeLists.txt.

# ds4_library(NAME SOURCES... DEPS dep...) — builds static library ds4_NAME from the given
# sources, with the repository root as include root (so includes read "core/status.h").
function(ds4_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ds4_${name} STATIC ${ARG_SOURCES})
  target_include_directories(ds4_${name} PUBLIC ${CMAKE_SOURCE_DIR})
  foreach(dep ${ARG_DEPS})
    if(dep MATCHES "::" OR dep STREQUAL "Threads::Threads")
      target_link_libraries(ds4_${name} PUBLIC ${dep})
    else()
      target_link_libraries(ds4_${name} PUBLIC ds4_${dep})
    endif()
  endforeach()
endfunction()

# ds4_test_dir(DIR LIBS...) — one gtest executable per test folder, from every *_test.cpp in it.
function(ds4_test_dir dir)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cpp)
  if(NOT srcs)
    return()
  endif()
  string(REPLACE "/" "_" tname "test_${dir}")
  add_executable(${tname} ${srcs})
  target_link_libraries(${tname} PRIVATE ${ARGN} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${tname} PRIVATE DS4_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                              DS4_BINARY_DIR="${CMAKE_BINARY_DIR}")
  include(GoogleTest)
  gtest_discover_tests(${tname} DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "DS4_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()
