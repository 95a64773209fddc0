# Runs one GoogleTest case under mpirun for zoe_add_mpi_test (ZoeTesting.cmake):
#   cmake -DMPIRUN=mpirun -DNP_FLAG=-n -DRANKS=K "-DFLAGS=..." -DBINARY=path -DCASE=Suite.Case -DLIMIT_S=s
#         -P ZoeMpiCase.cmake
# It decides the outcome itself because CTest lets SKIP_REGULAR_EXPRESSION win over a nonzero exit
# and over FAIL_REGULAR_EXPRESSION: one rank's GTEST_SKIP() would hide another rank's failure. So a
# run fails (nonzero) when mpirun fails or any rank printed a failure, and only otherwise, when a rank
# skipped the case, prints the marker the entry's SKIP_REGULAR_EXPRESSION looks for.
foreach(var MPIRUN NP_FLAG RANKS BINARY CASE LIMIT_S)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "ZoeMpiCase.cmake: -D${var}= is missing")
  endif()
endforeach()
execute_process(
  COMMAND ${MPIRUN} ${NP_FLAG} ${RANKS} ${FLAGS} ${BINARY} --gtest_filter=${CASE} --gtest_color=no
  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc TIMEOUT ${LIMIT_S})
message("${out}")
string(REPLACE "." "\\." case_re "${CASE}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "${CASE} on ${RANKS} ranks: mpirun ended with '${rc}'")
endif()
if(out MATCHES "\\[  FAILED  \\]")
  message(FATAL_ERROR "${CASE} on ${RANKS} ranks: a rank failed")
endif()
if(out MATCHES "\\[  SKIPPED \\] ${case_re}")
  message("zoe-mpi-case: ${CASE} skipped on ${RANKS} ranks")
endif()
