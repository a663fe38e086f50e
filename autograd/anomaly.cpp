// Anomaly detection (Note [Anomaly detection] in autograd/anomaly.h): the per-thread state, the
// checks, and the errors they raise.
#include <ampgrad/autograd/anomaly_watch.h>

#include <cmath>
#include <limits>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::autograd {

namespace {

// A check whose flags are read later (CUDA): what the anomaly is, if it is found there.
struct Site {
  Anomaly a;
  // Backward: the node, alive (with its saved tensors) until the backward ends, which reads or
  // drops every check it made (AnomalyWatch::end, backward_done).
  FunctionNode* node = nullptr;
  Tensor grad;  // the gradient it ran on
};

struct State {
  int guards = 0;     // guards alive on this thread
  bool check = false;  // the innermost guard's check_nan
  bool forward = true;  // and its check_forward
  bool busy = false;   // the checks' own ops are not checked
  int64_t ops = 0;     // outermost ops since the guard began or the last backward ended
  int64_t current = 0;
  int64_t nodes = 0;   // nodes the running backward has checked
  int backwards = 0;   // backward passes running: their formulas' ops are not the forward's
  bool ended = false;  // the running backward reached its end (AnomalyWatch::end)
  bool dirty = false;  // the flags may hold a check of a backward that ended by an exception
  std::vector<Site> sites;  // CUDA checks not read yet; a site's check number is its index + 1
  std::vector<std::pair<Device, Tensor>> flags;
};
thread_local State t_state;

bool active() { return t_state.guards > 0 && t_state.check && !t_state.busy; }

// The checks' own ops: neither counted nor checked, and not recorded.
struct Busy {
  detail::AnomalyQuiet quiet;
  NoGradGuard no_grad;
};

// A backward that ended by an exception left checks nobody will read: their flags are cleared
// before the next check or read (sites and flags must agree).
void clean() {
  if (!t_state.dirty) return;
  t_state.dirty = false;
  for (auto& [dev, f] : t_state.flags) f.zero_();
}

Tensor& flags_for(Device d) {
  for (auto& [dev, f] : t_state.flags)
    if (dev == d) return f;
  t_state.flags.emplace_back(d, zeros({3}, TensorOptions(kInt64).device(d)));
  return t_state.flags.back().second;
}

double largest_finite(DType d) {
  switch (d) {
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return 3.3895313892515355e38;
    case DType::Float32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

// A backward anomaly's node, run again on widened inputs: the largest magnitude of the gradient.
void recompute(Anomaly& a, FunctionNode& node, const Tensor& grad) {
  if (a.input < 0 || a.dtype == DType::Float64) return;
  const DType wide = is_reduced_float(a.dtype) ? kFloat32 : kFloat64;
  try {
    Grads g = node.apply_widened(grad, wide);
    const auto i = static_cast<size_t>(a.input);
    if (i >= g.size() || !g[i].defined()) return;
    // Reduced to the input's shape in the wide dtype: the float16 sum of a broadcast is what
    // may have overflowed (Note [Grad shape and dtype] in autograd/node.h).
    if (i < node.inputs.size() && g[i].shape() != node.inputs[i].shape) g[i] = sum_to(g[i], node.inputs[i].shape);
    a.wide_max_abs = max(abs(g[i].to(kFloat64))).item<double>();
    a.wide_dtype = g[i].dtype();
    a.recomputed = true;
  } catch (const Error&) {
    // A formula that cannot take the wider dtypes: the report goes without the magnitude.
  }
}

[[noreturn]] void raise(Anomaly a, FunctionNode* node, const Tensor& grad) {
  if (node != nullptr && node->part == FunctionNode::Part::whole) recompute(a, *node, grad);
  t_state.ops = 0;  // the forward or backward it ends is over: the next forward counts from 1
  throw AnomalyError(std::move(a));
}

// Checks `t` (if floating and not empty) for the anomaly `a`: at once on the CPU, else later
// (read_flags).
void check(const Tensor& t, Anomaly a, FunctionNode* node, const Tensor& grad) {
  if (!is_floating(t.dtype()) || t.numel() == 0) return;
  // A captured graph holds no checks: their kernels would replay, and the read synchronizes.
  if (graph_capturing(t.device())) return;
  Busy busy;
  clean();
  a.tensor = fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape()));
  a.dtype = t.dtype();
  a.numel = t.numel();
  a.device = t.device();
  const Tensor x = is_non_overlapping_and_dense(t) ? t : t.contiguous();
  Tensor& f = flags_for(t.device());
  if (t.device().type == DeviceType::CPU) {
    kernel::anomaly_check(x.device(), x, f, 1);
    int64_t* p = static_cast<int64_t*>(f.data_ptr());
    if (p[0] == 0) return;
    a.nan = p[1];
    a.inf = p[2];
    p[0] = p[1] = p[2] = 0;
    raise(std::move(a), node, grad);
  }
  t_state.sites.push_back({std::move(a), node, grad});
  kernel::anomaly_check(x.device(), x, f, static_cast<int64_t>(t_state.sites.size()));
}

// Reads the devices' flags (a synchronization each) and raises the first site they name.
void read_flags() {
  Busy busy;
  clean();
  if (t_state.sites.empty()) return;
  int64_t first = 0, nan = 0, inf = 0;
  for (auto& [dev, f] : t_state.flags) {
    if (dev.type == DeviceType::CPU || graph_capturing(dev)) continue;
    const std::vector<int64_t> v = f.to_vector<int64_t>();
    if (v[0] != 0 && (first == 0 || v[0] < first)) {
      first = v[0];
      nan = v[1];
      inf = v[2];
    }
    if (v[0] != 0) f.zero_();
  }
  std::vector<Site> sites = std::move(t_state.sites);
  t_state.sites.clear();
  if (first == 0) return;
  AG_INTERNAL_ASSERT(first <= static_cast<int64_t>(sites.size()), "anomaly check {} of {}", first, sites.size());
  Site& s = sites[static_cast<size_t>(first - 1)];
  s.a.nan = nan;
  s.a.inf = inf;
  raise(std::move(s.a), s.node, s.grad);
}

std::string count_text(int64_t n, const char* what) { return fmt::format("{} {} value{}", n, what, n == 1 ? "" : "s"); }

}  // namespace

