#include "topotrain/store/checkpoint_file.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "topotrain/core/error.h"
#include "topotrain/core/suggest.h"
#include "topotrain/core/crc32c.h"
#include "topotrain/store/h5_io.h"

namespace topotrain {
namespace {

constexpr const char* kFormat = "topotrain-checkpoint";
constexpr std::int64_t kFormatVersion = 1;
// The fix for a checkpoint that cannot be read, wherever it was named (--resume, model.weights,
// topotrain-export): a run directory's readers skip such files.
constexpr const char* kTakeAnother =
    ": name another checkpoint, or its run directory, whose newest complete checkpoint --resume auto, "
    "model.weights and topotrain-export take";

// An IEEE-style float type of `bits` bits with the given field layout.
H5Handle custom_float(std::size_t bits, std::size_t exponent_bits, std::size_t mantissa_bits, std::size_t bias) {
  H5Handle type(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "H5Tcopy(float)");
  h5_check(H5Tset_fields(type, bits - 1, mantissa_bits, exponent_bits, 0, mantissa_bits), "H5Tset_fields");
  h5_check(H5Tset_precision(type, bits), "H5Tset_precision");
  h5_check(H5Tset_size(type, bits / 8), "H5Tset_size");
  h5_check(H5Tset_ebias(type, bias), "H5Tset_ebias");
  return type;
}

H5Handle h5_type(at::ScalarType type) {
  auto copy = [](hid_t predefined) { return H5Handle(H5Tcopy(predefined), H5Tclose, "H5Tcopy"); };
  switch (type) {
    case at::kFloat: return copy(H5T_IEEE_F32LE);
    case at::kDouble: return copy(H5T_IEEE_F64LE);
    case at::kBFloat16: return custom_float(16, 8, 7, 127);
    case at::kHalf: return custom_float(16, 5, 10, 15);
    case at::kLong: return copy(H5T_STD_I64LE);
    case at::kInt: return copy(H5T_STD_I32LE);
    case at::kShort: return copy(H5T_STD_I16LE);
    case at::kChar: return copy(H5T_STD_I8LE);
    case at::kByte:
    case at::kBool: return copy(H5T_STD_U8LE);
    default: throw std::runtime_error(std::string("checkpoints cannot store dtype ") + c10::toString(type));
  }
}

at::ScalarType dtype_from_name(const std::string& name) {
  for (at::ScalarType type : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong, at::kInt, at::kShort,
                              at::kChar, at::kByte, at::kBool})
    if (dtype_name(type) == name) return type;
  throw std::runtime_error("unknown dtype '" + name + "'");
}

std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

void write_tensor(hid_t root, const std::string& name, const at::Tensor& tensor) {
  if (!tensor.defined()) throw std::runtime_error("tensor '" + name + "' is undefined");
  if (tensor.device().type() != at::kCPU || tensor.layout() != at::kStrided || !tensor.is_contiguous())
    throw std::runtime_error("tensor '" + name + "' must be a dense contiguous CPU tensor");
  H5Handle type = h5_type(tensor.scalar_type());
  std::vector<hsize_t> dims(tensor.sizes().begin(), tensor.sizes().end());
  H5Handle space = dims.empty() ? H5Handle(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate")
                                : H5Handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                           H5Sclose, "H5Screate_simple");
  H5Handle link_create(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate");
  h5_check(H5Pset_create_intermediate_group(link_create, 1), "H5Pset_create_intermediate_group");
  const std::string path = "tensors/" + name;
  H5Handle dataset(H5Dcreate2(root, path.c_str(), type, space, link_create, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
                   "cannot create dataset for tensor '" + name + "'");
  if (tensor.numel() > 0)
    h5_check(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data_ptr()),
             "cannot write tensor '" + name + "'");
  write_attribute(dataset, "dtype", dtype_name(tensor.scalar_type()));
  write_attribute(dataset, "crc32c", std::int64_t{crc32c(tensor.data_ptr(), tensor.nbytes())});
}

H5Handle create_group(hid_t location, const std::string& path) {
  H5Handle link_create(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate");
  h5_check(H5Pset_create_intermediate_group(link_create, 1), "H5Pset_create_intermediate_group");
  return H5Handle(H5Gcreate2(location, path.c_str(), link_create, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                  "cannot create group " + path);
}

H5Handle open_group(hid_t location, const std::string& path) {
  return H5Handle(H5Gopen2(location, path.c_str(), H5P_DEFAULT), H5Gclose, "missing group " + path);
}

// Every dataset below /tensors, by its path relative to it.
std::vector<std::string> tensor_names(hid_t root) {
  std::vector<std::string> names;
  if (!link_exists(root, "tensors")) return names;
  H5Handle group = open_group(root, "tensors");
  auto visit = [](hid_t group_id, const char* name, const H5L_info_t*, void* data) -> herr_t {
    hid_t object = H5Oopen(group_id, name, H5P_DEFAULT);
    if (object < 0) return -1;
    const bool dataset = H5Iget_type(object) == H5I_DATASET;
    H5Oclose(object);
    if (dataset) static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  h5_check(H5Lvisit(group, H5_INDEX_NAME, H5_ITER_INC, visit, &names), "cannot list tensors");
  return names;
}

at::Tensor read_tensor(hid_t root, const std::string& name) {
  const std::string path = "tensors/" + name;
  H5Handle dataset(H5Dopen2(root, path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open tensor '" + name + "'");
  const at::ScalarType dtype = dtype_from_name(read_string_attribute(dataset, "dtype"));
  H5Handle type(H5Dget_type(dataset), H5Tclose, "H5Dget_type");
  H5Handle space(H5Dget_space(dataset), H5Sclose, "H5Dget_space");
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw std::runtime_error("cannot read the shape of tensor '" + name + "'");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  h5_check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "cannot read the shape of tensor '" + name + "'");
  std::vector<std::int64_t> shape(dims.begin(), dims.end());
  at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(dtype));
  if (static_cast<std::int64_t>(H5Tget_size(type)) != tensor.element_size())
    throw std::runtime_error(cat("tensor '", name, "' has ", H5Tget_size(type), "-byte elements, not ",
                                 dtype_name(dtype)));
  // The file's own type as the memory type: no conversion, so the bits come back as written.
  if (tensor.numel() > 0)
    h5_check(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data_ptr()),
             "cannot read the data of tensor '" + name + "'");
  // HDF5 checks its own structures, not a dataset's bytes: without this a flipped bit on
  // disk would be trained on. Files written before the checksum lack it.
  if (has_attribute(dataset, "crc32c") &&
      read_int_attribute(dataset, "crc32c") != std::int64_t{crc32c(tensor.data_ptr(), tensor.nbytes())})
    throw std::runtime_error(cat("the data of tensor '", name, "' does not match the checksum written with it"));
  return tensor;
}

void check_expectations(const std::string& path, const CheckpointState& state,
                        const CheckpointExpectations& expectations) {
  if (!expectations.model_identity.empty() && state.model_identity != expectations.model_identity)
    throw ConfigError(cat("checkpoint ", path, " was written by model '", state.model_identity, "', but this run builds '",
                          expectations.model_identity,
                          "'; resume from a checkpoint of this model, or start a new run directory (checkpoint.run)"));
  std::vector<std::string> present;
  for (const auto& entry : state.tensors) present.push_back(entry.first);
  for (const auto& [name, expected] : expectations.tensors) {
    auto it = state.tensors.find(name);
    if (it == state.tensors.end())
      throw ConfigError(cat("checkpoint ", path, " has no tensor '", name, "'", did_you_mean(name, present), " (it holds ",
                            present.size(), " tensors); it was written by a different model or trainer"));
    const at::Tensor& tensor = it->second;
    if (tensor.sizes().vec() != expected.shape)
      throw ConfigError(cat("checkpoint ", path, ": tensor '", name, "' has shape ", shape_text(tensor.sizes()),
                            " but this run expects ", shape_text(expected.shape),
                            "; the model settings differ from the run that wrote it"));
    if (tensor.scalar_type() != expected.dtype)
      throw ConfigError(cat("checkpoint ", path, ": tensor '", name, "' is ", dtype_name(tensor.scalar_type()),
                            " but this run expects ", dtype_name(expected.dtype)));
  }
}

H5Handle open_checkpoint(const std::string& path) {
  h5_quiet();
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0)
    throw CheckpointDamaged(cat("checkpoint ", path, " is truncated or corrupt (not a readable HDF5 file)",
                                kTakeAnother));
  return H5Handle(file, H5Fclose, path);
}

}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointState& state) {
  auto lock = h5_serialize();
  h5_quiet();
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                "cannot create checkpoint file " + path);
  write_attribute(file, "format", std::string(kFormat));
  write_attribute(file, "format_version", kFormatVersion);
  write_attribute(file, "step", state.step);
  write_attribute(file, "model_identity", state.model_identity);
  for (const auto& [name, tensor] : state.tensors) write_tensor(file, name, tensor);
  {
    H5Handle ints = create_group(file, "meta/int64");
    for (const auto& [key, value] : state.ints) write_attribute(ints, key, value);
    H5Handle reals = create_group(file, "meta/float64");
    for (const auto& [key, value] : state.reals) write_attribute(reals, key, value);
    H5Handle texts = create_group(file, "meta/text");
    for (const auto& [key, value] : state.texts) {
      if (key.empty() || key.find('/') != std::string::npos)
        throw std::runtime_error("checkpoint text key '" + key + "' must be non-empty and without '/'");
      write_text(texts, key, value);
    }
  }
  write_text(file, "settings", state.settings_toml);
  write_text(file, "topology", state.topology_text);
  if (!state.model_config_json.empty()) {
    write_text(file, "model_config", state.model_config_json);
    H5Handle config(H5Dopen2(file, "model_config", H5P_DEFAULT), H5Dclose, "cannot open model_config");
    write_attribute(config, "source", state.model_config_source);
  }
  if (!state.tokenizer_files.empty()) {
    H5Handle tokenizer = create_group(file, "tokenizer_files");
    for (const auto& [name, text] : state.tokenizer_files) write_text(tokenizer, name, text);
  }
  // Invariant: `complete` is written after everything else and flushed, so a file that
  // carries it holds every tensor in full.
  h5_check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush " + path);
  write_attribute(file, "complete", std::int64_t{1});
  h5_check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush " + path);
}

