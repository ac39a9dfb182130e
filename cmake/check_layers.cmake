# Checks that every quoted #include under SRC points down the layers:
#   cmake -DSRC=<src dir> -DLAYERS=<file> -P check_layers.cmake
# LAYERS holds one line per layer, "name: seen seen ...", written by
# src/CMakeLists.txt. In src/<layer>/ an include must be "<folder>/<file>"
# with <folder> the layer itself or one it sees; anything else (another
# layer, "..", a path without its folder) is an error naming file and line.
# The compiler already refuses upward includes in the .cpp files of a layer
# (each compiles against a view of what it may see); this also covers
# headers that only higher layers compile, and paths that climb with "..".
cmake_minimum_required(VERSION 3.22)
file(STRINGS ${LAYERS} layer_lines)
set(failures "")
foreach(line IN LISTS layer_lines)
  string(REGEX MATCH "^([a-z_]+):(.*)$" _ "${line}")
  set(layer ${CMAKE_MATCH_1})
  string(STRIP "${CMAKE_MATCH_2}" seen)
  separate_arguments(seen UNIX_COMMAND "${seen}")
  list(APPEND seen ${layer})
  file(GLOB files ${SRC}/${layer}/*.h ${SRC}/${layer}/*.cpp ${SRC}/${layer}/*.inc)
  foreach(f IN LISTS files)
    file(STRINGS ${f} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(inc IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" path "${inc}")
      set(folder "")
      if(NOT path MATCHES "\\.\\." AND path MATCHES "^([a-z_0-9]+)/[A-Za-z_0-9.]+$")
        set(folder ${CMAKE_MATCH_1})
      endif()
      if(folder STREQUAL "")
        list(APPEND failures "${f}: #include \"${path}\": not of the form \"<layer>/<file>\"")
      elseif(NOT folder IN_LIST seen)
        list(JOIN seen " " shown)
        list(APPEND failures "${f}: #include \"${path}\": ${layer} cannot see ${folder} (it sees: ${shown})")
      endif()
    endforeach()
  endforeach()
endforeach()
if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "includes that point up the layers (docs/ARCHITECTURE.md):\n  ${text}")
endif()
