#include "topotrain/core/visible_devices.h"

#include <algorithm>
#include <cstring>

namespace topotrain {

bool one_visible_device(const char* visible) {
  return visible != nullptr && visible[0] != '\0' && std::strchr(visible, ',') == nullptr;
}

std::optional<int> cuda_ordinal(int index, int gpus_present, const char* visible) {
  if (gpus_present == 1 && one_visible_device(visible)) return 0;
  if (index >= 0 && index < gpus_present) return index;
  return std::nullopt;
}

std::string visible_devices_note(const char* visible) {
  return visible == nullptr ? std::string() : std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")";
}

}  // namespace topotrain
