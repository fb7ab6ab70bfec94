#include "topotrain/train/job.h"
#include "topotrain/train/moe_trainer.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  JobOptions options = parse_job_options(argc, argv, moe_job());
  return run_job(argc, argv, moe_job(), options, check_moe_inputs, train_moe);
}
