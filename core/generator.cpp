// The default generator and its normal draws.
#include <ampgrad/core/generator.h>

#include <cmath>

namespace ampgrad {

double Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  double u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  has_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().seed(seed); }

}  // namespace ampgrad
