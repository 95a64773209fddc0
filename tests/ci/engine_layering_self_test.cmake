# The layering check checked: engine_layering.cmake passes a copy of engine/ as it is, and fails a copy
# with one upward include (each way an include can name a file: through engine/include, from the
# including file's folder, from engine/src; in a source and in a public header), and a copy with a
# folder that is no stage, each time naming the file, the include and the two stages.
#
#   cmake -DLINT=<engine_layering.cmake> -DENGINE=<engine folder> -DSTAGES=<stages> -DWORK=<scratch folder>
#         -P engine_layering_self_test.cmake
#
# The injected files are new ones, so the cases do not depend on the names of engine's own files.
cmake_minimum_required(VERSION 3.25)

foreach(arg IN ITEMS LINT ENGINE STAGES WORK)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "engine_layering_self_test.cmake: pass -D${arg}=...")
  endif()
endforeach()

# A fresh copy of engine/'s sources in WORK/engine.
function(fresh_copy)
  file(REMOVE_RECURSE "${WORK}")
  file(MAKE_DIRECTORY "${WORK}/engine")
  file(COPY "${ENGINE}/src" "${ENGINE}/include" DESTINATION "${WORK}/engine")
endfunction()

# Runs the check over the copy: its exit code and its output, in `rc` and `out`.
function(run_lint rc out)
  execute_process(COMMAND "${CMAKE_COMMAND}" "-DENGINE=${WORK}/engine" "-DSTAGES=${STAGES}" -P "${LINT}"
                  RESULT_VARIABLE code OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  # CMake wraps a message at its width; the expectations below are one line each.
  string(REGEX REPLACE "[ \t\n]+" " " text "${stdout}${stderr}")
  set(${rc} "${code}" PARENT_SCOPE)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(failures "")

fresh_copy()
run_lint(rc out)
if(NOT rc EQUAL 0)
  list(APPEND failures "the unchanged copy of engine/ was refused: ${out}")
endif()

# Each case: a file to write (relative to the copy), its include, and what the refusal must say.
set(cases
    "src/tiers/injected_upward.cpp|zoe/engine/optim/gradient_path.hpp|engine/src/tiers/injected_upward.cpp: #include \"zoe/engine/optim/gradient_path.hpp\": stage tiers includes stage optim"
    "src/model/injected_upward.cpp|../checkpoint/injected_target.hpp|engine/src/model/injected_upward.cpp: #include \"../checkpoint/injected_target.hpp\": stage model includes stage checkpoint"
    "src/swap/injected_upward.hpp|coordinator/injected_target.hpp|engine/src/swap/injected_upward.hpp: #include \"coordinator/injected_target.hpp\": stage swap includes stage coordinator"
    "include/zoe/engine/config/injected_upward.hpp|zoe/engine/engine.hpp|engine/include/zoe/engine/config/injected_upward.hpp: #include \"zoe/engine/engine.hpp\": stage config includes stage engine")
foreach(case IN LISTS cases)
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 file)
  list(GET parts 1 include)
  list(GET parts 2 expected)
  fresh_copy()
  file(WRITE "${WORK}/engine/src/checkpoint/injected_target.hpp" "#pragma once\n")
  file(WRITE "${WORK}/engine/src/coordinator/injected_target.hpp" "#pragma once\n")
  file(WRITE "${WORK}/engine/${file}" "#include \"${include}\"\n")
  run_lint(rc out)
  if(rc EQUAL 0)
    list(APPEND failures "an upward include passed: ${file} including \"${include}\"")
  else()
    string(FIND "${out}" "${expected}" at)
    if(at LESS 0)
      list(APPEND failures "the refusal of ${file} including \"${include}\" does not say '${expected}': ${out}")
    endif()
  endif()
endforeach()

# Downward includes, each way, and one into the same stage pass.
fresh_copy()
file(WRITE "${WORK}/engine/src/tiers/injected_target.hpp" "#pragma once\n")
file(WRITE "${WORK}/engine/src/optim/injected_target.hpp" "#pragma once\n")
file(WRITE "${WORK}/engine/src/optim/injected_downward.cpp"
     "#include \"zoe/engine/tiers/tier_manager.hpp\"\n#include \"tiers/injected_target.hpp\"\n"
     "#include \"../tiers/injected_target.hpp\"\n#include \"injected_target.hpp\"\n")
run_lint(rc out)
if(NOT rc EQUAL 0)
  list(APPEND failures "a downward include was refused: ${out}")
endif()

# A folder that is no stage.
fresh_copy()
file(WRITE "${WORK}/engine/src/injected_stage/x.cpp" "\n")
run_lint(rc out)
string(FIND "${out}" "engine/src/injected_stage/ is no stage of the engine's order" at)
if(rc EQUAL 0 OR at LESS 0)
  list(APPEND failures "a folder that is no stage was not refused by name: ${out}")
endif()

file(REMOVE_RECURSE "${WORK}")
if(failures)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "engine layering self-test:\n${text}")
endif()
message(STATUS "engine layering self-test: every injected violation was refused by name")
