// Grad mode: whether ops record history (thread-local, as in PyTorch), and NoGradGuard.
#pragma once

namespace ampgrad::autograd {

bool grad_mode_enabled();
void set_grad_mode(bool enabled);

}  // namespace ampgrad::autograd

namespace ampgrad {
// Disables recording in its scope, like torch::NoGradGuard.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::grad_mode_enabled()) { autograd::set_grad_mode(false); }
  ~NoGradGuard() { autograd::set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
}  // namespace ampgrad
