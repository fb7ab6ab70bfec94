#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "topotrain/core/error.h"
#include "topotrain/core/run_file.h"
#include "topotrain/core/settings.h"

using namespace topotrain;

namespace {

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Settings, DefaultsComeFromTheSchema) {
  Settings s;
  EXPECT_EQ(s.integer("train.grad_accum"), 1);
  EXPECT_DOUBLE_EQ(s.real("train.bucket_mb"), 25.0);
  EXPECT_FALSE(s.boolean("log.all_ranks"));
  EXPECT_EQ(s.string("checkpoint.dir"), "checkpoints");
  EXPECT_FALSE(s.has("data.path"));
  EXPECT_EQ(s.origin("train.lr"), "default");
  EXPECT_NE(error_of([&] { s.string("data.path"); }).find("'data.path' is not set"), std::string::npos);
}

TEST(Settings, RunFileTablesThenOverrides) {
  Settings s;
  merge_settings("[train]\ntoken_budget = 4096\nlr = 1\n[log]\nall_ranks = true\n", "run.toml", s);
  EXPECT_EQ(s.integer("train.token_budget"), 4096);
  EXPECT_DOUBLE_EQ(s.real("train.lr"), 1.0);  // an integer is accepted for a real
  EXPECT_TRUE(s.boolean("log.all_ranks"));
  EXPECT_EQ(s.origin("train.token_budget"), "run.toml:2:16");
  s.set_from_assignment("train.token_budget=32_768");
  s.set_from_assignment("train.max_tokens=1e9");
  s.set_from_assignment("data.path=\"/data/x.h5\"");
  s.set_from_assignment("train.lr=6e-4");
  EXPECT_EQ(s.integer("train.token_budget"), 32768);
  EXPECT_EQ(s.integer("train.max_tokens"), 1000000000);
  EXPECT_EQ(s.string("data.path"), "/data/x.h5");
  EXPECT_DOUBLE_EQ(s.real("train.lr"), 6e-4);
  EXPECT_EQ(s.origin("train.token_budget"), "--set");
}

// `--set key=` is how a user takes back what a topology set without editing it: the key
// returns to its default (unset where it has none), as if never set.
TEST(Settings, AnEmptyAssignmentReturnsTheKeyToItsDefault) {
  Settings s;
  merge_settings("[model]\npreset = \"tiny-dense\"\nweights = \"ckpt\"\n[train]\nlr = 1\n", "run.toml", s);
  s.set_from_assignment("model.preset=");
  s.set_from_assignment(" model.weights = ");
  s.set_from_assignment("train.lr=");
  EXPECT_EQ(s.string("model.preset"), "tiny-moe");
  EXPECT_EQ(s.origin("model.preset"), "default");
  EXPECT_FALSE(s.has("model.weights"));
  EXPECT_EQ(s.origin("model.weights"), "default");
  EXPECT_DOUBLE_EQ(s.real("train.lr"), std::get<double>(find_setting("train.lr")->default_value));
  EXPECT_EQ(s.changes_since(Settings()), "");
  EXPECT_NE(error_of([&] { s.set_from_assignment("model.presett="); }).find("did you mean 'model.preset'?"),
            std::string::npos);
}

TEST(Settings, UnknownKeySuggestsNearest) {
  Settings s;
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.token_budgt=1"); })
                .find("unknown setting 'train.token_budgt' (did you mean 'train.token_budget'?)"),
            std::string::npos);
  // The right key under the wrong table, or no table at all.
  EXPECT_NE(error_of([&] { s.set_from_assignment("token_budget=1"); })
                .find("did you mean 'train.token_budget'?"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[data]\ngrad_accum = 2\n", "run.toml", s); })
                .find("run.toml:2:14: unknown setting 'data.grad_accum' (did you mean 'train.grad_accum'?)"),
            std::string::npos);
}

TEST(Settings, WrongTypesNameKeyAndType) {
  Settings s;
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.grad_accum=ten"); })
                .find("setting 'train.grad_accum' takes an integer, got 'ten'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.grad_accum=2.5"); }).find("takes an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("log.all_ranks=yes"); }).find("takes a boolean"), std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[train]\ntoken_budget = \"big\"\n", "run.toml", s); })
                .find("run.toml:2:16: setting 'train.token_budget' takes an integer or \"auto\", got \"big\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[train]\nlr = [1, 2]\n", "run.toml", s); })
                .find("'train.lr' takes a number, not a list"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.lr"); }).find("expected key=value"), std::string::npos);
}

