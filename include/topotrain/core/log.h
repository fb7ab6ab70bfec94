// Rank-prefixed logging: "[rank 3 drafter] message". By default only rank 0 prints info
// and debug lines (log.all_ranks = true lets every rank print); warnings and errors print
// from every rank, because the rank that sees a problem is the one that knows about it.
#pragma once

#include <string>

namespace topotrain {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

LogLevel parse_log_level(const std::string& text);  // throws ConfigError naming log.level

// Set once per process after the rank's role is known; before that the prefix is "[rank N]".
void log_configure(int rank, const std::string& role, LogLevel level, bool all_ranks);
std::string log_prefix();

void log_debug(const std::string& message);
void log_info(const std::string& message);
// An info line from whichever rank calls it: for news only one rank other than 0 has,
// such as the first drafter's progress in a pipeline whose rank 0 is a target.
void log_info_here(const std::string& message);
void log_warn(const std::string& message);
void log_error(const std::string& message);

}  // namespace topotrain
