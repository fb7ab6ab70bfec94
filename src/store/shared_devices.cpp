#include "topotrain/store/shared_devices.h"

#include <algorithm>
#include <limits>
#include <map>

#include "topotrain/core/error.h"
#include "topotrain/core/log.h"

namespace topotrain {

std::vector<std::vector<int>> ranks_sharing_gpus(const TimingsData& launch) {
  const std::vector<RankRecord> records = rank_records(launch);
  std::map<int, std::vector<int>> groups;  // by device_group; ranks ascending
  for (std::size_t rank = 0; rank < records.size(); ++rank)
    if (records[rank].device_group >= 0) groups[records[rank].device_group].push_back(static_cast<int>(rank));
  std::vector<std::vector<int>> shared;
  for (auto& [group, ranks] : groups)
    if (ranks.size() >= 2) shared.push_back(std::move(ranks));
  return shared;
}

std::vector<SharedDevice> shared_devices(const StitchedRun& run) {
  std::vector<SharedDevice> devices;
  for (std::size_t li = 0; li < run.launches.size(); ++li) {
    const TimingsData& data = run.launches[li];
    const std::vector<RankRecord> records = rank_records(data);
    struct Member {
      int rank = 0;
      double flops_per_token = 0, peak = 0;
      std::vector<const StitchedRow*> rows;
    };
    for (const std::vector<int>& ranks : ranks_sharing_gpus(data)) {
      std::vector<Member> members(ranks.size());
      for (std::size_t m = 0; m < ranks.size(); ++m) {
        const RankRecord& record = records[static_cast<std::size_t>(ranks[m])];
        members[m] = {ranks[m], record.flops_per_token, record.peak_flops, {}};
      }
      for (const StitchedRow& row : run.rows) {
        if (row.launch != li) continue;
        for (Member& member : members)
          if (run.rank_of(row) == member.rank) member.rows.push_back(&row);
      }
      // The window all of them ran: none may be missing from it.
      double from = -std::numeric_limits<double>::infinity(), to = std::numeric_limits<double>::infinity();
      bool every_rank_ran = true;
      for (const Member& member : members) {
        if (member.rows.empty()) {
          every_rank_ran = false;
          break;
        }
        double first = std::numeric_limits<double>::infinity(), last = -first;
        for (const StitchedRow* row : member.rows) {
          const double start = run.value(*row, &StepColumns::start);
          first = std::min(first, start);
          last = std::max(last, start + run.value(*row, &StepColumns::wall));
        }
        from = std::max(from, first);
        to = std::min(to, last);
      }
      if (!every_rank_ran || to <= from) continue;
      SharedDevice device;
      device.launch = data.launch;
      device.window_seconds = to - from;
      bool known = true;
      double sum = 0;
      for (const Member& member : members) {
        device.ranks.push_back(member.rank);
        device.roles.push_back(data.roles[static_cast<std::size_t>(member.rank)]);
        double flops = 0;
        bool rank_known = member.peak > 0;
        for (const StitchedRow* row : member.rows) {
          const double start = run.value(*row, &StepColumns::start), wall = run.value(*row, &StepColumns::wall);
          const double inside = std::min(start + wall, to) - std::max(start, from);
          if (inside <= 0 || wall <= 0) continue;
          // A step's own FLOPs (where they vary per step) take precedence over FLOPs per token.
          const double own = run.value(*row, &StepColumns::flops);
          const double step_flops = own > 0 ? own : member.flops_per_token * run.value(*row, &StepColumns::tokens);
          if (!(own > 0) && member.flops_per_token <= 0) rank_known = false;
          flops += step_flops * inside / wall;
        }
        const double mfu = rank_known ? flops / (device.window_seconds * member.peak) : -1;
        device.rank_mfu.push_back(mfu);
        known = known && rank_known;
        sum += rank_known ? mfu : 0;
      }
      device.mfu = known ? sum : -1;
      devices.push_back(std::move(device));
    }
  }
  return devices;
}

std::string format_shared_devices(const std::vector<SharedDevice>& devices, bool name_launches) {
  std::string out;
  for (const SharedDevice& device : devices) {
    std::string ranks, parts;
    for (std::size_t i = 0; i < device.ranks.size(); ++i) {
      const char* separator = i == 0 ? "" : i + 1 == device.ranks.size() ? " and " : ", ";
      ranks += cat(separator, device.ranks[i], " (", device.roles[i], ")");
      if (device.rank_mfu[i] >= 0)
        parts += cat(i == 0 ? "" : ", ", device.roles[i], " ", fixed_point(device.rank_mfu[i] * 100, 1), "%");
    }
    out += cat(name_launches ? cat("launch ", device.launch, ": ") : std::string(), "one GPU shared by ranks ", ranks,
               ": ");
    if (device.mfu < 0) {
      out += cat("MFU n/a (FLOPs or the peak not recorded) over the ", fixed_point(device.window_seconds, 1),
                 " s they all ran\n");
    } else {
      out += cat("MFU ", fixed_point(device.mfu * 100, 1), "% of its peak over the ", fixed_point(device.window_seconds, 1),
                 " s they all ran (", parts, "; each rank's FLOPs in that time)\n");
    }
  }
  return out;
}

}  // namespace topotrain
