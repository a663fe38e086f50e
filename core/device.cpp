// Device parsing and printing.
#include "core/device.h"

#include "core/error.h"

namespace ampgrad {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
  } else if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() > 4) {
      AG_CHECK(spec[4] == ':' && spec.size() > 5, "device: cannot parse '{}' (expected cpu, cuda or cuda:N)", spec);
      size_t used = 0;
      index = std::stoi(spec.substr(5), &used);
      AG_CHECK(used == spec.size() - 5 && index >= 0, "device: cannot parse '{}' (expected cuda:N)", spec);
    }
  } else {
    AG_CHECK(false, "device: cannot parse '{}' (expected cpu, cuda or cuda:N)", spec);
  }
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace ampgrad
