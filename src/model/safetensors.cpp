#include "topotrain/model/safetensors.h"

#include <cstring>
#include <fstream>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "topotrain/core/error.h"
#include "topotrain/core/files.h"

namespace topotrain::model {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit
const char* const kIndexName = "model.safetensors.index.json";

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
};

const char* dtype_name(torch::ScalarType type, const std::string& tensor) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw std::invalid_argument(cat("safetensors: tensor '", tensor, "' has dtype ", type, " which the format cannot store"));
}

SafetensorsEntry parse_entry(const std::string& file, const std::string& name, const json& value) {
  auto bad = [&](const std::string& what) { return ConfigError(cat(file, ": tensor '", name, "': ", what)); };
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
    throw bad("header entry needs dtype, shape and data_offsets");
  }
  SafetensorsEntry e;
  try {
    e.dtype = value.at("dtype").get<std::string>();
    e.shape = value.at("shape").get<std::vector<int64_t>>();
    auto offsets = value.at("data_offsets").get<std::vector<uint64_t>>();
    if (offsets.size() != 2 || offsets[1] < offsets[0]) throw bad("data_offsets must be [begin, end] with begin <= end");
    e.begin = offsets[0], e.end = offsets[1];
  } catch (const json::exception& ex) {
    throw bad(cat("malformed header entry (", ex.what(), ")"));
  }
  const DtypeName* dtype = nullptr;
  for (const auto& d : kDtypes) {
    if (e.dtype == d.name) dtype = &d;
  }
  if (dtype == nullptr) throw bad(cat("unknown dtype '", e.dtype, "'"));
  e.scalar_type = dtype->type;
  uint64_t numel = 1;
  for (int64_t s : e.shape) {
    if (s < 0) throw bad("negative dimension in shape");
    numel *= static_cast<uint64_t>(s);
  }
  const uint64_t expected = numel * c10::elementSize(e.scalar_type);
  if (e.end - e.begin != expected) {
    throw bad(cat("data_offsets span ", e.end - e.begin, " bytes but ", e.dtype, " ", c10::IntArrayRef(e.shape),
                  " needs ", expected));
  }
  return e;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(cat("cannot open '", path, "'"));
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw ConfigError(cat(path, ": not valid JSON (", e.what(), ")"));
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  uint64_t size = 0;
  try {
    size = file_size(path_);
  } catch (const std::system_error& e) {
    throw ConfigError(cat("cannot open safetensors file '", path_, "': ", e.code().message()));
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw ConfigError(cat("cannot open safetensors file '", path_, "'"));
  unsigned char prefix[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(prefix), 8)) {
    throw ConfigError(cat(path_, ": truncated safetensors file (", size, " bytes, shorter than the 8-byte header length)"));
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
  if (header_bytes > kMaxHeaderBytes) {
    throw ConfigError(cat(path_, ": header length ", header_bytes, " is implausible; not a safetensors file"));
  }
  if (header_bytes > size - 8) {
    throw ConfigError(cat(path_, ": truncated safetensors file: the header needs ", header_bytes, " bytes but only ",
                          size - 8, " follow"));
  }
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  json doc;
  try {
    doc = json::parse(header);
  } catch (const json::parse_error& e) {
    throw ConfigError(cat(path_, ": safetensors header is not JSON (", e.what(), ")"));
  }
  if (!doc.is_object()) throw ConfigError(cat(path_, ": safetensors header is not a JSON object"));
  data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = size - data_start_;
  for (const auto& [name, value] : doc.items()) {
    if (name == "__metadata__") continue;
    SafetensorsEntry e = parse_entry(path_, name, value);
    if (e.end > data_bytes) {
      throw ConfigError(cat(path_, ": truncated safetensors file: tensor '", name, "' ends at data byte ", e.end,
                            " but the data section has ", data_bytes, " bytes"));
    }
    entries_.emplace(name, std::move(e));
  }
}

torch::Tensor SafetensorsFile::load(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw ConfigError(cat(path_, ": no tensor '", name, "'"));
  const SafetensorsEntry& e = it->second;
  auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.scalar_type));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  if (!in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(e.end - e.begin))) {
    throw ConfigError(cat(path_, ": could not read tensor '", name, "' (file changed or truncated while loading)"));
  }
  return tensor;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  std::string p = path;
  if (is_directory(path)) {
    if (file_exists(join_path(path, kIndexName))) {
      p = join_path(path, kIndexName);
    } else if (file_exists(join_path(path, "model.safetensors"))) {
      p = join_path(path, "model.safetensors");
    } else {
      throw ConfigError(cat("checkpoint directory '", path, "' has neither ", kIndexName, " nor model.safetensors"));
    }
  }
  if (file_extension(p) != ".json") {
    files_.emplace_back(p);
  } else {
    const json index = read_json_file(p);
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw ConfigError(cat(p, ": no \"weight_map\" object"));
    }
    std::map<std::string, std::string> weight_map;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) throw ConfigError(cat(p, ": weight_map entry '", name, "' is not a file name"));
      weight_map[name] = file.get<std::string>();
    }
    std::set<std::string> shard_names;
    for (const auto& [name, file] : weight_map) shard_names.insert(file);
    for (const auto& shard : shard_names) files_.emplace_back(join_path(parent_directory(p), shard));
    for (const auto& [name, file] : weight_map) {
      const std::string shard = join_path(parent_directory(p), file);
      auto f = std::find_if(files_.begin(), files_.end(), [&](const SafetensorsFile& s) { return s.path() == shard; });
      if (f->entries().count(name) == 0) {
        throw ConfigError(cat(p, " maps tensor '", name, "' to ", shard, " which does not contain it"));
      }
    }
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    for (const auto& [name, entry] : files_[i].entries()) {
      auto [it, fresh] = where_.emplace(name, i);
      if (!fresh) {
        throw ConfigError(cat("checkpoint '", path, "': tensor '", name, "' appears in both ", files_[it->second].path(),
                              " and ", files_[i].path()));
      }
    }
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  return files_.at(where_.at(name)).entries().at(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  return files_.at(where_.at(name)).path();
}

torch::Tensor SafetensorsCheckpoint::load(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw ConfigError(cat("checkpoint '", path_, "' has no tensor '", name, "'"));
  return files_[it->second].load(name);
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type(), name)},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(prefix), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : data) {
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
  out.close();
  if (!out) throw std::runtime_error(cat("could not write safetensors file '", path, "'"));
}

std::vector<std::string> write_safetensors_checkpoint(const std::string& directory, const NamedTensors& tensors,
                                                      int64_t max_shard_bytes) {
  make_directories(directory);
  std::vector<NamedTensors> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& named : tensors) {
    const int64_t bytes = named.second.numel() * named.second.element_size();
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  std::vector<std::string> written;
  if (shards.size() == 1) {
    written.push_back(join_path(directory, "model.safetensors"));
    write_safetensors(written.back(), tensors, {{"format", "pt"}});
    return written;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    written.push_back(join_path(directory, name));
    write_safetensors(written.back(), shards[i], {{"format", "pt"}});
    for (const auto& named : shards[i]) weight_map[named.first] = name;
  }
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  written.push_back(join_path(directory, kIndexName));
  std::ofstream out(written.back());
  out << index.dump(2) << "\n";
  if (!out) throw std::runtime_error(cat("could not write ", written.back()));
  return written;
}

}  // namespace topotrain::model
