#include "topotrain/store/timing_log.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/core/io_failure.h"
#include "topotrain/core/log.h"
#include "topotrain/store/h5_io.h"
#include "topotrain/store/timings_file.h"

namespace topotrain {
namespace {

// A shipment: [step values, span values, nvml values, last, steps..., spans..., nvml...].
constexpr int kShipmentTag = 1;
constexpr std::size_t kShipmentHeader = 4;

void mpi_check(int status, const char* what) {
  if (status != MPI_SUCCESS) throw std::runtime_error(std::string("timing log: ") + what + " failed");
}

// All ranks' rows of one table on rank 0 (empty elsewhere).
std::vector<double> gather_rows(MPI_Comm world, int rank, int world_size, const std::vector<double>& local) {
  const int count = static_cast<int>(local.size());
  std::vector<int> counts(rank == 0 ? world_size : 0);
  mpi_check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world), "MPI_Gather");
  std::vector<int> displacements(counts.size());
  std::vector<double> all;
  if (rank == 0) {
    long long total = 0;
    for (int r = 0; r < world_size; ++r) {
      displacements[r] = static_cast<int>(total);
      total += counts[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  mpi_check(MPI_Gatherv(local.data(), count, MPI_DOUBLE, all.data(), counts.data(), displacements.data(), MPI_DOUBLE,
                        0, world),
            "MPI_Gatherv");
  return all;
}

std::string gather_roles(MPI_Comm world, int rank, int world_size, const std::string& role) {
  if (role.empty() || role.find(',') != std::string::npos)
    throw std::runtime_error("timing log: role '" + role + "' must be non-empty and without commas");
  const int length = static_cast<int>(role.size());
  std::vector<int> lengths(rank == 0 ? world_size : 0);
  mpi_check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world), "MPI_Gather");
  std::vector<int> displacements(lengths.size());
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < world_size; ++r) {
      displacements[r] = total;
      total += lengths[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  mpi_check(MPI_Gatherv(role.data(), length, MPI_CHAR, all.data(), lengths.data(), displacements.data(), MPI_CHAR, 0,
                        world),
            "MPI_Gatherv");
  std::string joined;
  for (int r = 0; r < static_cast<int>(lengths.size()); ++r)
    joined += (r ? "," : "") + all.substr(static_cast<std::size_t>(displacements[r]), static_cast<std::size_t>(lengths[r]));
  return joined;
}

// The live file, <run_dir>/timings.h5.live, is written in place and flushed after every
// gather, so it is whole up to the last gather even if the job is killed; readers never
// open it. What they open, timings.h5, is a copy of it taken right after a flush and put in
// place by rename: a reader sees a complete file at any moment, and a writer that holds the
// live file open (and locked) stands in no reader's way. Copies are spaced so that copying
// costs at most kPublishShare of the run's time; the last one is the live file itself,
// renamed when the log closes.
constexpr double kPublishShare = 0.01;

// A failed copy (a full disk, say) names the OS's reason and leaves no partial `to` behind:
// the published log stays the last whole copy.
void copy_bytes(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw std::runtime_error(cat("timing log: cannot read ", from, ": ", os_error_text(errno)));
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  errno = 0;
  if (out) out << in.rdbuf();
  if (out) out.close();
  if (out) return;
  const int error = errno;
  const std::string said = cat("timing log: cannot copy ", from, " to ", to);
  const std::string detail = write_failure_detail(error, to, file_size(from), said);
  out.close();
  remove_file(to);
  throw std::runtime_error(said + detail);
}

}  // namespace

struct TimingLog::File {
  std::string published;  // timings.h5
  std::string live;       // timings.h5.live
  H5Handle file;
  std::unique_ptr<H5Table> steps, spans, nvml;
  PhaseTimer::Clock::time_point last_copy;
  double copy_seconds = -1;  // of the last copy; -1: none yet

