// safetensors files: an 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the raw little-endian tensor bytes. A
// sharded checkpoint adds model.safetensors.index.json ({"weight_map": {name: file}}).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace topotrain::model {

struct SafetensorsEntry {
  std::string dtype;  // "F32", "BF16", ...
  torch::ScalarType scalar_type;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

// One file: the header is parsed and checked on open; tensors are read on demand, so a
// large checkpoint never sits in memory twice. Every error (ConfigError) names the file
// and, where there is one, the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  torch::Tensor load(const std::string& name) const;  // CPU tensor, stored dtype

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

// A checkpoint: a .safetensors file, a model.safetensors.index.json, or a directory
// holding either (the index wins).
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);
  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  torch::Tensor load(const std::string& name) const;

 private:
  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes one file (tensors are stored contiguous, in their dtype).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes `directory`/model.safetensors, or, when the tensors exceed max_shard_bytes,
// model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json (HF's layout:
// an index only for shards). Returns the paths written.
std::vector<std::string> write_safetensors_checkpoint(const std::string& directory, const NamedTensors& tensors,
                                                      int64_t max_shard_bytes);

}  // namespace topotrain::model
