// File and directory operations on plain POSIX calls, used instead of the C++17 filesystem
// library.
//
// Why not that library: pip wheels of LibTorch link libstdc++ statically into
// libtorch_cpu.so and export its filesystem-library symbols (pytorch/pytorch#133437). Those
// interpose on the system libstdc++'s, so filesystem-library code compiled by a newer g++ and
// linked with such a LibTorch calls mismatched implementations and crashes. Every binary
// that links LibTorch links this instead; ctest's no_std_filesystem check keeps it so.
//
// Failures throw std::system_error, whose what() names the operation and the path and whose
// code().message() is the bare reason (for callers that phrase their own message).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace topotrain {

// stat() succeeds (symbolic links followed, as open() does).
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

// Whether both paths exist and name the same file or directory (one device and inode: "run"
// and "./run/" alike, or a symbolic link and its target).
bool same_file(const std::string& a, const std::string& b);

std::uint64_t file_size(const std::string& path);

// mkdir -p: creates `path` and its missing parents; an existing directory is fine.
void make_directories(const std::string& path);

// Names of the entries of a directory (without "." and ".."), sorted.
std::vector<std::string> list_directory(const std::string& path);

// Deletes a file; false if it did not exist.
bool remove_file(const std::string& path);

// rm -rf (symbolic links removed, not followed); nothing to do if `path` does not exist.
void remove_tree(const std::string& path);

// rename(2): atomic within one file system, replacing `to` if it exists.
void rename_file(const std::string& from, const std::string& to);

// A new, empty directory $TMPDIR/<prefix>XXXXXX (or under /tmp), unique per call, so that
// test binaries run in parallel by ctest -j never share files.
std::string make_temp_directory(const std::string& prefix);

// "a" + "b" -> "a/b"; an empty `directory` gives `name`.
std::string join_path(const std::string& directory, const std::string& name);

// The part after the last '/' ("" for a path ending in '/').
std::string file_name(const std::string& path);

// The part before the last '/': "." for a bare name, "/" for a file at the root, so that the
// result can always be opened (to fsync a directory, for one).
std::string parent_directory(const std::string& path);

// ".json" of "dir/a.b.json"; "" when the file name has no '.' other than a leading one.
std::string file_extension(const std::string& path);

}  // namespace topotrain
