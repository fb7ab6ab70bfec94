// The process states the watchdog and the stop-signal handler rely on, read from /proc
// for real processes: this one, a child stopped with SIGSTOP, a child that exited (a
// zombie until reaped) and one reaped; and which gone peers count as dead (NodeMarks).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "topotrain/core/peer_processes.h"

namespace topotrain {
namespace {

pid_t child_that_sleeps() {
  const pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

TEST(PeerProcesses, ReadsTheStateOfLocalProcesses) {
  EXPECT_EQ(local_process_state(getpid()), ProcessState::running);

  const pid_t stopped = child_that_sleeps();
  ASSERT_GT(stopped, 0);
  kill(stopped, SIGSTOP);
  int status = 0;
  ASSERT_EQ(waitpid(stopped, &status, WUNTRACED), stopped);  // the stop has taken effect
  EXPECT_EQ(local_process_state(stopped), ProcessState::stopped);

  kill(stopped, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(stopped), &info, WEXITED | WNOWAIT), 0);  // dead, not reaped
  EXPECT_EQ(local_process_state(stopped), ProcessState::gone) << "a zombie is not alive";
  ASSERT_EQ(waitpid(stopped, &status, 0), stopped);
  EXPECT_EQ(local_process_state(stopped), ProcessState::gone);
}

TEST(PeerProcesses, NamesRanks) {
  const pid_t stopped = child_that_sleeps();
  ASSERT_GT(stopped, 0);
  kill(stopped, SIGSTOP);
  int status = 0;
  ASSERT_EQ(waitpid(stopped, &status, WUNTRACED), stopped);
  const pid_t dead = child_that_sleeps();
  kill(dead, SIGKILL);
  ASSERT_EQ(waitpid(dead, &status, 0), dead);

  const std::vector<PeerProcess> peers = {{0, "target", "here", dead, 0},
                                          {1, "drafter", "here", stopped, 1},
                                          {2, "drafter", "elsewhere", dead, 0}};
  EXPECT_EQ(process_state(peers[2], "here"), ProcessState::unknown) << "another node's pid means nothing here";
  EXPECT_EQ(describe_ranks({peers[1]}, "here"), "rank 1 (drafter) (process stopped)");
  EXPECT_EQ(describe_ranks({peers[0], peers[2]}, "here"), "ranks 0 (target), 2 (drafter)");
  kill(stopped, SIGKILL);
  waitpid(stopped, &status, 0);
}

// A peer gone after marking itself as leaving (torn down after another's death) is not
// dead; one gone without its mark is; a stopped one and another node's are not named.
TEST(PeerProcesses, OnlyAPeerGoneWithoutItsMarkDied) {
  int status = 0;
  const pid_t killed = child_that_sleeps();
  const pid_t left = child_that_sleeps();
  const pid_t alive = child_that_sleeps();
  ASSERT_GT(killed, 0);
  ASSERT_GT(left, 0);
  ASSERT_GT(alive, 0);
  std::vector<char> bytes(NodeMarks::bytes(4), 0);
  const NodeMarks marks(bytes.data());
  marks.mark_leaving(2);  // `left`, local rank 2, leaves on purpose
  kill(killed, SIGKILL);
  kill(left, SIGKILL);
  ASSERT_EQ(waitpid(killed, &status, 0), killed);
  ASSERT_EQ(waitpid(left, &status, 0), left);

  const std::vector<PeerProcess> peers = {{0, "target", "here", getpid(), 0},
                                          {1, "target", "here", killed, 1},
                                          {2, "target", "here", left, 2},
                                          {3, "drafter", "here", alive, 3},
                                          {4, "drafter", "elsewhere", killed, 0}};
  std::vector<PeerProcess> dead = dead_peers(peers, 0, "here", marks);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].rank, 1);
  EXPECT_FALSE(marks.died(left, 2)) << "a rank that marked itself left on purpose";
  EXPECT_FALSE(marks.died(alive, 3));
  EXPECT_TRUE(NodeMarks().died(left, 2)) << "without shared marks every gone process counts";

  EXPECT_FALSE(marks.ending());
  EXPECT_TRUE(marks.claim_ending());
  EXPECT_FALSE(marks.claim_ending()) << "one rank of the node says why the job ends";
  EXPECT_TRUE(marks.ending());
  kill(alive, SIGKILL);
  waitpid(alive, &status, 0);
}

}  // namespace
}  // namespace topotrain
