#include <gtest/gtest.h>

#include "../config_error_text.h"
#include <hdf5.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <string>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"
#include "topotrain/store/checkpoint_file.h"
#include "topotrain/store/checkpoint_reader.h"
#include "topotrain/store/checkpoint_writer.h"

using namespace topotrain;

namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    // The run directory itself does not exist yet: the writer creates it.
    temp_ = make_temp_directory("topotrain-ckpt-");
    dir_ = join_path(temp_, "run");
  }
  void TearDown() override { remove_tree(temp_); }
  const std::string& dir() const { return dir_; }
  std::string temp_, dir_;
};

// A state with every dtype a trainer stores, filled with bit patterns that a lossy
// conversion would change (NaN payloads, subnormals, negative zero, extreme int64s).
// A CPU generator, not torch::manual_seed: seeding would initialise CUDA on a GPU build,
// and the forked writer below cannot use CUDA after that.
CheckpointState sample_state(std::int64_t step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(step));
  CheckpointState state;
  state.step = step;
  state.tensors["model/embed_tokens.weight"] = torch::randn({7, 5}, generator).to(torch::kBFloat16);
  state.tensors["model/layers.0.mlp.gate_proj.weight"] = torch::randn({3, 4}, generator);
  at::Tensor odd = torch::tensor({0.0f, -0.0f, 1e-42f, std::numeric_limits<float>::quiet_NaN(), 3.4e38f, -1.5f});
  state.tensors["optim/exp_avg/layers.0.mlp.gate_proj.weight"] = odd;
  state.tensors["optim/step"] = torch::tensor(step * 1.0);  // 0-dim
  state.tensors["rng/cpu"] = torch::tensor({std::numeric_limits<std::int64_t>::min(), std::int64_t{-1},
                                            std::numeric_limits<std::int64_t>::max()});
  state.tensors["rng/bytes"] = torch::randint(0, 255, {16}, generator, torch::kUInt8);
  state.tensors["model/empty"] = torch::zeros({0, 3});
  state.ints = {{"consumed_samples", 1234 + step}, {"consumed_tokens", 987654321012}, {"sampler_seed", 42}, {"epoch", 2}};
  state.reals = {{"lr_position", 0.25}};
  state.texts = {{"note", "hello"}};
  state.settings_toml = "[train]\ntoken_budget = 32768\n";
  state.topology_text = "[topology]\nname = \"1t1d\"\n";
  state.model_identity = model_identity("tiny", state.tensors);
  state.model_config_json = "{\n  \"model_type\": \"qwen3\"\n}";
  state.model_config_source = "model preset 'tiny'";
  return state;
}

void expect_bit_equal(const at::Tensor& a, const at::Tensor& b, const std::string& name) {
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << name;
  ASSERT_EQ(a.sizes(), b.sizes()) << name;
  ASSERT_EQ(0, std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.numel() * a.element_size())) << name;
}

void expect_same_state(const CheckpointState& a, const CheckpointState& b) {
  EXPECT_EQ(a.step, b.step);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, tensor] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    expect_bit_equal(tensor, b.tensors.at(name), name);
  }
  EXPECT_EQ(a.ints, b.ints);
  EXPECT_EQ(a.reals, b.reals);
  EXPECT_EQ(a.texts, b.texts);
  EXPECT_EQ(a.settings_toml, b.settings_toml);
  EXPECT_EQ(a.topology_text, b.topology_text);
  EXPECT_EQ(a.model_identity, b.model_identity);
  EXPECT_EQ(a.model_config_json, b.model_config_json);
  EXPECT_EQ(a.model_config_source, b.model_config_source);
}

using topotrain::test_support::config_error_of;

}  // namespace

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  CheckpointState state = sample_state(100);
  {
    CheckpointWriter writer(dir(), 3);
    writer.save(state);
    EXPECT_FALSE(writer.snapshot_unordered());  // CPU tensors: the host copied them in save()
    writer.wait();
  }
  auto latest = CheckpointReader::find_latest(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(file_name(*latest), "step-00000100.h5");
  CheckpointExpectations expect;
  expect.model_identity = state.model_identity;
  expect.expect_like(state.tensors);
  expect_same_state(state, CheckpointReader::load(*latest, expect));
}

