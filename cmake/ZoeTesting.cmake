# zoe_add_test(NAME name SOURCES ... LIBS ... [LABELS label] [TIMEOUT seconds] [RESOURCE_LOCK name])
# Labels: unit (the default), concurrency (unit tests whose subject is threads, also run under
# TSan; scripts/test adds kernels_tests there by name), gpu (tests/gpu: need a GPU, skip without
# one), mpi (cases run under mpirun: zoe_add_mpi_test below), soak (long fault-injection runs, such as
# zoe-train-mlp killed and resumed round after round: a short form by default, the full one when an
# environment variable asks, tests/bindings/train_mlp_soak_test.cpp); slow is reserved for tests no
# module has yet.
# One GoogleTest binary per test file group; every test case becomes its own CTest entry,
# discovered when ctest runs (so building never executes test binaries).
enable_testing()
include(GoogleTest)

# zoe_tests_need(LABEL label TARGETS ...): the targets the tests labelled `label` run or load.
# Each label gets one target, zoe_tests_<label> (zoe_tests_unit, zoe_tests_concurrency, zoe_tests_mpi,
# zoe_tests_gpu), that builds them all, so a build that runs only some labels (the sanitizer builds
# in scripts/test) builds only what those tests need. zoe_add_test and zoe_add_mpi_test register
# their binaries themselves; a plain add_test names what its command needs. A plain test whose
# binary was left out fails loudly (its command is missing), never silently.
# zoe_use_test_pch(target): with ZOE_TEST_PCH, the target's C++ units start from the precompiled
# <gtest/gtest.h> and <gmock/gmock.h> of zoe_test_pch_donor, built once per build folder. The donor
# is a test binary like the others (same flags through zoe::build_flags and the GTest targets), so
# GCC accepts its precompiled header for them; CMake adds -Winvalid-pch, so with warnings as errors a
# header GCC would refuse fails the build instead of silently costing the time again.
function(zoe_use_test_pch target)
  if(NOT ZOE_TEST_PCH)
    return()
  endif()
  if(NOT TARGET zoe_test_pch_donor)
    file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/zoe_test_pch_donor.cpp
         CONTENT "// The unit that precompiles GoogleTest's headers for every test binary (ZOE_TEST_PCH).\n")
    add_executable(zoe_test_pch_donor ${PROJECT_BINARY_DIR}/zoe_test_pch_donor.cpp)
    target_link_libraries(zoe_test_pch_donor PRIVATE GTest::gtest GTest::gtest_main GTest::gmock zoe::build_flags)
    target_precompile_headers(zoe_test_pch_donor PRIVATE <gtest/gtest.h> <gmock/gmock.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM zoe_test_pch_donor)
endfunction()

function(zoe_tests_need)
  cmake_parse_arguments(arg "" "LABEL" "TARGETS" ${ARGN})
  if(NOT TARGET zoe_tests_${arg_LABEL})
    add_custom_target(zoe_tests_${arg_LABEL})
  endif()
  add_dependencies(zoe_tests_${arg_LABEL} ${arg_TARGETS})
endfunction()

function(zoe_add_test)
  cmake_parse_arguments(arg "" "NAME;TIMEOUT;RESOURCE_LOCK" "SOURCES;LIBS;LABELS" ${ARGN})
  # RESOURCE_LOCK: the cases never run beside another test holding the same lock (mpi: a test that
  # starts mpirun itself, as zoe_add_mpi_test's do).
  set(lock "")
  if(arg_RESOURCE_LOCK)
    set(lock RESOURCE_LOCK ${arg_RESOURCE_LOCK})
  endif()
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
  zoe_use_test_pch(${arg_NAME})
  zoe_tests_need(LABEL ${arg_LABELS} TARGETS ${arg_NAME})
  gtest_discover_tests(${arg_NAME}
    DISCOVERY_MODE PRE_TEST
    TEST_PREFIX "${arg_NAME}."
    PROPERTIES LABELS ${arg_LABELS} TIMEOUT ${arg_TIMEOUT} ${lock})
endfunction()

