// core/files: the POSIX file helpers, checked against direct system calls.
#include "topotrain/core/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <system_error>

namespace topotrain {
namespace {

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_directory("topotrain_files_test_"); }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  static bool stat_ok(const std::string& path) {
    struct stat info;
    return ::lstat(path.c_str(), &info) == 0;
  }
  // The message of the std::system_error that `f` throws, with its errno.
  template <typename F>
  static std::pair<std::string, int> error_of(F f) {
    try {
      f();
    } catch (const std::system_error& e) {
      return {e.what(), e.code().value()};
    }
    return {"", 0};
  }

  std::string dir_;
};

TEST_F(FilesTest, TempDirectoriesAreNewAndDistinctUnderTmpdir) {
  EXPECT_TRUE(is_directory(dir_));
  const std::string other = make_temp_directory("topotrain_files_test_");
  EXPECT_NE(other, dir_);
  remove_tree(other);
  EXPECT_FALSE(stat_ok(other));

  const char* saved = std::getenv("TMPDIR");
  const std::string saved_value = saved ? saved : "";
  ::setenv("TMPDIR", dir_.c_str(), 1);
  const std::string inside = make_temp_directory("x");
  if (saved) ::setenv("TMPDIR", saved_value.c_str(), 1); else ::unsetenv("TMPDIR");
  EXPECT_EQ(parent_directory(inside), dir_);
  EXPECT_EQ(file_name(inside).size(), 7u);
}

TEST_F(FilesTest, KindsAndSizeMatchStat) {
  write(path("f"), "12345");
  EXPECT_TRUE(file_exists(path("f")));
  EXPECT_TRUE(is_regular_file(path("f")));
  EXPECT_FALSE(is_directory(path("f")));
  EXPECT_TRUE(is_directory(dir_));
  EXPECT_FALSE(is_regular_file(dir_));
  EXPECT_FALSE(file_exists(path("none")));
  EXPECT_EQ(file_size(path("f")), 5u);
  ASSERT_EQ(::truncate(path("f").c_str(), 3), 0);
  EXPECT_EQ(file_size(path("f")), 3u);
  const auto [message, code] = error_of([&] { file_size(path("none")); });
  EXPECT_EQ(code, ENOENT);
  EXPECT_NE(message.find(path("none")), std::string::npos) << message;
}

TEST_F(FilesTest, SameFileComparesWhatPathsNameNotTheirText) {
  make_directories(path("run"));
  write(path("f"), "1");
  write(path("g"), "1");
  ASSERT_EQ(::symlink(path("run").c_str(), path("link").c_str()), 0);
  EXPECT_TRUE(same_file(path("run"), path("run/")));
  EXPECT_TRUE(same_file(path("run"), path("run/../run")));
  EXPECT_TRUE(same_file(path("link"), path("run")));
  EXPECT_FALSE(same_file(path("f"), path("g")));  // equal contents, two files
  EXPECT_FALSE(same_file(path("run"), dir_));
  EXPECT_FALSE(same_file(path("none"), path("none")));
}

TEST_F(FilesTest, MakeDirectoriesCreatesParentsAndAcceptsExisting) {
  make_directories(path("a/b//c/"));
  EXPECT_TRUE(is_directory(path("a/b/c")));
  make_directories(path("a/b"));  // exists already
  write(path("a/file"), "x");
  const auto [message, code] = error_of([&] { make_directories(path("a/file/d")); });
  EXPECT_NE(code, 0);
  EXPECT_NE(message.find(path("a/file")), std::string::npos) << message;
  EXPECT_EQ(error_of([] { make_directories(""); }).second, ENOENT);
}

TEST_F(FilesTest, ListDirectoryIsSortedWithoutDots) {
  for (const char* name : {"b", "a", "c.h5"}) write(path(name), "");
  make_directories(path("d"));
  EXPECT_EQ(list_directory(dir_), (std::vector<std::string>{"a", "b", "c.h5", "d"}));
  EXPECT_TRUE(list_directory(path("d")).empty());
  const auto [message, code] = error_of([&] { list_directory(path("none")); });
  EXPECT_EQ(code, ENOENT);
  EXPECT_NE(message.find("cannot list directory '" + path("none") + "'"), std::string::npos) << message;
}

TEST_F(FilesTest, RemoveAndRename) {
  write(path("f"), "old");
  write(path("g"), "new");
  rename_file(path("g"), path("f"));  // replaces
  EXPECT_FALSE(stat_ok(path("g")));
  std::ifstream in(path("f"));
  std::string text;
  in >> text;
  EXPECT_EQ(text, "new");
  EXPECT_EQ(error_of([&] { rename_file(path("g"), path("h")); }).second, ENOENT);

  EXPECT_TRUE(remove_file(path("f")));
  EXPECT_FALSE(stat_ok(path("f")));
  EXPECT_FALSE(remove_file(path("f")));
}

TEST_F(FilesTest, RemoveTreeDeletesContentsButNotLinkTargets) {
  make_directories(path("keep"));
  write(path("keep/k"), "k");
  make_directories(path("t/u/v"));
  write(path("t/u/v/f"), "f");
  write(path("t/g"), "g");
  ASSERT_EQ(::symlink(path("keep").c_str(), path("t/link").c_str()), 0);
  remove_tree(path("t"));
  EXPECT_FALSE(stat_ok(path("t")));
  EXPECT_TRUE(stat_ok(path("keep/k")));
  remove_tree(path("t"));  // absent: nothing to do
}

TEST(FilePaths, SplitAndJoinLikePaths) {
  EXPECT_EQ(join_path("a", "b"), "a/b");
  EXPECT_EQ(join_path("a/", "b"), "a/b");
  EXPECT_EQ(join_path("", "b"), "b");
  EXPECT_EQ(file_name("/x/y/step-1.h5"), "step-1.h5");
  EXPECT_EQ(file_name("name"), "name");
  EXPECT_EQ(file_name("dir/"), "");
  EXPECT_EQ(parent_directory("/x/y/z"), "/x/y");
  EXPECT_EQ(parent_directory("/z"), "/");
  EXPECT_EQ(parent_directory("z"), ".");
  EXPECT_EQ(file_extension("d/a.b.json"), ".json");
  EXPECT_EQ(file_extension("d.x/name"), "");
  EXPECT_EQ(file_extension("d/.hidden"), "");
  EXPECT_EQ(file_extension("d/.hidden.jsonl"), ".jsonl");
  EXPECT_EQ(file_extension(".."), "");
}

}  // namespace
}  // namespace topotrain
