# ps_target_defaults(<target>): the warning flags and include root every project target uses.
function(ps_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PS_WARNINGS}>)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()

# ps_library(<name> SOURCES ... DEPS ... [PRIVATE_DEPS ...]): a static library of the project,
# with the project's warnings and include root; DEPS are linked PUBLIC (its headers name theirs),
# PRIVATE_DEPS only by its sources.
function(ps_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  ps_target_defaults(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# ps_test(<name> SOURCES ... LIBS ... [LABELS ...]): one gtest executable registered with ctest.
function(ps_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  ps_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "PS_BIN_DIR=${CMAKE_BINARY_DIR}/bin;PS_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

# ps_unit_tests(LIBS ... SOURCES ...): one ps_test per source, named after its file
# (tests/worker/piece_plan_test.cc is the test piece_plan_test), all linking LIBS.
function(ps_unit_tests)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  foreach(source ${ARG_SOURCES})
    get_filename_component(name ${source} NAME_WE)
    ps_test(${name} SOURCES ${source} LIBS ${ARG_LIBS})
  endforeach()
endfunction()
