#include "topotrain/core/run_file.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/suggest.h"

namespace topotrain {
namespace {

const std::vector<std::string> kTopologyTables = {"topology", "roles", "links"};
const std::vector<std::string> kSettingsTables = {"model", "data", "train", "checkpoint", "log"};

// "file:line:col" of a node, so that a wrong value points at the line to edit.
std::string where(const std::string& source, const toml::node& node) {
  const auto& begin = node.source().begin;
  if (begin.line == 0) return source;
  return cat(source, ':', begin.line, ':', begin.column);
}

std::string read_text(const std::string& path, const char* what) {
  // An ifstream opens a directory and reads it as empty: a run would go on without its file.
  if (is_directory(path)) throw ConfigError(cat(what, " '", path, "' is a directory; name a TOML file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(cat("cannot open ", what, " '", path, "': no such file or not readable"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

toml::table parse_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw ConfigError(cat(source, ':', at.line, ':', at.column, ": malformed TOML: ", e.description()));
  }
}

void reject_unknown_keys(const toml::table& table, const std::vector<std::string>& known, const std::string& source,
                         const std::string& table_name) {
  for (const auto& [key, node] : table) {
    std::string k(key.str());
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string hint = did_you_mean(k, known);
      if (hint.empty()) {
        hint = cat("; [", table_name, "] takes ");
        for (std::size_t i = 0; i < known.size(); ++i) hint += (i ? ", " : "") + known[i];
      }
      throw ConfigError(cat(where(source, node), ": unknown key '", k, "' in [", table_name, "]", hint));
    }
  }
}

std::string string_value(const toml::node& node, const std::string& source, const std::string& key) {
  if (auto s = node.value<std::string>()) return *s;
  throw ConfigError(cat(where(source, node), ": '", key, "' must be a string"));
}

// An integer of the run file as an int, refused (never wrapped) outside [min, INT_MAX].
int int_value(const toml::node& node, const std::string& source, const std::string& key, std::int64_t min) {
  auto v = node.value<std::int64_t>();
  if (!v || !node.is_integer()) throw ConfigError(cat(where(source, node), ": '", key, "' must be an integer"));
  if (*v < min || *v > INT_MAX)
    throw ConfigError(cat(where(source, node), ": '", key, "' = ", *v, " is out of range; use ", min, " .. ", INT_MAX));
  return static_cast<int>(*v);
}

std::vector<int> int_list(const toml::node& node, const std::string& source, const std::string& key,
                          std::int64_t min) {
  // devices also takes the word "cpu" (parse_role), which a list of names is not.
  const std::string expected =
      cat("'", key, "' must be a list of integers, e.g. [0, 1]", key == "devices" ? ", or \"cpu\"" : "");
  const toml::array* array = node.as_array();
  if (!array) throw ConfigError(cat(where(source, node), ": ", expected));
  std::vector<int> values;
  for (const auto& item : *array) {
    if (!item.is_integer()) throw ConfigError(cat(where(source, item), ": ", expected));
    values.push_back(int_value(item, source, key, min));
  }
  return values;
}

template <typename Enum>
Enum enum_value(const toml::node& node, const std::string& source, const std::string& key,
                const std::vector<std::pair<std::string, Enum>>& choices) {
  std::string text = string_value(node, source, key);
  std::vector<std::string> names;
  for (const auto& [name, value] : choices) {
    if (name == text) return value;
    names.push_back(name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : " | ") + n;
  throw ConfigError(cat(where(source, node), ": ", key, " = \"", text, "\" is not one of ", list,
                        did_you_mean(text, names)));
}

RoleSpec parse_role(const toml::table& table, const std::string& source) {
  reject_unknown_keys(table, {"role", "ranks", "devices", "route"}, source, "[roles]");
  RoleSpec role;
  if (!table.contains("role")) throw ConfigError(cat(where(source, table), ": a [[roles]] entry needs role = \"...\""));
  role.role = string_value(*table.get("role"), source, "role");
  if (!table.contains("ranks"))
    throw ConfigError(cat(where(source, table), ": role \"", role.role, "\" needs ranks = [...]"));
  role.ranks = int_list(*table.get("ranks"), source, "ranks", 0);
  if (const toml::node* devices = table.get("devices")) {
    if (devices->is_string()) {
      if (string_value(*devices, source, "devices") != "cpu")
        throw ConfigError(cat(where(source, *devices), ": devices must be \"cpu\" or a list of GPU ordinals"));
      role.all_cpu = true;
    } else {
      for (int index : int_list(*devices, source, "devices", 0)) role.devices.push_back(Device::cuda(index));
    }
  }
  if (const toml::node* route = table.get("route")) role.route = int_list(*route, source, "route", 0);
  return role;
}

Topology parse_topology_tables(const toml::table& root, const std::string& source) {
  Topology topology;
  topology.source = source;
  std::string stem = source.substr(source.find_last_of('/') + 1);
  topology.name = stem.substr(0, stem.rfind(".toml"));
  if (const toml::table* t = root["topology"].as_table()) {
    reject_unknown_keys(*t, {"name", "interconnect"}, source, "topology");
    if (const toml::node* name = t->get("name")) topology.name = string_value(*name, source, "name");
    if (const toml::node* ic = t->get("interconnect"))
      topology.interconnect = enum_value<Interconnect>(*ic, source, "interconnect",
                                                       {{"pcie4", Interconnect::pcie4},
                                                        {"pcie5", Interconnect::pcie5},
                                                        {"nvlink", Interconnect::nvlink},
                                                        {"cpu", Interconnect::cpu}});
  }
  const toml::array* roles = root["roles"].as_array();
  if (!roles || roles->empty())
    throw ConfigError(cat(source, ": no [[roles]] tables; a topology lists its roles, e.g.\n  [[roles]]\n  role = "
                                  "\"trainer\"\n  ranks = [0, 1, 2, 3]"));
  for (const auto& node : *roles) {
    const toml::table* table = node.as_table();
    if (!table) throw ConfigError(cat(where(source, node), ": roles must be written as [[roles]] tables"));
    topology.roles.push_back(parse_role(*table, source));
  }
  if (const toml::table* links = root["links"].as_table()) {
    reject_unknown_keys(*links, {"hidden_states", "queue_depth", "fan_in"}, source, "links");
    if (const toml::node* fan_in = links->get("fan_in"))
      topology.links.fan_in = enum_value<FanIn>(*fan_in, source, "fan_in",
                                                {{"arrival", FanIn::arrival}, {"round_robin", FanIn::round_robin}});
    if (const toml::node* hs = links->get("hidden_states"))
      topology.links.hidden_states = enum_value<LinkTransport>(
          *hs, source, "hidden_states",
          {{"auto", LinkTransport::automatic}, {"nccl", LinkTransport::nccl}, {"ipc", LinkTransport::ipc},
           {"mpi", LinkTransport::mpi}});
    if (const toml::node* depth = links->get("queue_depth"))
      topology.links.queue_depth = int_value(*depth, source, "queue_depth", 1);
  }
  return topology;
}

void merge_settings_tables(const toml::table& root, const std::string& source, Settings& settings) {
  for (const auto& section : kSettingsTables) {
    const toml::node* node = root.get(section);
    if (!node) continue;
    const toml::table* table = node->as_table();
    if (!table) throw ConfigError(cat(where(source, *node), ": '", section, "' must be a table: [", section, "]"));
    for (const auto& [key, value] : *table) {
      std::string full = section + "." + std::string(key.str());
      std::string at = where(source, value);
      if (value.is_integer()) settings.set(full, *value.value<std::int64_t>(), at);
      else if (value.is_floating_point()) settings.set(full, *value.value<double>(), at);
      else if (value.is_boolean()) settings.set(full, *value.value<bool>(), at);
      else if (value.is_string()) settings.set(full, *value.value<std::string>(), at);
      else {
        const SettingSpec* spec = find_setting(full);
        if (!spec) settings.set(full, std::monostate{}, at);  // raises the unknown-key error
        throw ConfigError(cat(at, ": setting '", full, "' takes ", to_string(spec->type), ", not a list or table"));
      }
    }
  }
}

void reject_unknown_tables(const toml::table& root, const std::string& source, bool topology_allowed) {
  std::vector<std::string> known = kSettingsTables;
  if (topology_allowed) known.insert(known.end(), kTopologyTables.begin(), kTopologyTables.end());
  for (const auto& [key, node] : root) {
    std::string k(key.str());
    bool is_topology = std::find(kTopologyTables.begin(), kTopologyTables.end(), k) != kTopologyTables.end();
    if (is_topology && !topology_allowed)
      throw ConfigError(cat(where(source, node), ": [", k, "] belongs in the topology file, not in a --config file"));
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw ConfigError(cat(where(source, node), ": unknown table or key '", k, "'", did_you_mean(k, known),
                            "; a run file has [topology] [[roles]] [links] [model] [data] [train] [checkpoint] [log]"));
  }
}

}  // namespace

Topology parse_topology(const std::string& text, const std::string& source) {
  toml::table root = parse_toml(text, source);
  reject_unknown_tables(root, source, true);
  return parse_topology_tables(root, source);
}

void merge_settings(const std::string& text, const std::string& source, Settings& settings) {
  toml::table root = parse_toml(text, source);
  reject_unknown_tables(root, source, true);
  merge_settings_tables(root, source, settings);
}

RunFile load_run(const std::string& topology_path, const std::vector<std::string>& config_paths,
                 const std::vector<std::string>& overrides) {
  RunFile run;
  run.topology_text = read_text(topology_path, "topology file");
  toml::table root = parse_toml(run.topology_text, topology_path);
  reject_unknown_tables(root, topology_path, true);
  run.topology = parse_topology_tables(root, topology_path);
  merge_settings_tables(root, topology_path, run.settings);
  for (const auto& path : config_paths) {
    toml::table config = parse_toml(read_text(path, "config file"), path);
    reject_unknown_tables(config, path, false);
    merge_settings_tables(config, path, run.settings);
  }
  for (const auto& assignment : overrides) {
    // The topology's tables shape the processes, which mpirun fixed before any rank read them.
    const std::string table = assignment.substr(0, assignment.find_first_of(".="));
    if (std::find(kTopologyTables.begin(), kTopologyTables.end(), table) != kTopologyTables.end())
      throw ConfigError(cat("--set ", assignment, ": [", table, "] is a table of the topology file (",
                            topology_path, "), which --set does not override; --set takes the keys of [model] "
                            "[data] [train] [checkpoint] [log]: edit the topology file (or a copy) instead"));
    run.settings.set_from_assignment(assignment);
  }
  return run;
}

}  // namespace topotrain
