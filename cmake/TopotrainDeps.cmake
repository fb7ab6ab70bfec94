# Third-party dependencies and the TOPOTRAIN_CUDA switch.
#
# TOPOTRAIN_CUDA (AUTO, ON or OFF) compiles our CUDA code: the .cu kernels, NCCL, the CUDA-IPC
# link and every `#if TOPOTRAIN_CUDA` block. AUTO turns it on exactly when the LibTorch found
# was built with CUDA and a CUDA toolkit (nvcc) was found beside it; ON makes either missing
# a configure error (ci/test.sh asks for ON wherever nvcc exists, so CI compiles what GPUs
# run); OFF builds for CPU ranks only, also against a CUDA LibTorch.
set(TOPOTRAIN_CUDA AUTO CACHE STRING "Compile the CUDA paths: AUTO, ON or OFF")
set_property(CACHE TOPOTRAIN_CUDA PROPERTY STRINGS AUTO ON OFF)

# torch's CMake config discards CMAKE_CUDA_ARCHITECTURES and compiles CUDA for
# TORCH_CUDA_ARCH_LIST instead; unset, it detects the GPU, and with none falls back to a list
# that includes sm_50, which CUDA 13's nvcc rejects. So our list is handed over in its form:
# -DCMAKE_CUDA_ARCHITECTURES (taken over, and removed, which torch's config would warn of),
# else the GPUs nvidia-smi sees here (a GPU machine compiles for its own GPU alone), else the
# A100, RTX 30/40 and L40 generations and Hopper, the GPUs that compute in bf16 natively.
set(TOPOTRAIN_CUDA_ARCHITECTURES "" CACHE STRING
    "GPU architectures our kernels are compiled for (empty: this machine's GPUs, else 80;86;89;90)")
if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(TOPOTRAIN_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CACHE STRING "" FORCE)
  unset(CMAKE_CUDA_ARCHITECTURES)
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
endif()
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(_tt_archs ${TOPOTRAIN_CUDA_ARCHITECTURES})
  if(NOT _tt_archs)
    execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                    RESULT_VARIABLE _tt_smi OUTPUT_VARIABLE _tt_caps ERROR_QUIET)
    if(_tt_smi EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _tt_caps "${_tt_caps}")
      string(REPLACE "." "" _tt_archs "${_tt_caps}")
      list(REMOVE_DUPLICATES _tt_archs)
    endif()
    if(NOT _tt_archs)
      set(_tt_archs 80 86 89 90)
    endif()
  endif()
  set(TORCH_CUDA_ARCH_LIST "")
  foreach(arch ${_tt_archs})
    string(REGEX REPLACE "^([0-9]+)([0-9][a-z]?)$" "\\1.\\2" arch "${arch}")
    list(APPEND TORCH_CUDA_ARCH_LIST "${arch}")
  endforeach()
endif()

include(TopotrainCudaVersion)
find_package(Torch REQUIRED)
# The floor: the version the GPU machines run and CI tests; torch_compat.h holds no branch
# for an older one.
if(Torch_VERSION VERSION_LESS 2.11)
  message(FATAL_ERROR "topotrain: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} is older than 2.11, the "
                      "oldest topotrain builds against: run ci/setup.sh (it installs torch 2.11.0 into the "
                      "project's venv), or point TOPOTRAIN_LIBTORCH at a LibTorch 2.11 or newer")
endif()
find_package(MPI REQUIRED COMPONENTS C)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Threads REQUIRED)
find_package(CLI11 REQUIRED)

if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(_tt_torch_cuda ON)
else()
  set(_tt_torch_cuda OFF)
endif()
# torch's config enables the CUDA language itself when it finds a toolkit.
if(_tt_torch_cuda AND CMAKE_CUDA_COMPILER)
  set(_tt_cuda_possible ON)
else()
  set(_tt_cuda_possible OFF)
