// The switches and this thread's counters, shared by the speed-ups' files (Note [Speed-ups]).
#pragma once

#include <atomic>

#include <ampgrad/speedups/speedups.h>

namespace ampgrad::speedups::detail {

struct Switches {
  std::atomic<bool> backward{true};
  std::atomic<bool> working_copies{true};
  std::atomic<bool> ready_casts{true};
};
// Read once at load: AMPGRAD_SPEEDUPS=0 turns every switch off.
Switches& switches();

// This thread's counts (speedups::stats()).
Stats& thread_stats();

}  // namespace ampgrad::speedups::detail
