// A sampling profiler of host time for machines without perf or gdb (the lent GPU machines):
// a CLOCK_MONOTONIC timer signals the calling thread every `period_us`, the handler records
// the thread's stack (glibc backtrace over the unwind tables), and write() lists the distinct
// stacks with their counts. Frames are offsets from their module's load address, so
// benchmarks/host_profile.py can name them with addr2line on the unstripped binaries of the
// build that was carried stripped. Unwinding from a signal is best effort: it crashed inside
// cuDNN (profile_step cnn) on the H200, so sample steps whose libraries unwind cleanly (cuBLASLt
// and the driver do).
#pragma once

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace host_sampler {

constexpr int kDepth = 48;
constexpr size_t kMaxSamples = 200000;

struct Sample {
  int depth;
  void* pc[kDepth];
};

inline std::vector<Sample>& samples() {
  static std::vector<Sample> s(kMaxSamples);
  return s;
}
inline std::atomic<size_t>& count() {
  static std::atomic<size_t> n{0};
  return n;
}
inline std::atomic<bool>& active() {
  static std::atomic<bool> a{false};
  return a;
}

inline void on_signal(int) {
  if (!active().load(std::memory_order_relaxed)) return;
  const size_t i = count().fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  Sample& s = samples()[i];
  s.depth = backtrace(s.pc, kDepth);
}

class Sampler {
 public:
  explicit Sampler(long period_us) {
    void* warm[4];
    (void)backtrace(warm, 4);  // loads the unwinder now, not inside the first signal
    (void)samples();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, nullptr);
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    ok_ = timer_create(CLOCK_MONOTONIC, &ev, &timer_) == 0;
    if (!ok_) return;
    itimerspec its{};
    its.it_interval.tv_nsec = period_us * 1000;
    its.it_value.tv_nsec = period_us * 1000;
    active() = true;
    timer_settime(timer_, 0, &its, nullptr);
  }
  ~Sampler() { stop(); }
  void stop() {
    if (!ok_) return;
    active() = false;
    timer_delete(timer_);
    ok_ = false;
  }
  bool ok() const { return ok_; }
  size_t taken() const { return std::min(count().load(), kMaxSamples); }

  // The distinct stacks with their counts: "count frame;frame;..." lines (innermost first,
  // each frame "m+offset" with m an index into the "# module m path" lines), and "# symbol"
  // lines with dladdr's nearest exported symbol of a frame where there is one. Return
  // addresses are moved back one byte, into their call.
  bool write(const char* path) const {
    std::map<std::string, int> modules;
    std::map<std::string, std::string> symbols;
    std::map<std::string, long> stacks;
    const size_t n = taken();
    for (size_t i = 0; i < n; ++i) {
      const Sample& s = samples()[i];
      std::string stack;
      // Frame 0 is the handler, frame 1 the signal trampoline: the interrupted code is frame 2.
      for (int f = 2; f < s.depth; ++f) {
        Dl_info info{};
        const auto pc = reinterpret_cast<uintptr_t>(s.pc[f]) - (f > 2 ? 1 : 0);
        std::string frame;
        if (dladdr(reinterpret_cast<void*>(pc), &info) && info.dli_fname) {
          auto it = modules.emplace(info.dli_fname, static_cast<int>(modules.size())).first;
          char buf[64];
          std::snprintf(buf, sizeof buf, "%d+%lx", it->second,
                        static_cast<unsigned long>(pc - reinterpret_cast<uintptr_t>(info.dli_fbase)));
          frame = buf;
          if (info.dli_sname) symbols.emplace(frame, info.dli_sname);
        } else {
          char buf[64];
          std::snprintf(buf, sizeof buf, "?+%lx", static_cast<unsigned long>(pc));
          frame = buf;
        }
        if (!stack.empty()) stack += ';';
        stack += frame;
      }
      ++stacks[stack];
    }
    FILE* out = std::fopen(path, "w");
    if (!out) return false;
    std::fprintf(out, "# samples %zu\n", n);
    for (const auto& [m, i] : modules) std::fprintf(out, "# module %d %s\n", i, m.c_str());
    for (const auto& [f, sym] : symbols) std::fprintf(out, "# symbol %s %s\n", f.c_str(), sym.c_str());
    for (const auto& [st, c] : stacks) std::fprintf(out, "%ld %s\n", c, st.c_str());
    std::fclose(out);
    return true;
  }

 private:
  timer_t timer_{};
  bool ok_ = false;
};

}  // namespace host_sampler
