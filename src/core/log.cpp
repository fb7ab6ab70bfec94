#include "topotrain/core/log.h"

#include <cstdio>
#include <mutex>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

struct LogState {
  int rank = 0;
  std::string role;
  LogLevel level = LogLevel::info;
  bool all_ranks = false;
  std::mutex mutex;  // background threads (prefetch, checkpoint writer) log too
};

LogState& state() {
  static LogState s;
  return s;
}

void emit(LogLevel level, const std::string& message, bool any_rank = false) {
  LogState& s = state();
  if (level < s.level) return;
  if (level <= LogLevel::info && s.rank != 0 && !s.all_ranks && !any_rank) return;
  static const char* const kTags[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard<std::mutex> lock(s.mutex);
  FILE* stream = level >= LogLevel::warn ? stderr : stdout;
  std::fprintf(stream, "%s %s%s\n", log_prefix().c_str(), kTags[static_cast<int>(level)], message.c_str());
  std::fflush(stream);
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

void log_debug(const std::string& message) { emit(LogLevel::debug, message); }
void log_info(const std::string& message) { emit(LogLevel::info, message); }
void log_info_here(const std::string& message) { emit(LogLevel::info, message, true); }
void log_warn(const std::string& message) { emit(LogLevel::warn, message); }
void log_error(const std::string& message) { emit(LogLevel::error, message); }

}  // namespace topotrain
