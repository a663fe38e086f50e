// Training progress: a live bar on a terminal, plain periodic lines otherwise.
#pragma once

#include <chrono>
#include <string>

namespace ampgrad::cli {

struct StepStats {
  int64_t step = 0;      // within the epoch, 1-based
  int64_t steps = 0;     // in the epoch
  double images_per_s = 0;
  double loss = 0;
  double scale = 0;      // 0 when no scaler
  int64_t skipped = 0;   // skipped steps so far
};

class Progress {
 public:
  Progress(int epoch, int epochs, bool terminal);
  // Whether update() would draw now: at most every 100 ms (terminal) or every 10% (lines).
  // Callers gather the stats, which synchronize with the device, only then.
  bool due(int64_t step, int64_t steps) const;
  void update(const StepStats& s);
  void finish(const StepStats& s);

 private:
  std::string line(const StepStats& s) const;
  int epoch_, epochs_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t last_decile_ = -1;
};

bool stdout_is_terminal();

}  // namespace ampgrad::cli
