// Rank-prefixed, timestamped logging: "2026-12-01 10:41:07 [rank 3 drafter] message" (local
// time). By default only rank 0 prints info and debug lines (log.all_ranks = true lets every
// rank print); warnings and errors print from every rank, because the rank that sees a
// problem is the one that knows about it. A process that called log_to_file also appends
// every line it prints to that file, so a run's log outlives the terminal.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace topotrain {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

LogLevel parse_log_level(const std::string& text);  // throws ConfigError naming log.level

// Set once per process after the rank's role is known; before that the prefix is "[rank N]".
void log_configure(int rank, const std::string& role, LogLevel level, bool all_ranks);
std::string log_prefix();
// "2026-12-01 10:41:07": `when` in local time, to the second.
std::string log_timestamp(std::time_t when);

// `value` with `decimals` digits after the point ("0.42"), for numbers in log lines.
std::string fixed_point(double value, int decimals);

// A rate with three significant digits and the SI prefix its magnitude asks for, so that no
// rate rounds to zero: "0.05 tok/s", "12.3 tok/s", "41.2 Ktok/s", "5.00 Mtok/s".
std::string format_rate(double per_second, const std::string& unit = "tok/s");

// A size in memory or on disk: "312.4 MiB" below a GiB (negative too: a headroom), "1.25 GiB".
std::string format_bytes(std::int64_t bytes);

// From now on the lines this process prints are also appended to `path` (created if
// missing; an earlier file, a resumed run's, is kept and appended to). Throws
// std::system_error naming the path when it cannot be opened.
void log_to_file(const std::string& path);

void log_debug(const std::string& message);
void log_info(const std::string& message);
// An info line from whichever rank calls it: for news only one rank other than 0 has,
// such as the first drafter's progress in a pipeline whose rank 0 is a target.
void log_info_here(const std::string& message);
void log_warn(const std::string& message);
void log_error(const std::string& message);
// A progress line (a trainer's step line), from whichever rank calls it: printed at info,
// and kept at log.level = "warn" too (only "error" hides it), where it is all that shows
// that a run is alive.
void log_progress(const std::string& message);
// An error line in this process's log file only (nothing without log_to_file), for a message
// the caller prints in its own form: the reason a job ends, the file's last line.
void log_error_in_file(const std::string& message);

}  // namespace topotrain
