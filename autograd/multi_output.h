// Ops with several differentiable outputs (lstm_cell's hy and cy, unbind's slices) over the
// one-output nodes of the graph (Note [Several outputs]).
#pragma once

#include <functional>
#include <vector>

#include <ampgrad/autograd/node.h>

namespace ampgrad::autograd {

// Note [Several outputs]
// A graph node has one output (Note [Autograd graph]). An op with k differentiable outputs
// records one FunctionNode for its formula, over its inputs, whose output is a token (an alias
// of outs[0] that nobody sees), and gives each output a one-input node of its own whose
// input is that token. When output j's node runs, it keeps its gradient in a slot that the
// formula's node shares and passes the token on; only the first of them to run passes it, so
// the formula's node runs once, after every output's node that backward reaches, and finds
// each output's gradient in its slot, undefined where none arrived (an output that no loss
// uses). The engine and FunctionNode's shape and dtype handling are untouched: outputs and
// inputs keep Note [Grad shape and dtype].
using MultiBackwardFn = std::function<Grads(const std::vector<Tensor>& grads, const std::vector<Tensor>& saved)>;
// A formula that asks its context (Note [Backward context]).
using ContextMultiBackwardFn = std::function<Grads(const std::vector<Tensor>& grads, const std::vector<Tensor>& saved,
                                                   BackwardContext& ctx)>;

// Gives each of `outs` (defined, floating) a gradient edge into one node for `op` over
// `inputs`, keeping `saved` for `fn`, which maps one gradient per output (undefined where none
// arrived) to one gradient per input.
void record_outputs(const OpInfo& op, const std::vector<Tensor>& outs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor> saved, MultiBackwardFn fn);
void record_outputs(const OpInfo& op, const std::vector<Tensor>& outs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor> saved, ContextMultiBackwardFn fn);

}  // namespace ampgrad::autograd
