// FileLock: held while its object lives, refused to anyone else naming the holder, released
// by the kernel when the holding process dies (its name left in the file), emptied when
// released in order.
#include "topotrain/core/file_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "topotrain/core/files.h"

namespace topotrain {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

LockHolder me(const std::string& what) {
  return {"test-host", static_cast<std::int64_t>(::getpid()), 1700000000, what};
}

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_directory("file-lock-"); }
  void TearDown() override { remove_tree(dir_); }
  std::string path() const { return dir_ + "/.lock"; }
  std::string dir_;
};

TEST(LockHolder, TextRoundTrips) {
  const LockHolder holder{"node-a", 4242, 1700000000, "moe_train, 4 ranks"};
  const auto parsed = parse_lock_holder(lock_holder_text(holder));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->host, "node-a");
  EXPECT_EQ(parsed->pid, 4242);
  EXPECT_EQ(parsed->since, 1700000000);
  EXPECT_EQ(parsed->what, "moe_train, 4 ranks");
  EXPECT_FALSE(parse_lock_holder(""));
  EXPECT_FALSE(parse_lock_holder("host: a\npid: 1"));  // cut short
  const std::string text = describe_lock_holder(holder);
  EXPECT_NE(text.find("pid 4242 on host node-a (moe_train, 4 ranks) since "), std::string::npos) << text;
  EXPECT_NE(text.find(" days ago)"), std::string::npos) << text;
}

TEST_F(FileLockTest, HeldUntilReleasedThenEmpty) {
  auto first = FileLock::try_acquire(path(), me("first"));
  ASSERT_EQ(first.outcome, LockOutcome::acquired);
  EXPECT_EQ(first.previous, "");
  EXPECT_EQ(parse_lock_holder(read_text(path()))->what, "first");
  // flock's locks belong to open file descriptions: a second open in this process conflicts.
  auto second = FileLock::try_acquire(path(), me("second"));
  EXPECT_EQ(second.outcome, LockOutcome::held);
  EXPECT_FALSE(second.lock);
  EXPECT_EQ(parse_lock_holder(second.previous)->what, "first");
  const auto held = FileLock::held_by(path());
  ASSERT_TRUE(held);
  EXPECT_EQ(parse_lock_holder(*held)->what, "first");
  EXPECT_EQ(parse_lock_holder(read_text(path()))->what, "first");  // the refused attempt wrote nothing

  first.lock.reset();
  EXPECT_EQ(read_text(path()), "");  // released in order: emptied
  EXPECT_FALSE(FileLock::held_by(path()));
  auto third = FileLock::try_acquire(path(), me("third"));
  ASSERT_EQ(third.outcome, LockOutcome::acquired);
  EXPECT_EQ(third.previous, "");
}

TEST_F(FileLockTest, HeldByNothingWhenMissing) {
  EXPECT_FALSE(FileLock::held_by(path()));
  EXPECT_FALSE(file_exists(path()));  // held_by creates nothing
}

// A child takes the lock and is killed: while it lives the lock is refused naming it; once
// it is gone the kernel has released the lock, and the file still names the dead holder.
TEST_F(FileLockTest, ReleasedWhenTheHolderIsKilled) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    auto mine = FileLock::try_acquire(path(), me("child"));
    const char ok = mine.outcome == LockOutcome::acquired ? '1' : '0';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
    ::pause();  // killed here, holding the lock
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(ok, '1');
  EXPECT_TRUE(process_alive(child));

  auto refused = FileLock::try_acquire(path(), me("parent"));
  EXPECT_EQ(refused.outcome, LockOutcome::held);
  const auto holder = parse_lock_holder(refused.previous);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->pid, child);
  EXPECT_EQ(holder->what, "child");

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(process_alive(child));
  EXPECT_FALSE(FileLock::held_by(path()));

  auto taken = FileLock::try_acquire(path(), me("parent"));
  ASSERT_EQ(taken.outcome, LockOutcome::acquired);
  const auto left = parse_lock_holder(taken.previous);  // the dead holder's name, left behind
  ASSERT_TRUE(left);
  EXPECT_EQ(left->pid, child);
  EXPECT_EQ(parse_lock_holder(read_text(path()))->what, "parent");
}

TEST_F(FileLockTest, UnopenableFileNamesTheReason) {
  const std::string file = dir_ + "/plain";
  std::ofstream(file) << "x";
  try {
    FileLock::try_acquire(file + "/.lock", me("x"));
    FAIL() << "a lock file under a regular file was opened";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOTDIR);
    EXPECT_NE(std::string(e.what()).find(file + "/.lock"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace topotrain
