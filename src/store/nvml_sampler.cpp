#include "topotrain/store/nvml_sampler.h"

#include <dlfcn.h>

#include <memory>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"

namespace topotrain {

// The few NVML entry points used, with their C ABI (nvml.h is not needed to build).
struct NvmlSampler::Api {
  using Device = void*;
  struct Utilization {
    unsigned int gpu;
    unsigned int memory;
  };
  struct Memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
  };
  static constexpr int kClockSm = 1;  // NVML_CLOCK_SM

  void* library = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_index)(unsigned int, Device*) = nullptr;
  int (*by_pci_bus_id)(const char*, Device*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*power)(Device, unsigned int*) = nullptr;  // milliwatts
  int (*clock)(Device, int, unsigned int*) = nullptr;
  Device device = nullptr;

  ~Api() {
    if (device && shutdown) shutdown();
    if (library) dlclose(library);
  }

  template <typename Fn>
  bool bind(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(library, name));
    return fn != nullptr;
  }

  // "" when ready, else why not.
  std::string open(const std::string& path, int cuda_device) {
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) return path + " not found";
    if (!bind(init, "nvmlInit_v2") || !bind(shutdown, "nvmlShutdown") ||
        !bind(by_index, "nvmlDeviceGetHandleByIndex_v2") || !bind(by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
        !bind(utilization, "nvmlDeviceGetUtilizationRates") || !bind(memory, "nvmlDeviceGetMemoryInfo") ||
        !bind(power, "nvmlDeviceGetPowerUsage") || !bind(clock, "nvmlDeviceGetClockInfo"))
      return path + " lacks an NVML function";
    if (init() != 0) return "nvmlInit failed";
    Device handle = nullptr;
    int status = -1;
#ifdef TOPOTRAIN_CUDA
    char bus_id[64] = {0};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, cuda_device) == cudaSuccess)
      status = by_pci_bus_id(bus_id, &handle);
#endif
    if (status != 0) status = by_index(static_cast<unsigned int>(cuda_device), &handle);
    if (status != 0) {
      shutdown();
      return cat("NVML has no device for CUDA device ", cuda_device);
    }
    device = handle;
    return "";
  }

  NvmlSample sample() const {
    NvmlSample s;
    Utilization u{};
    if (utilization(device, &u) == 0) {
      s.gpu_util = u.gpu;
      s.mem_util = u.memory;
    }
    Memory m{};
    if (memory(device, &m) == 0) s.mem_used_bytes = static_cast<double>(m.used);
    unsigned int milliwatts = 0;
    if (power(device, &milliwatts) == 0) s.power_watts = milliwatts * 1e-3;
    unsigned int mhz = 0;
    if (clock(device, kClockSm, &mhz) == 0) s.sm_clock_mhz = mhz;
    return s;
  }
};

NvmlSampler::NvmlSampler(int cuda_device, double hz, Clock::time_point epoch, const std::string& library)
    : api_(std::make_unique<Api>()), period_(1.0 / (hz > 0 ? hz : 10.0)), epoch_(epoch) {
  const std::string why_not = api_->open(library, cuda_device);
  if (!why_not.empty()) {
    log_info("GPU sampling off: " + why_not);
    api_.reset();
    return;
  }
  active_ = true;
  thread_ = std::thread([this] { run(); });
}

NvmlSampler::~NvmlSampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<NvmlSample> NvmlSampler::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<NvmlSample> out;
  out.swap(samples_);
  return out;
}

void NvmlSampler::run() {
  auto next = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    NvmlSample sample = api_->sample();
    sample.time = std::chrono::duration<double>(Clock::now() - epoch_).count();
    lock.lock();
    samples_.push_back(sample);
    // A fixed rate, not a fixed sleep: sampling time does not stretch the period.
    next += std::chrono::duration_cast<Clock::duration>(period_);
    wake_.wait_until(lock, next, [this] { return stop_; });
  }
}

}  // namespace topotrain
