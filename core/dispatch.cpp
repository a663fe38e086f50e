// Kernel registrations and the error of a kernel missing on a device (Note [Kernel dispatch]).
#include <ampgrad/core/dispatch.h>

#include <cstdlib>

#include <ampgrad/core/error.h>

namespace ampgrad {

namespace {
// Function-local statics: registrations run during the library's (or a program's) static
// initialization, before any namespace-scope object of this file would be constructed.
std::vector<std::string>& clashes() {
  static std::vector<std::string> c;
  return c;
}
int& registrations(DeviceType type) {
  static int n[detail::kDeviceTypes] = {};
  return n[static_cast<int>(type)];
}
const char* type_name(DeviceType type) { return type == DeviceType::CUDA ? "cuda" : "cpu"; }
}  // namespace

const std::vector<std::string>& kernel_registration_clashes() { return clashes(); }
bool kernels_registered(DeviceType type) { return registrations(type) > 0; }

namespace detail {

bool fast_cpu_kernels_default() {
  const char* ref = std::getenv("AMPGRAD_CPU_REFERENCE");
  return !(ref && ref[0] == '1');
}

void kernel_registered(const char* kernel, DeviceType type, bool again, bool fast) {
  if (!fast) ++registrations(type);
  if (again) clashes().push_back(fmt::format("{} on {}{}", kernel, type_name(type), fast ? " (fast)" : ""));
}

void kernel_missing(const char* kernel, Device device) {
  const std::string_view op = CurrentOp::name();
  const std::string who = op.empty() ? std::string(kernel) : fmt::format("{} (kernel {})", op, kernel);
  if (!kernels_registered(device.type))
    throw_error(fmt::format("{}: a {} tensor reached it, but ampgrad was built without {} (AMPGRAD_CUDA=OFF)", who,
                            device.str(), type_name(device.type)));
  throw_error(fmt::format("{}: no {} implementation is registered for {} tensors (AG_REGISTER_KERNEL({}, k{}, fn))",
                          who, type_name(device.type), device.str(), kernel,
                          device.type == DeviceType::CUDA ? "CUDA" : "CPU"));
}

}  // namespace detail

}  // namespace ampgrad
