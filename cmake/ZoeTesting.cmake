# zoe_add_test(NAME name SOURCES ... LIBS ... [LABELS ...])
# One GoogleTest binary per test file group; every test case becomes its own CTest entry,
# discovered when ctest runs (so building never executes test binaries).
enable_testing()
include(GoogleTest)

function(zoe_add_test)
  cmake_parse_arguments(arg "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT arg_LABELS)
    set(arg_LABELS unit)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE ${arg_LIBS} GTest::gtest GTest::gtest_main GTest::gmock
                                            zoe::build_flags)
  gtest_discover_tests(${arg_NAME}
    DISCOVERY_MODE PRE_TEST
    TEST_PREFIX "${arg_NAME}."
    PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT})
endfunction()
