#include "topotrain/core/hdf5_handle.h"

#include <stdexcept>

namespace topotrain {

H5Handle::H5Handle(hid_t id, Closer closer, const std::string& what) : id_(id), closer_(closer) {
  if (id_ < 0) throw std::runtime_error(what);
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
  if (status < 0) throw std::runtime_error(what);
}

void h5_quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace topotrain
