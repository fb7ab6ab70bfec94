#include "topotrain/core/error.h"
#include "topotrain/train/job.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  JobOptions options = parse_job_options(argc, argv, moe_job());
  return run_job(argc, argv, moe_job(), options, [](JobContext&) {
    throw ConfigError("moe_train: training is not in this build yet; only --dry-run works");
  });
}
