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

std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

}  // namespace topotrain