DetectAnomalyGuard::DetectAnomalyGuard(bool check_nan, bool check_forward)
    : prev_check_(t_state.check), prev_forward_(t_state.forward) {
  if (t_state.guards++ == 0) t_state.ops = 0;
  t_state.check = check_nan;
  t_state.forward = check_forward;
  detail::anomaly_guards.fetch_add(1, std::memory_order_relaxed);
}

DetectAnomalyGuard::~DetectAnomalyGuard() {
  t_state.check = prev_check_;
  t_state.forward = prev_forward_;
  if (--t_state.guards == 0) {
    t_state.sites.clear();  // checks nobody read: a destructor cannot raise them
    t_state.flags.clear();
    t_state.dirty = false;
  }
  detail::anomaly_guards.fetch_sub(1, std::memory_order_relaxed);
}

void DetectAnomalyGuard::check() {
  if (t_state.guards == 0) return;
  t_state.ops = 0;  // a forward ends here: the next one counts from 1
  read_flags();
}

bool anomaly_mode_enabled() { return t_state.guards > 0 && t_state.check; }

double Anomaly::dtype_max() const { return largest_finite(dtype); }

std::string Anomaly::message() const {
  std::string what = nan > 0 && inf > 0 ? count_text(nan, "NaN") + " and " + count_text(inf, "inf")
                     : nan > 0          ? count_text(nan, "NaN")
                                        : count_text(inf, "inf");
  const std::string where = fmt::format(" (DetectAnomalyGuard, on {})", device.str());
  if (!backward)
    return fmt::format("anomaly detected: {} (op {} of the forward) returned {} in its output ({}, {} elements){}", op,
                       position, what, tensor, numel, where);
  if (input < 0 && !sum)
    return fmt::format("anomaly detected: the gradient given to backward() holds {} ({}, {} elements){}", what,
                       tensor, numel, where);
  if (sum) {
    const std::string who = op == "AccumulateGrad" ? std::string("a leaf's accumulated gradient")
                                                   : fmt::format("the gradient reaching {}'s backward", op);
    return fmt::format("anomaly detected: {} (node {} of the backward{}), the sum of gradients that each were finite, "
                       "holds {} ({}, {} elements): several paths add up past {}'s largest finite value {:.5g}{}",
                       who, node, position > 0 ? fmt::format("; {} was op {} of the forward", op, position) : "", what,
                       tensor, numel, dtype_name(dtype), dtype_max(), where);
  }
  std::string s = fmt::format("anomaly detected: {}'s backward (node {} of the backward{}) returned {} in its gradient "
                              "for input {} ({}, {} elements)",
                              op, node, position > 0 ? fmt::format("; {} was op {} of the forward", op, position) : "",
                              what, input, tensor, numel);
  if (recomputed) {
    s += fmt::format("; run again in {}, that gradient's largest magnitude is {:.3g}", dtype_name(wide_dtype),
                     wide_max_abs);
    const double top = dtype_max();
    if (std::isfinite(wide_max_abs) && wide_max_abs > top)
      s += fmt::format(", {:.3g}x {}'s largest finite value {:.5g}", wide_max_abs / top, dtype_name(dtype), top);
  }
  return s + where;
}

