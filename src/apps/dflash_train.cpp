#include "topotrain/train/job.h"
#include "topotrain/train/job_exit.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  JobOptions options = parse_job_options(argc, argv, dflash_job());
  return run_job(argc, argv, dflash_job(), options, [](JobContext&) {
    // Every rank reaches this line, so the agreed exit path applies: one message, no abort.
    throw JobExit(2, "the DFlash pipeline (targets streaming to drafters) is not in this build yet; "
                     "--dry-run checks a topology, and the drafter model is in src/model/dflash_*");
  });
}
