#include "topotrain/core/settings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "topotrain/core/error.h"
#include "topotrain/core/suggest.h"

namespace topotrain {
namespace {

std::vector<std::string> all_keys() {
  std::vector<std::string> keys;
  for (const auto& spec : setting_specs()) keys.push_back(spec.key);
  return keys;
}

std::string unknown_key_message(const std::string& key, const std::string& origin) {
  std::string hint = did_you_mean(key, all_keys());
  if (hint.empty()) {
    // "token_budget" without its table, or under the wrong table.
    std::string leaf = key.substr(key.find('.') + 1);
    for (const auto& spec : setting_specs())
      if (spec.key.substr(spec.key.find('.') + 1) == leaf) hint = " (did you mean '" + spec.key + "'?)";
  }
  return cat(origin, ": unknown setting '", key, "'", hint, "; `--help-settings` lists every key");
}

std::string render(const SettingValue& value) {
  std::ostringstream out;
  if (std::holds_alternative<bool>(value)) out << (std::get<bool>(value) ? "true" : "false");
  if (std::holds_alternative<std::int64_t>(value)) out << std::get<std::int64_t>(value);
  if (std::holds_alternative<double>(value)) {
    double v = std::get<double>(value);
    out << std::setprecision(10) << v;
    if (std::floor(v) == v && std::fabs(v) < 1e15 && out.str().find_first_of(".e") == std::string::npos)
      out << ".0";
  }
  if (std::holds_alternative<std::string>(value)) out << std::quoted(std::get<std::string>(value));
  return out.str();
}

std::string unquoted(const std::string& text) {
  if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
    return text.substr(1, text.size() - 2);
  return text;
}

// One of the words an integer key takes in place of a number.
bool is_word_of(const SettingSpec& spec, const std::string& text) {
  const auto& words = spec.range.choices;
  return spec.type == SettingType::integer && std::find(words.begin(), words.end(), text) != words.end();
}

// "an integer", or "an integer or \"auto\"" for a key that also takes words.
std::string type_text(const SettingSpec& spec) {
  std::string text = to_string(spec.type);
  if (spec.type == SettingType::integer)
    for (const auto& word : spec.range.choices) text += " or \"" + word + "\"";
  return text;
}

// `shown`: the value as the user wrote it or as render() prints it; `word`: a string value
// (a choice), whose fix is a list of the choices.
std::string out_of_range_message(const SettingSpec& spec, const std::string& shown, bool word,
                                 const std::string& origin) {
  const std::string accepts = spec.range.describe(spec.type);
  std::string fix;
  if (word)
    fix = cat("use one of ", accepts, did_you_mean(unquoted(shown), spec.range.choices));
  else
    fix = cat("set ", spec.key, " to a value ", accepts.front() == '[' || accepts.front() == '(' ? "in " : "", accepts);
  return cat(origin, ": ", spec.key, " = ", shown, " is outside what it accepts (", accepts, "; ", spec.help,
             "): ", fix);
}

// Parses command-line text as the key's type. Integers accept '_' separators and
// exact scientific notation ("1e9" tokens), as users write large token counts that way;
// plain digits are read exactly (a double would round 9223372036854775807 up past int64).
// Booleans are TOML's words only, as in a run file.
SettingValue parse_as(const SettingSpec& spec, std::string text, const std::string& origin) {
  auto fail = [&]() -> SettingValue {
    throw ConfigError(cat(origin, ": setting '", spec.key, "' takes ", type_text(spec), ", got '", text, "'"));
  };
  // A number of the right type that no int64 or double holds is out of range, not mistyped.
  auto too_large = [&]() -> SettingValue { throw ConfigError(out_of_range_message(spec, text, false, origin)); };
  switch (spec.type) {
    case SettingType::string:
      return unquoted(text);
    case SettingType::boolean:
      if (text == "true") return true;
      if (text == "false") return false;
      return fail();
    case SettingType::integer:
    case SettingType::real: {
      if (spec.type == SettingType::integer && is_word_of(spec, unquoted(text))) return unquoted(text);
      std::string digits;
      for (char c : text)
        if (c != '_') digits += c;
      if (digits.empty()) return fail();
      errno = 0;
      char* end = nullptr;
      const double v = std::strtod(digits.c_str(), &end);
      if (*end != '\0' || std::isnan(v)) return fail();
      if (errno == ERANGE || !std::isfinite(v)) return too_large();
      if (spec.type == SettingType::real) return v;
      if (std::floor(v) != v) return fail();
      if (digits.find_first_of(".eE") == std::string::npos) {
        errno = 0;
        const long long exact = std::strtoll(digits.c_str(), nullptr, 10);
        if (errno == ERANGE) return too_large();
        return static_cast<std::int64_t>(exact);
      }
      if (std::fabs(v) >= 9.2e18) return too_large();
      return static_cast<std::int64_t>(v);
    }
  }
  return fail();
}

// A range's end as a reader writes it: whole numbers without exponent ("2147483647").
std::string bound(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  return cat(v);
}

std::string trimmed(const std::string& text) {
  const char* space = " \t";
  const auto first = text.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

bool has_type(const SettingValue& value, SettingType type) {
  switch (type) {
    case SettingType::boolean: return std::holds_alternative<bool>(value);
    case SettingType::integer: return std::holds_alternative<std::int64_t>(value);
    case SettingType::real: return std::holds_alternative<double>(value);
    case SettingType::string: return std::holds_alternative<std::string>(value);
  }
  return false;
}

}  // namespace

const char* to_string(SettingType type) {
  switch (type) {
    case SettingType::boolean: return "a boolean (true/false)";
    case SettingType::integer: return "an integer";
    case SettingType::real: return "a number";
    case SettingType::string: return "a string";
  }
  return "?";
}

bool SettingRange::admits(const SettingValue& value) const {
  if (std::holds_alternative<std::string>(value))
    return choices.empty() || std::find(choices.begin(), choices.end(), std::get<std::string>(value)) != choices.end();
  double v = 0;
  if (std::holds_alternative<std::int64_t>(value)) v = static_cast<double>(std::get<std::int64_t>(value));
  else if (std::holds_alternative<double>(value)) v = std::get<double>(value);
  else return true;
  if (!std::isfinite(v)) return false;
  return (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
}

std::string SettingRange::describe(SettingType type) const {
  if (type == SettingType::boolean) return "true | false";
  if (type == SettingType::string) {
    std::string list;
    for (const auto& choice : choices) list += (list.empty() ? "" : " | ") + choice;
    return list.empty() ? "any" : list;
  }
  const bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  std::string numbers = type == SettingType::real ? "finite" : "any";
  if (has_min && has_max) numbers = cat(min_open ? '(' : '[', bound(min), ", ", bound(max), max_open ? ')' : ']');
  else if (has_min) numbers = cat(min_open ? "> " : ">= ", bound(min));
  else if (has_max) numbers = cat(max_open ? "< " : "<= ", bound(max));
  for (const auto& word : choices) numbers += " | " + word;  // an integer key's words
  return numbers;
}

const SettingSpec* find_setting(const std::string& key) {
  for (const auto& spec : setting_specs())
    if (spec.key == key) return &spec;
  return nullptr;
}

bool read_by_job(const SettingSpec& spec, const std::string& job) { return spec.job.empty() || spec.job == job; }

void Settings::check_read_by(const std::string& job) const {
  for (const auto& spec : setting_specs()) {
    const Entry& set = entries_.at(spec.key);
    if (read_by_job(spec, job) || set.origin == "default") continue;
    throw ConfigError(cat(set.origin, ": ", spec.key, " is a ", spec.job, " setting; ", job,
                          " does not read it, so it would do nothing: remove it (`", job,
                          " --help-settings` lists what ", job, " reads)"));
  }
}

Settings::Settings() {
  for (const auto& spec : setting_specs()) entries_[spec.key] = Entry{spec.default_value, "default"};
}

void Settings::set(const std::string& key, const SettingValue& value, const std::string& origin) {
  const SettingSpec* spec = find_setting(key);
  if (!spec) throw ConfigError(unknown_key_message(key, origin));
  SettingValue v = value;
  if (spec->type == SettingType::real && std::holds_alternative<std::int64_t>(v))
    v = static_cast<double>(std::get<std::int64_t>(v));
  const bool word = std::holds_alternative<std::string>(v) && spec->type == SettingType::integer;
  if (word && !is_word_of(*spec, std::get<std::string>(v)))
    throw ConfigError(cat(origin, ": setting '", key, "' takes ", type_text(*spec), ", got ", render(value),
                          did_you_mean(std::get<std::string>(v), spec->range.choices)));
  if (!word && !has_type(v, spec->type))
    throw ConfigError(cat(origin, ": setting '", key, "' takes ", type_text(*spec), ", got ", render(value)));
  if (!spec->range.admits(v))
    throw ConfigError(out_of_range_message(*spec, render(v), std::holds_alternative<std::string>(v), origin));
  entries_[key] = Entry{v, origin};
}

void Settings::set_from_assignment(const std::string& assignment) {
  auto eq = assignment.find('=');
  std::string key = trimmed(assignment.substr(0, eq));
  if (eq == std::string::npos || key.empty())
    throw ConfigError(cat("--set ", assignment, ": expected key=value, e.g. --set train.token_budget=32768"));
  const SettingSpec* spec = find_setting(key);
  if (!spec) throw ConfigError(unknown_key_message(key, "--set"));
  const std::string value = trimmed(assignment.substr(eq + 1));
  // No key takes an empty value, so `--set key=` is free to mean "as if never set": the
  // only way to take back a topology's value (model.preset, so that model.weights gives the
  // shape) without editing the file.
  if (value.empty()) {
    entries_[key] = Entry{spec->default_value, "default"};
    return;
  }
  set(key, parse_as(*spec, value, "--set"), "--set");
}

const Settings::Entry& Settings::entry(const std::string& key, SettingType type) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) throw std::logic_error("setting '" + key + "' is not in the schema");
  read_.insert(key);
  const SettingSpec* spec = find_setting(key);
  if (spec->type != type)
    throw std::logic_error(cat("setting '", key, "' is ", to_string(spec->type), ", read as ", to_string(type)));
  if (std::holds_alternative<std::monostate>(it->second.value))
    throw ConfigError(cat("setting '", key, "' is not set; set it in the run file or with --set ", key, "=..."));
  return it->second;
}

bool Settings::has(const std::string& key) const {
  read_.insert(key);
  auto it = entries_.find(key);
  return it != entries_.end() && !std::holds_alternative<std::monostate>(it->second.value);
}

std::int64_t Settings::integer(const std::string& key) const {
  const SettingValue& value = entry(key, SettingType::integer).value;
  if (std::holds_alternative<std::string>(value))
    throw std::logic_error(cat("setting '", key, "' holds \"", std::get<std::string>(value), "\", not a number"));
  return std::get<std::int64_t>(value);
}

std::string Settings::word(const std::string& key) const {
  const SettingValue& value = entry(key, SettingType::integer).value;
  return std::holds_alternative<std::string>(value) ? std::get<std::string>(value) : std::string();
}
double Settings::real(const std::string& key) const { return std::get<double>(entry(key, SettingType::real).value); }
bool Settings::boolean(const std::string& key) const { return std::get<bool>(entry(key, SettingType::boolean).value); }
const std::string& Settings::string(const std::string& key) const {
  return std::get<std::string>(entry(key, SettingType::string).value);
}

const std::string& Settings::origin(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) throw std::logic_error("setting '" + key + "' is not in the schema");
  return it->second.origin;
}