bool checkpoint_file_complete(const std::string& path) {
  auto lock = h5_serialize();
  h5_quiet();
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) return false;
  H5Handle file(id, H5Fclose, path);
  try {
    return has_attribute(file, "complete") && read_int_attribute(file, "complete") == 1;
  } catch (const std::runtime_error&) {
    return false;
  }
}

namespace {

// The tensors read: those under *tensor_prefix, none when it is empty.
CheckpointState read_state(const std::string& path, const std::optional<std::string>& tensor_prefix) {
  auto lock = h5_serialize();
  H5Handle file = open_checkpoint(path);
  CheckpointState state;
  try {
    if (!has_attribute(file, "format") || read_string_attribute(file, "format") != kFormat)
      throw ConfigError(cat(path, " is an HDF5 file but not a topotrain checkpoint (a run directory's checkpoints are "
                            "its step-N.h5 files; timings.h5 is not one)", kTakeAnother));
    if (read_int_attribute(file, "format_version") > kFormatVersion)
      throw ConfigError(cat("checkpoint ", path, " was written by a newer topotrain (format_version ",
                            read_int_attribute(file, "format_version"), "); update topotrain to read it"));
    if (!has_attribute(file, "complete"))
      throw ConfigError(cat("checkpoint ", path,
                            " is incomplete (its writer stopped before the end)", kTakeAnother));
    state.step = read_int_attribute(file, "step");
    state.model_identity = read_string_attribute(file, "model_identity");
    if (tensor_prefix) {
      for (const std::string& name : tensor_names(file))
        if (name.compare(0, tensor_prefix->size(), *tensor_prefix) == 0) state.tensors[name] = read_tensor(file, name);
    }
    H5Handle ints = open_group(file, "meta/int64");
    for (const std::string& key : attribute_names(ints)) state.ints[key] = read_int_attribute(ints, key);
    H5Handle reals = open_group(file, "meta/float64");
    for (const std::string& key : attribute_names(reals)) state.reals[key] = read_real_attribute(reals, key);
    H5Handle texts = open_group(file, "meta/text");
    for (const std::string& key : child_names(texts)) state.texts[key] = read_text(texts, key);
    state.settings_toml = read_text(file, "settings");
    state.topology_text = read_text(file, "topology");
    if (link_exists(file, "model_config")) {
      state.model_config_json = read_text(file, "model_config");
      H5Handle config(H5Dopen2(file, "model_config", H5P_DEFAULT), H5Dclose, "cannot open model_config");
      state.model_config_source = read_string_attribute(config, "source");
    }
    if (link_exists(file, "tokenizer_files")) {
      H5Handle tokenizer = open_group(file, "tokenizer_files");
      for (const std::string& name : child_names(tokenizer)) state.tokenizer_files[name] = read_text(tokenizer, name);
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointDamaged(cat("checkpoint ", path, " is corrupt: ", e.what(), kTakeAnother));
  }
  return state;
}

}  // namespace

CheckpointState read_checkpoint_file(const std::string& path, const CheckpointExpectations& expectations,
                                     const std::string& tensor_prefix) {
  CheckpointState state = read_state(path, tensor_prefix);
  check_expectations(path, state, expectations);
  return state;
}

CheckpointState read_checkpoint_header(const std::string& path) { return read_state(path, std::nullopt); }

}  // namespace topotrain
