// The progress bar and its non-terminal fallback.
#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace ampgrad::cli {

bool stdout_is_terminal() { return isatty(fileno(stdout)) != 0; }

Progress::Progress(int epoch, int epochs, bool terminal)
    : epoch_(epoch), epochs_(epochs), terminal_(terminal), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

std::string Progress::line(const StepStats& s) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = s.step > 0 ? elapsed / static_cast<double>(s.step) * static_cast<double>(s.steps - s.step) : 0;
  std::string scale = s.scale > 0 ? fmt::format("  scale {:g}  skipped {}", s.scale, s.skipped) : "";
  return fmt::format("epoch {}/{} step {:>5}/{}  {:>8.0f} img/s  loss {:.4f}{}  eta {:.0f}s", epoch_, epochs_, s.step,
                     s.steps, s.images_per_s, s.loss, scale, eta);
}

bool Progress::due(int64_t step, int64_t steps) const {
  if (terminal_)
    return step == steps || std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(100);
  return 10 * step / std::max<int64_t>(steps, 1) != last_decile_;
}

void Progress::update(const StepStats& s) {
  if (!due(s.step, s.steps)) return;
  if (terminal_) {
    last_draw_ = std::chrono::steady_clock::now();
    const int width = 24;
    const int filled = static_cast<int>(width * s.step / std::max<int64_t>(s.steps, 1));
    std::printf("\r[%s%s] %s", std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                line(s).c_str());
    std::fflush(stdout);
  } else {
    last_decile_ = 10 * s.step / std::max<int64_t>(s.steps, 1);
    std::printf("%s\n", line(s).c_str());
    std::fflush(stdout);
  }
}

void Progress::finish(const StepStats& s) {
  if (terminal_) {
    update(s);
    std::printf("\n");
  }
}

}  // namespace ampgrad::cli
