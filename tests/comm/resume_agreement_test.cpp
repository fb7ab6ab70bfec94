#include <gtest/gtest.h>
#include <mpi.h>

#include <fstream>

#include "topotrain/comm/resume_agreement.h"
#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

using namespace topotrain;
using namespace topotrain::comm;

// Where ranks see the same checkpoint directory, everyone gets the lead's choice.
TEST(ResumeAgreement, EveryRankGetsTheLeadsCheckpoint) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string dir = rank == 0 ? make_temp_directory("topotrain-resume-") : std::string();
  int length = static_cast<int>(dir.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(static_cast<std::size_t>(length));
  MPI_Bcast(dir.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string file = join_path(dir, "step-00000007.h5");
  if (rank == 0) std::ofstream(file) << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(agree_resume_path(file, MPI_COMM_WORLD, "rank"), file);
  EXPECT_EQ(agree_resume_path(std::nullopt, MPI_COMM_WORLD, "rank"), std::nullopt);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) remove_tree(dir);
}

// A rank whose node does not share the lead's checkpoint.dir is told so, whichever way it
// differs; the agreeing cases say nothing.
TEST(ResumeAgreement, DisagreementsNameWhatEachRankSaw) {
  EXPECT_EQ(resume_disagreement(std::string("/ckpt/step-9.h5"), std::string("/ckpt/step-9.h5"), true), "");
  EXPECT_EQ(resume_disagreement(std::nullopt, std::nullopt, true), "");
  const std::string unreadable = resume_disagreement(std::string("/ckpt/step-9.h5"), std::nullopt, false);
  EXPECT_NE(unreadable.find("cannot read /ckpt/step-9.h5"), std::string::npos) << unreadable;
  EXPECT_NE(unreadable.find("every node shares"), std::string::npos) << unreadable;
  const std::string other = resume_disagreement(std::string("/ckpt/step-9.h5"), std::string("/ckpt/step-5.h5"), true);
  EXPECT_NE(other.find("finds /ckpt/step-5.h5 where the group's first rank resumes from /ckpt/step-9.h5"),
            std::string::npos)
      << other;
  const std::string fresh = resume_disagreement(std::nullopt, std::string("/ckpt/step-5.h5"), true);
  EXPECT_NE(fresh.find("finds no checkpoint and starts fresh"), std::string::npos) << fresh;
}
