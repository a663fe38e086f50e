// The deterministic random generator behind rand, randn, dropout and init (manual_seed).
#pragma once

#include <cstdint>
#include <random>

namespace ampgrad {

// Draws on the CPU from a 64-bit Mersenne twister, whose output is fixed by the standard,
// and turns it into floats with our own formulas (the std distributions differ between
// library vendors). CUDA tensors are filled from the same stream, so a seed gives the same
// values on both devices.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void seed(uint64_t s) { engine_.seed(s); has_spare_ = false; }
  uint64_t next_u64() { return engine_(); }
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal();  // Box-Muller

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace ampgrad
