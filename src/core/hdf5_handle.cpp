#include "topotrain/core/hdf5_handle.h"

#include <cerrno>
#include <stdexcept>

#include "topotrain/core/io_failure.h"

namespace topotrain {

namespace {

// HDF5 reports a failed open, write or flush of the file itself only through errno: a full
// disk would otherwise read "cannot write tensor 'x'" and nothing more.
[[noreturn]] void fail(const std::string& what) {
  const int error = errno;
  throw std::runtime_error(is_write_errno(error) ? what + ": " + os_error_text(error) : what);
}

}  // namespace

H5Handle::H5Handle(hid_t id, Closer closer, const std::string& what) : id_(id), closer_(closer) {
  if (id_ < 0) fail(what);
}

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

void H5Handle::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = -1;
}

void h5_check(herr_t status, const std::string& what) {
  if (status < 0) fail(what);
}

void h5_quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace topotrain
