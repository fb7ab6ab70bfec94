// Which checkpoint a group resumes from: its lead's choice, for every rank.
//
// `--resume auto` looks for the newest checkpoint in checkpoint.dir, a path every node must
// share: ranks on a node that sees another directory (or none) would otherwise resume from
// another step, or start fresh beside ranks that resumed, and train a silently wrong run.
// So the lead's answer travels to every rank, and a rank that found another one, or cannot
// read the lead's file, ends the job with a message naming its rank, host and the fix.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>

namespace topotrain::comm {

// What is wrong when this rank found `mine` and the lead `lead` (nullopt: start fresh);
// `lead_readable` says whether the lead's file can be read here. Empty when they agree.
std::string resume_disagreement(const std::optional<std::string>& lead, const std::optional<std::string>& mine,
                                bool lead_readable);

// Collective over `group`, whose rank 0 is the lead: the lead's `mine` on every rank.
// Throws ConfigError with resume_disagreement's message, prefixed by `who` ("rank 3 on
// node-b"), on a rank that disagrees.
std::optional<std::string> agree_resume_path(const std::optional<std::string>& mine, MPI_Comm group,
                                             const std::string& who);

}  // namespace topotrain::comm
