# cuDNN for the CUDA backend's convolutions (optional: without it, convs run
# as im2col + cuBLAS). Sets KAIWU_CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY.
#
# The cuDNN of the Python environment (the nvidia-cudnn wheel PyTorch uses) is
# preferred over a system one: a process that loads both kaiwu_infer and
# PyTorch then loads one cuDNN, the one PyTorch was built for.
set(KAIWU_CUDNN_FOUND OFF)
if(KAIWU_CUDNN)
  find_package(Python 3.9 COMPONENTS Interpreter QUIET)
  set(_kaiwu_py_cudnn "")
  if(Python_EXECUTABLE)
    execute_process(
      COMMAND ${Python_EXECUTABLE} -c "import nvidia.cudnn as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE _kaiwu_py_cudnn OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      set(_kaiwu_py_cudnn "")
    endif()
  endif()
  if(_kaiwu_py_cudnn AND EXISTS "${_kaiwu_py_cudnn}/include/cudnn.h")
    find_path(CUDNN_INCLUDE_DIR cudnn.h PATHS "${_kaiwu_py_cudnn}/include" NO_DEFAULT_PATH)
    find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 PATHS "${_kaiwu_py_cudnn}/lib" NO_DEFAULT_PATH)
  else()
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT
              PATH_SUFFIXES include x86_64-linux-gnu include/x86_64-linux-gnu)
    find_library(CUDNN_LIBRARY NAMES cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT
                 PATH_SUFFIXES lib lib64 x86_64-linux-gnu)
  endif()
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    set(KAIWU_CUDNN_FOUND ON)
    message(STATUS "cuDNN: ${CUDNN_LIBRARY} (headers ${CUDNN_INCLUDE_DIR})")
  else()
    message(STATUS "cuDNN not found: CUDA convolutions run as im2col + cuBLAS")
  endif()
endif()
