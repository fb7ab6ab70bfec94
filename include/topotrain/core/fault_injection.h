// Test hooks that make a failure happen on one rank at one step, so that the failure paths
// (out of memory, a non-finite loss, a sender that stalls mid-send) can be tested on CPU
// ranks: the environment variable holds "RANK:STEP". The hooks and where they act:
//   TOPOTRAIN_FAULT_OOM         train/out_of_memory.h
//   TOPOTRAIN_FAULT_NONFINITE   moe_trainer.cpp, dflash_drafting.cpp: the step's loss is NaN
//   TOPOTRAIN_FAULT_LINK_STALL  comm/hidden_state_link.h: STEP counts the sender's batches
//   TOPOTRAIN_FAULT_STALL       fault_inject_stall, at the start of a trainer's step
//   TOPOTRAIN_FAULT_STALL_IN_COLLECTIVE  the same, inside the step's first watched collective,
//                               once the group knows the rank entered it (comm/watchdog.h)
//   TOPOTRAIN_FAULT_SLOW_CHECKPOINT  holds SECONDS instead: every checkpoint write takes that
//                               much longer (store/checkpoint_writer.h), as on a slow disk
//   TOPOTRAIN_FAULT_DISK_FULL   holds STEP instead: the checkpoint of that step fails to write
//                               as on a full disk (errno ENOSPC after the file was begun;
//                               store/checkpoint_writer.h), for machines that refuse a small
//                               tmpfs mount
//   TOPOTRAIN_FAULT_SLOW_DRAFTER  holds SECONDS: every drafter micro-batch's forward takes that
//                               much longer (dflash_drafting.cpp), as on a slower GPU, without
//                               using a core (CPU ranks sharing a few cores then run at the
//                               steady rates the topology model assumes)
#pragma once

#include <cstdint>
#include <string>

namespace topotrain {

// True the first time this process reaches `step` as rank `rank` named by the variable
// (once per process and variable: a retry of the same step must succeed).
bool fault_injected(const char* variable, int rank, std::int64_t step);

// TOPOTRAIN_FAULT_STALL: the rank stops itself (SIGSTOP) at the start of the step, as a
// wedged or suspended process would; SIGCONT lets it go on.
void fault_inject_stall(int rank, std::int64_t step);

// The SLOW variables: sleeps the seconds `variable` holds (none when unset).
void fault_inject_delay(const char* variable);

// TOPOTRAIN_FAULT_DISK_FULL: throws std::runtime_error("<what>") with errno set to ENOSPC, as a
// write on a full disk fails, when `step` is the step the variable holds.
void fault_inject_disk_full(std::int64_t step, const std::string& what);

}  // namespace topotrain
