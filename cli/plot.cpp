// Drives gnuplot (Debian's gnuplot-nox) with a data file and a short script.
#include "cli/plot.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <ampgrad/core/error.h>

namespace ampgrad::cli {

void plot_training(const std::string& png, const std::vector<double>& loss, const std::vector<double>& scale,
                   const std::string& title) {
  AG_CHECK(std::system("command -v gnuplot >/dev/null 2>&1") == 0,
           "--plot: gnuplot is not installed (apt-get install gnuplot-nox, or run scripts/setup.sh)");
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("ampgrad-plot-{}", static_cast<long>(::getpid()));
  fs::create_directories(dir);
  const fs::path data = dir / "metrics.dat", script = dir / "plot.gp";
  {
    std::ofstream f(data);
    for (size_t i = 0; i < loss.size(); ++i) f << i + 1 << ' ' << loss[i] << ' ' << (i < scale.size() ? scale[i] : 0) << '\n';
  }
  bool has_scale = false;
  for (double s : scale) has_scale = has_scale || s > 0;
  {
    std::ofstream f(script);
    f << "set terminal pngcairo size 1000,500 font 'sans,10'\n"
      << "set output '" << png << "'\n"
      << "set title '" << title << "'\n"
      << "set xlabel 'step'\nset ylabel 'training loss'\nset grid\nset key top right\n";
    if (has_scale) {
      f << "set y2label 'loss scale'\nset logscale y2 2\nset y2tics\nset ytics nomirror\n"
        << "plot '" << data.string() << "' using 1:2 with lines lw 1 title 'loss', '" << data.string()
        << "' using 1:3 axes x1y2 with steps lw 2 title 'loss scale'\n";
    } else {
      f << "plot '" << data.string() << "' using 1:2 with lines lw 1 title 'loss'\n";
    }
  }
  const int rc = std::system(fmt::format("gnuplot '{}' 2>&1", script.string()).c_str());
  fs::remove_all(dir);
  AG_CHECK(rc == 0, "--plot: gnuplot failed (exit status {}) writing {}", rc, png);
}

}  // namespace ampgrad::cli
