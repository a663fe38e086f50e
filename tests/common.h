// Helpers shared by the Catch2 test files: error-message checks, CUDA skipping, tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <ampgrad/ampgrad.h>
#include <ampgrad/autograd/node.h>  // tests look at autograd's nodes and the op machinery
#include <ampgrad/ops/define_op.h>

namespace ag = ampgrad;

// Asserts that `expr` throws (any std::exception, ag::Error in practice) whose what()
// contains `substr`. Thin wrapper over Catch2 v2's matcher form; use it directly as
// REQUIRE_THROWS_WITH(expr, Catch::Contains("a") && Catch::Contains("b")) for several parts.
#define REQUIRE_THROWS_WITH_SUBSTR(expr, substr) REQUIRE_THROWS_WITH(expr, Catch::Contains(substr))
#define CHECK_THROWS_WITH_SUBSTR(expr, substr) CHECK_THROWS_WITH(expr, Catch::Contains(substr))

// Runs `fn` and returns the ag::Error message it throws; fails the test when nothing (or
// something else) is thrown. For asserting several parts of one message.
template <class F> std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const ag::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected ag::Error, got another exception: " << e.what());
  }
  FAIL("expected ag::Error, nothing was thrown");
  return {};
}

inline bool cuda_available() { return ag::cuda::is_available(); }

// A seed nobody chose: every run draws fresh inputs.
inline uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

// `if (skip_without_cuda()) return;` at the top of a CUDA-only test case or section.
// Prints the skip once per test case (Catch2 re-enters a test case once per section).
inline bool skip_without_cuda() {
  if (cuda_available()) return false;
  static std::string last_reported;
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  if (name != last_reported) {
    last_reported = name;
    fmt::print("[{}] skipped: no CUDA device\n", name);
  }
  return true;
}

// Machine epsilon of a dtype (spacing of 1.0); 0 for integer dtypes.
inline double eps_of(ag::DType d) {
  switch (d) {
    case ag::DType::Float32: return 1.1920928955078125e-07;
    case ag::DType::Float16: return 9.765625e-04;
    case ag::DType::BFloat16: return 7.8125e-03;
    case ag::DType::Float64: return 2.220446049250313e-16;
    default: return 0.0;
  }
}

// Checks |got - ref| <= atol + rtol * |ref| elementwise (got is read as float64, any dtype
// or device). On failure reports the worst element: index, got, ref, error and bound.
// NaN in got or ref fails unless both are NaN; infinities must match exactly.
inline void check_close(const ag::Tensor& got, const std::vector<double>& ref, double atol, double rtol) {
  REQUIRE(got.defined());
  REQUIRE(static_cast<size_t>(got.numel()) == ref.size());
  const std::vector<double> g = got.to_vector<double>();
  size_t worst = 0;
  double worst_excess = -1;  // error - bound; > 0 means out of tolerance
  size_t n_bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double excess;
    if (std::isnan(g[i]) || std::isnan(ref[i])) {
      excess = (std::isnan(g[i]) && std::isnan(ref[i])) ? -1 : INFINITY;
    } else if (std::isinf(g[i]) || std::isinf(ref[i])) {
      excess = g[i] == ref[i] ? -1 : INFINITY;
    } else {
      excess = std::abs(g[i] - ref[i]) - (atol + rtol * std::abs(ref[i]));
    }
    if (excess > 0) ++n_bad;
    if (excess > worst_excess || i == 0) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (n_bad == 0) {
    SUCCEED();
    return;
  }
  FAIL(fmt::format("check_close: {} of {} elements out of tolerance (atol {:g}, rtol {:g}); worst at flat index "
                   "{}: got {:.10g}, expected {:.10g}, |diff| {:.3g} > bound {:.3g} ({})",
                   n_bad, g.size(), atol, rtol, worst, g[worst], ref[worst], std::abs(g[worst] - ref[worst]),
                   atol + rtol * std::abs(ref[worst]), got.desc()));
}
