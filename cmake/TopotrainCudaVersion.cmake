# topotrain_check_cuda_versions(TORCH_PREFIX NVCC_VERSION NVCC)
#
# Kernels compiled by one CUDA major version run on another's runtime only by chance: the
# CUDA LibTorch at TORCH_PREFIX was built with (a pip torch's version.py, or a LibTorch
# archive's build-version) and the toolkit's nvcc must share the major version, or this stops
# the configure naming both and the fixes. Minor versions may differ (CUDA's minor version
# compatibility; the driver must support the newer of the two). Where the prefix records no
# version, a status line says what must hold. tests/cmake/cuda_versions.cmake tests it.
function(topotrain_check_cuda_versions torch_prefix nvcc_version nvcc)
  set(torch_cuda "")
  foreach(file "${torch_prefix}/version.py" "${torch_prefix}/build-version")
    if(EXISTS "${file}" AND torch_cuda STREQUAL "")
      file(READ "${file}" text)
      if(text MATCHES "cuda[^\n']*'([0-9]+)\\.([0-9]+)'")
        set(torch_cuda "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
      elseif(text MATCHES "\\+cu([0-9]+)([0-9])")
        set(torch_cuda "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
      endif()
    endif()
  endforeach()
  if(torch_cuda STREQUAL "")
    message(STATUS "topotrain: the CUDA version LibTorch was built with is not recorded at ${torch_prefix}; "
                   "it must share its major version with nvcc ${nvcc_version}")
    return()
  endif()
  string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda}")
  string(REGEX MATCH "^[0-9]+" nvcc_major "${nvcc_version}")
  if(NOT torch_major STREQUAL nvcc_major)
    message(FATAL_ERROR "topotrain: LibTorch at ${torch_prefix} was built with CUDA ${torch_cuda}, and the CUDA "
                        "toolkit found (${nvcc}) is ${nvcc_version}: kernels of one major version do not run on "
                        "the other's runtime. Install a torch built for CUDA ${nvcc_major} (pip torch 2.11.0 is "
                        "CUDA 13.0), point CUDAToolkit_ROOT at a CUDA ${torch_major} toolkit, or configure with "
                        "-DTOPOTRAIN_CUDA=OFF for CPU ranks only.")
  endif()
  message(STATUS "topotrain: LibTorch's CUDA ${torch_cuda} and nvcc ${nvcc_version} share the major version")
endfunction()