endif()
if(TOPOTRAIN_CUDA STREQUAL "AUTO")
  set(TOPOTRAIN_CUDA_ENABLED ${_tt_cuda_possible})
elseif(TOPOTRAIN_CUDA)
  if(NOT _tt_cuda_possible)
    message(FATAL_ERROR "topotrain: TOPOTRAIN_CUDA=ON needs a LibTorch built with CUDA (found "
                        "${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}, CUDA: ${_tt_torch_cuda}) and a CUDA toolkit "
                        "whose nvcc torch's config finds (found: '${CMAKE_CUDA_COMPILER}'). Install both, set "
                        "CUDAToolkit_ROOT, or configure with -DTOPOTRAIN_CUDA=AUTO or OFF.")
  endif()
  set(TOPOTRAIN_CUDA_ENABLED ON)
else()
  set(TOPOTRAIN_CUDA_ENABLED OFF)
endif()
message(STATUS "topotrain: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} (CUDA: ${_tt_torch_cuda}), "
               "CUDA toolkit: ${CMAKE_CUDA_COMPILER_VERSION} for ${TORCH_CUDA_ARCH_LIST}, TOPOTRAIN_CUDA=${TOPOTRAIN_CUDA} -> "
               "${TOPOTRAIN_CUDA_ENABLED}")

if(TOPOTRAIN_CUDA_ENABLED)
  find_package(CUDAToolkit REQUIRED)
  topotrain_check_cuda_versions("${TORCH_INSTALL_PREFIX}" "${CMAKE_CUDA_COMPILER_VERSION}" "${CMAKE_CUDA_COMPILER}")
  # NCCL: the toolkit's or the system's, else the one a pip torch bundles (a CUDA toolkit alone
  # has none).
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include
            ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include REQUIRED)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/lib
               REQUIRED)
  # cuBLAS: the very library LibTorch loads (pip torch bundles its own under nvidia/), so that
  # one copy serves torch's handle and our calls; a toolkit build of LibTorch uses the toolkit's.
  find_library(TOPOTRAIN_CUBLAS NAMES cublas libcublas.so.13 libcublas.so.12
               HINTS ${TORCH_INSTALL_PREFIX}/../nvidia/cu13/lib ${TORCH_INSTALL_PREFIX}/../nvidia/cublas/lib
               NO_DEFAULT_PATH)
  if(NOT TOPOTRAIN_CUBLAS)
    set(TOPOTRAIN_CUBLAS CUDA::cublas)
  endif()
  message(STATUS "topotrain: cuBLAS ${TOPOTRAIN_CUBLAS}")
  add_library(topotrain_nccl INTERFACE)
  target_include_directories(topotrain_nccl INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(topotrain_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
endif()

# Flags shared by all of our targets. Third-party headers come in as SYSTEM includes so
# that -Wall -Wextra judge our code only.
add_library(topotrain_flags INTERFACE)
target_compile_options(topotrain_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
                                                 $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
target_include_directories(topotrain_flags INTERFACE ${PROJECT_SOURCE_DIR}/include)
# We use MPI's C API only; its deprecated C++ bindings would need libmpi_cxx.
target_compile_definitions(topotrain_flags INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
if(TOPOTRAIN_CUDA_ENABLED)
  target_compile_definitions(topotrain_flags INTERFACE TOPOTRAIN_CUDA=1)
endif()

# Everything a LibTorch translation unit of ours needs; the precompiled header is built
# with exactly these settings so that every consumer can reuse it.
add_library(topotrain_torch INTERFACE)
target_link_libraries(topotrain_torch INTERFACE topotrain_flags ${TORCH_LIBRARIES} MPI::MPI_C Threads::Threads)
target_include_directories(topotrain_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
if(TOPOTRAIN_CUDA_ENABLED)
  target_link_libraries(topotrain_torch INTERFACE topotrain_nccl)
endif()

add_library(topotrain_hdf5 INTERFACE)
target_include_directories(topotrain_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(topotrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(topotrain_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})
