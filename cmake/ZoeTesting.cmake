# zoe_add_test(NAME name SOURCES ... LIBS ... [LABELS label] [TIMEOUT seconds])
# Labels: unit (the default), concurrency (unit tests whose subject is threads, also run under
# TSan; scripts/test adds kernels_tests there by name), gpu (tests/gpu: need a GPU, skip without
# one); slow and mpi are reserved for tests no module has yet.
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
  # gtest_discover_tests loses the separators of a list in PROPERTIES: one label per binary.
  list(LENGTH arg_LABELS label_count)
  if(NOT label_count EQUAL 1)
    message(FATAL_ERROR "zoe_add_test(${arg_NAME}): give exactly one label (ctest -L takes a regex)")
  endif()
  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE ${arg_LIBS} GTest::gtest GTest::gtest_main GTest::gmock
                                            zoe::build_flags)
  gtest_discover_tests(${arg_NAME}
    DISCOVERY_MODE PRE_TEST
    TEST_PREFIX "${arg_NAME}."
    PROPERTIES LABELS ${arg_LABELS} TIMEOUT ${arg_TIMEOUT})
endfunction()