TEST_F(CheckpointTest, HeaderAndPrefixReadsLeaveTheOtherTensorsOut) {
  const CheckpointState state = sample_state(7);
  make_directories(dir());
  const std::string path = join_path(dir(), "step-00000007.h5");
  write_checkpoint_file(path, state);
  const CheckpointState header = CheckpointReader::load_header(path);
  EXPECT_TRUE(header.tensors.empty());
  EXPECT_EQ(header.step, 7);
  EXPECT_EQ(header.model_identity, state.model_identity);
  EXPECT_EQ(header.model_config_json, state.model_config_json);
  EXPECT_EQ(header.model_config_source, state.model_config_source);
  EXPECT_EQ(header.settings_toml, state.settings_toml);
  const CheckpointState weights = CheckpointReader::load(path, {}, "model/");
  std::vector<std::string> names;
  for (const auto& entry : weights.tensors) names.push_back(entry.first);
  EXPECT_EQ(names, (std::vector<std::string>{"model/embed_tokens.weight", "model/empty",
                                             "model/layers.0.mlp.gate_proj.weight"}));
  expect_bit_equal(weights.tensors.at("model/embed_tokens.weight"), state.tensors.at("model/embed_tokens.weight"),
                   "model/embed_tokens.weight");
}

TEST_F(CheckpointTest, ModelConfigIsOptional) {
  // A drafter's checkpoint, and every one written before checkpoints stored a config.
  CheckpointState state = sample_state(8);
  state.model_config_json.clear();
  state.model_config_source.clear();
  make_directories(dir());
  const std::string path = join_path(dir(), "step-00000008.h5");
  write_checkpoint_file(path, state);
  expect_same_state(state, CheckpointReader::load(path, {}));
}

TEST_F(CheckpointTest, CheckpointAtResolvesFilesAndRunDirectories) {
  EXPECT_FALSE(CheckpointReader::checkpoint_at(dir()));  // missing
  make_directories(dir());
  EXPECT_FALSE(CheckpointReader::checkpoint_at(dir()));  // empty: not a run directory
  std::ofstream(join_path(dir(), "timings.h5")) << "x";
  EXPECT_NE(config_error_of([&] { CheckpointReader::checkpoint_at(dir()); }).find("holds no complete checkpoint"),
            std::string::npos);
  {
    CheckpointWriter writer(dir(), 3);
    writer.save(sample_state(3));
    writer.save(sample_state(5));
    writer.wait();
  }
  EXPECT_EQ(CheckpointReader::checkpoint_at(dir()), join_path(dir(), "step-00000005.h5"));
  EXPECT_EQ(CheckpointReader::checkpoint_at(join_path(dir(), "step-00000003.h5")), join_path(dir(), "step-00000003.h5"));
}

TEST_F(CheckpointTest, SaveSnapshotsTensorsBeforeReturning) {
  CheckpointState state = sample_state(1);
  CheckpointState original = sample_state(1);
  CheckpointWriter writer(dir(), 0);
  writer.save(state);
  // Training goes on and updates the parameters while the file is being written.
  for (auto& [name, tensor] : state.tensors) tensor.fill_(7);
  writer.wait();
  expect_same_state(original, CheckpointReader::load(*CheckpointReader::find_latest(dir()), {}));
}

// The snapshot buffers are sized once to the state (each tensor 256-byte aligned) and
// every save of that layout reuses them; another layout gets new ones.
TEST_F(CheckpointTest, SnapshotBuffersAreSizedOnceAndReused) {
  CheckpointWriter writer(dir(), 0);
  const CheckpointState state = sample_state(1);
  std::int64_t expected = 0;
  for (const auto& [name, tensor] : state.tensors)
    expected += (tensor.numel() * static_cast<std::int64_t>(tensor.element_size()) + 255) / 256 * 256;
  EXPECT_EQ(writer.reserve(state.tensors), expected);
  for (std::int64_t step : {1, 2, 3}) {
    CheckpointState next = sample_state(step);
    writer.save(next);
    EXPECT_EQ(writer.buffer_bytes(), expected);
    writer.wait();
    CheckpointExpectations expect;
    expect.expect_like(next.tensors);
    expect_same_state(next, CheckpointReader::load(join_path(dir(), CheckpointWriter::file_name(step)), expect));
  }
  CheckpointState wider = sample_state(4);
  wider.tensors["model/layers.0.mlp.gate_proj.weight"] = torch::ones({3, 100});
  writer.save(wider);
  writer.wait();
  EXPECT_EQ(writer.buffer_bytes(), expected + 1024);  // 1200 bytes (5 blocks) now, 48 (1 block) before
  expect_same_state(wider, CheckpointReader::load(join_path(dir(), CheckpointWriter::file_name(4)), {}));
  EXPECT_FALSE(writer.buffers_pinned());  // CPU tensors
}

