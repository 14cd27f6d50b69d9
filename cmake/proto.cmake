# Our own .proto files (proto/: the subset of Envoy's rate-limit API Sluice speaks) into C++
# with protoc and grpc_cpp_plugin, as the library sluice_proto. Its headers reach the code
# that includes them as SYSTEM headers, so that warnings in generated code never fail
# -Werror; the generated sources are compiled with -Wno-error for the same reason.
pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++)
pkg_check_modules(PROTOBUF REQUIRED IMPORTED_TARGET protobuf)
find_program(SLUICE_PROTOC protoc REQUIRED)
find_program(SLUICE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# sluice_proto(<target> DIR <proto root> PROTOS <path under root>... GRPC <path under root>...)
function(sluice_proto target)
  cmake_parse_arguments(arg "" "DIR" "PROTOS;GRPC" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/proto)
  set(sources)
  foreach(p IN LISTS arg_PROTOS)
    string(REGEX REPLACE "\\.proto$" "" stem ${p})
    set(generated ${out}/${stem}.pb.cc ${out}/${stem}.pb.h)
    set(plugin_args)
    if(p IN_LIST arg_GRPC)
      list(APPEND generated ${out}/${stem}.grpc.pb.cc ${out}/${stem}.grpc.pb.h)
      set(plugin_args --grpc_out=${out} --plugin=protoc-gen-grpc=${SLUICE_GRPC_CPP_PLUGIN})
    endif()
    add_custom_command(
      OUTPUT ${generated}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
      COMMAND ${SLUICE_PROTOC} -I ${arg_DIR} --cpp_out=${out} ${plugin_args} ${arg_DIR}/${p}
      DEPENDS ${arg_DIR}/${p}
      COMMENT "protoc ${p}"
      VERBATIM)
    list(APPEND sources ${generated})
  endforeach()
  add_library(${target} STATIC ${sources})
  # protoc gives every generated file the same file-local names: never one translation unit.
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
  target_compile_options(${target} PRIVATE -Wno-error)
  target_include_directories(${target} SYSTEM PUBLIC ${out})
  target_link_libraries(${target} PUBLIC PkgConfig::GRPCPP PkgConfig::PROTOBUF)
endfunction()