TEST(Settings, BooleansAreTomlWordsOnCommandLinesToo) {
  Settings s;
  s.set_from_assignment("log.all_ranks=true");
  EXPECT_TRUE(s.boolean("log.all_ranks"));
  // A run file refuses 1 for a boolean; --set does too, rather than guessing.
  EXPECT_NE(error_of([&] { s.set_from_assignment("log.all_ranks=1"); }).find("takes a boolean"), std::string::npos);
}

TEST(Settings, NumbersNoInt64OrDoubleHoldsAreOutOfRangeNotMistyped) {
  Settings s;
  s.set_from_assignment("train.max_steps=9223372036854775807");  // exact, not rounded through a double
  EXPECT_EQ(s.integer("train.max_steps"), 9223372036854775807LL);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.max_steps=9223372036854775808"); })
                .find("--set: train.max_steps = 9223372036854775808 is outside what it accepts (>= 0;"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.max_tokens=1e19"); })
                .find("train.max_tokens = 1e19 is outside what it accepts"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.lr=1e400"); })
                .find("train.lr = 1e400 is outside what it accepts (>= 0;"),
            std::string::npos);
}

TEST(Settings, RangesThatKeepComponentsFromWrapping) {
  Settings s;
  // A micro-batch needs a token and its next-token target.
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.token_budget=1"); })
                .find("train.token_budget = 1 is outside what it accepts ([2, 2147483647] | auto;"),
            std::string::npos);
  s.set_from_assignment("train.token_budget=2");
  // The reducer's bucket size in bytes stays an exact int64.
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.bucket_mb=1e30"); })
                .find("train.bucket_mb = 1e+30 is outside what it accepts ((0, 1048576];"),
            std::string::npos);
  s.set_from_assignment("train.bucket_mb=1048576");
  EXPECT_DOUBLE_EQ(s.real("train.bucket_mb"), 1048576.0);
}

TEST(Settings, ConfigFilesCannotCarryTopology) {
  const char* path = "settings_test_config.toml";
  {
    std::ofstream out(path);
    out << "[[roles]]\nrole = \"trainer\"\nranks = [0]\n";
  }
  std::string topology = std::string(TOPOTRAIN_SOURCE_DIR) + "/topology/cpu4.toml";
  EXPECT_NE(error_of([&] { load_run(topology, {path}, {}); }).find("belongs in the topology file"),
            std::string::npos);
  std::remove(path);
}

TEST(Settings, LoadRunAppliesFileThenConfigThenSet) {
  const char* path = "settings_test_config.toml";
  {
    std::ofstream out(path);
    out << "[train]\ngrad_accum = 5\ntoken_budget = 512\n";
  }
  std::string topology = std::string(TOPOTRAIN_SOURCE_DIR) + "/topology/cpu4.toml";
  RunFile run = load_run(topology, {path}, {"train.token_budget=256"});
  EXPECT_EQ(run.topology.name, "cpu4");
  EXPECT_EQ(run.settings.integer("train.epochs"), 2);  // from the topology file
  EXPECT_EQ(run.settings.integer("train.grad_accum"), 5);   // --config wins over the file
  EXPECT_EQ(run.settings.integer("train.token_budget"), 256);  // --set wins over both
  EXPECT_NE(run.topology_text.find("[[roles]]"), std::string::npos);
  std::remove(path);
}

