// log.samples = true: every rank appends each trained piece of a sample ("sample begin
// end", token range) to <run_dir>/samples-rank-<R>.txt. This is how tests (and users who
// doubt a resume) check that no sample was skipped or trained twice. In dflash_train a
// target records what it sent, a drafter what it trained on.
#pragma once

#include <cstdio>
#include <string>

#include "topotrain/batch/packed_batch.h"

namespace topotrain {

class SampleLog {
 public:
  SampleLog(bool enabled, const std::string& run_dir, int rank);  // log.samples
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  void record(const PackedBatch& batch);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace topotrain
