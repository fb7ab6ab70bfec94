#include "topotrain/store/phase.h"

namespace topotrain {

const std::array<const char*, kPhaseCount>& phase_names() {
  static const std::array<const char*, kPhaseCount> names = {
      "data_wait", "h2d",  "forward", "backward",   "comm_wait", "optimizer",
      "queue_wait", "send", "recv",    "checkpoint", "eval"};
  return names;
}

bool is_wait_phase(Phase phase) {
  return phase == Phase::data_wait || phase == Phase::comm_wait || phase == Phase::queue_wait;
}

bool is_comm_phase(Phase phase) { return phase == Phase::comm_wait || phase == Phase::send || phase == Phase::recv; }

}  // namespace topotrain
