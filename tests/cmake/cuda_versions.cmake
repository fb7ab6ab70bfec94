# cmake -DWORK=dir -DFILE=version.py|build-version -DTEXT=... -DNVCC=13.0.88 -P tests/cmake/cuda_versions.cmake
# WORK made a LibTorch folder holding only FILE with TEXT, checked against an nvcc of version
# NVCC by cmake/TopotrainCudaVersion.cmake (tests/CMakeLists.txt: which must pass, which must
# stop).
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/TopotrainCudaVersion.cmake)
file(REMOVE_RECURSE "${WORK}")
file(WRITE "${WORK}/${FILE}" "${TEXT}\n")
topotrain_check_cuda_versions("${WORK}" "${NVCC}" /usr/local/cuda/bin/nvcc)