TEST(Settings, ResolvedTextRoundTrips) {
  Settings s;
  s.set_from_assignment("train.token_budget=777");
  s.set_from_assignment("train.lr=0.5");
  s.set_from_assignment("model.preset=qwen3-0.6b");
  std::string text = s.to_toml();
  EXPECT_NE(text.find("token_budget = 777  # --set"), std::string::npos) << text;
  Settings back;
  merge_settings(text, "resolved", back);
  for (const auto& spec : setting_specs()) {
    EXPECT_EQ(back.has(spec.key), s.has(spec.key)) << spec.key;
    if (!s.has(spec.key)) continue;
    switch (spec.type) {
      case SettingType::integer: EXPECT_EQ(back.integer(spec.key), s.integer(spec.key)) << spec.key; break;
      case SettingType::real: EXPECT_DOUBLE_EQ(back.real(spec.key), s.real(spec.key)) << spec.key; break;
      case SettingType::boolean: EXPECT_EQ(back.boolean(spec.key), s.boolean(spec.key)) << spec.key; break;
      case SettingType::string: EXPECT_EQ(back.string(spec.key), s.string(spec.key)) << spec.key; break;
    }
  }
}

// What a resumed launch reports: every key whose value differs from the stored settings',
// read back from their TOML, in schema order, with the new value's origin; a value merely
// set again from another place is no change.
TEST(Settings, ChangesSinceNameEachChangedKeyBothValuesAndTheOrigin) {
  Settings saved;
  saved.set_from_assignment("train.token_budget=16384");
  saved.set_from_assignment("train.lr=0.001");
  saved.set_from_assignment("data.path=a.h5");
  Settings stored;
  merge_settings(saved.to_toml(), "checkpoint", stored);
  Settings now;
  now.set("train.token_budget", std::int64_t{8192}, "--set");
  now.set("train.lr", 0.001, "run.toml");
  now.set("train.token_budget", std::int64_t{8192}, "--set");
  EXPECT_EQ(now.changes_since(stored),
            "data.path \"a.h5\" -> unset (default); train.token_budget 16384 -> 8192 (--set)");
  now.set("data.path", std::string("a.h5"), "--set");
  now.set("train.token_budget", std::int64_t{16384}, "--set");
  EXPECT_EQ(now.changes_since(stored), "");
  now.set_from_assignment("train.token_budget=auto");
  EXPECT_EQ(now.changes_since(stored), "train.token_budget 16384 -> \"auto\" (--set)");
}

TEST(Settings, SetTrimsSpacesAroundKeyAndValue) {
  Settings s;
  s.set_from_assignment("train.lr = 7e-4");
  s.set_from_assignment("  model.dtype =  \"bf16\" ");
  s.set_from_assignment("train.grad_accum=\t4");
  EXPECT_DOUBLE_EQ(s.real("train.lr"), 7e-4);
  EXPECT_EQ(s.string("model.dtype"), "bf16");
  EXPECT_EQ(s.integer("train.grad_accum"), 4);
  EXPECT_NE(error_of([&] { s.set_from_assignment(" = 4"); }).find("expected key=value"), std::string::npos);
}

// Values outside a key's range are refused where they are set, naming the origin, the
// value, what the key accepts and the fix, instead of failing late in the run.
TEST(Settings, ValuesOutsideTheRangeNameOriginValueAndRange) {
  Settings s;
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.token_budget=-5"); })
                .find("--set: train.token_budget = -5 is outside what it accepts ([2, 2147483647] | auto;"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.lr=-1e-4"); })
                .find("set train.lr to a value >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[train]\nwarmup = 1.5\n", "run.toml", s); })
                .find("run.toml:2:10: train.warmup = 1.5 is outside what it accepts ([0, 1];"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[train]\nwarmup = 1.5\n", "run.toml", s); })
                .find("set train.warmup to a value in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.beta2=1"); }).find("[0, 1)"), std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.eps=0"); }).find("> 0"), std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("checkpoint.every_steps=-2"); }).find(">= -1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("model.block_size=1"); }).find("[2, "), std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.token_budget=3e9"); }).find("[2, 2147483647]"),
            std::string::npos);
  // TOML writes non-finite reals; no setting takes one.
  EXPECT_NE(error_of([&] { merge_settings("[train]\nclip = inf\n", "run.toml", s); })
                .find("train.clip = inf is outside"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[train]\nlr = nan\n", "run.toml", s); }).find("train.lr = nan"),
            std::string::npos);
  // Strings with fixed choices list them, with the nearest one.
  EXPECT_NE(error_of([&] { s.set_from_assignment("model.dtype=bf61"); })
                .find("model.dtype = \"bf61\" is outside what it accepts (auto | bf16 | fp32;"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set_from_assignment("model.dtype=bf61"); })
                .find("use one of auto | bf16 | fp32 (did you mean 'bf16'?)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_settings("[train]\nschedule = \"step\"\n", "run.toml", s); })
                .find("run.toml:2:12: train.schedule = \"step\""),
            std::string::npos);
  // The ends of the ranges themselves are accepted, and a refused value changes nothing.
  s.set_from_assignment("train.warmup=0");
  s.set_from_assignment("train.warmup=1");
  s.set_from_assignment("train.beta1=0");
  s.set_from_assignment("checkpoint.every_steps=-1");
  s.set_from_assignment("model.mask_token_id=-1");
  s.set_from_assignment("train.max_steps=0");
  EXPECT_DOUBLE_EQ(s.real("train.lr"), 3e-4);
  EXPECT_EQ(s.integer("train.token_budget"), 2048);
}

