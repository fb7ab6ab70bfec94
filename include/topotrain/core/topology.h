// The process topology of a run: which MPI rank plays which role on which device, and how
// hidden states travel between roles. Parsed from the [topology], [[roles]] and [links]
// tables of a run file (see run_file.h); validated against the job and the machine.
#pragma once

#include <string>
#include <vector>

namespace topotrain {

enum class Interconnect { pcie4, pcie5, nvlink, cpu };
enum class LinkTransport { automatic, nccl, ipc, mpi };

const char* to_string(Interconnect value);
const char* to_string(LinkTransport value);

// Where a rank computes: the CPU, or one CUDA device by index on its node.
struct Device {
  bool is_cpu = true;
  int index = -1;  // CUDA device ordinal; -1 on CPU

  static Device cpu() { return Device{}; }
  static Device cuda(int index) { return Device{false, index}; }
  std::string str() const;  // "cpu" or "cuda:3"
  bool operator==(const Device& other) const { return is_cpu == other.is_cpu && index == other.index; }
};

struct RoleSpec {
  std::string role;           // "trainer" | "target" | "drafter"
  std::vector<int> ranks;     // world ranks, in role order
  // Per-rank devices, parallel to `ranks`. Empty: the node-local rank's GPU, or the CPU
  // when the interconnect is "cpu". Written as a list of ordinals, or as "cpu".
  std::vector<Device> devices;
  bool all_cpu = false;       // devices = "cpu"
  // Targets only: route[i] is the drafter rank that ranks[i] sends to. Empty: targets
  // are dealt round-robin over the drafters.
  std::vector<int> route;
};

// How a drafter takes the batches of its targets: `arrival` in the order they arrive
// (fastest; a slow target does not hold the others up), `round_robin` one target after
// the other in a fixed rotation, so that training does not depend on timing (reproducible,
// and a resumed run equals an uninterrupted one).
enum class FanIn { arrival, round_robin };

struct LinkSpec {
  LinkTransport hidden_states = LinkTransport::automatic;
  int queue_depth = 20;  // packed hidden-state batches buffered per drafter
  FanIn fan_in = FanIn::arrival;
};

struct Topology {
  std::string source;  // the file it came from, for messages
  std::string name;
  Interconnect interconnect = Interconnect::pcie4;
  std::vector<RoleSpec> roles;
  LinkSpec links;

  int ranks_listed() const;
  // The role table a rank belongs to, and its index inside that role; nullptr if none.
  const RoleSpec* role_of(int rank, int* index_in_role = nullptr) const;
  const RoleSpec* find_role(const std::string& role) const;
  // The device a rank uses, given its node-local rank (for the default placement).
  Device device_of(int rank, int local_rank) const;
  // For a target rank: the drafter rank it feeds. For a drafter: the targets feeding it.
  int drafter_of(int target_rank) const;
  std::vector<int> targets_of(int drafter_rank) const;
};

// The roles a job understands; the first role listed in `required` must all be present.
struct JobSpec {
  std::string name;                 // "moe_train"
  std::vector<std::string> roles;   // roles the job knows
  std::vector<std::string> required;
};

// Checks that do not depend on the machine: every rank in exactly one role, known roles,
// required roles present, routes to drafter ranks, sizes consistent. Throws ConfigError
// naming the file, the key and the fix.
void validate_topology(const Topology& topology, const JobSpec& job);

// Checks against the launched job: the world size equals the ranks listed.
void validate_world(const Topology& topology, int world_size);

// Checks one rank's placement against the GPUs its process sees: `gpus_present`, with
// CUDA_VISIBLE_DEVICES = `visible` (nullptr: unset; core/visible_devices.h).
void validate_device(const Topology& topology, int rank, int local_rank, int gpus_present,
                     const char* visible = nullptr);

}  // namespace topotrain
