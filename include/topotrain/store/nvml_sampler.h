// Samples one GPU's utilisation, memory and power through NVML on a background thread
// at a fixed rate. NVML is loaded with dlopen("libnvidia-ml.so.1") when the sampler
// starts, so CPU builds and machines without the driver run unchanged: the sampler then
// logs one line and stays inactive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace topotrain {

struct NvmlSample {
  double time = 0;  // seconds since the epoch given to the sampler
  double gpu_util = 0;         // % of time a kernel ran
  double mem_util = 0;         // % of time device memory was read or written
  double mem_used_bytes = 0;
  double power_watts = 0;
  double sm_clock_mhz = 0;
};

class NvmlSampler {
 public:
  using Clock = std::chrono::steady_clock;

  // `cuda_device`: the CUDA device index of this rank (mapped to NVML through its PCI bus
  // id in CUDA builds, so CUDA_VISIBLE_DEVICES is honoured). `library` is for tests.
  NvmlSampler(int cuda_device, double hz, Clock::time_point epoch, const std::string& library = "libnvidia-ml.so.1");
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  bool active() const { return active_; }
  // Samples taken since the last call, oldest first.
  std::vector<NvmlSample> drain();

 private:
  struct Api;
  void run();

  std::unique_ptr<Api> api_;
  bool active_ = false;
  std::chrono::duration<double> period_;
  Clock::time_point epoch_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<NvmlSample> samples_;
  std::thread thread_;
};

}  // namespace topotrain
