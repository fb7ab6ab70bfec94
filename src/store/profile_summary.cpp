#include "topotrain/store/profile_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace topotrain {
namespace {

struct Totals {
  double us = 0;
  std::int64_t calls = 0;
};

std::string row(double us, double of_us, std::int64_t calls, const std::string& name) {
  char line[96];
  std::snprintf(line, sizeof line, "%11.2f %6.1f%% %8lld %10.1f  ", us / 1e3, of_us > 0 ? 100 * us / of_us : 0.0,
                static_cast<long long>(calls), calls > 0 ? us / static_cast<double>(calls) : 0.0);
  return line + name + "\n";
}

void table(std::ostringstream& out, const std::map<std::string, Totals>& by_name, double of_us, std::size_t top,
           const char* heading) {
  std::vector<std::pair<std::string, Totals>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  out << heading << " (" << rows.size() << " distinct)\n       ms   of wall    calls    mean us  name\n";
  for (std::size_t i = 0; i < rows.size() && i < top; ++i)
    out << row(rows[i].second.us, of_us, rows[i].second.calls, rows[i].first);
}

// Self time of host calls: a call's duration minus that of the calls nested directly in it
// on the same thread. Events must be sorted by (thread, start, longest first).
std::map<std::string, Totals> host_self_times(const std::vector<ProfiledEvent>& host) {
  std::map<std::string, Totals> by_name;
  std::vector<std::size_t> open;  // indices of the enclosing calls, innermost last
  std::vector<double> self(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    const ProfiledEvent& e = host[i];
    self[i] = e.duration_us;
    while (!open.empty()) {
      const ProfiledEvent& outer = host[open.back()];
      if (outer.thread == e.thread && e.start_us < outer.start_us + outer.duration_us) break;
      open.pop_back();
    }
    if (!open.empty()) self[open.back()] -= std::min(e.duration_us, self[open.back()]);
    open.push_back(i);
  }
  for (std::size_t i = 0; i < host.size(); ++i) {
    Totals& t = by_name[host[i].name];
    t.us += self[i];
    ++t.calls;
  }
  return by_name;
}

}  // namespace

std::string summarize_profile(std::vector<ProfiledEvent> events, double wall_us, const std::string& title,
                              const ProfileSummaryOptions& options) {
  std::vector<ProfiledEvent> device, host;
  for (auto& e : events) (e.on_device ? device : host).push_back(std::move(e));
  std::sort(device.begin(), device.end(), [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
  std::sort(host.begin(), host.end(), [](const auto& a, const auto& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_us != b.start_us) return a.start_us < b.start_us;
    return a.duration_us > b.duration_us;
  });

  std::ostringstream out;
  out << title << "\n";
  char line[256];
  // Busy time is the union of the device intervals (streams may overlap), and a gap is
  // time between the union's pieces.
  double busy = 0, covered_until = 0;
  struct Gap {
    double us;
    std::size_t after;
  };
  std::vector<Gap> gaps;
  std::map<std::string, Totals> device_totals;
  for (std::size_t i = 0; i < device.size(); ++i) {
    const ProfiledEvent& e = device[i];
    const double end = e.start_us + e.duration_us;
    if (i == 0 || e.start_us > covered_until) {
      if (i > 0) gaps.push_back({e.start_us - covered_until, i});
      busy += e.duration_us;
      covered_until = end;
    } else if (end > covered_until) {
      busy += end - covered_until;
      covered_until = end;
    }
    Totals& t = device_totals[e.name];
    t.us += e.duration_us;
    ++t.calls;
  }
  std::snprintf(line, sizeof line,
                "wall time %.2f ms; device: %zu activities, busy %.2f ms (%.1f%% of the wall time)\n", wall_us / 1e3,
                device.size(), busy / 1e3, wall_us > 0 ? 100 * busy / wall_us : 0.0);
  out << line;
  if (!device.empty()) {
    out << "\n";
    table(out, device_totals, wall_us, options.top, "device activities by total time");
    std::sort(gaps.begin(), gaps.end(), [](const Gap& a, const Gap& b) { return a.us > b.us; });
    out << "\nlongest device idle gaps:\n";
    for (std::size_t i = 0; i < gaps.size() && i < options.gaps; ++i) {
      const double at = device[gaps[i].after].start_us - gaps[i].us - device.front().start_us;
      std::snprintf(line, sizeof line, "%11.2f ms at +%.2f ms, after ", gaps[i].us / 1e3, at / 1e3);
      out << line << device[gaps[i].after - 1].name << " / before " << device[gaps[i].after].name << "\n";
    }
  }
  if (!host.empty()) {
    out << "\n";
    table(out, host_self_times(host), wall_us, options.top, "host calls by self time");
  }
  return out.str();
}

}  // namespace topotrain
