#include "topotrain/core/log.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <system_error>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

struct LogState {
  int rank = 0;
  std::string role;
  LogLevel level = LogLevel::info;
  bool all_ranks = false;
  std::FILE* file = nullptr;  // log_to_file's; lives until the process ends
  std::mutex mutex;  // background threads (prefetch, checkpoint writer) log too
};

LogState& state() {
  static LogState s;
  return s;
}

// Where a line goes: the terminal (stdout, or stderr from warnings on) and the log file.
enum class Sink { terminal_and_file, file_only };

// `kept_until`: a line is printed up to the more severe of its level and this log.level (a
// progress line, an info line, is kept until "warn").
void emit(LogLevel level, const std::string& message, bool any_rank = false, LogLevel kept_until = LogLevel::debug,
          Sink sink = Sink::terminal_and_file) {
  LogState& s = state();
  if (std::max(level, kept_until) < s.level) return;
  if (level <= LogLevel::info && s.rank != 0 && !s.all_ranks && !any_rank) return;
  static const char* const kTags[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::string line = cat(log_timestamp(std::time(nullptr)), ' ', log_prefix(), ' ',
                               kTags[static_cast<int>(level)], message, '\n');
  FILE* stream = sink == Sink::file_only ? nullptr : level >= LogLevel::warn ? stderr : stdout;
  for (FILE* out : {stream, s.file}) {
    if (!out) continue;
    std::fputs(line.c_str(), out);
    std::fflush(out);
  }
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  if (text == "debug") return LogLevel::debug;
  if (text == "info") return LogLevel::info;
  if (text == "warn") return LogLevel::warn;
  if (text == "error") return LogLevel::error;
  throw ConfigError(cat("log.level = \"", text, "\": use debug, info, warn or error"));
}

void log_configure(int rank, const std::string& role, LogLevel level, bool all_ranks) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.rank = rank;
  s.role = role;
  s.level = level;
  s.all_ranks = all_ranks;
}

std::string log_prefix() {
  const LogState& s = state();
  return s.role.empty() ? cat("[rank ", s.rank, "]") : cat("[rank ", s.rank, ' ', s.role, "]");
}

std::string log_timestamp(std::time_t when) {
  std::tm local{};
  localtime_r(&when, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string fixed_point(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (std::abs(bytes) < (std::int64_t{1} << 30)) return cat(fixed_point(b / double(1 << 20), 1), " MiB");
  return cat(fixed_point(b / double(1 << 30), 2), " GiB");
}

std::string format_rate(double per_second, const std::string& unit) {
  if (!std::isfinite(per_second)) return cat(per_second, ' ', unit);
  const double magnitude = std::fabs(per_second);
  char text[64];
  if (magnitude < 1) {  // also 0: "0 tok/s", "0.05 tok/s", "0.123 tok/s"
    std::snprintf(text, sizeof text, "%.3g %s", per_second, unit.c_str());
    return text;
  }
  static const char* const kPrefixes[] = {"", "K", "M", "G", "T", "P"};
  constexpr int kLast = static_cast<int>(sizeof kPrefixes / sizeof *kPrefixes) - 1;
  int prefix = 0;
  double value = per_second;
  // Three significant digits; a value that rounds up to 1000 takes the next prefix.
  while (prefix < kLast && std::fabs(value) >= 999.5) {
    value /= 1000;
    ++prefix;
  }
  const double shown = std::fabs(value);
  const int decimals = shown >= 99.95 ? 0 : shown >= 9.995 ? 1 : 2;
  std::snprintf(text, sizeof text, "%.*f %s%s", decimals, value, kPrefixes[prefix], unit.c_str());
  return text;
}

void log_to_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (!file) throw std::system_error(errno, std::generic_category(), "cannot open the log file " + path);
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.file) std::fclose(s.file);
  s.file = file;
}

void log_debug(const std::string& message) { emit(LogLevel::debug, message); }
void log_info(const std::string& message) { emit(LogLevel::info, message); }
void log_info_here(const std::string& message) { emit(LogLevel::info, message, true); }
void log_progress(const std::string& message) { emit(LogLevel::info, message, true, LogLevel::warn); }
void log_error_in_file(const std::string& message) {
  emit(LogLevel::error, message, true, LogLevel::debug, Sink::file_only);
}
void log_warn(const std::string& message) { emit(LogLevel::warn, message); }
void log_error(const std::string& message) { emit(LogLevel::error, message); }

}  // namespace topotrain
