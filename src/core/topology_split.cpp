#include "topotrain/core/topology_split.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "topotrain/core/error.h"
#include "topotrain/core/run_file.h"

namespace topotrain {
namespace {

std::string trimmed(const std::string& line) {
  const std::size_t begin = line.find_first_not_of(" \t\r");
  return begin == std::string::npos ? std::string() : line.substr(begin);
}

bool is_header(const std::string& line) { return trimmed(line).rfind('[', 0) == 0; }
bool is_roles_header(const std::string& line) { return trimmed(line).rfind("[[roles]]", 0) == 0; }
bool is_blank_or_comment(const std::string& line) {
  const std::string t = trimmed(line);
  return t.empty() || t[0] == '#';
}

std::string int_list(const std::vector<int>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

}  // namespace

std::string resplit_topology(const std::string& text, const std::string& source, int targets, int drafters) {
  const Topology old = parse_topology(text, source);
  const RoleSpec* old_targets = old.find_role("target");
  const RoleSpec* old_drafters = old.find_role("drafter");
  if (!old_targets || !old_drafters || old.roles.size() != 2)
    throw ConfigError(cat(source, ": not a DFlash topology (one target and one drafter [[roles]] table); "
                          "only those are re-split"));
  const int world = old.ranks_listed();
  if (targets < 1 || drafters < 1 || targets + drafters != world)
    throw ConfigError(cat(source, ": cannot split its ", world, " ranks into ", targets, " target(s) and ", drafters,
                          " drafter(s); both need at least 1 and together ", world));
  if (drafters > targets)
    throw ConfigError(cat(source, ": cannot split its ", world, " ranks into ", targets, " target(s) and ", drafters,
                          " drafter(s): a target streams to one drafter, so every drafter needs a target of its own "
                          "(at most ", world / 2, " drafters)"));

  const bool all_cpu = old_targets->all_cpu && old_drafters->all_cpu;
  const bool listed = !old_targets->devices.empty() && !old_drafters->devices.empty();
  const bool placed_by_default = !old_targets->all_cpu && !old_drafters->all_cpu && old_targets->devices.empty() &&
                                 old_drafters->devices.empty();
  if (!all_cpu && !listed && !placed_by_default)
    throw ConfigError(cat(source, ": its target and drafter roles place their ranks differently (devices listed or "
                          "\"cpu\" for one, not for the other), so a rank's device cannot be carried to its new role; "
                          "write devices the same way for both roles"));
  std::vector<int> ranks;
  std::map<int, int> device_of_rank;  // listed devices: the CUDA ordinal of each rank
  for (const RoleSpec* role : {old_targets, old_drafters})
    for (std::size_t i = 0; i < role->ranks.size(); ++i) {
      ranks.push_back(role->ranks[i]);
      if (listed) device_of_rank[role->ranks[i]] = role->devices[i].index;
    }
  std::sort(ranks.begin(), ranks.end());
  const bool targets_first = *std::min_element(old_targets->ranks.begin(), old_targets->ranks.end()) <
                             *std::min_element(old_drafters->ranks.begin(), old_drafters->ranks.end());
  const auto split = ranks.begin() + (targets_first ? targets : drafters);
  const std::vector<int> low(ranks.begin(), split), high(split, ranks.end());
  const std::vector<int>& target_ranks = targets_first ? low : high;
  const std::vector<int>& drafter_ranks = targets_first ? high : low;

  auto role_table = [&](const char* role, const std::vector<int>& role_ranks) {
    std::string table = cat("[[roles]]\nrole = \"", role, "\"\nranks = ", int_list(role_ranks), "\n");
    if (all_cpu) table += "devices = \"cpu\"\n";
    if (listed) {
      std::vector<int> devices;
      for (int rank : role_ranks) devices.push_back(device_of_rank.at(rank));
      table += "devices = " + int_list(devices) + "\n";
    }
    return table;
  };
  const std::string new_roles = role_table("target", target_ranks) + "\n" + role_table("drafter", drafter_ranks);

  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // Each [[roles]] table runs to the next table header; comments and blank lines just above
  // that header belong to what follows.
  std::vector<bool> removed(lines.size(), false);
  std::size_t first_roles = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!is_roles_header(lines[i])) continue;
    first_roles = std::min(first_roles, i);
    std::size_t end = i + 1;
    while (end < lines.size() && !is_header(lines[end])) ++end;
    while (end > i + 1 && is_blank_or_comment(lines[end - 1])) --end;
    std::fill(removed.begin() + static_cast<std::ptrdiff_t>(i), removed.begin() + static_cast<std::ptrdiff_t>(end), true);
  }
  if (first_roles == lines.size())
    throw ConfigError(cat(source, ": its roles are not written as [[roles]] tables, which is the form re-split"));

  const std::string old_counts = cat(old_targets->ranks.size(), "t", old_drafters->ranks.size(), "d");
  const std::string new_counts = cat(targets, "t", drafters, "d");
  std::string out;
  bool in_topology_table = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i == first_roles) out += new_roles;
    if (removed[i]) continue;
    std::string line = lines[i];
    if (is_header(line)) in_topology_table = trimmed(line).rfind("[topology]", 0) == 0;
    if (in_topology_table && trimmed(line).rfind("name", 0) == 0) {
      const std::size_t at = line.find(old_counts);
      if (at != std::string::npos) line.replace(at, old_counts.size(), new_counts);
    }
    out += line + "\n";
  }
  // The edit works on lines; a file it misreads (a table header inside a multi-line string)
  // is refused rather than written wrong.
  const Topology written = parse_topology(out, source);
  const RoleSpec* t = written.find_role("target");
  const RoleSpec* d = written.find_role("drafter");
  if (!t || !d || written.roles.size() != 2 || static_cast<int>(t->ranks.size()) != targets ||
      static_cast<int>(d->ranks.size()) != drafters)
    throw ConfigError(cat(source, ": its [[roles]] tables could not be rewritten line by line; "
                          "write each as a plain [[roles]] table with one key per line"));
  return out;
}

}  // namespace topotrain