std::string Settings::to_toml(const std::string& job) const {
  std::ostringstream out;
  std::string table;
  for (const auto& spec : setting_specs()) {
    if (!job.empty() && !read_by_job(spec, job)) continue;
    std::string section = spec.key.substr(0, spec.key.find('.'));
    if (section != table) {
      out << (table.empty() ? "" : "\n") << '[' << section << "]\n";
      table = section;
    }
    const Entry& e = entries_.at(spec.key);
    std::string name = spec.key.substr(section.size() + 1);
    if (std::holds_alternative<std::monostate>(e.value)) {
      out << "# " << name << " is unset\n";
      continue;
    }
    out << name << " = " << render(e.value);
    if (e.origin != "default") out << "  # " << e.origin;
    out << '\n';
  }
  return out.str();
}

std::string Settings::changes_since(const Settings& earlier) const {
  auto text = [](const SettingValue& value) {
    return std::holds_alternative<std::monostate>(value) ? std::string("unset") : render(value);
  };
  std::string changes;
  for (const auto& spec : setting_specs()) {
    const Entry& now = entries_.at(spec.key);
    const std::string before = text(earlier.entries_.at(spec.key).value), after = text(now.value);
    if (before == after) continue;
    changes += cat(changes.empty() ? "" : "; ", spec.key, " ", before, " -> ", after, " (", now.origin, ")");
  }
  return changes;
}

}  // namespace topotrain
