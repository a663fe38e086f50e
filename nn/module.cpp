// Module bookkeeping: parameter and buffer trees, moves, and state_dict.
#include <ampgrad/nn/module.h>

#include <typeinfo>
#include <unordered_set>

#include <ampgrad/autograd/node.h>
#include <ampgrad/nn/layers.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn {

Tensor Module::forward(const Tensor&) {
  AG_CHECK(false, "{}: this module does not define forward(tensor)", name_);
  return Tensor();
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  AG_CHECK(t.defined(), "{}: parameter '{}' is undefined", name_, name);
  if (requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, t);
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool recurse, bool params,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : params ? params_ : buffers_) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", true, params, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> all, out;
  collect("", recurse, true, all);
  // A tensor registered twice (a weight shared by two layers) is one parameter, under its first
  // name, as PyTorch's named_parameters (remove_duplicate): an optimizer steps it once.
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [n, t] : all)
    if (seen.insert(t.unsafe_impl()).second) out.emplace_back(std::move(n), std::move(t));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, false, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [n, t] : named_parameters()) t.set_data(t.to(device));
  for (auto& [n, t] : named_buffers()) t.set_data(t.to(device));
}

void Module::to(DType dtype) {
  AG_CHECK(is_floating(dtype), "{}.to: expected a floating dtype, got {}", name_, dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto& [n, t] : named_parameters())
    if (t.is_floating_point()) t.set_data(t.to(dtype));
  for (auto& [n, t] : named_buffers())
    if (t.is_floating_point()) t.set_data(t.to(dtype));
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      NoGradGuard no_grad;
      p.grad().zero_();
    }
  }
}

StateDict Module::state_dict() const {
  StateDict sd;
  std::vector<std::pair<std::string, Tensor>> params;  // every name, a shared weight's too (as PyTorch)
  collect("", true, true, params);
  for (auto& [n, t] : params) sd[n] = t;
  for (auto& [n, t] : named_buffers()) sd[n] = t;
  return sd;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  StateDict mine = state_dict();
  // Check everything before copying anything: a bad dict leaves the module unchanged.
  for (const auto& [n, t] : mine) {
    auto it = sd.find(n);
    AG_CHECK(it != sd.end() || !strict, "{}.load_state_dict: missing '{}' ({})", name_, n, t.desc());
    if (it != sd.end())
      AG_CHECK(it->second.shape() == t.shape(), "{}.load_state_dict: '{}' is {} in the state dict but {} here",
               name_, n, shape_str(it->second.shape()), shape_str(t.shape()));
  }
  if (strict)
    for (const auto& [n, t] : sd)
      AG_CHECK(mine.count(n), "{}.load_state_dict: unexpected '{}' ({}) in the state dict", name_, n, t.desc());
  NoGradGuard no_grad;
  for (auto& [n, t] : mine) {
    auto it = sd.find(n);
    if (it != sd.end()) t.copy_(it->second);
  }
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

Sequential& Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const auto& children = named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    Module* m = children[i].second.get();
    // A Linear directly followed by a ReLU runs as one op (Note [Linear + ReLU] in
    // ops/linear.cpp): the same values, one launch and one autograd node fewer.
    if (i + 1 < children.size() && typeid(*m) == typeid(Linear) && typeid(*children[i + 1].second) == typeid(ReLU)) {
      auto* lin = static_cast<Linear*>(m);
      h = linear_relu(h, lin->weight, lin->bias);
      ++i;
      continue;
    }
    // And one followed by a tanh GELU (Note [Linear + GELU]).
    if (i + 1 < children.size() && typeid(*m) == typeid(Linear) && typeid(*children[i + 1].second) == typeid(GELU) &&
        static_cast<const GELU&>(*children[i + 1].second).approximate() == "tanh") {
      auto* lin = static_cast<Linear*>(m);
      h = linear_gelu(h, lin->weight, lin->bias);
      ++i;
      continue;
    }
    h = m->forward(h);
  }
  return h;
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(size()), std::move(m));
  return *this;
}

}  // namespace ampgrad::nn
