#include "topotrain/core/error.h"
#include "topotrain/train/job.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  JobOptions options = parse_job_options(argc, argv, dflash_job());
  return run_job(argc, argv, dflash_job(), options, [](JobContext&) {
    throw ConfigError("dflash_train: training is not in this build yet; only --dry-run works");
  });
}
