#include "topotrain/core/topology.h"

#include <algorithm>
#include <map>

#include "topotrain/core/error.h"
#include "topotrain/core/suggest.h"
#include "topotrain/core/visible_devices.h"

namespace topotrain {

const char* to_string(Interconnect value) {
  switch (value) {
    case Interconnect::pcie4: return "pcie4";
    case Interconnect::pcie5: return "pcie5";
    case Interconnect::nvlink: return "nvlink";
    case Interconnect::cpu: return "cpu";
  }
  return "?";
}

const char* to_string(LinkTransport value) {
  switch (value) {
    case LinkTransport::automatic: return "auto";
    case LinkTransport::nccl: return "nccl";
    case LinkTransport::ipc: return "ipc";
    case LinkTransport::mpi: return "mpi";
  }
  return "?";
}

std::string Device::str() const { return is_cpu ? std::string("cpu") : cat("cuda:", index); }

int Topology::ranks_listed() const {
  int n = 0;
  for (const auto& role : roles) n += static_cast<int>(role.ranks.size());
  return n;
}

const RoleSpec* Topology::role_of(int rank, int* index_in_role) const {
  for (const auto& role : roles) {
    auto it = std::find(role.ranks.begin(), role.ranks.end(), rank);
    if (it != role.ranks.end()) {
      if (index_in_role) *index_in_role = static_cast<int>(it - role.ranks.begin());
      return &role;
    }
  }
  return nullptr;
}

const RoleSpec* Topology::find_role(const std::string& name) const {
  for (const auto& role : roles)
    if (role.role == name) return &role;
  return nullptr;
}

Device Topology::device_of(int rank, int local_rank) const {
  int index = 0;
  const RoleSpec* role = role_of(rank, &index);
  if (role && role->all_cpu) return Device::cpu();
  if (role && !role->devices.empty()) return role->devices[index];
  return interconnect == Interconnect::cpu ? Device::cpu() : Device::cuda(local_rank);
}

int Topology::drafter_of(int target_rank) const {
  int index = 0;
  const RoleSpec* role = role_of(target_rank, &index);
  const RoleSpec* drafters = find_role("drafter");
  if (!role || role->role != "target" || !drafters || drafters->ranks.empty()) return -1;
  if (!role->route.empty()) return role->route[index];
  return drafters->ranks[index % drafters->ranks.size()];
}

std::vector<int> Topology::targets_of(int drafter_rank) const {
  std::vector<int> targets;
  if (const RoleSpec* role = find_role("target"))
    for (int rank : role->ranks)
      if (drafter_of(rank) == drafter_rank) targets.push_back(rank);
  return targets;
}

void validate_topology(const Topology& topology, const JobSpec& job) {
  const std::string& file = topology.source;
  std::map<int, std::string> owner;  // rank -> role that lists it
  std::map<std::string, int> entries;  // role -> [[roles]] tables naming it
  for (const auto& role : topology.roles) {
    // Two tables of one role would make two role groups: two trainer groups train the same
    // micro-batches without averaging, and a second target group waits for a start forever.
    if (++entries[role.role] == 2)
      throw ConfigError(cat(file, ": two [[roles]] tables have role = \"", role.role, "\"; a role is one table: "
                            "list all its ranks (and devices) in one ranks = [...]"));
    if (std::find(job.roles.begin(), job.roles.end(), role.role) == job.roles.end()) {
      std::string known;
      for (const auto& r : job.roles) known += (known.empty() ? "\"" : ", \"") + r + "\"";
      throw ConfigError(cat(file, ": [[roles]] role = \"", role.role, "\" is not a role of ", job.name,
                            did_you_mean(role.role, job.roles), "; ", job.name, " knows ", known));
    }
    if (role.ranks.empty())
      throw ConfigError(cat(file, ": [[roles]] role \"", role.role, "\" lists no ranks; add ranks = [...]"));
    for (int rank : role.ranks) {
      if (rank < 0) throw ConfigError(cat(file, ": role \"", role.role, "\" lists rank ", rank, "; ranks start at 0"));
      auto [it, fresh] = owner.emplace(rank, role.role);
      if (!fresh)
        throw ConfigError(cat(file, ": rank ", rank, " is listed in role \"", it->second, "\" and again in role \"",
                              role.role, "\"; each rank plays exactly one role"));
    }
    if (!role.devices.empty() && role.devices.size() != role.ranks.size())
      throw ConfigError(cat(file, ": role \"", role.role, "\" has ", role.ranks.size(), " ranks but ",
                            role.devices.size(), " devices; list one device per rank, or \"cpu\""));
    if (!role.route.empty() && role.role != "target")
      throw ConfigError(cat(file, ": role \"", role.role, "\" has a route; only targets route to drafters"));
  }
  const int listed = topology.ranks_listed();
  for (int rank = 0; rank < listed; ++rank)
    if (!owner.count(rank))
      throw ConfigError(cat(file, ": rank ", rank, " is in no role, but ", listed,
                            " ranks are listed; ranks must be 0..", listed - 1, " each in one role"));
  for (const auto& required : job.required)
    if (!topology.find_role(required))
      throw ConfigError(cat(file, ": ", job.name, " needs a [[roles]] entry with role = \"", required, "\"",
                            required == "drafter" ? " (targets without a drafter have no one to feed)" : ""));

  if (const RoleSpec* targets = topology.find_role("target")) {
    const RoleSpec* drafters = topology.find_role("drafter");
    if (!targets->route.empty()) {
      if (targets->route.size() != targets->ranks.size())
        throw ConfigError(cat(file, ": the target role has ", targets->ranks.size(), " ranks but route lists ",
                              targets->route.size(), "; give one drafter rank per target rank"));
      for (std::size_t i = 0; i < targets->route.size(); ++i) {
        int to = targets->route[i];
        if (!drafters || std::find(drafters->ranks.begin(), drafters->ranks.end(), to) == drafters->ranks.end())
          throw ConfigError(cat(file, ": target rank ", targets->ranks[i], " routes to rank ", to,
                                ", which is not a drafter rank; route entries must be drafter ranks"));
      }
    }
    if (drafters)
      for (int drafter : drafters->ranks)
        if (topology.targets_of(drafter).empty())
          throw ConfigError(cat(file, ": drafter rank ", drafter,
                                " is fed by no target; add it to the targets' route or drop the rank"));
  }
  if (topology.links.queue_depth < 1)
    throw ConfigError(cat(file, ": [links] queue_depth must be at least 1, got ", topology.links.queue_depth));
}

void validate_world(const Topology& topology, int world_size) {
  const int listed = topology.ranks_listed();
  if (listed != world_size)
    throw ConfigError(cat(topology.source, " lists ", listed, " ranks but the job was launched with ", world_size,
                          "; run it with mpirun -np ", listed, " (or change [[roles]] ranks)"));
}

void validate_device(const Topology& topology, int rank, int local_rank, int gpus_present, const char* visible) {
  Device device = topology.device_of(rank, local_rank);
  if (device.is_cpu) return;
  if (!cuda_ordinal(device.index, gpus_present, visible)) {
    const RoleSpec* role = topology.role_of(rank);
    std::string fix = gpus_present == 0
                          ? cat("this node has no usable GPU", visible_devices_note(visible),
                                " (or this build has no CUDA); use a CPU topology such as topology/cpu4.toml, or "
                                "devices = \"cpu\"")
                          : cat("this process sees ", gpus_present, " GPUs (0..", gpus_present - 1, ")",
                                visible_devices_note(visible),
                                "; fix devices = [...], start fewer ranks per node, or show each process its own "
                                "GPU with CUDA_VISIBLE_DEVICES");
    throw ConfigError(cat(topology.source, ": rank ", rank, " (", role ? role->role : "?", ") is placed on ",
                          device.str(), role && role->devices.empty() ? " (its node-local rank)" : "", " but ",
                          fix));
  }
}

}  // namespace topotrain
