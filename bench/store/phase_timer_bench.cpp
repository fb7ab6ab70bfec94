// Cost of one PhaseTimer scope (open + close) on the CPU, and of a whole timed step.
// Prints ns per scope; the target is < 1000 ns.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "topotrain/store/phase_timer.h"

using namespace topotrain;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20000;
  constexpr int kScopesPerStep = 10;
  PhaseTimer timer;
  // Warm-up: vectors reach their steady capacity.
  for (int s = 0; s < 100; ++s) {
    timer.begin_step(s);
    for (int p = 0; p < kScopesPerStep; ++p) auto t = timer.scope(static_cast<Phase>(p % kPhaseCount));
    timer.end_step({});
    timer.take_finished();
  }
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    timer.begin_step(s);
    for (int p = 0; p < kScopesPerStep; ++p) auto t = timer.scope(static_cast<Phase>(p % kPhaseCount));
    timer.end_step({});
    if (s % 20 == 19) timer.take_finished();  // as the timing log does between gathers
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
  const double per_step = ns / steps;
  std::printf("phase timer: %d steps x %d scopes: %.0f ns per step, %.1f ns per scope (step overhead included)\n", steps,
              kScopesPerStep, per_step, per_step / kScopesPerStep);
  const auto nested_start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    timer.begin_step(s);
    {
      auto outer = timer.scope(Phase::forward);
      for (int p = 0; p < kScopesPerStep - 1; ++p) auto t = timer.scope(Phase::send);
    }
    timer.end_step({});
    if (s % 20 == 19) timer.take_finished();
  }
  const double nested_ns = std::chrono::duration<double, std::nano>(Clock::now() - nested_start).count() / steps;
  std::printf("phase timer, nested scopes: %.1f ns per scope\n", nested_ns / kScopesPerStep);
  return per_step / kScopesPerStep < 1000 ? 0 : 1;
}
