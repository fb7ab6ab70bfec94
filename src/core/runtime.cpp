#include "topotrain/core/runtime.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"
#include "topotrain/core/visible_devices.h"

namespace topotrain {

Runtime::Runtime(int* argc, char*** argv) {
  int provided = 0;
  int initialized = 0;
  MPI_Initialized(&initialized);
  owns_mpi_ = !initialized;  // a test harness may have initialised MPI already
  // Background threads (prefetch, link receivers, checkpoint writer) may call MPI.
  if (owns_mpi_) MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  else MPI_Query_thread(&provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  // The node's marks (NodeMarks: a rank is ending the job; who left on purpose): memory all
  // its ranks share.
  const auto marks_bytes = static_cast<MPI_Aint>(NodeMarks::bytes(local_size_));
  char* base = nullptr;
  MPI_Win_allocate_shared(local_rank_ == 0 ? marks_bytes : 0, 1, MPI_INFO_NULL, local, &base, &node_window_);
  MPI_Aint bytes = 0;
  int unit = 0;
  char* marks = nullptr;
  MPI_Win_shared_query(node_window_, 0, &bytes, &unit, &marks);
  if (local_rank_ == 0) std::memset(marks, 0, static_cast<std::size_t>(marks_bytes));
  node_marks_ = NodeMarks(marks);
  MPI_Barrier(local);  // zeroed before any rank uses them
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  host_.assign(name, length);
  log_configure(rank_, "", LogLevel::info, false);
  if (provided < MPI_THREAD_MULTIPLE)
    log_warn("this MPI library lacks MPI_THREAD_MULTIPLE; background threads must not call MPI");
}

Runtime::~Runtime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Leaving on purpose: a peer still waiting must not take this rank's exit for a death.
  node_marks_.mark_leaving(local_rank_);
  if (role_comm_ != MPI_COMM_NULL) MPI_Comm_free(&role_comm_);
  report_dead_peers_on_signal({}, rank_, host_, "", NodeMarks());  // the marks' memory goes with the window
  MPI_Win_free(&node_window_);
  if (owns_mpi_) MPI_Finalize();
}

void Runtime::bind(const Topology& topology, bool select_device) {
  int index = 0;
  const RoleSpec* role = topology.role_of(rank_, &index);
  if (!role) throw std::logic_error("Runtime::bind before validate_world");
  if (role_comm_ != MPI_COMM_NULL) MPI_Comm_free(&role_comm_);
  role_ = role->role;
  device_ = topology.device_of(rank_, local_rank_);
  if (!device_.is_cpu) {
    // validate_device refused a device the process lacks (a dry run goes on with the
    // topology's number, selecting no device).
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (const std::optional<int> ordinal = cuda_ordinal(device_.index, gpus_present(), visible)) {
      if (*ordinal != device_.index)
        log_info_here(cat("cuda:", device_.index, " of the topology is the one GPU CUDA_VISIBLE_DEVICES=", visible,
                          " shows this process (cuda:0)"));
      device_.index = *ordinal;
    }
  }
  int color = static_cast<int>(role - topology.roles.data());
  MPI_Comm_split(MPI_COMM_WORLD, color, index, &role_comm_);
  MPI_Comm_rank(role_comm_, &role_rank_);
  MPI_Comm_size(role_comm_, &role_size_);
  gather_peers(topology);
#ifdef TOPOTRAIN_CUDA
  if (select_device && !device_.is_cpu) {
    cudaError_t status = cudaSetDevice(device_.index);
    if (status != cudaSuccess)
      throw std::runtime_error(cat("cannot use ", device_.str(), ": ", cudaGetErrorString(status)));
  }
#else
  (void)select_device;  // a CPU build selects no device
#endif
}

void Runtime::gather_peers(const Topology& topology) {
  std::vector<int> processes(2 * static_cast<std::size_t>(world_size_));  // pid, local rank
  const int mine_process[2] = {static_cast<int>(getpid()), local_rank_};
  MPI_Allgather(mine_process, 2, MPI_INT, processes.data(), 2, MPI_INT, MPI_COMM_WORLD);
  std::string mine = host_;
  mine.resize(MPI_MAX_PROCESSOR_NAME, '\0');
  std::string hosts(static_cast<std::size_t>(world_size_) * MPI_MAX_PROCESSOR_NAME, '\0');
  MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  peers_.assign(world_size_, {});
  for (int r = 0; r < world_size_; ++r) {
    PeerProcess& peer = peers_[r];
    peer.rank = r;
    peer.role = topology.role_of(r)->role;
    peer.host = hosts.c_str() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    peer.pid = processes[2 * static_cast<std::size_t>(r)];
    peer.local_rank = processes[2 * static_cast<std::size_t>(r) + 1];
  }
  report_dead_peers_on_signal(peers_, rank_, host_, cat("[rank ", rank_, ' ', role_, ']'), node_marks_);
}

Runtime::Outcome Runtime::first_failure(const Outcome& mine, MPI_Comm comm) const {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int first = size;
  const int candidate = mine.code != 0 ? rank : size;
  MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return {};
  int header[2] = {mine.code, static_cast<int>(mine.message.size())};  // meaningful on `first`
  MPI_Bcast(header, 2, MPI_INT, first, comm);
  Outcome outcome{header[0], rank == first ? mine.message : std::string(static_cast<std::size_t>(header[1]), '\0')};
  MPI_Bcast(outcome.message.data(), header[1], MPI_CHAR, first, comm);
  return outcome;
}

std::string Runtime::first_error(const std::string& local_error, MPI_Comm comm) const {
  return first_failure({local_error.empty() ? 0 : 1, local_error}, comm).message;
}

bool Runtime::agree_stop() const {
  int mine = stop_requested() ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

std::string Runtime::placement_table() const {
  std::string line = cat(rank_, '\t', role_, '\t', device_.str(), '\t', host_);
  int length = static_cast<int>(line.size());
  std::vector<int> lengths(rank_ == 0 ? world_size_ : 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(lengths.size());
  int total = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    offsets[i] = total;
    total += lengths[i];
  }
  std::string all(total, '\0');
  MPI_Gatherv(line.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (rank_ != 0) return std::string();
  std::string table = "rank\trole\tdevice\thost\n";
  for (std::size_t i = 0; i < lengths.size(); ++i) table += all.substr(offsets[i], lengths[i]) + "\n";
  return table;
}

bool Runtime::claim_ending() const { return node_marks_.claim_ending(); }

bool Runtime::ending() const { return node_marks_.ending(); }

std::vector<PeerProcess> Runtime::dead_peers() const { return topotrain::dead_peers(peers_, rank_, host_, node_marks_); }

namespace {
std::string death_line(const std::vector<PeerProcess>& dead, const std::string& host) {
  return cat(describe_ranks(dead, host), " died or left; stopping");
}
}  // namespace

void Runtime::abort(const std::string& message, int exit_code) const {
  exit_on_stop_signal(exit_code);  // mpirun's SIGTERM may come before MPI_Abort ends this rank
  // A peer of this node that died is the cause of whatever this rank saw (a link that broke
  // with it): the first rank of the node to say why the job ends names it.
  const std::vector<PeerProcess> dead = ending() ? std::vector<PeerProcess>() : dead_peers();
  const bool first = claim_ending();
  leave_with(first && !dead.empty() ? cat(death_line(dead, host_), " (this rank: ", message, ")") : message, exit_code);
}

void Runtime::abort_if_peer_died() const {
  if (ending()) return;  // a rank of this node already said why the job ends
  const std::vector<PeerProcess> dead = dead_peers();
  if (dead.empty() || !claim_ending()) return;
  exit_on_stop_signal(1);
  leave_with(death_line(dead, host_), 1);
}

void Runtime::leave_with(const std::string& line, int exit_code) const {
  node_marks_.mark_leaving(local_rank_);
  std::fprintf(stderr, "%s %s\n", log_prefix().c_str(), line.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this satisfies [[noreturn]]
}

int Runtime::gpus_present() {
#ifdef TOPOTRAIN_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

}  // namespace topotrain