  // Creates the live file of a new launch and folds the `earlier` timings files' launches
  // into it. It is built under a temporary name and renamed to the live name only once
  // whole: a live file found at start-up is a log to keep (a killed run's), never a
  // half-made one.
  File(const std::string& path, int world_size, const std::string& roles, int gather_every,
       const std::vector<std::string>& extra_fields, const std::vector<double>& rank_rows,
       const std::vector<std::string>& earlier)
      : published(path), live(path + kTimingsLiveSuffix) {
    auto lock = h5_serialize();
    h5_quiet();
    const std::string starting = live + ".start";
    try {
      create(starting, world_size, roles, gather_every, extra_fields, rank_rows, earlier);
    } catch (const std::runtime_error& e) {
      // A full disk, say: named, and no half-made file left to be taken for a killed run's log.
      const int error = errno;
      const std::string detail = write_failure_detail(error, starting, 0, e.what());
      steps.reset();
      spans.reset();
      nvml.reset();
      file.reset();
      remove_file(starting);
      throw std::runtime_error(cat(e.what(), detail));
    }
    rename_file(starting, live);
    copy_to_published();  // an empty log, at once; not counted: the first gather's copy follows
  }

  // The constructor's file: `starting` with the earlier launches and this one's empty tables.
  void create(const std::string& starting, int world_size, const std::string& roles, int gather_every,
              const std::vector<std::string>& extra_fields, const std::vector<double>& rank_rows,
              const std::vector<std::string>& earlier) {
    file = H5Handle(H5Fcreate(starting.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                    "cannot create timing log " + starting);
    int before = 0;  // the highest launch number before this one
    for (const std::string& previous : earlier) {
      try {
        before = std::max(before, fold_launches(file, previous));
      } catch (const std::exception& e) {
        log_warn(cat("timing log: the earlier log ", previous, " cannot be read (", e.what(), "); it is left as ",
                     previous, ".unreadable"));
        rename_file(previous, previous + ".unreadable");
      }
    }
    launch = before + 1;
    if (launch > 1) log_info(cat("timing log: launch ", launch, " of this run; earlier launches are kept in ", published));
    write_attribute(file, "format", std::string("topotrain-timings"));
    write_attribute(file, "launch", std::int64_t{launch});
    write_attribute(file, "started_at",
                    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    write_attribute(file, "world_size", std::int64_t{world_size});
    write_attribute(file, "roles", roles);
    write_attribute(file, "gather_every", std::int64_t{gather_every});
    H5Table ranks(file, "ranks", rank_fields(), 64);
    ranks.append(rank_rows);
    steps = std::make_unique<H5Table>(file, "steps", step_fields(extra_fields));
    spans = std::make_unique<H5Table>(file, "spans", span_fields(), 4096);
    std::string phases;
    for (const char* name : phase_names()) phases += (phases.empty() ? "" : ",") + std::string(name);
    H5Handle spans_set(H5Dopen2(file, "spans", H5P_DEFAULT), H5Dclose, "spans");
    write_attribute(spans_set, "phases", phases);
    nvml = std::make_unique<H5Table>(file, "nvml", nvml_fields(), 1024);
    h5_check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush " + starting);
  }

  // The final state: the live file closed and renamed to timings.h5.
  ~File() {
    steps.reset();
    spans.reset();
    nvml.reset();
    file.reset();
    try {
      rename_file(live, published);
    } catch (const std::exception& e) {
      log_error(cat("timing log: ", e.what(), "; the whole log is ", live));
    }
  }

  void append(const std::vector<double>& step_rows, const std::vector<double>& span_rows,
              const std::vector<double>& nvml_rows) {
    auto lock = h5_serialize();
    steps->append(step_rows);
    spans->append(span_rows);
    nvml->append(nvml_rows);
    try {
      h5_check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush the timing log " + live);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(cat(e.what(), write_failure_detail(errno, live, 0, e.what())));
    }
  }

  // Copies the live file (flushed by every append) to timings.h5; unless `now`, only when
  // the last copy is long enough ago to keep copying within kPublishShare.
  void publish(bool now) {
    const auto started = PhaseTimer::Clock::now();
    if (!now && copy_seconds >= 0 &&
        std::chrono::duration<double>(started - last_copy).count() * kPublishShare < copy_seconds)
      return;
    copy_to_published();
    last_copy = PhaseTimer::Clock::now();
    copy_seconds = std::chrono::duration<double>(last_copy - started).count();
  }

  int launch = 1;  // this launch's number

  void copy_to_published() {
    const std::string temporary = published + ".tmp";
    copy_bytes(live, temporary);
    rename_file(temporary, published);
  }
};

TimingLog::TimingLog(const std::string& run_dir, MPI_Comm world, const std::string& role, TimingLogConfig config)
    : config_(std::move(config)), path_(join_path(run_dir, kTimingsFileName)) {
  mpi_check(MPI_Comm_dup(world, &world_), "MPI_Comm_dup");
  MPI_Comm_rank(world_, &rank_);
  MPI_Comm_size(world_, &world_size_);
  if (config_.gather_every < 1)
    throw ConfigError(cat("log.timings_every = ", config_.gather_every, ": must be at least 1"));
  const std::string roles = gather_roles(world_, rank_, world_size_, role);
  const std::vector<double> rank_rows =
      gather_rows(world_, rank_, world_size_,
                  {double(rank_), config_.flops_per_token, config_.peak_flops, double(config_.nvml_device),
                   double(config_.device_group)});
  std::string error;
  if (rank_ == 0) {
    try {
      make_directories(run_dir);
      // A killed run's live file holds more rows than the copy it last published.
      if (file_exists(path_ + kTimingsLiveSuffix)) rename_file(path_ + kTimingsLiveSuffix, path_);
      // A resumed run's log holds the earlier launches: older versions' timings.N.h5 files,
      // oldest first, then the last log.
      std::vector<std::string> earlier;
      for (int n = 1; file_exists(cat(run_dir, "/timings.", n, ".h5")); ++n)
        earlier.push_back(cat(run_dir, "/timings.", n, ".h5"));
      const std::size_t separate = earlier.size();
      if (file_exists(path_)) earlier.push_back(path_);
      file_ = std::make_unique<File>(path_, world_size_, roles, config_.gather_every, config_.extra_fields, rank_rows,
                                     earlier);
      // Only now that timings.h5 holds them.
      for (std::size_t i = 0; i < separate; ++i)
        if (file_exists(earlier[i])) remove_file(earlier[i]);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Every rank learns whether rank 0 could create the file, so none is left in a gather,
  // and the launch's number (0: no file).
  int launch = rank_ != 0 ? 1 : error.empty() ? file_->launch : 0;
  MPI_Bcast(&launch, 1, MPI_INT, 0, world_);
  if (launch == 0) throw std::runtime_error(rank_ == 0 ? error : "rank 0 could not create " + path_);
  launch_ = launch;
  // One epoch for all ranks, right after a barrier, so that trace lanes line up.
  MPI_Barrier(world_);
  const auto epoch = PhaseTimer::Clock::now();
  timer_.set_epoch(epoch);
  if (config_.nvml_device >= 0) sampler_ = std::make_unique<NvmlSampler>(config_.nvml_device, config_.nvml_hz, epoch);
}

TimingLog::~TimingLog() {
  try {
    flush_local();
  } catch (const std::exception& e) {
    log_error(e.what());
  }
  // Shipments still in flight are abandoned (their rank 0 may be gone), not waited for.
  for (MPI_Request& request : send_requests_) MPI_Request_free(&request);
  MPI_Comm_free(&world_);
}

void TimingLog::collect_finished() {
  const std::size_t extras = config_.extra_fields.size();
  for (StepRecord& record : timer_.take_finished()) {
    const StepMetrics& m = record.metrics;
    if (m.extra.size() != extras)
      throw std::runtime_error(cat("timing log: step ", record.step, " has ", m.extra.size(), " extra values, the log has ",
                                   extras, " extra fields"));
    step_rows_.insert(step_rows_.end(), {double(record.step), double(rank_), record.start, record.wall});
    step_rows_.insert(step_rows_.end(), record.phase_seconds.begin(), record.phase_seconds.end());
    for (std::size_t p = 0; p < kPhaseCount; ++p) phase_totals_[p] += record.phase_seconds[p];
    step_rows_.insert(step_rows_.end(), {record.other_seconds(), m.tokens, m.loss, m.lr, m.grad_norm,
                                         m.peak_memory_bytes, m.queue_depth, m.collectives, m.flops,
                                         record.overlap_seconds, record.comm_overlap_seconds,
                                         m.checkpoint_writing});
    step_rows_.insert(step_rows_.end(), m.extra.begin(), m.extra.end());
    for (const PhaseSpan& span : record.spans)
      span_rows_.insert(span_rows_.end(), {double(rank_), double(record.step), double(static_cast<int>(span.phase)),
                                           span.start, span.seconds, span.gpu ? 1.0 : 0.0});
    if (config_.on_record) config_.on_record(record);
  }
  if (sampler_) {
    for (const NvmlSample& s : sampler_->drain())
      nvml_rows_.insert(nvml_rows_.end(), {double(rank_), s.time, s.gpu_util, s.mem_util, s.mem_used_bytes,
                                           s.power_watts, s.sm_clock_mhz});
  }
}

void TimingLog::end_step(StepMetrics metrics) {
  timer_.end_step(std::move(metrics));
  collect_finished();
  if (++steps_ % config_.gather_every == 0) ship(false);
}

void TimingLog::ship(bool last) {
  if (rank_ == 0) {
    if (file_) file_->append(step_rows_, span_rows_, nvml_rows_);
    while (receive_shipment(false)) {
    }
    if (file_) file_->publish(false);
  } else {
    std::vector<double> buffer{double(step_rows_.size()), double(span_rows_.size()), double(nvml_rows_.size()),
                               last ? 1.0 : 0.0};
    for (const auto* rows : {&step_rows_, &span_rows_, &nvml_rows_}) buffer.insert(buffer.end(), rows->begin(), rows->end());
    send_buffers_.push_back(std::move(buffer));
    send_requests_.emplace_back();
    mpi_check(MPI_Isend(send_buffers_.back().data(), static_cast<int>(send_buffers_.back().size()), MPI_DOUBLE, 0,
                        kShipmentTag, world_, &send_requests_.back()),
              "MPI_Isend");
    complete_sends(false);
  }
  step_rows_.clear();
  span_rows_.clear();
  nvml_rows_.clear();
}

void TimingLog::complete_sends(bool wait) {
  for (std::size_t i = 0; i < send_requests_.size();) {
    int done = 0;
    if (wait) {
      mpi_check(MPI_Wait(&send_requests_[i], MPI_STATUS_IGNORE), "MPI_Wait");
      done = 1;
    } else {
      mpi_check(MPI_Test(&send_requests_[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
    if (!done) {
      ++i;
      continue;
    }
    send_requests_.erase(send_requests_.begin() + static_cast<std::ptrdiff_t>(i));
    send_buffers_.erase(send_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

// Returns whether a shipment was received; a final one (`last`) counts down the ranks
// flush() waits for through finished_ranks_.
bool TimingLog::receive_shipment(bool blocking) {
  MPI_Status status;
  int waiting = 1;
  if (blocking) mpi_check(MPI_Probe(MPI_ANY_SOURCE, kShipmentTag, world_, &status), "MPI_Probe");
  else mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, kShipmentTag, world_, &waiting, &status), "MPI_Iprobe");
  if (!waiting) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_DOUBLE, &count);
  std::vector<double> buffer(static_cast<std::size_t>(count));
  mpi_check(MPI_Recv(buffer.data(), count, MPI_DOUBLE, status.MPI_SOURCE, kShipmentTag, world_, MPI_STATUS_IGNORE),
            "MPI_Recv");
  if (buffer.size() < kShipmentHeader) throw std::runtime_error("timing log: truncated shipment");
  std::vector<double> tables[3];
  std::size_t at = kShipmentHeader;
  for (int t = 0; t < 3; ++t) {
    const auto n = static_cast<std::size_t>(buffer[static_cast<std::size_t>(t)]);
    if (at + n > buffer.size()) throw std::runtime_error("timing log: shipment shorter than its header says");
    tables[t].assign(buffer.begin() + static_cast<std::ptrdiff_t>(at), buffer.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  if (file_) file_->append(tables[0], tables[1], tables[2]);
  if (buffer[3] != 0) ++finished_ranks_;
  return true;
}

void TimingLog::flush() {
  timer_.finish();
  collect_finished();
  ship(true);
  if (rank_ == 0) {
    while (finished_ranks_ < world_size_ - 1) receive_shipment(true);
    finished_ranks_ = 0;
    if (file_) file_->publish(true);
  } else {
    complete_sends(true);
  }
}

void TimingLog::flush_local() {
  if (!file_) return;
  timer_.finish();
  collect_finished();
  file_->append(step_rows_, span_rows_, nvml_rows_);
  file_->publish(true);
  step_rows_.clear();
  span_rows_.clear();
  nvml_rows_.clear();
}

}  // namespace topotrain
