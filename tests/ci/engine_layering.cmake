# The layering inside engine/ (engine/README.md, "Stages"): every file belongs to a stage (its
# folder under engine/src/ or engine/include/zoe/engine/; the files directly in those folders are
# the top stage, `engine`), and no file includes a file of a stage above its own. zoe_engine is one
# target, so the compiler alone would let an upward include through; this script refuses it.
#
#   cmake -DENGINE=<engine folder> -DSTAGES=<stages, lowest first, comma-separated, without the top one>
#         -P engine_layering.cmake
#
# Each violation is one line naming the file, the include and the two stages; a folder that is no
# stage of STAGES is refused too (a new stage takes its place in the order in engine/CMakeLists.txt).
# An include is resolved as the compiler resolves it: "zoe/engine/..." from engine/include, any
# other quoted path from the including file's folder, then from engine/src (the target's private
# include folder); one found in neither (a system or third-party header) is not engine's.
cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED ENGINE OR NOT DEFINED STAGES)
  message(FATAL_ERROR "engine_layering.cmake: pass -DENGINE=<engine folder> and -DSTAGES=<stages, lowest first>")
endif()
string(REPLACE "," ";" STAGES "${STAGES}")  # commas: a list that survives add_test's command line
cmake_path(ABSOLUTE_PATH ENGINE NORMALIZE)
string(REGEX REPLACE "/$" "" ENGINE "${ENGINE}")
if(NOT IS_DIRECTORY "${ENGINE}/src" OR NOT IS_DIRECTORY "${ENGINE}/include/zoe/engine")
  message(FATAL_ERROR "engine_layering.cmake: ${ENGINE} holds no src/ and include/zoe/engine/")
endif()
set(order ${STAGES} engine)
string(REPLACE ";" " < " order_text "${order}")

# The stage of a path relative to ENGINE, in `out`; empty when the path is outside both trees.
function(stage_of relative out)
  # One pattern per branch: a failed MATCHES clears CMAKE_MATCH_1 even after another matched.
  if(relative MATCHES "^src/([^/]+)/")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  elseif(relative MATCHES "^include/zoe/engine/([^/]+)/")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  elseif(relative MATCHES "^src/[^/]+$" OR relative MATCHES "^include/zoe/engine/[^/]+$")
    set(${out} engine PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

set(failures "")
foreach(root IN ITEMS src include/zoe/engine)
  file(GLOB entries LIST_DIRECTORIES true RELATIVE "${ENGINE}/${root}" "${ENGINE}/${root}/*")
  foreach(entry IN LISTS entries)
    if(IS_DIRECTORY "${ENGINE}/${root}/${entry}" AND NOT entry IN_LIST STAGES)
      list(APPEND failures "engine/${root}/${entry}/ is no stage of the engine's order (${order_text}): add it to ZOE_ENGINE_STAGES in engine/CMakeLists.txt, in its place")
    endif()
  endforeach()
endforeach()

file(GLOB_RECURSE files RELATIVE "${ENGINE}" "${ENGINE}/src/*" "${ENGINE}/include/zoe/engine/*")
set(checked 0)
foreach(file IN LISTS files)
  if(NOT file MATCHES "\\.(c|cc|cpp|cu|h|hpp|cuh|inl)$")
    continue()
  endif()
  stage_of("${file}" from)
  list(FIND order "${from}" from_index)
  if(from_index LESS 0)
    continue()  # in a folder that is no stage: refused above
  endif()
  math(EXPR checked "${checked} + 1")
  cmake_path(GET file PARENT_PATH folder)
  file(STRINGS "${ENGINE}/${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "#[ \t]*include[ \t]*[\"<]([^\">]+)[\">]")
      continue()
    endif()
    set(include "${CMAKE_MATCH_1}")
    set(target "")
    if(include MATCHES "^zoe/engine/")
      set(target "include/${include}")
    elseif(line MATCHES "#[ \t]*include[ \t]*\"")
      foreach(base IN ITEMS "${folder}" src)
        set(candidate "${base}/${include}")
        cmake_path(NORMAL_PATH candidate)
        if(EXISTS "${ENGINE}/${candidate}")
          set(target "${candidate}")
          break()
        endif()
      endforeach()
    endif()
    if(target STREQUAL "")
      continue()  # not one of engine's files
    endif()
    stage_of("${target}" to)
    list(FIND order "${to}" to_index)
    if(to_index GREATER from_index)
      list(APPEND failures "engine/${file}: #include \"${include}\": stage ${from} includes stage ${to}, which is above it (${order_text})")
    elseif(to_index LESS 0 AND NOT to STREQUAL "")
      list(APPEND failures "engine/${file}: #include \"${include}\": ${to} is no stage of the engine's order (${order_text})")
    endif()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "engine_layering.cmake: no source file found under ${ENGINE}/src or ${ENGINE}/include/zoe/engine")
endif()
if(failures)
  list(LENGTH failures count)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "engine layering: ${count} violation(s) in ${checked} files:\n${text}")
endif()
message(STATUS "engine layering: ${checked} files keep the order ${order_text}")