TEST(Settings, EveryDefaultLiesInItsRangeAndEveryNumberHasOne) {
  for (const auto& spec : setting_specs()) {
    if (!std::holds_alternative<std::monostate>(spec.default_value)) {
      EXPECT_TRUE(spec.range.admits(spec.default_value)) << spec.key;
    }
    if (spec.type == SettingType::integer || spec.type == SettingType::real) {
      EXPECT_TRUE(std::isfinite(spec.range.min) || std::isfinite(spec.range.max))
          << spec.key << " accepts any number: give it a range";
    }
  }
}

// A key only another job reads would do nothing: refused with where it was set and which job
// reads it; left at its default it is no error.
TEST(Settings, AKeyTheJobDoesNotReadIsRefused) {
  Settings settings;
  settings.check_read_by("moe_train");
  settings.set("train.anchors", std::int64_t{64}, "run.toml:12:1");
  settings.check_read_by("dflash_train");
  try {
    settings.check_read_by("moe_train");
    FAIL() << "train.anchors accepted by moe_train";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "run.toml:12:1: train.anchors is a dflash_train setting; moe_train does not read it, so it would do "
                 "nothing: remove it (`moe_train --help-settings` lists what moe_train reads)");
  }
}

// train.token_budget takes a number or the word "auto", from --set (quoted or not) and
// from a run file; any other word is refused naming what the key takes, with a suggestion.
TEST(Settings, AnIntegerKeyTakesItsWords) {
  Settings s;
  EXPECT_EQ(s.word("train.token_budget"), "");
  EXPECT_EQ(s.integer("train.token_budget"), 2048);
  s.set_from_assignment("train.token_budget=auto");
  EXPECT_EQ(s.word("train.token_budget"), "auto");
  EXPECT_THROW(s.integer("train.token_budget"), std::logic_error);
  EXPECT_NE(s.to_toml().find("token_budget = \"auto\"  # --set"), std::string::npos);
  s.set_from_assignment("train.token_budget=4096");
  EXPECT_EQ(s.word("train.token_budget"), "");
  s.set_from_assignment("train.token_budget=\"auto\"");
  EXPECT_EQ(s.word("train.token_budget"), "auto");
  merge_settings("[train]\ntoken_budget = 1024\n", "run.toml", s);
  EXPECT_EQ(s.integer("train.token_budget"), 1024);
  merge_settings("[train]\ntoken_budget = \"auto\"\n", "run.toml", s);
  EXPECT_EQ(s.word("train.token_budget"), "auto");
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.token_budget=atuo"); })
                .find("setting 'train.token_budget' takes an integer or \"auto\", got 'atuo'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.set("train.token_budget", std::string("atuo"), "run.toml"); })
                .find("takes an integer or \"auto\", got \"atuo\" (did you mean 'auto'?)"),
            std::string::npos);
  // A key without words takes none.
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.grad_accum=auto"); })
                .find("setting 'train.grad_accum' takes an integer, got 'auto'"),
            std::string::npos);
  EXPECT_EQ(find_setting("train.token_budget")->range.describe(SettingType::integer), "[2, 2147483647] | auto");
  EXPECT_NE(error_of([&] { s.set_from_assignment("train.token_budget=0"); })
                .find("train.token_budget = 0 is outside what it accepts ([2, 2147483647] | auto;"),
            std::string::npos);
}
