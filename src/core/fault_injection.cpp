#include "topotrain/core/fault_injection.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

namespace topotrain {

bool fault_injected(const char* variable, int rank, std::int64_t step) {
  const char* spec = std::getenv(variable);
  if (!spec) return false;
  long long want_rank = -1, want_step = -1;
  if (std::sscanf(spec, "%lld:%lld", &want_rank, &want_step) != 2) return false;
  if (want_rank != rank || want_step != step) return false;
  static std::mutex mutex;
  static std::set<std::string> fired;
  std::lock_guard<std::mutex> lock(mutex);
  return fired.insert(variable).second;
}

void fault_inject_stall(int rank, std::int64_t step) {
  if (fault_injected("TOPOTRAIN_FAULT_STALL", rank, step)) std::raise(SIGSTOP);
}

void fault_inject_disk_full(std::int64_t step, const std::string& what) {
  const char* spec = std::getenv("TOPOTRAIN_FAULT_DISK_FULL");
  if (!spec || std::atoll(spec) != step) return;
  errno = ENOSPC;
  throw std::runtime_error(what);
}

void fault_inject_delay(const char* variable) {
  const char* seconds = std::getenv(variable);
  if (seconds) std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(seconds)));
}

}  // namespace topotrain
