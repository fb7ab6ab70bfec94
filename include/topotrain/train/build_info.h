// What this binary is: topotrain's version (CMake's project version) and the LibTorch,
// CUDA runtime and NCCL it was built against, as `--version` prints it.
#pragma once

#include <string>

namespace topotrain {

// "topotrain 0.17.0\nbuilt with LibTorch 2.11.0, CUDA 12.8, NCCL 2.27.3\n"
// (a CPU build: "..., no CUDA, no NCCL").
std::string build_info();

}  // namespace topotrain
