#include "topotrain/core/process_memory.h"

#include <unistd.h>

#include <cstdio>

namespace topotrain {

std::int64_t resident_set_bytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (!statm) return 0;
  long long size_pages = 0, resident_pages = 0;
  const bool read = std::fscanf(statm, "%lld %lld", &size_pages, &resident_pages) == 2;
  std::fclose(statm);
  const long page = sysconf(_SC_PAGESIZE);
  return read && page > 0 ? static_cast<std::int64_t>(resident_pages) * page : 0;
}

std::int64_t peak_resident_set_bytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (!status) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, status))
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  std::fclose(status);
  return static_cast<std::int64_t>(kib) * 1024;
}

bool reset_peak_resident_set() {
  std::FILE* clear_refs = std::fopen("/proc/self/clear_refs", "w");
  if (!clear_refs) return false;
  const bool written = std::fputs("5", clear_refs) >= 0;
  return std::fclose(clear_refs) == 0 && written;
}

std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

}  // namespace topotrain
