// The speed-ups' switches and counters (Note [Speed-ups] in speedups/speedups.h).
#include <ampgrad/speedups/speedups.h>

#include <cstdlib>
#include <cstring>

#include <ampgrad/speedups/state.h>

namespace ampgrad::speedups {

namespace detail {

Switches& switches() {
  static Switches* s = [] {
    auto* made = new Switches();  // leaked: read by the destructors of static tensors
    const char* env = std::getenv("AMPGRAD_SPEEDUPS");
    if (env != nullptr && std::strcmp(env, "0") == 0) {
      made->backward = false;
      made->working_copies = false;
      made->ready_casts = false;
    }
    return made;
  }();
  return *s;
}

Stats& thread_stats() {
  thread_local Stats s;
  return s;
}

}  // namespace detail

void set_backward_speedups(bool on) { detail::switches().backward = on; }
bool backward_speedups() { return detail::switches().backward; }

void set_working_copies(bool on) {
  detail::switches().working_copies = on;
  if (!on) clear_working_copies();
}
bool working_copies() { return detail::switches().working_copies; }

void set_ready_casts(bool on) { detail::switches().ready_casts = on; }
bool ready_casts() { return detail::switches().ready_casts; }

void set_all(bool on) {
  set_backward_speedups(on);
  set_working_copies(on);
  set_ready_casts(on);
}

Stats stats() { return detail::thread_stats(); }

}  // namespace ampgrad::speedups
