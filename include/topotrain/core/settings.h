// Run settings: the [model] [data] [train] [checkpoint] [log] tables of a run file,
// then `--config FILE` files, then `--set key=value` overrides, later ones winning.
//
// Every key is declared once in the schema (settings_schema.cpp) with its type, default,
// the values it accepts and a line of help; a key outside the schema is an error that
// suggests the nearest known key, and a value of the wrong type or outside the key's range
// is an error naming the key, where the value came from, the value and what is accepted.
// Components never read Settings themselves: train/ maps settings onto each component's
// own small config struct.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace topotrain {

// std::monostate means "not set" (only keys declared without a default may be unset).
using SettingValue = std::variant<std::monostate, bool, std::int64_t, double, std::string>;

enum class SettingType { boolean, integer, real, string };
const char* to_string(SettingType type);

// The values a setting accepts beyond its type: numbers within [min, max] (an end may be
// open, and reals must be finite), strings among `choices` when there are any. An integer
// key with `choices` also takes those words in place of a number (train.token_budget =
// "auto"); Settings::word says which one it holds.
struct SettingRange {
  double min = -HUGE_VAL;
  bool min_open = false;
  double max = HUGE_VAL;
  bool max_open = false;
  std::vector<std::string> choices;

  bool admits(const SettingValue& value) const;
  // "[0, 1]", ">= 1", "> 0", "auto | bf16 | fp32", "[1, 2147483647] | auto"; "any" when
  // nothing is excluded.
  std::string describe(SettingType type) const;
};

struct SettingSpec {
  SettingSpec(std::string key_, SettingType type_, SettingValue default_value_, SettingRange range_, std::string help_,
              std::string job_ = {})
      : key(std::move(key_)), type(type_), default_value(std::move(default_value_)), range(std::move(range_)),
        help(std::move(help_)), job(std::move(job_)) {}
  std::string key;  // "train.token_budget"
  SettingType type;
  SettingValue default_value;
  SettingRange range;
  std::string help;
  std::string job;  // the one job that reads it ("dflash_train"); empty: every job does
};

// The schema, in the order settings are printed.
const std::vector<SettingSpec>& setting_specs();
const SettingSpec* find_setting(const std::string& key);
// Whether `job` ("moe_train") reads `spec`.
bool read_by_job(const SettingSpec& spec, const std::string& job);

class Settings {
 public:
  Settings();  // every key at its default

  // Sets a key, checking that it exists, that the value has its type (an integer is
  // accepted for a real) and that it lies in the key's range. `origin` says where the
  // value came from, for messages and the resolved print-out: "topology/cpu4.toml", "--set".
  void set(const std::string& key, const SettingValue& value, const std::string& origin);
  // "key=value" from the command line (spaces around key and value are ignored); the
  // value is parsed as the key's type. "key=" returns the key to its default (unset where it
  // has none) with origin "default", whatever set it before.
  void set_from_assignment(const std::string& assignment);

  bool has(const std::string& key) const;
  // An integer key's number; std::logic_error when it holds one of its words (ask word()).
  std::int64_t integer(const std::string& key) const;
  // The word an integer key holds in place of a number ("auto"); empty when it holds a number.
  std::string word(const std::string& key) const;
  double real(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::string& string(const std::string& key) const;
  const std::string& origin(const std::string& key) const;
  // Whether `key`'s value was asked for (has() or a typed read) since construction: how a
  // test shows that every key a job reads is consumed by the run's configuration.
  bool was_read(const std::string& key) const { return read_.count(key) > 0; }

  // Throws ConfigError naming the key, where it was set and the job that reads it, when a
  // key that `job` does not read was set (it would do nothing).
  void check_read_by(const std::string& job) const;

  // The resolved settings as TOML, one table per section, non-default values marked with
  // where they came from; with `job`, only the keys that job reads. Stored in every
  // checkpoint (all keys), in a run's settings.toml and printed by --print-settings and
  // --dry-run (the job's keys).
  std::string to_toml(const std::string& job = {}) const;

  // The keys whose values differ from `earlier`'s, in schema order, as "train.lr 0.001 ->
  // 0.0005 (--set)" joined by "; " (an unset value reads "unset"); "" when none does. How a
  // resumed launch shows what it changed of the settings its checkpoint was saved with.
  std::string changes_since(const Settings& earlier) const;

 private:
  struct Entry {
    SettingValue value;
    std::string origin;
  };
  const Entry& entry(const std::string& key, SettingType type) const;
  std::map<std::string, Entry> entries_;
  mutable std::set<std::string> read_;
};

}  // namespace topotrain
