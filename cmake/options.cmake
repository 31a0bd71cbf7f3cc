option(KAIWU_BUILD_PYTHON "Build the kaiwu_infer._core Python module" ON)
option(KAIWU_BUILD_TESTS "Build the GoogleTest suite" OFF)
option(KAIWU_CUDA "Build the CUDA backend (needs the CUDA toolkit: nvcc and cuBLAS)" OFF)
option(KAIWU_CUDNN "CUDA backend: run convolutions with cuDNN when it is found" ON)
option(KAIWU_NATIVE "Compile for the building machine's CPU (-march=native)" ON)
set(KAIWU_SANITIZE "" CACHE STRING "Sanitizers for the C++ targets, e.g. address,undefined")

set(KAIWU_ARCH_FLAGS "")
if(KAIWU_NATIVE AND NOT MSVC)
  set(KAIWU_ARCH_FLAGS -march=native)
endif()

function(kaiwu_apply_sanitizers target)
  if(KAIWU_SANITIZE)
    target_compile_options(${target} PUBLIC -fsanitize=${KAIWU_SANITIZE} -fno-omit-frame-pointer
                                            -fno-sanitize-recover=all)
    target_link_options(${target} PUBLIC -fsanitize=${KAIWU_SANITIZE})
  endif()
endfunction()