// writing() holds while a write is in flight (what a trainer defers its next checkpoint
// on); a save meanwhile waits for it and loses neither.
TEST_F(CheckpointTest, WritingHoldsUntilTheWriteEndsAndASaveMeanwhileWaits) {
  ::setenv("TOPOTRAIN_FAULT_SLOW_CHECKPOINT", "0.4", 1);
  CheckpointWriter writer(dir(), 0);
  EXPECT_FALSE(writer.writing());
  EXPECT_LT(writer.save(sample_state(5)), 0.2);  // the stall: a copy of a few bytes
  EXPECT_TRUE(writer.writing());
  EXPECT_EQ(writer.writing_step(), 5);
  EXPECT_GE(writer.save(sample_state(6)), 0.2);  // waited for step 5's write
  writer.wait();
  ::unsetenv("TOPOTRAIN_FAULT_SLOW_CHECKPOINT");
  EXPECT_FALSE(writer.writing());
  EXPECT_EQ(CheckpointReader::find_latest(dir()), join_path(dir(), "step-00000006.h5"));
  expect_same_state(sample_state(5), CheckpointReader::load(join_path(dir(), "step-00000005.h5"), {}));
}

TEST_F(CheckpointTest, KeepsTheNewestKAndLatestPointsAtTheNewest) {
  CheckpointWriter writer(dir(), 2);
  for (std::int64_t step : {10, 20, 30, 40}) writer.save(sample_state(step));
  writer.wait();
  std::vector<std::string> names;
  for (const auto& path : CheckpointReader::list(dir())) names.push_back(file_name(path));
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000030.h5", "step-00000040.h5"}));
  std::ifstream latest(join_path(dir(), "latest"));
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "step-00000040.h5");
  EXPECT_EQ(CheckpointReader::load(*CheckpointReader::find_latest(dir()), {}).step, 40);
}

TEST_F(CheckpointTest, WriterKilledMidWriteLeavesPreviousLatestUsable) {
  {
    CheckpointWriter writer(dir(), 3);
    writer.save(sample_state(100));
  }
  // A child process starts a large checkpoint and is killed while writing it.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {  // never return into the test runner from the child
      CheckpointState big = sample_state(200);
      big.tensors["model/big"] = torch::ones({64, 1024, 1024});  // 256 MiB: takes a while to write
      CheckpointWriter writer(dir(), 3);
      writer.save(big);
      writer.wait();
    } catch (...) {
      std::_Exit(1);
    }
    std::_Exit(0);
  }
  const std::string tmp = join_path(dir(), "step-00000200.h5.tmp");
  for (int i = 0; i < 2000 && !file_exists(tmp); ++i) ::usleep(1000);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before it was killed; make its checkpoint larger";
  EXPECT_FALSE(file_exists(join_path(dir(), "step-00000200.h5")));
  auto latest = CheckpointReader::find_latest(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(file_name(*latest), "step-00000100.h5");
  expect_same_state(sample_state(100), CheckpointReader::load(*latest, {}));
  // The next save of a fresh writer removes the leftover.
  {
    CheckpointWriter writer(dir(), 3);
    writer.save(sample_state(300));
  }
  EXPECT_FALSE(file_exists(tmp));
}

