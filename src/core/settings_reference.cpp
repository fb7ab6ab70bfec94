#include "topotrain/core/settings_reference.h"

#include <algorithm>
#include <sstream>

#include "topotrain/core/error.h"
#include "topotrain/core/settings.h"

namespace topotrain {
namespace {

const char* type_name(SettingType type) {
  switch (type) {
    case SettingType::boolean: return "bool";
    case SettingType::integer: return "int";
    case SettingType::real: return "real";
    case SettingType::string: return "string";
  }
  return "?";
}

std::string default_text(const SettingValue& value) {
  if (std::holds_alternative<bool>(value)) return std::get<bool>(value) ? "true" : "false";
  if (std::holds_alternative<std::int64_t>(value)) return std::to_string(std::get<std::int64_t>(value));
  if (std::holds_alternative<double>(value)) return cat(std::get<double>(value));
  if (std::holds_alternative<std::string>(value)) return "\"" + std::get<std::string>(value) + "\"";
  return "unset";
}

}  // namespace

std::vector<SettingReferenceRow> settings_reference_rows(const std::string& job) {
  std::vector<SettingReferenceRow> rows;
  for (const auto& spec : setting_specs())
    if (job.empty() || read_by_job(spec, job))
        rows.push_back({spec.key, type_name(spec.type), default_text(spec.default_value),
                      spec.range.describe(spec.type), spec.help});
  return rows;
}

std::string settings_reference_text(const std::string& job) {
  const auto rows = settings_reference_rows(job);
  std::size_t key = 3, def = 7, accepts = 7;
  for (const auto& row : rows) {
    key = std::max(key, row.key.size());
    def = std::max(def, row.default_value.size());
    accepts = std::max(accepts, row.accepts.size());
  }
  std::ostringstream out;
  out << (job.empty() ? std::string("Run settings") : "Run settings of " + job)
      << " (TOML tables in the topology file or --config FILE; --set key=value wins):\n\n";
  auto line = [&](const std::string& k, const std::string& t, const std::string& d, const std::string& a,
                  const std::string& m) {
    out << "  " << k << std::string(key + 2 - k.size(), ' ') << t << std::string(8 - t.size(), ' ') << d
        << std::string(def + 2 - d.size(), ' ') << a << std::string(accepts + 2 - a.size(), ' ') << m << '\n';
  };
  line("key", "type", "default", "accepts", "meaning");
  for (const auto& row : rows) line(row.key, row.type, row.default_value, row.accepts, row.meaning);
  return out.str();
}

std::string settings_reference_markdown() {
  std::ostringstream out;
  out << "| key | type | default | accepts | meaning |\n|---|---|---|---|---|\n";
  for (const auto& row : settings_reference_rows()) {
    // A '|' inside a cell would end it: Markdown tables write it escaped.
    std::string accepts = row.accepts;
    for (std::size_t at = accepts.find('|'); at != std::string::npos; at = accepts.find('|', at + 2))
      accepts.replace(at, 1, "\\|");
    out << "| " << row.key << " | " << row.type << " | " << row.default_value << " | " << accepts << " | "
        << row.meaning << " |\n";
  }
  return out.str();
}

}  // namespace topotrain
