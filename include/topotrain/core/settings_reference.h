// The settings reference: one row per key of the schema (key, type, default, accepted
// values, meaning), printed by `JOB --help-settings` as aligned text (the keys that job
// reads) and kept in README.md as a Markdown table (every key). Both come from the same
// rows, so the two cannot disagree.
#pragma once

#include <string>
#include <vector>

namespace topotrain {

struct SettingReferenceRow {
  std::string key, type, default_value, accepts, meaning;
};

// Every key; with a `job` ("moe_train"), the keys that job reads.
std::vector<SettingReferenceRow> settings_reference_rows(const std::string& job = "");
// Aligned columns, for a terminal (`JOB --help-settings`).
std::string settings_reference_text(const std::string& job = "");
// "| key | type | default | accepts | meaning |", the separator line, then one line per key.
std::string settings_reference_markdown();

}  // namespace topotrain