# zoe_add_mpi_test(NAME name SOURCES ... LIBS ... RANKS 1 2 3 4 [TIMEOUT seconds])
# A GoogleTest binary whose cases run under mpirun: every TEST / TEST_F case found in SOURCES (one
# `TEST(Suite, Case)` per line, as clang-format leaves them) times every rank count in RANKS becomes
# its own CTest entry `<name>.<Suite>.<Case>.np<K>`, running
#   mpirun -n K <ZOE_MPIRUN_FLAGS> <binary> --gtest_filter=Suite.Case --gtest_color=no
# with label `mpi` (not unit or concurrency: the sanitizer runs leave them out) and RESOURCE_LOCK
# mpi, so two mpirun jobs never share the cores at once (ZoeMpiCase.cmake runs it and judges the
# output). A case that needs other rank counts calls GTEST_SKIP() on every rank alike; CTest then
# reports it skipped, unless a rank failed or mpirun did: a failure always wins. The cases are found
# when CMake configures (the sources are scanned; CMake re-runs when they change), because
# gtest_discover_tests cannot wrap each rank count; a TEST_P, TYPED_TEST or indented TEST the scan
# would miss stops the configure instead of silently never running.
#
# ZOE_MPIRUN_FLAGS: root in containers needs --allow-run-as-root; more ranks than cores needs
# --oversubscribe; --bind-to none leaves the oversubscribed ranks free to move between cores; the
# shared-memory transport's single-copy mechanism (CMA, process_vm_readv) needs ptrace rights that
# containers often lack, so large messages take its copy-in/copy-out path instead. --mca pml ob1
# names the point-to-point layer Open MPI picks here anyway (Debian's openmpi-mca-params.conf leaves
# UCX out): left to choose, every rank first opens the others too, cm with its MTLs (psm, psm2),
# which costs about 0.25 s of every mpirun start (MPI_Init to MPI_Finalize: 0.63 s against 0.37 s
# on 1 rank, 0.8 s against 0.55 s on 4), and CI starts mpirun ~175 times.
# ZOE_MPIRUN_EXTRA_FLAGS (cache) adds to them.
set(ZOE_MPIRUN_EXTRA_FLAGS "" CACHE STRING "More options for mpirun in the mpi tests")
set(ZOE_MPIRUN_FLAGS --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none
    --mca pml ob1 ${ZOE_MPIRUN_EXTRA_FLAGS})

set(zoe_mpi_case_script ${CMAKE_CURRENT_LIST_DIR}/ZoeMpiCase.cmake)
function(zoe_add_mpi_test)
  cmake_parse_arguments(arg "" "NAME;TIMEOUT" "SOURCES;LIBS;RANKS" ${ARGN})
  if(NOT arg_RANKS)
    set(arg_RANKS 1 2 3 4)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE ${arg_LIBS} GTest::gtest GTest::gtest_main GTest::gmock
                                            zoe::build_flags)
  zoe_use_test_pch(${arg_NAME})
  zoe_tests_need(LABEL mpi TARGETS ${arg_NAME})
  set(cases "")
  foreach(source IN LISTS arg_SOURCES)
    get_filename_component(path ${source} ABSOLUTE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
    file(STRINGS ${path} missed REGEX "^[ \t]*(TEST_P|TYPED_TEST|TYPED_TEST_P)\\(|^[ \t]+TEST(_F)?\\(")
    if(missed)
      list(GET missed 0 first)
      message(FATAL_ERROR "zoe_add_mpi_test(${arg_NAME}): ${path} has a case the scan cannot run under "
                          "mpirun (only unindented TEST / TEST_F lines are found): '${first}'")
    endif()
    file(STRINGS ${path} lines REGEX "^TEST(_F)?\\([A-Za-z0-9_]+, *[A-Za-z0-9_]+\\)")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^TEST(_F)?\\(([A-Za-z0-9_]+), *([A-Za-z0-9_]+)\\).*" "\\2.\\3" case "${line}")
      list(APPEND cases ${case})
    endforeach()
  endforeach()
  if(NOT cases)
    message(FATAL_ERROR "zoe_add_mpi_test(${arg_NAME}): no TEST(Suite, Case) line in ${arg_SOURCES}")
  endif()
  # mpirun gets a little less than CTest's limit, so the runner (not CTest) reports the timeout.
  math(EXPR mpirun_limit_s "${arg_TIMEOUT} - 5")
  foreach(case IN LISTS cases)
    foreach(ranks IN LISTS arg_RANKS)
      set(test_name ${arg_NAME}.${case}.np${ranks})
      add_test(NAME ${test_name}
        COMMAND ${CMAKE_COMMAND} -DMPIRUN=${MPIEXEC_EXECUTABLE} -DNP_FLAG=${MPIEXEC_NUMPROC_FLAG} -DRANKS=${ranks}
                "-DFLAGS=${ZOE_MPIRUN_FLAGS}" -DBINARY=$<TARGET_FILE:${arg_NAME}> -DCASE=${case}
                -DLIMIT_S=${mpirun_limit_s} -P ${zoe_mpi_case_script})
      set_tests_properties(${test_name} PROPERTIES LABELS mpi RESOURCE_LOCK mpi TIMEOUT ${arg_TIMEOUT}
        SKIP_REGULAR_EXPRESSION "zoe-mpi-case: ${case} skipped")
    endforeach()
  endforeach()
endfunction()
