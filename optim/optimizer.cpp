// Optimizer base: groups, state, zero_grad, master weights and state_dict.
#include <ampgrad/optim/optimizer.h>

#include <algorithm>
#include <unordered_set>

#include <ampgrad/amp/cast_reuse.h>
#include <ampgrad/autograd/grad_mode.h>
#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/dispatch.h>

namespace ampgrad::optim {

Optimizer::Optimizer(const char* name, std::vector<std::vector<Tensor>> groups, const OptimizerOptions& defaults,
                     std::vector<std::string> state_names, const std::vector<double>& group_lrs)
    : state_names_(std::move(state_names)) {
  AG_CHECK(group_lrs.empty() || group_lrs.size() == groups.size(), "{}: {} group learning rates for {} groups", name,
           group_lrs.size(), groups.size());
  AG_CHECK(!groups.empty(), "optimizer: got no parameter groups");
  // A parameter given twice would be stepped twice (PyTorch refuses it across groups).
  std::unordered_set<const TensorImpl*> seen;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (const Tensor& p : groups[gi]) {
      if (!p.defined()) continue;
      AG_CHECK(seen.insert(p.unsafe_impl()).second,
               "{}: some parameters appear more than once in the parameter groups ({}, again in group {}); give "
               "each parameter once (a tied weight is one parameter)",
               name, p.desc(), gi);
    }
  for (auto& params : groups) {
    AG_CHECK(!params.empty(), "optimizer: a parameter group is empty");
    Group g;
    for (const Tensor& p : params) {
      AG_CHECK(p.defined() && p.is_leaf() && p.requires_grad(),
               "optimizer: parameters must be leaf tensors that require grad, got {}", p.desc());
      AG_CHECK(p.is_contiguous(), "optimizer: parameters must be contiguous, got {}", p.desc());
    }
    g.params = std::move(params);
    g.options = defaults.clone();
    if (!group_lrs.empty()) g.options->set_lr(group_lrs[groups_.size()]);
    groups_.push_back(std::move(g));
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  // Kept gradients are zeroed in one launch per device, not one memset each: a small
  // network's step is bound by the host's launch time.
  std::vector<std::pair<Device, std::vector<Tensor>>> batches;
  NoGradGuard no_grad;
  for (Group& g : groups_)
    for (Tensor& p : g.params) {
      if (set_to_none) {
        p.set_grad(Tensor());
        continue;
      }
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (!grad.is_contiguous() || grad.numel() == 0 ||
          reinterpret_cast<uintptr_t>(ampgrad::detail::address(grad)) % 16 != 0) {
        grad.zero_();
        continue;
      }
      grad.bump_version();  // as zero_() would
      auto it = std::find_if(batches.begin(), batches.end(), [&](const auto& b) { return b.first == grad.device(); });
      if (it == batches.end()) it = batches.insert(batches.end(), {grad.device(), {}});
      it->second.push_back(grad);
    }
  for (const auto& [dev, grads] : batches) kernel::zero_tensors(dev, grads);
}

std::vector<Tensor> Optimizer::params() const {
  std::vector<Tensor> all;
  for (const Group& g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  return all;
}

double Optimizer::lr(size_t group) const { return groups_.at(group).options->get_lr(); }
void Optimizer::set_lr(double lr) {
  for (Group& g : groups_) g.options->set_lr(lr);
}
void Optimizer::set_lr(size_t group, double lr) { groups_.at(group).options->set_lr(lr); }

void Optimizer::use_master_weights() {
  master_weights_ = true;
  NoGradGuard no_grad;
  for (Group& g : groups_) {
    if (!g.masters.empty()) continue;
    for (const Tensor& p : g.params)
      g.masters.push_back(is_reduced_float(p.dtype()) ? p.to(kFloat32) : p);  // f32/f64 params are their own master
  }
}

Tensor Optimizer::master_of(const Tensor& param) const {
  for (const Group& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      if (g.params[i].is_same(param)) return g.masters.empty() ? param : g.masters[i];
  AG_CHECK(false, "optimizer: {} is not one of this optimizer's parameters", param.desc());
  return param;
}

// Note [A failed step]
// Running out of memory in the middle of a step must leave the parameters and the optimizer's
// state as they were, so that a smaller next step can train from them. Everything a step
// allocates is therefore allocated, and every group's options checked, before anything is
// written: every group's lists and its lazily created state, which is stored only once all of
// it exists; then the fused kernels run (they allocate nothing). GradScaler makes what its
// step and update need before the optimizer's step too. A failure before the kernels changes
// nothing; tests/test_faults.cpp fails each allocation of a step in turn.
void Optimizer::step_gated(const Tensor& found_inf, const Tensor& inv_scale, const ScaleUpdate* update,
                           bool check_grads) {
  AG_INTERNAL_ASSERT(!update || groups_.size() == 1, "optimizer: a scale update in the step needs one parameter group");
  NoGradGuard no_grad;
  CurrentOp current("optimizer step");  // names the step's device errors
  struct Planned {
    Group* g;
    FusedStep s;
    std::vector<size_t> idx;
  };
  std::vector<Planned> plan;
  plan.reserve(groups_.size());
  std::vector<FreshState> fresh;
  for (const Group& g : groups_) check_group(g);
  for (Group& g : groups_) {
    std::vector<size_t> idx;
    FusedStep s = gather(g, found_inf, inv_scale, idx, fresh);
    AG_INTERNAL_ASSERT(!update || !s.params.empty(), "optimizer: a scale update in the step needs a gradient");
    if (s.params.empty()) continue;
    s.update = update;
    s.check_grads = check_grads;
    plan.push_back({&g, std::move(s), std::move(idx)});
  }
  for (FreshState& f : fresh) *f.slot = std::move(f.value);
  for (Planned& p : plan) {
    fused_step(*p.g, p.s, p.idx);
    step_written(p.s);
    // A phase of the step ends: its calls, and the backward's, go to the device now (Note
    // [Device hooks] in core/device_hooks.h).
    end_phase(p.s.params[0].device());
  }
}

FusedStep Optimizer::gather(Group& g, const Tensor& found_inf, const Tensor& inv_scale, std::vector<size_t>& idx,
                            std::vector<FreshState>& fresh) {
  FusedStep s;
  s.found_inf = found_inf;
  s.inv_scale = inv_scale;
  const bool masters = !g.masters.empty();
  s.masters = masters;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& p = g.params[i];
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    AG_CHECK(grad.is_contiguous() && grad.shape() == p.shape() && grad.device() == p.device(),
             "optimizer: the gradient {} of parameter {} is not a contiguous tensor of its shape and device",
             grad.desc(), p.desc());
    idx.push_back(i);
    const Tensor& target = masters ? g.masters[i] : p;
    s.params.push_back(target);
    s.grads.push_back(grad);
    if (masters && !target.is_same(p)) s.working.push_back(p);
  }
  AG_CHECK(s.working.empty() || s.working.size() == s.params.size(),
           "optimizer: with master weights, a group must hold only 16-bit or only 32-bit parameters");
  if (!masters) {
    // 16-bit copies of these parameters that autocast will reuse, written by the same pass
    // (Note [Cast reuse] in amp/cast_reuse.h).
    std::vector<Tensor> copies = amp::copies_to_write(s.params);
    if (std::any_of(copies.begin(), copies.end(), [](const Tensor& c) { return c.defined(); }))
      s.working = std::move(copies);
  }
  // State is created lazily, like PyTorch's, in the dtype of what is updated; the caller stores
  // it (Note [A failed step]). The slots exist first: resizing later would move them.
  for (const std::string& name : state_names_) g.state[name].resize(g.params.size());
  g.steps.resize(g.params.size());
  for (const std::string& name : state_names_) {
    auto& st = g.state[name];
    for (size_t i : idx)
      if (!st[i].defined()) fresh.push_back({&st[i], zeros_like(masters ? g.masters[i] : g.params[i])});
  }
  for (size_t i : idx)
    if (!g.steps[i].defined())
      fresh.push_back({&g.steps[i], zeros({1}, TensorOptions(kFloat32).device(g.params[i].device()))});
  return s;
}

void Optimizer::step_written(const FusedStep& s) {
  // The step wrote them in place: later reads of saved copies must see new versions.
  for (const Tensor& p : s.params) p.bump_version();
  for (const Tensor& w : s.working)
    if (w.defined()) w.bump_version();
  // Tells cast reuse which copies are current again (a master-weight step's working tensors are
  // the 16-bit parameters themselves: nothing to tell).
  if (!s.masters) amp::copies_written(s.params, s.working);
}

std::vector<Tensor> Optimizer::state_at(Group& g, const std::string& name, const std::vector<size_t>& idx) {
  std::vector<Tensor> out;
  for (size_t i : idx) out.push_back(g.state.at(name)[i]);
  return out;
}

std::vector<Tensor> Optimizer::steps_at(Group& g, const std::vector<size_t>& idx) {
  std::vector<Tensor> out;
  for (size_t i : idx) out.push_back(g.steps[i]);
  return out;
}

StateDict Optimizer::state_dict() const {
  StateDict sd;
  size_t base = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    for (const auto& [k, v] : g.options->values())
      sd[fmt::format("param_groups.{}.{}", gi, k)] = tensor(std::vector<double>{v}, {});
    sd[fmt::format("param_groups.{}.size", gi)] = tensor(std::vector<double>{static_cast<double>(g.params.size())}, {});
    for (size_t i = 0; i < g.params.size(); ++i) {
      const size_t id = base + i;
      if (i < g.steps.size() && g.steps[i].defined()) sd[fmt::format("state.{}.step", id)] = g.steps[i];
      for (const auto& [name, ts] : g.state)
        if (i < ts.size() && ts[i].defined()) sd[fmt::format("state.{}.{}", id, name)] = ts[i];
      if (!g.masters.empty() && !g.masters[i].is_same(g.params[i])) sd[fmt::format("state.{}.master", id)] = g.masters[i];
    }
    base += g.params.size();
  }
  return sd;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  NoGradGuard no_grad;
  // Validate everything first, so that a mismatched dict leaves the optimizer unchanged.
  size_t base = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto it = sd.find(fmt::format("param_groups.{}.size", gi));
    AG_CHECK(it != sd.end(), "optimizer.load_state_dict: missing param_groups.{}.size", gi);
    AG_CHECK(static_cast<size_t>(it->second.item<double>()) == groups_[gi].params.size(),
             "optimizer.load_state_dict: group {} holds {} parameters but the state dict has {}", gi,
             groups_[gi].params.size(), it->second.item<double>());
    for (const auto& [k, v] : groups_[gi].options->values())
      AG_CHECK(sd.count(fmt::format("param_groups.{}.{}", gi, k)), "optimizer.load_state_dict: missing param_groups.{}.{}",
               gi, k);
    base += groups_[gi].params.size();
  }
  base = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    for (const auto& [k, v] : g.options->values()) g.options->set_value(k, sd.at(fmt::format("param_groups.{}.{}", gi, k)).item<double>());
    for (size_t i = 0; i < g.params.size(); ++i) {
      const size_t id = base + i;
      const Device dev = g.params[i].device();
      auto load = [&](const std::string& key, Tensor& slot, const Tensor& like) {
        auto it = sd.find(key);
        if (it == sd.end()) return;
        AG_CHECK(it->second.numel() == like.numel(), "optimizer.load_state_dict: {} is {} but expected {} elements",
                 key, it->second.desc(), like.numel());
        slot = it->second.to(dev, like.dtype()).reshape(like.shape()).clone();
      };
      g.steps.resize(g.params.size());
      load(fmt::format("state.{}.step", id), g.steps[i], zeros({1}, TensorOptions(kFloat32)));
      if (!g.masters.empty() && !g.masters[i].is_same(g.params[i])) load(fmt::format("state.{}.master", id), g.masters[i], g.masters[i]);
      for (const std::string& name : state_names_) {
        auto& st = g.state[name];
        st.resize(g.params.size());
        const Tensor& like = g.masters.empty() ? g.params[i] : g.masters[i];
        load(fmt::format("state.{}.{}", id, name), st[i], like);
      }
    }
    base += g.params.size();
  }
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor sq = sum(pow(g.to(kFloat32), 2));
    total = total.defined() ? total + sq : sq;
  }
  AG_CHECK(total.defined(), "clip_grad_norm_: none of the {} parameters has a gradient", params.size());
  Tensor norm = sqrt(total);
  // coef = min(max_norm / (norm + 1e-6), 1), computed on the device.
  Tensor coef = clamp(rdiv(norm + 1e-6, max_norm), std::nullopt, 1.0);
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.copy_(g * coef);
  }
  return norm;
}

}  // namespace ampgrad::optim
