// A job whose rank 2 fails while every other rank waits in a collective: the failure path
// must take all ranks down with rank 2's message (tests/core/CMakeLists.txt).
#include <mpi.h>

#include <stdexcept>

#include "topotrain/core/topology.h"
#include "topotrain/train/job.h"
#include "topotrain/train/moe_trainer.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  JobOptions options = parse_job_options(argc, argv, moe_job());
  return run_job(argc, argv, moe_job(), options, [](const RunFile&, const RunConfig&) {}, [](JobContext& context) {
    if (context.runtime.rank() == 2) throw std::runtime_error("injected failure on rank 2");
    MPI_Barrier(MPI_COMM_WORLD);
  });
}
