// The process states the watchdog and the stop-signal handler rely on, read from /proc
// for real processes: this one, a child stopped with SIGSTOP, a child that exited (a
// zombie until reaped) and one reaped.
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

TEST(PeerProcesses, NamesRanksAndFindsTheFirstSurvivor) {
  const pid_t stopped = child_that_sleeps();
  ASSERT_GT(stopped, 0);
  kill(stopped, SIGSTOP);
  int status = 0;
  ASSERT_EQ(waitpid(stopped, &status, WUNTRACED), stopped);
  const pid_t dead = child_that_sleeps();
  kill(dead, SIGKILL);
  ASSERT_EQ(waitpid(dead, &status, 0), dead);

  const std::vector<PeerProcess> peers = {{0, "target", "here", dead},
                                          {1, "drafter", "here", stopped},
                                          {2, "drafter", "elsewhere", dead}};
  EXPECT_EQ(process_state(peers[2], "here"), ProcessState::unknown) << "another node's pid means nothing here";
  EXPECT_EQ(describe_ranks({peers[1]}, "here"), "rank 1 (drafter) (process stopped)");
  EXPECT_EQ(describe_ranks({peers[0], peers[2]}, "here"), "ranks 0 (target), 2 (drafter)");
  EXPECT_EQ(first_survivor(peers, "here"), 1);
  EXPECT_EQ(first_survivor({peers[0]}, "here"), -1);
  kill(stopped, SIGKILL);
  waitpid(stopped, &status, 0);
}

}  // namespace
}  // namespace topotrain
