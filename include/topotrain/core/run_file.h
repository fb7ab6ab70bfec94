// Loading a run: the topology file (which may also carry settings tables), any
// `--config` files (settings only), and `--set` overrides, into one Topology and one
// Settings. Every rank loads the same files and so raises the same ConfigError.
#pragma once

#include <string>
#include <vector>

#include "topotrain/core/settings.h"
#include "topotrain/core/topology.h"

namespace topotrain {

struct RunFile {
  Topology topology;
  Settings settings;
  std::string topology_text;  // the file as written, stored in checkpoints
};

RunFile load_run(const std::string& topology_path, const std::vector<std::string>& config_paths,
                 const std::vector<std::string>& overrides);

// The same from text (tests, and files already read); `source` names it in messages.
Topology parse_topology(const std::string& text, const std::string& source);
void merge_settings(const std::string& text, const std::string& source, Settings& settings);

}  // namespace topotrain
