find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)

# The ONNX schema is the one shipped inside the installed `onnx` Python package.
# Its package is renamed so that our generated classes never collide with the
# onnx module's own copy when both live in one Python process.
if(NOT KAIWU_ONNX_PROTO)
  find_package(Python 3.9 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND ${Python_EXECUTABLE} -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'onnx.proto'))"
    OUTPUT_VARIABLE KAIWU_ONNX_PROTO OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _onnx_rc)
  if(NOT _onnx_rc EQUAL 0 OR NOT EXISTS "${KAIWU_ONNX_PROTO}")
    message(FATAL_ERROR "Could not find onnx.proto: install the `onnx` Python package "
                        "or pass -DKAIWU_ONNX_PROTO=/path/to/onnx.proto")
  endif()
endif()
message(STATUS "kaiwu_infer: ONNX schema from ${KAIWU_ONNX_PROTO}")

set(KAIWU_PROTO_DIR ${CMAKE_CURRENT_BINARY_DIR}/proto)
file(MAKE_DIRECTORY ${KAIWU_PROTO_DIR})
file(READ ${KAIWU_ONNX_PROTO} _schema)
string(REGEX REPLACE "\npackage onnx;" "\npackage kaiwu_onnx;" _schema "${_schema}")
file(WRITE ${KAIWU_PROTO_DIR}/onnx.proto.tmp "${_schema}")
configure_file(${KAIWU_PROTO_DIR}/onnx.proto.tmp ${KAIWU_PROTO_DIR}/onnx.proto COPYONLY)

set(KAIWU_PROTO_SRCS ${KAIWU_PROTO_DIR}/onnx.pb.cc ${KAIWU_PROTO_DIR}/onnx.pb.h)
add_custom_command(
  OUTPUT ${KAIWU_PROTO_SRCS}
  COMMAND protobuf::protoc --cpp_out=${KAIWU_PROTO_DIR} -I${KAIWU_PROTO_DIR} ${KAIWU_PROTO_DIR}/onnx.proto
  DEPENDS ${KAIWU_PROTO_DIR}/onnx.proto protobuf::protoc
  COMMENT "Generating C++ code for onnx.proto")
