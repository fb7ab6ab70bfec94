// How a topology's `cuda:N` becomes a CUDA device of this process.
//
// Topology device numbers are the node's GPUs as this process sees them (CUDA ordinals). A
// launcher may show each process only its own GPU: CUDA_VISIBLE_DEVICES with one entry, as
// SLURM's --gpus-per-task, cluster schedulers and many wrappers set it per task. The process
// then has one device, ordinal 0, and that is the GPU the launcher gave it, whatever N the
// topology names for the rank (a cgroup-confined task is often shown "0" on every rank).
#pragma once

#include <optional>
#include <string>

namespace topotrain {

// CUDA_VISIBLE_DEVICES (`visible`, nullptr when unset) lists exactly one device.
bool one_visible_device(const char* visible);

// The CUDA ordinal of topology device `index` in a process that sees `gpus_present` GPUs
// with CUDA_VISIBLE_DEVICES = `visible`: `index` itself, or 0 when the launcher showed the
// process one GPU; nullopt when the process has no such device.
std::optional<int> cuda_ordinal(int index, int gpus_present, const char* visible);

// " (CUDA_VISIBLE_DEVICES=2,3)" when it is set, for messages about the GPUs a process sees.
std::string visible_devices_note(const char* visible);

}  // namespace topotrain
