// Which checkpoint a training group resumes from (--resume), loaded on every rank of it.
//
// --resume auto does not give up on a run whose newest checkpoint is damaged (HDF5 cannot read
// it, or a tensor's bytes no longer match their checksum: a disk fault, a copy cut short): it
// falls back to the next older complete checkpoint of the run directory, with a warning naming
// the damage, and so on down to the oldest. Each attempt ends in one agreement of the group, so
// damage that one rank alone sees (its node's copy, a read error) moves every rank to the older
// file alike. A checkpoint named by its path is the user's choice: damage there ends the job on
// every rank with its message. The damaged file is left where it was; the resume from an older
// step moves it aside with any other later file (CheckpointWriter::set_aside_after).
#pragma once

#include <optional>
#include <string>

#include "topotrain/core/runtime.h"
#include "topotrain/store/checkpoint_state.h"

namespace topotrain {

struct ResumedCheckpoint {
  std::string path;
  CheckpointState state;
};

// Collective over runtime.role_comm(). nullopt: the group starts fresh. ConfigError for what
// CheckpointReader::resolve_resume and ::load refuse, and when no complete checkpoint of run_dir
// loads.
std::optional<ResumedCheckpoint> load_resume_checkpoint(const Runtime& runtime, const std::string& run_dir,
                                                        const std::string& resume,
                                                        const CheckpointExpectations& expectations);

}  // namespace topotrain
