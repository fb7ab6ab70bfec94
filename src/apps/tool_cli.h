// The command line that topotrain-prepare, topotrain-report and topotrain-export share.
//
// Exit status as the trainers' (README, "Exit codes"): 0 done (also --help), 2 bad arguments
// or input (CLI11's parse errors, ConfigError), 1 any other failure. Errors are printed as
// "<tool>: error: <message>".
//
// Range checks say the rule ("--skip: must be >= 0 (got -1)"): CLI11's own ranges print an
// open end as the largest double, 310 digits, and PositiveNumber's as ">= 0.000000".
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace topotrain {

// Parses argv with `app`, then runs `body`; returns the process's exit status.
int run_tool(CLI::App& app, int argc, char** argv, const std::function<void()>& body);

// A number >= bound.
CLI::Validator at_least(double bound);
// A number > bound.
CLI::Validator greater_than(double bound);

}  // namespace topotrain
