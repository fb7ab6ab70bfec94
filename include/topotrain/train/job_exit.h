// An orderly, agreed end of a job with a message and an exit code: thrown on EVERY rank
// at the same point (after an agreement collective), so that run_job can print the
// message once, finalize MPI and exit with the code, instead of aborting.
#pragma once

#include <stdexcept>
#include <string>

namespace topotrain {

class JobExit : public std::runtime_error {
 public:
  JobExit(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace topotrain
