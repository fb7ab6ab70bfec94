// The settings reference: one row per key of the schema (key, type, default, accepted
// values, meaning), printed by `--help-settings` as aligned text and kept in README.md as
// a Markdown table. Both come from the same rows, so the two cannot disagree.
#pragma once

#include <string>
#include <vector>

namespace topotrain {

struct SettingReferenceRow {
  std::string key, type, default_value, accepts, meaning;
};

std::vector<SettingReferenceRow> settings_reference_rows();
// Aligned columns, for a terminal.
std::string settings_reference_text();
// "| key | type | default | accepts | meaning |", the separator line, then one line per key.
std::string settings_reference_markdown();

}  // namespace topotrain