TEST_F(CheckpointTest, StaleLatestFallsBackToNewestCompleteFile) {
  {
    CheckpointWriter writer(dir(), 0);
    writer.save(sample_state(1));
    writer.save(sample_state(2));
  }
  // `latest` names a file that has since been truncated on disk.
  ASSERT_EQ(::truncate(join_path(dir(), "step-00000002.h5").c_str(), 100), 0);
  auto latest = CheckpointReader::find_latest(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(file_name(*latest), "step-00000001.h5");
}

TEST_F(CheckpointTest, EmptyRunDirHasNoLatest) {
  EXPECT_FALSE(CheckpointReader::find_latest(dir()));
  EXPECT_FALSE(CheckpointReader::resolve_resume(dir(), "auto"));
  EXPECT_FALSE(CheckpointReader::resolve_resume(dir(), ""));
  EXPECT_NE(config_error_of([&] { CheckpointReader::resolve_resume(dir(), dir() + "/nope.h5"); }).find("no such checkpoint"),
            std::string::npos);
}

// One run directory holds one run: a fresh start beside a run's checkpoints is refused (its
// step-10 would be pruned in favour of the older run's step-300, and `latest` would move
// between them); --resume takes a run directory as model.weights does.
TEST_F(CheckpointTest, AFreshStartIsRefusedWhereARunsCheckpointsAre) {
  {
    CheckpointWriter writer(dir(), 0);
    writer.save(sample_state(300));
  }
  const std::string message = config_error_of([&] { CheckpointReader::resolve_resume(dir(), ""); });
  EXPECT_NE(message.find(cat(dir(), " already holds the checkpoints of a run (the latest: ", dir(),
                             "/step-00000300.h5): pass --resume auto to continue it")),
            std::string::npos)
      << message;
  EXPECT_EQ(file_name(CheckpointReader::resolve_resume(dir(), "auto").value_or("")), "step-00000300.h5");
  const std::string other = dir() + "-other";
  make_directories(other);
  EXPECT_EQ(file_name(CheckpointReader::resolve_resume(other, dir()).value_or("")), "step-00000300.h5");
  EXPECT_NE(config_error_of([&] { CheckpointReader::resolve_resume(dir(), other); }).find("is a directory but no run"),
            std::string::npos);
  remove_tree(other);
}

// Continuing another run's checkpoint where a run's checkpoints are would mix the two as a
// fresh start would; the run's own checkpoints, however named, are taken.
TEST_F(CheckpointTest, AResumeFromAnotherRunIsRefusedWhereARunsCheckpointsAre) {
  const std::string other = temp_ + "/other";
  {
    CheckpointWriter writer(dir(), 0);
    writer.save(sample_state(300));
    CheckpointWriter elsewhere(other, 0);
    elsewhere.save(sample_state(40));
  }
  for (const std::string& resume : {other, other + "/step-00000040.h5"}) {
    const std::string message = config_error_of([&] { CheckpointReader::resolve_resume(dir(), resume); });
    EXPECT_NE(message.find(cat("--resume ", resume, " continues ", other, "/step-00000040.h5, but ", dir(),
                               " already holds the checkpoints of another run (the latest: ", dir(),
                               "/step-00000300.h5): continue it under another checkpoint.run")),
              std::string::npos)
        << message;
  }
  for (const std::string& own : {dir() + "/step-00000300.h5", temp_ + "/./run/step-00000300.h5", dir() + "/"})
    EXPECT_EQ(file_name(CheckpointReader::resolve_resume(dir(), own).value_or("")), "step-00000300.h5") << own;
  // Into a run directory without checkpoints, another run's checkpoint is where a run starts.
  EXPECT_EQ(CheckpointReader::resolve_resume(temp_ + "/new", other), other + "/step-00000040.h5");
}

// What --resume auto falls back to: the newest complete checkpoint below a step, skipping
// incomplete files.
TEST_F(CheckpointTest, NewestBeforeAStepSkipsIncompleteFiles) {
  {
    CheckpointWriter writer(dir(), 0);
    for (std::int64_t step : {3, 6, 9}) writer.save(sample_state(step));
  }
  std::ofstream(dir() + "/step-00000007.h5") << "cut short";
  EXPECT_EQ(CheckpointReader::newest_before(dir(), 9), dir() + "/step-00000006.h5");
  EXPECT_EQ(CheckpointReader::newest_before(dir(), 10), dir() + "/step-00000009.h5");
  EXPECT_EQ(CheckpointReader::newest_before(dir(), 4), dir() + "/step-00000003.h5");
  EXPECT_FALSE(CheckpointReader::newest_before(dir(), 3));
}

// A resume from step 3 of a run directory holding steps 6 and 9 abandons them: they move into
// a folder of their own (a second such resume gets another), `latest` names step 3, and the
// checkpoints saved next are pruned among the resumed run's alone.
TEST_F(CheckpointTest, AResumeFromAnEarlierStepSetsTheLaterCheckpointsAside) {
  const std::string resumed = dir() + "/step-00000003.h5";
  {
    CheckpointWriter writer(dir(), 0);
    for (std::int64_t step : {3, 6, 9}) writer.save(sample_state(step));
  }
  CheckpointWriter writer(dir(), 2);
  const std::string aside = dir() + "/superseded-after-step-00000003";
  EXPECT_EQ(writer.set_aside_after(3, resumed), aside);
  EXPECT_EQ(list_directory(aside), (std::vector<std::string>{"step-00000006.h5", "step-00000009.h5"}));
  expect_same_state(sample_state(9), CheckpointReader::load(aside + "/step-00000009.h5", {}));
  EXPECT_EQ(CheckpointReader::find_latest(dir()), resumed);
  EXPECT_EQ(writer.set_aside_after(3, resumed), "");  // nothing later now
  for (std::int64_t step : {4, 5}) writer.save(sample_state(step));
  writer.wait();
  std::vector<std::string> names;
  for (const auto& path : CheckpointReader::list(dir())) names.push_back(file_name(path));
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000004.h5", "step-00000005.h5"}));
  EXPECT_EQ(writer.set_aside_after(3, resumed), aside + "-2");
  EXPECT_EQ(list_directory(aside + "-2"), (std::vector<std::string>{"step-00000004.h5", "step-00000005.h5"}));
  EXPECT_EQ(list_directory(aside).size(), 2u);
}

TEST_F(CheckpointTest, ValidationErrorsNameWhatIsWrong) {
  CheckpointState state = sample_state(5);
  {
    CheckpointWriter writer(dir(), 0);
    writer.save(state);
  }
  const std::string path = *CheckpointReader::find_latest(dir());

  CheckpointExpectations missing;
  missing.tensors["model/layers.0.mlp.gate_proj.weights"] = {{3, 4}, at::kFloat};
  std::string message = config_error_of([&] { CheckpointReader::load(path, missing); });
  EXPECT_NE(message.find("has no tensor 'model/layers.0.mlp.gate_proj.weights'"), std::string::npos) << message;
  // Another model's file is no damage: --resume auto must not pass over it to an older one.
  try {
    CheckpointReader::load(path, missing);
  } catch (const CheckpointDamaged& e) {
    ADD_FAILURE() << "a mismatch taken for damage: " << e.what();
  } catch (const ConfigError&) {
  }
  EXPECT_NE(message.find("did you mean 'model/layers.0.mlp.gate_proj.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;

  CheckpointExpectations shape;
  shape.tensors["model/layers.0.mlp.gate_proj.weight"] = {{3, 8}, at::kFloat};
  message = config_error_of([&] { CheckpointReader::load(path, shape); });
  EXPECT_NE(message.find("has shape [3, 4] but this run expects [3, 8]"), std::string::npos) << message;

  CheckpointExpectations dtype;
  dtype.tensors["model/embed_tokens.weight"] = {{7, 5}, at::kFloat};
  message = config_error_of([&] { CheckpointReader::load(path, dtype); });
  EXPECT_NE(message.find("is bfloat16 but this run expects float32"), std::string::npos) << message;

  CheckpointExpectations other_model;
  auto other = state.tensors;
  other["model/layers.0.mlp.gate_proj.weight"] = torch::zeros({3, 5});
  other_model.model_identity = model_identity("tiny", other);
  EXPECT_NE(other_model.model_identity, state.model_identity);
  message = config_error_of([&] { CheckpointReader::load(path, other_model); });
  EXPECT_NE(message.find("was written by model '" + state.model_identity + "', but this run builds '" +
                         other_model.model_identity + "'"),
            std::string::npos)
      << message;

  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(file_size(path) / 2)), 0);
  message = config_error_of([&] { CheckpointReader::load(path, {}); });
  EXPECT_NE(message.find("is truncated or corrupt"), std::string::npos) << message;

  // An HDF5 file of another kind (a run directory's timings.h5, named by mistake).
  const std::string timings = dir() + "/timings.h5";
  H5Fclose(H5Fcreate(timings.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  message = config_error_of([&] { CheckpointReader::load(timings, {}); });
  EXPECT_NE(message.find(timings + " is an HDF5 file but not a topotrain checkpoint (a run directory's checkpoints are "
                         "its step-N.h5 files; timings.h5 is not one): name another checkpoint, or its run directory"),
            std::string::npos)
      << message;

  std::ofstream(dir() + "/garbage.h5") << "not hdf5 at all";
  message = config_error_of([&] { CheckpointReader::load(dir() + "/garbage.h5", {}); });
  EXPECT_NE(message.find("garbage.h5 is truncated or corrupt"), std::string::npos) << message;
  EXPECT_THROW(CheckpointReader::load(dir() + "/garbage.h5", {}), CheckpointDamaged);
}

// HDF5 checks its own structures only: a flipped bit in a tensor's bytes (a bad disk, a
// bad copy) reads back without an error, and only the tensor's checksum tells.
TEST_F(CheckpointTest, TensorBytesChangedOnDiskAreRefused) {
  make_directories(dir());
  const std::string path = dir() + "/step-00000004.h5";
  CheckpointState state = sample_state(4);
  const float marker = 1234.5678f;  // a value found nowhere else in the file
  state.tensors["model/marked"] = torch::full({64}, marker);
  write_checkpoint_file(path, state);
  EXPECT_EQ(CheckpointReader::load(path, {}).tensors.at("model/marked").sum().item<float>(), 64 * marker);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string pattern(reinterpret_cast<const char*>(&marker), sizeof(marker));
  const std::size_t at = bytes.find(pattern + pattern);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = static_cast<char>(bytes[at + 1] ^ 0x10);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_TRUE(checkpoint_file_complete(path));
  const std::string message = config_error_of([&] { CheckpointReader::load(path, {}); });
  EXPECT_NE(message.find("checkpoint " + path + " is corrupt: the data of tensor 'model/marked' does not match the "
                         "checksum written with it: name another checkpoint"),
            std::string::npos)
      << message;
  // The kind of refusal --resume auto passes over to an older checkpoint.
  EXPECT_THROW(CheckpointReader::load(path, {}), CheckpointDamaged);
}

TEST_F(CheckpointTest, FileWithoutCompletionMarkerIsRefused) {
  make_directories(dir());
  const std::string path = dir() + "/step-00000009.h5";
  CheckpointState state = sample_state(9);
  write_checkpoint_file(path, state);
  EXPECT_TRUE(checkpoint_file_complete(path));
  // Rewrite the file without its marker, as a writer killed before the end would leave it.
  {
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    H5Adelete(file, "complete");
    H5Fclose(file);
  }
  EXPECT_FALSE(checkpoint_file_complete(path));
  EXPECT_FALSE(CheckpointReader::find_latest(dir()));
  std::string message = config_error_of([&] { CheckpointReader::load(path, {}); });
  EXPECT_NE(message.find("is incomplete"), std::string::npos) << message;
}

TEST_F(CheckpointTest, WriteErrorSurfacesOnNextCall) {
  CheckpointWriter writer(dir(), 0);
  CheckpointState bad = sample_state(3);
  bad.texts["bad/key"] = "x";
  writer.save(bad);
  try {
    writer.wait();
    FAIL() << "expected the write error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint of step 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'bad/key'"), std::string::npos) << e.what();
  }
  writer.save(sample_state(4));
  EXPECT_NO_THROW(writer.wait());
  EXPECT_FALSE(file_exists(join_path(dir(), "step-00000003.h5")));
}

TEST(ModelIdentity, DependsOnShapesNotValues) {
  std::map<std::string, at::Tensor> a{{"w", torch::zeros({2, 3})}};
  std::map<std::string, at::Tensor> b{{"w", torch::ones({2, 3})}};
  std::map<std::string, at::Tensor> c{{"w", torch::zeros({3, 2})}};
  EXPECT_EQ(model_identity("p", a), model_identity("p", b));
  EXPECT_NE(model_identity("p", a), model_identity("p", c));
  EXPECT_NE(model_identity("p", a), model_identity("q", a));
  EXPECT_EQ(model_identity("p", a).rfind("p/", 0), 0u);
}
