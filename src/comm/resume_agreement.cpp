#include "topotrain/comm/resume_agreement.h"

#include "mpi_types.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain::comm {

namespace {

constexpr const char* kShareFix =
    "checkpoint.dir must be a directory every node shares (a network file system), or copy the run "
    "directory to the same path on every node before resuming";

}  // namespace

std::string resume_disagreement(const std::optional<std::string>& lead, const std::optional<std::string>& mine,
                                bool lead_readable) {
  if (lead && !lead_readable)
    return cat("cannot read ", *lead, ", the checkpoint the group's first rank resumes from; ", kShareFix);
  if (lead && mine && *lead != *mine)
    return cat("finds ", *mine, " where the group's first rank resumes from ", *lead, "; ", kShareFix);
  if (!lead && mine)
    return cat("finds ", *mine, " but the group's first rank finds no checkpoint and starts fresh; ", kShareFix);
  return "";
}

std::optional<std::string> agree_resume_path(const std::optional<std::string>& mine, MPI_Comm group,
                                             const std::string& who) {
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  // [found, length] then the path's bytes.
  long long header[2] = {mine ? 1 : 0, mine ? static_cast<long long>(mine->size()) : 0};
  detail::mpi_check(MPI_Bcast(header, 2, MPI_LONG_LONG, 0, group), "MPI_Bcast (resume path)");
  std::string text = rank == 0 && mine ? *mine : std::string(static_cast<std::size_t>(header[1]), '\0');
  if (header[1] > 0)
    detail::mpi_check(MPI_Bcast(text.data(), static_cast<int>(header[1]), MPI_CHAR, 0, group), "MPI_Bcast (resume path)");
  const std::optional<std::string> lead = header[0] ? std::optional<std::string>(text) : std::nullopt;
  if (rank != 0) {
    const std::string wrong = resume_disagreement(lead, mine, !lead || is_regular_file(*lead));
    if (!wrong.empty()) throw ConfigError(cat(who, ": --resume ", wrong));
  }
  return lead;
}

}  // namespace topotrain::comm
