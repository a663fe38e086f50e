// nn::Module: named parameters, buffers and children, train/eval, device and dtype moves,
// and state_dict (the tree of names every checkpoint uses: "features.0.weight").
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad::nn {

using StateDict = std::map<std::string, Tensor>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name = "Module") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Most layers map one tensor to one tensor.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  const std::string& name() const { return name_; }

  // Depth-first, in registration order, names joined with '.'; a tensor registered in two places
  // (a tied weight) once, under its first name, as PyTorch's. state_dict() holds every name.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer in place (the tensors stay the same objects).
  void to(Device device);
  // Casts floating parameters and buffers (not integer buffers such as counters).
  void to(DType dtype);
  void zero_grad(bool set_to_none = true);

  // Parameters and buffers by name. load_state_dict checks every name and shape first, so a
  // mismatch changes nothing; values are copied into the existing tensors.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& sd, bool strict = true);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool recurse, bool params,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::string name_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Modules applied in order; a Linear directly followed by a ReLU runs as one linear_relu (Note
// [Linear + ReLU] in ops/linear.cpp), one followed by GELU("tanh") as one linear_gelu (Note
// [Linear + GELU]).
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  Sequential& push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return named_children().at(i).second; }
};

// A list of modules whose parameters are registered, applied by the owner as it likes.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList& push_back(std::shared_ptr<Module> m);
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return named_children().at(i).second; }
};

}  // namespace ampgrad::nn
