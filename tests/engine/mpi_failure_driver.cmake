# Runs mpi_failure_probe under mpirun and checks that every rank but the victim reported a failure
# naming the victim, within the timeout, and that mpirun itself ended within the limit (a survivor
# hanging in MPI_Finalize on a dead peer would keep it running). mpirun's status need not be zero:
# the survivors exit without MPI_Finalize, which mpirun reports as an abnormal exit.
#   cmake -DMPIRUN=... -DFLAGS="..." -DPROBE=... -DSCENARIO=skip|kill|throw -DRANKS=4 -DVICTIM=1
#         -DTIMEOUT_MS=2000 [-DLIMIT_S=seconds] [-DEVERY_RANK=ON -DEXPECT=regex] -P mpi_failure_driver.cmake
# EVERY_RANK: the victim must report its failure too, and EXPECT replaces the check that the line
# names the victim (a refused mismatch of settings fails alike on every rank).
# --enable-recovery and orte_abort_on_non_zero_status 0 keep Open MPI 4.1's mpirun from killing the
# survivors as soon as the victim dies or the first survivor exits, so each gets to report.
foreach(var MPIRUN PROBE SCENARIO RANKS VICTIM TIMEOUT_MS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "mpi_failure_driver: -D${var}=... missing")
  endif()
endforeach()
set(flags ${FLAGS})  # a CMake list: ZOE_MPIRUN_FLAGS
# Seconds a survivor may take: the timeout, and some more, for the ranks share two cores with
# everything else (LIMIT_S overrides it). mpirun gets as much again for starting and ending them.
if(DEFINED LIMIT_S)
  set(limit_s ${LIMIT_S})
else()
  math(EXPR limit_s "${TIMEOUT_MS} / 1000 + 10")
endif()
math(EXPR mpirun_limit_s "2 * ${limit_s}")
math(EXPR kill_after_s "${mpirun_limit_s} + 10")
string(TIMESTAMP started "%s" UTC)
execute_process(
  COMMAND ${MPIRUN} -n ${RANKS} ${flags} --enable-recovery --mca orte_abort_on_non_zero_status 0
          ${PROBE} ${SCENARIO} ${VICTIM} ${TIMEOUT_MS}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT ${kill_after_s})
string(TIMESTAMP ended "%s" UTC)
math(EXPR elapsed "${ended} - ${started}")
message("${out}")
set(failed "")
# A number is mpirun's exit status; anything else ("Process terminated due to timeout") means it
# was killed, i.e. a rank hung.
if(NOT rc MATCHES "^[0-9]+$")
  string(APPEND failed "mpirun did not exit by itself within ${kill_after_s} s: ${rc}\n")
elseif(elapsed GREATER mpirun_limit_s)
  string(APPEND failed "mpirun took ${elapsed} s (limit ${mpirun_limit_s} s)\n")
endif()
math(EXPR last "${RANKS} - 1")
foreach(rank RANGE ${last})
  if(rank EQUAL VICTIM AND NOT EVERY_RANK)
    continue()
  endif()
  string(REGEX MATCH "zoe-mpi-probe rank ${rank} failed after ([0-9.]+) s: [^\n]*" line "${out}")
  if(NOT line)
    string(APPEND failed "rank ${rank} printed no failure\n")
    continue()
  endif()
  set(seconds ${CMAKE_MATCH_1})
  if(DEFINED EXPECT)
    if(NOT line MATCHES "${EXPECT}")
      string(APPEND failed "rank ${rank} failed without the expected message (${EXPECT}): ${line}\n")
    endif()
  elseif(NOT line MATCHES "\\(world rank ${VICTIM}, node [0-9]+\\) (sent nothing|failed)")
    string(APPEND failed "rank ${rank} failed without naming world rank ${VICTIM}: ${line}\n")
  endif()
  if(seconds GREATER limit_s)
    string(APPEND failed "rank ${rank} took ${seconds} s (timeout ${TIMEOUT_MS} ms)\n")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "mpi_failure_driver (${SCENARIO}, victim ${VICTIM}, mpirun status ${rc}):\n${failed}stderr:\n${err}")
endif()
if(EVERY_RANK)
  message("every rank reported the expected failure within ${limit_s} s")
else()
  message("every survivor named world rank ${VICTIM} within ${limit_s} s")
endif()
