// Ranks that ran on one GPU (the timings' device_group), and how busy they kept it together.
// Each rank's MFU over its own step says little there: a DFlash drafter beside its target on
// one card counts its own FLOPs over steps that also ran the target's forwards. What the
// card delivered is every sharer's FLOPs over the time they all ran: per launch, the window
// from the latest of the sharers' first measured step starts to the earliest of their last
// step ends; a step that straddles an edge counts the part inside, its FLOPs taken as spread
// evenly over its wall.
#pragma once

#include <string>
#include <vector>

#include "topotrain/store/run_stitch.h"

namespace topotrain {

struct SharedDevice {
  int launch = 1;                  // its launch number
  std::vector<int> ranks;          // sharing one GPU, ascending
  std::vector<std::string> roles;  // per rank
  double window_seconds = 0;       // all of them ran
  // Per rank: its FLOPs inside the window over (window x peak); mfu is their sum. -1: a
  // rank's FLOPs or the device's peak are not recorded (then mfu is -1 too).
  std::vector<double> rank_mfu;
  double mfu = -1;
};

// The ranks of a launch that shared a GPU: one ascending list per GPU that two or more ran
// on; none where the launch's timings lack device_group (older files) or its ranks ran on
// CPUs (-1).
std::vector<std::vector<int>> ranks_sharing_gpus(const TimingsData& launch);

// Every group of ranks_sharing_gpus with rows after the stitch's skip, launch by launch.
std::vector<SharedDevice> shared_devices(const StitchedRun& run);

// One line per shared device, "" for none.
std::string format_shared_devices(const std::vector<SharedDevice>& devices, bool name_launches);

}  // namespace topotrain
