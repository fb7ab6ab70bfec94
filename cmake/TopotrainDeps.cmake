# Third-party dependencies and the TOPOTRAIN_CUDA switch.
#
# TOPOTRAIN_CUDA is on exactly when the LibTorch that was found was built with CUDA
# (pip torch on a GPU machine); Debian's libtorch-dev is CPU only. NCCL and CUDA code
# compile only when it is on.

find_package(Torch REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Threads REQUIRED)
find_package(CLI11 REQUIRED)

if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(TOPOTRAIN_CUDA ON)
else()
  set(TOPOTRAIN_CUDA OFF)
endif()
message(STATUS "topotrain: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}, TOPOTRAIN_CUDA=${TOPOTRAIN_CUDA}")

if(TOPOTRAIN_CUDA)
  find_package(CUDAToolkit REQUIRED)
  # Our own kernels (src/model/*.cu): the default covers the A100, the RTX 30/40 and L40
  # generations and Hopper, the GPUs that compute in bf16 natively; others (sm_75 compiles
  # too) with -DCMAKE_CUDA_ARCHITECTURES, which a launch error on such a GPU names.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 86 89 90)
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include REQUIRED)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu REQUIRED)
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
if(TOPOTRAIN_CUDA)
  target_compile_definitions(topotrain_flags INTERFACE TOPOTRAIN_CUDA=1)
endif()

# Everything a LibTorch translation unit of ours needs; the precompiled header is built
# with exactly these settings so that every consumer can reuse it.
add_library(topotrain_torch INTERFACE)
target_link_libraries(topotrain_torch INTERFACE topotrain_flags ${TORCH_LIBRARIES} MPI::MPI_C Threads::Threads)
target_include_directories(topotrain_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
if(TOPOTRAIN_CUDA)
  target_link_libraries(topotrain_torch INTERFACE topotrain_nccl)
endif()

add_library(topotrain_hdf5 INTERFACE)
target_include_directories(topotrain_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(topotrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(topotrain_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})
