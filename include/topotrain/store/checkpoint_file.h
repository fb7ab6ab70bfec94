// The HDF5 layout of one checkpoint file and its synchronous write and read.
//
//   /                     attributes: format = "topotrain-checkpoint", format_version,
//                         step, model_identity, complete = 1 (written last)
//   /tensors/<name>       one dataset per tensor; '/' in a name makes groups
//                         (/tensors/model/layers.0.mlp.gate_proj.weight); attributes dtype and
//                         crc32c (of the tensor's bytes; a read that finds other bytes refuses
//                         the file; absent in files written before it existed)
//   /meta/int64           one int64 attribute per CheckpointState::ints entry
//   /meta/float64         one float64 attribute per CheckpointState::reals entry
//   /meta/text/<key>      one string dataset per CheckpointState::texts entry
//   /settings, /topology  the resolved settings TOML and the topology text
//   /model_config         the model's HF config.json text, attribute source; optional (absent
//                         for a model that is not Qwen3 and in files written before it existed)
//
// bfloat16 and float16 are HDF5 floating-point types with their exact bit layout, so
// h5dump shows their values; tensors are read back with the file's own type, bit-exact.
#pragma once

#include <string>

#include "topotrain/core/error.h"
#include "topotrain/store/checkpoint_state.h"

namespace topotrain {

// A checkpoint whose bytes cannot be read back as written: HDF5 cannot read it, or a tensor's
// data does not match its CRC-32C. Unlike the other refusals (another model, a missing tensor),
// another checkpoint of the same run may well load, which --resume auto tries.
class CheckpointDamaged : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// Writes `state` (host tensors) to `path` and flushes it; the completion marker is the
// last thing written. Does not fsync or rename: CheckpointWriter does that.
void write_checkpoint_file(const std::string& path, const CheckpointState& state);

// Reads and validates a checkpoint; throws ConfigError naming the file and what is
// wrong: truncated or corrupt (CheckpointDamaged), incomplete, another model, a missing
// tensor, a shape or dtype mismatch. Only tensors whose names start with `tensor_prefix` are read ("model/":
// the weights without the optimizer state).
CheckpointState read_checkpoint_file(const std::string& path, const CheckpointExpectations& expectations,
                                     const std::string& tensor_prefix = "");

// Everything but the tensors (step, identity, settings, model config): cheap for any size.
CheckpointState read_checkpoint_header(const std::string& path);

// True when `path` opens as HDF5 and carries the completion marker.
bool checkpoint_file_complete(const std::string& path);

}  // namespace topotrain
