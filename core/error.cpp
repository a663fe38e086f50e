// Throwing ag::Error; kept out of line so the check macros stay small at every call site.
#include <ampgrad/core/error.h>

namespace ampgrad::detail {

void throw_error(std::string msg) { throw Error(msg); }

void throw_internal(const char* cond, const char* file, int line, std::string msg) {
  throw Error(fmt::format("internal error (this is a bug in ampgrad, please report it): {} failed at {}:{}{}{}", cond,
                          file, line, msg.empty() ? "" : ": ", msg));
}

}  // namespace ampgrad::detail
