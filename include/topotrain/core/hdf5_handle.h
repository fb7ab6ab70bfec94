// RAII for HDF5 C API identifiers, shared by the dataset reader (data/), checkpoints and
// the timing log (store/). HDF5's automatic error-stack printing is switched off: callers
// turn a failed call into one exception whose message names the file and the object.
#pragma once

#include <hdf5.h>

#include <string>

namespace topotrain {

class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  H5Handle() = default;
  // Takes ownership of `id`; throws std::runtime_error("<what>") when id < 0, followed by
  // ": <the OS's reason>" where errno names a failed write (io_failure.h).
  H5Handle(hid_t id, Closer closer, const std::string& what);
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  H5Handle& operator=(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: used directly in H5 calls
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// Throws std::runtime_error(what) when an herr_t status is negative, with the OS's reason as
// H5Handle's constructor adds it.
void h5_check(herr_t status, const std::string& what);

// Stops HDF5 printing its error stack to stderr (once per process; idempotent).
void h5_quiet();

}  // namespace topotrain
