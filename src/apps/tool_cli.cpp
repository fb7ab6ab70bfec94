#include "tool_cli.h"

#include <cstdio>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

CLI::Validator bound_check(double bound, bool inclusive) {
  const std::string rule = cat(inclusive ? ">= " : "> ", bound);
  return CLI::Validator(
      [bound, inclusive, rule](std::string& input) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(input, value)) return cat("'", input, "' is not a number");
        if (inclusive ? value >= bound : value > bound) return "";
        return cat("must be ", rule, " (got ", input, ")");
      },
      rule);
}

}  // namespace

CLI::Validator at_least(double bound) { return bound_check(bound, true); }
CLI::Validator greater_than(double bound) { return bound_check(bound, false); }

int run_tool(CLI::App& app, int argc, char** argv, const std::function<void()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const std::string name = app.get_name();
  try {
    body();
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace topotrain