namespace {
// The backward from `seed` begins (raises the forward's anomaly, if any). True when its nodes
// are checked.
bool begin_backward(const Tensor& seed) {
  if (!active()) return false;
  read_flags();  // the forward's
  t_state.nodes = 0;
  t_state.ended = false;
  Anomaly a;
  a.op = "backward()";
  a.backward = true;
  check(seed, std::move(a), nullptr, Tensor());  // may raise (the CPU): before the count below
  ++t_state.backwards;  // until backward_done
  return true;
}

// After begin_backward returned true, when the backward is over, however it ended.
void backward_done() noexcept {
  --t_state.backwards;
  t_state.ops = 0;
  t_state.current = 0;
  if (!t_state.ended) {
    // Ended by an exception: its checks are dropped with their nodes.
    t_state.sites.clear();
    t_state.dirty = true;
  }
  t_state.ended = false;
}

// `node` is about to run on `sum`, the sum of the gradients that reached it along several edges.
void check_sum(Node& node, const Tensor& sum) {
  if (!active()) return;
  Anomaly a;
  a.op = std::string(node.name());
  a.backward = true;
  a.sum = true;
  a.position = node.forward_position;
  a.node = t_state.nodes + 1;
  check(sum, std::move(a), nullptr, Tensor());
}
}  // namespace

AnomalyWatch::AnomalyWatch(const Tensor& seed) {
  if (!detail::anomaly_guarded()) return;
  active_ = begin_backward(seed);
  // On a device that checks later (not the CPU) the nodes keep their saved tensors until the
  // backward's checks are read.
  keep_ = active_ && seed.device().type != DeviceType::CPU;
}

AnomalyWatch::~AnomalyWatch() {
  for (Node* n : kept_) n->release();
  if (active_) backward_done();
}

void AnomalyWatch::before_run(Node* node, const Tensor& grad) {
  if (active_ && grad.defined() && summed_.erase(node) > 0) [[unlikely]] check_sum(*node, grad);
}

void AnomalyWatch::release(Node* node) {
  if (keep_) [[unlikely]] kept_.push_back(node);
  else node->release();
}

void AnomalyWatch::end() {
  if (!active_) return;
  t_state.ops = 0;
  t_state.ended = true;
  if (t_state.guards > 0) read_flags();
}

namespace detail {

int64_t anomaly_begin_op() {
  if (!active() || t_state.backwards > 0) return 0;
  return t_state.current = ++t_state.ops;
}

int64_t anomaly_position() { return active() ? t_state.current : 0; }

void anomaly_check_output(std::string_view op, int64_t position, const Tensor& out) {
  if (!active() || !t_state.forward || !out.defined()) return;
  Anomaly a;
  a.op = std::string(op);
  a.position = position;
  check(out, std::move(a), nullptr, Tensor());
}

void anomaly_check_gradients(FunctionNode& node, const Tensor& grad, const std::vector<Tensor>& grads) {
  if (!active() || node.part == FunctionNode::Part::output) return;  // a marker, not a gradient
  const int64_t n = ++t_state.nodes;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    Anomaly a;
    a.op = std::string(node.name());
    a.backward = true;
    a.position = node.forward_position;
    a.node = n;
    a.input = static_cast<int64_t>(i);
    check(g, std::move(a), &node, grad);
  }
}

AnomalyQuiet::AnomalyQuiet() : prev_(t_state.busy) { t_state.busy = true; }
AnomalyQuiet::~AnomalyQuiet() { t_state.busy = prev_; }

}  // namespace detail

}  // namespace ampgrad::autograd
