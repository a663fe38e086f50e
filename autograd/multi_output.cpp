// Several differentiable outputs over one-output nodes (Note [Several outputs]).
#include <ampgrad/autograd/multi_output.h>

#include <memory>

#include <ampgrad/ops/op.h>

namespace ampgrad::autograd {

namespace {
// The outputs' gradients on their way to the formula's node, and whether the token went.
struct Slots {
  std::vector<Tensor> grads;
  bool token_sent = false;
};
}  // namespace

void record_outputs(const OpInfo& op, const std::vector<Tensor>& outs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor> saved, MultiBackwardFn fn) {
  record_outputs(op, outs, inputs, std::move(saved),
                 [fn = std::move(fn)](const std::vector<Tensor>& g, const std::vector<Tensor>& s, BackwardContext&) {
                   return fn(g, s);
                 });
}

void record_outputs(const OpInfo& op, const std::vector<Tensor>& outs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor> saved, ContextMultiBackwardFn fn) {
  AG_INTERNAL_ASSERT(!outs.empty(), "{}: record_outputs without outputs", op.name);
  auto slots = std::make_shared<Slots>();
  slots->grads.resize(outs.size());
  // The token: its shape and dtype are what the outputs' nodes pass on, so nothing is summed
  // or cast on the way; its values are never read.
  const Tensor token = outs[0].detach();
  record(op, token, inputs, std::move(saved),
         [slots, fn = std::move(fn)](const Tensor&, const std::vector<Tensor>& s, BackwardContext& ctx) {
           std::vector<Tensor> grads = std::move(slots->grads);
           slots->grads.assign(grads.size(), Tensor());
           slots->token_sent = false;  // a second backward (retain_graph) starts afresh
           return fn(grads, s, ctx);
         });
  static_cast<FunctionNode&>(*token.grad_fn()).part = FunctionNode::Part::formula;
  const Tensor marker = outs[0].detach();  // what the first output's node passes on (no grad_fn)
  for (size_t j = 0; j < outs.size(); ++j) {
    record(op, outs[j], {token}, {}, [slots, marker, j](const Tensor& g, const std::vector<Tensor>&) {
      slots->grads[j] = g;
      if (slots->token_sent) return Grads{Tensor()};
      slots->token_sent = true;
      return Grads{marker};
    });
    static_cast<FunctionNode&>(*outs[j].grad_fn()).part = FunctionNode::Part::output;
  }
}

}  // namespace ampgrad::autograd
