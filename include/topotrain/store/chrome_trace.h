// A Chrome / Perfetto trace (JSON "traceEvents") of a timings file: one lane per rank
// with its steps and their phases as nested spans, a second lane per rank for phases
// timed on the GPU, and NVML samples as counter tracks. Open it in ui.perfetto.dev or
// chrome://tracing.
#pragma once

#include <string>

#include "topotrain/store/timings_file.h"

namespace topotrain {

std::string chrome_trace_json(const TimingsData& data);

}  // namespace topotrain
