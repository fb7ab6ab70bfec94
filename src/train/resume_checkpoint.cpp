#include "topotrain/train/resume_checkpoint.h"

#include "topotrain/comm/resume_agreement.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/log.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/run_dir_files.h"

namespace topotrain {

std::optional<ResumedCheckpoint> load_resume_checkpoint(const Runtime& runtime, const std::string& run_dir,
                                                        const std::string& resume,
                                                        const CheckpointExpectations& expectations) {
  const MPI_Comm group = runtime.role_comm();
  const std::string who = cat("rank ", runtime.rank(), " on ", runtime.host());
  auto path = comm::agree_resume_path(CheckpointReader::resolve_resume(run_dir, resume), group, who);
  while (path) {
    std::optional<CheckpointState> state;
    std::string damage;
    try {
      state = CheckpointReader::load(*path, expectations);
    } catch (const CheckpointDamaged& e) {
      damage = cat(who, ": ", e.what());
    }
    damage = runtime.first_error(damage, group);
    if (damage.empty()) return ResumedCheckpoint{*path, std::move(*state)};
    if (resume != "auto") throw CheckpointDamaged(damage);
    // --resume auto's candidates are run_dir's step-*.h5 files, so the name has a step.
    const auto older = CheckpointReader::newest_before(run_dir, checkpoint_step(file_name(*path)).value());
    if (!older)
      throw CheckpointDamaged(cat(damage, "\n--resume auto: ", run_dir, " holds no older complete checkpoint to fall "
                                  "back to; restore the run directory from a copy, or start afresh under another "
                                  "checkpoint.run, or here with --resume fresh (which moves this run's files aside)"));
    if (runtime.role_rank() == 0)
      log_warn(cat(damage, "\n--resume auto falls back to ", *older, ", the newest complete checkpoint before it"));
    path = comm::agree_resume_path(older, group, who);
  }
  return std::nullopt;
}

}  // namespace topotrain
