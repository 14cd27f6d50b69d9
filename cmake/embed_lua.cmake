# Embeds a Lua script in the binary as `extern const char* const <namespace>::<name>`.
#
# A script may be written in parts: a line `-- #include <file>` (a path relative to the file
# that holds the line) is replaced by that file, itself expanded the same way, each of its lines
# indented as the marker is. The result is one chunk (one EVALSHA, one SHA); a part can be a
# function's body spliced where a Lua call would cost more (see lua/rate_limit.lua).
#
# As a module:  include(cmake/embed_lua.cmake)
#               sluice_embed_lua(<target> <lua file> <namespace> <name>)
#   adds a .cpp generated at build time (regenerated when any .lua under the file's directory
#   changes) to <target>.
# As a script:  cmake -DINPUT=<lua> -DOUTPUT=<cpp> -DNAMESPACE=<ns> -DNAME=<name> -P embed_lua.cmake
#               cmake -DINPUT=<lua> -DLUA_OUTPUT=<lua> -P embed_lua.cmake   (the script assembled)

if(CMAKE_SCRIPT_MODE_FILE)
  cmake_policy(VERSION 3.25)
endif()

# Sets <out_var> to <file> with its includes expanded.
function(sluice_lua_expand file out_var)
  file(READ "${file}" src)
  get_filename_component(dir "${file}" DIRECTORY)
  set(result "")
  while(TRUE)
    string(REGEX MATCH "\n( *)-- #include ([A-Za-z0-9_./-]+)\n" marker "${src}")
    if(NOT marker)
      break()
    endif()
    set(indent "${CMAKE_MATCH_1}")
    set(part_file "${dir}/${CMAKE_MATCH_2}")
    string(FIND "${src}" "${marker}" at)
    string(LENGTH "${marker}" length)
    string(SUBSTRING "${src}" 0 ${at} before)
    math(EXPR rest "${at} + ${length} - 1")  # the marker's line end stays: the part's
    string(SUBSTRING "${src}" ${rest} -1 src)
    sluice_lua_expand("${part_file}" part)
    string(REGEX REPLACE "\n$" "" part "${part}")
    string(REPLACE "\n" "\n${indent}" part "${indent}${part}")
    string(REGEX REPLACE " +\n" "\n" part "${part}")
    string(APPEND result "${before}\n${part}")
  endwhile()
  string(APPEND result "${src}")
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  sluice_lua_expand("${INPUT}" lua_source)
  if(DEFINED LUA_OUTPUT)
    file(WRITE "${LUA_OUTPUT}" "${lua_source}")
    return()
  endif()
  set(delimiter "sluice_lua")
  string(FIND "${lua_source}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${INPUT} contains the raw string delimiter )${delimiter}\"")
  endif()
  file(WRITE "${OUTPUT}.tmp"
    "// Generated from ${INPUT} by cmake/embed_lua.cmake: do not edit.\n"
    "namespace ${NAMESPACE} {\n"
    "extern const char* const ${NAME};\n"
    "const char* const ${NAME} = R\"${delimiter}(${lua_source})${delimiter}\";\n"
    "}  // namespace ${NAMESPACE}\n")
  file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
  file(REMOVE "${OUTPUT}.tmp")
  return()
endif()

set(SLUICE_EMBED_LUA_SCRIPT "${CMAKE_CURRENT_LIST_FILE}")

function(sluice_embed_lua target lua_file namespace name)
  get_filename_component(input "${lua_file}" ABSOLUTE)
  get_filename_component(dir "${input}" DIRECTORY)
  file(GLOB_RECURSE parts CONFIGURE_DEPENDS "${dir}/*.lua")
  set(output "${CMAKE_CURRENT_BINARY_DIR}/generated/${name}.cpp")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}" "-DINPUT=${input}" "-DOUTPUT=${output}"
            "-DNAMESPACE=${namespace}" "-DNAME=${name}" -P "${SLUICE_EMBED_LUA_SCRIPT}"
    DEPENDS "${input}" ${parts} "${SLUICE_EMBED_LUA_SCRIPT}"
    COMMENT "Embedding ${lua_file}"
    VERBATIM)
  target_sources(${target} PRIVATE "${output}")
endfunction()
