// OpScope: what every op runs first. It applies the autocast policy to the op's inputs
// (Note [Autocast] in amp/autocast.h), logs the call when a trace is recording, and names the
// op for the errors of the kernels it calls (Note [Kernel dispatch] in core/dispatch.h).
#pragma once

#include <array>
#include <optional>

#include <ampgrad/amp/policy.h>
#include <ampgrad/autograd/anomaly.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/dispatch.h>
#include <ampgrad/ops/op.h>

namespace ampgrad {

class OpScope {
 public:
  // `inputs` are the op's local copies of its tensor arguments; the policy may replace them.
  template <class... Ts>
  OpScope(const OpInfo& op, Ts&... inputs) : op_(op), current_(op.name) {
    std::array<Tensor*, sizeof...(Ts)> ptrs{&inputs...};
    enter(ptrs.size(), [&](size_t i) { return ptrs[i]; });
    if (depth_.outermost && amp::detail::policy_active()) begin(ptrs.data(), ptrs.size());
  }
  OpScope(const OpInfo& op, std::vector<Tensor>& inputs) : op_(op), current_(op.name) {
    enter(inputs.size(), [&](size_t i) { return &inputs[i]; });
    if (depth_.outermost && amp::detail::policy_active()) {
      std::vector<Tensor*> ptrs;
      for (Tensor& t : inputs) ptrs.push_back(&t);
      begin(ptrs.data(), ptrs.size());
    }
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  // The dtype autocast chose for this call (nothing when it did not act): an fp32 op that
  // reads 16-bit inputs as they are (OpInfo::reads_16bit) computes in it.
  std::optional<DType> autocast_dtype() const { return autocast_dtype_; }

  // Under FP8 autocast (autocast_dtype() is a float8 dtype, Note [FP8 autocast]), a GEMM op
  // whose shapes no FP8 GEMM takes casts its inputs to `dtype` (bfloat16) with this and runs as usual.
  template <class... Ts> void cast_inputs(DType dtype, Ts&... inputs) {
    std::array<Tensor*, sizeof...(Ts)> ptrs{&inputs...};
    amp::detail::cast_inputs(ptrs.data(), ptrs.size(), dtype, record_ ? &*record_ : nullptr);
    autocast_dtype_ = dtype;
  }

  // Which implementation this call takes, and why, for the trace (`ampgrad explain`); the text
  // is made only when a trace records this call.
  template <class Make> void note_path(Make&& make) {
    if (record_) record_->path = make();
  }

  // Returns `out`, logging it to the trace when one records this call.
  Tensor finish(Tensor out) {
    if (record_) {
      record_->output_dtype = out.dtype();
      amp::detail::trace_push(std::move(*record_));
      record_.reset();
    }
    // Sync debug (cuda::set_sync_debug): the device's errors raised by the op that caused them.
    if (detail::after_op_hook != nullptr && out.defined()) [[unlikely]] detail::after_op_hook(out.device());
    // Anomaly detection (Note [Anomaly detection] in autograd/anomaly.h): the output is checked.
    if (position_ != 0) [[unlikely]] autograd::detail::anomaly_check_output(op_.name, position_, out);
    return out;
  }

 private:
  // The first kNamedInputs tensor arguments, named by errors found later (CurrentOp::inputs).
  static constexpr size_t kNamedInputs = 6;
  // What both constructors do first: refuse a duplicate record, remember the first inputs
  // (input(i) for i < n), and under anomaly detection number an outermost op.
  template <class Input> void enter(size_t n, Input&& input) {
    if (op_.duplicate) [[unlikely]] refuse_duplicate();
    for (size_t i = 0; i < n && i < kNamedInputs; ++i) inputs_[n_inputs_++] = input(i);
    current_.set_inputs(inputs_, n_inputs_);
    if (!op_.moves_float8) {
      for (size_t i = 0; i < n; ++i) {
        const Tensor* t = input(i);
        if (t->defined() && is_float8(t->dtype())) [[unlikely]] refuse_float8(*t);
      }
    }
    if (autograd::detail::anomaly_guarded() && depth_.outermost) [[unlikely]]
      position_ = autograd::detail::anomaly_begin_op();
  }
  void begin(Tensor* const* inputs, size_t n) {
    if (amp::detail::tracing()) record_.emplace();
    autocast_dtype_ = amp::detail::apply_policy(op_, inputs, n, record_ ? &*record_ : nullptr);
  }
  // A member, so that the depth is restored even when the policy throws in the constructor.
  struct Depth {
    bool outermost = amp::detail::OpDepth::depth++ == 0;
    Depth() = default;
    Depth(const Depth&) = delete;
    ~Depth() { --amp::detail::OpDepth::depth; }
  };
  [[noreturn]] void refuse_duplicate() const;
  [[noreturn]] void refuse_float8(const Tensor& t) const;
  Depth depth_;
  const OpInfo& op_;
  CurrentOp current_;
  const Tensor* inputs_[kNamedInputs] = {};
  size_t n_inputs_ = 0;
  std::optional<amp::OpRecord> record_;
  std::optional<DType> autocast_dtype_;
  int64_t position_ = 0;  // under anomaly detection, the op's position in the forward
};

}  // namespace ampgrad
