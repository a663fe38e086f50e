// ag::Error, the AG_CHECK macro for user-facing checks, and AG_INTERNAL_ASSERT for bugs.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ampgrad {

// Every failure a user can cause, and every CUDA/cuBLAS/cuDNN failure, is an Error.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
[[noreturn]] void throw_error(std::string msg);
[[noreturn]] void throw_internal(const char* cond, const char* file, int line, std::string msg);
}  // namespace detail

}  // namespace ampgrad

// AG_CHECK(cond, "mm: shapes {} and {} cannot be multiplied", a.shape(), b.shape());
#define AG_CHECK(cond, ...)                                           \
  do {                                                                \
    if (!(cond)) ::ampgrad::detail::throw_error(fmt::format(__VA_ARGS__)); \
  } while (0)

// An invariant of ampgrad itself; failing it is a bug in ampgrad, not in the caller.
#define AG_INTERNAL_ASSERT(cond, ...)                                                              \
  do {                                                                                             \
    if (!(cond)) ::ampgrad::detail::throw_internal(#cond, __FILE__, __LINE__, fmt::format("" __VA_ARGS__)); \
  } while (0)
