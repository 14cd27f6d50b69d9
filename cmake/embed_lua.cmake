# Embeds a Lua script in the binary as `extern const char* const <namespace>::<name>`.
#
# As a module:  include(cmake/embed_lua.cmake)
#               sluice_embed_lua(<target> <lua file> <namespace> <name>)
#   adds a .cpp generated at build time (regenerated when the .lua changes) to <target>.
# As a script:  cmake -DINPUT=<lua> -DOUTPUT=<cpp> -DNAMESPACE=<ns> -DNAME=<name> -P embed_lua.cmake

if(CMAKE_SCRIPT_MODE_FILE)
  file(READ "${INPUT}" lua_source)
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
  set(output "${CMAKE_CURRENT_BINARY_DIR}/generated/${name}.cpp")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}" "-DINPUT=${input}" "-DOUTPUT=${output}"
            "-DNAMESPACE=${namespace}" "-DNAME=${name}" -P "${SLUICE_EMBED_LUA_SCRIPT}"
    DEPENDS "${input}" "${SLUICE_EMBED_LUA_SCRIPT}"
    COMMENT "Embedding ${lua_file}"
    VERBATIM)
  target_sources(${target} PRIVATE "${output}")
endfunction()
