// Device parsing and printing.
#include <ampgrad/core/device.h>

#include <ampgrad/core/error.h>

namespace ampgrad {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
  } else if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() > 4) {
      AG_CHECK(spec[4] == ':' && spec.size() > 5, "device: cannot parse '{}' (expected cpu, cuda or cuda:N)", spec);
      const std::string digits = spec.substr(5);
      // std::stoi would throw std::invalid_argument/out_of_range, which are not ag::Error.
      AG_CHECK(digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos,
               "device: cannot parse '{}' (expected cuda:N)", spec);
      index = std::stoi(digits);
    }
  } else {
    AG_CHECK(false, "device: cannot parse '{}' (expected cpu, cuda or cuda:N)", spec);
  }
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace ampgrad
