#include "topotrain/train/dflash_trainer.h"
#include "topotrain/train/job.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  JobOptions options = parse_job_options(argc, argv, dflash_job());
  return run_job(argc, argv, dflash_job(), options, check_dflash_inputs, train_dflash);
}
