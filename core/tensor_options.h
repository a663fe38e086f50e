// TensorOptions: dtype, device and requires_grad for factories, in libtorch's builder style.
#pragma once

#include <ampgrad/core/device.h>
#include <optional>

#include <ampgrad/core/dtype.h>

namespace ampgrad {

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}  // NOLINT: ag::zeros({2}, ag::kFloat16)
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  TensorOptions(DeviceType d) : device_(d) {}  // NOLINT
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r) const { auto o = *this; o.requires_grad_ = r; return o; }
  DType dtype() const { return dtype_.value_or(get_default_dtype()); }  // get_default_dtype(): core/dtype.h
  bool has_dtype() const { return dtype_.has_value(); }  // factories that infer a dtype ask
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  std::optional<DType> dtype_;
  Device device_;
  bool requires_grad_ = false;
};

}  // namespace ampgrad
