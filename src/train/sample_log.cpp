#include "topotrain/train/sample_log.h"

#include <stdexcept>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain {

SampleLog::SampleLog(bool enabled, const std::string& run_dir, int rank) {
  if (!enabled) return;
  make_directories(run_dir);
  const std::string path = cat(run_dir, "/samples-rank-", rank, ".txt");
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw std::runtime_error(cat("cannot open ", path, " for log.samples"));
}

SampleLog::~SampleLog() {
  if (file_) std::fclose(file_);
}

void SampleLog::record(const PackedBatch& batch) {
  if (!file_) return;
  auto ids = batch.sample_ids.to(at::kCPU, at::kLong);
  auto cu = batch.cu_seqlens.to(at::kCPU, at::kLong);
  auto positions = batch.positions.to(at::kCPU, at::kLong);
  for (int64_t i = 0; i < ids.size(0); ++i) {
    const int64_t begin = cu[i].item<int64_t>(), end = cu[i + 1].item<int64_t>();
    const int64_t first = positions[begin].item<int64_t>();
    std::fprintf(file_, "%lld %lld %lld\n", static_cast<long long>(ids[i].item<int64_t>()),
                 static_cast<long long>(first), static_cast<long long>(first + end - begin));
  }
  std::fflush(file_);
}

}  // namespace topotrain
