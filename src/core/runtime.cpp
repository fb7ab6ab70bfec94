#include "topotrain/core/runtime.h"

#include <cstdio>
#include <vector>

#ifdef TOPOTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"
#include "topotrain/core/stop_signal.h"

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
  if (role_comm_ != MPI_COMM_NULL) MPI_Comm_free(&role_comm_);
  if (owns_mpi_) MPI_Finalize();
}

void Runtime::bind(const Topology& topology, bool select_device) {
  int index = 0;
  const RoleSpec* role = topology.role_of(rank_, &index);
  if (!role) throw std::logic_error("Runtime::bind before validate_world");
  if (role_comm_ != MPI_COMM_NULL) MPI_Comm_free(&role_comm_);
  role_ = role->role;
  device_ = topology.device_of(rank_, local_rank_);
  int color = static_cast<int>(role - topology.roles.data());
  MPI_Comm_split(MPI_COMM_WORLD, color, index, &role_comm_);
  MPI_Comm_rank(role_comm_, &role_rank_);
  MPI_Comm_size(role_comm_, &role_size_);
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

Runtime::Outcome Runtime::first_failure(const Outcome& mine) const {
  int first = world_size_;
  const int candidate = mine.code != 0 ? rank_ : world_size_;
  MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world_size_) return {};
  int header[2] = {mine.code, static_cast<int>(mine.message.size())};  // meaningful on `first`
  MPI_Bcast(header, 2, MPI_INT, first, MPI_COMM_WORLD);
  Outcome outcome{header[0], rank_ == first ? mine.message : std::string(static_cast<std::size_t>(header[1]), '\0')};
  MPI_Bcast(outcome.message.data(), header[1], MPI_CHAR, first, MPI_COMM_WORLD);
  return outcome;
}

std::string Runtime::first_error(const std::string& local_error) const {
  return first_failure({local_error.empty() ? 0 : 1, local_error}).message;
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

void Runtime::abort(const std::string& message, int exit_code) const {
  std::fprintf(stderr, "%s %s\n", log_prefix().c_str(), message.c_str());
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
