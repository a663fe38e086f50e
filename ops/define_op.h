// Everything a program needs to define an op the way ampgrad defines its own (Note [Defining an
// op]): the record, the scope every op opens, kernels declared once and registered per device,
// the autograd record, and the input checks ampgrad's ops share.
#pragma once

#include <string_view>

#include <ampgrad/amp/category.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/ops/op.h>
#include <ampgrad/ops/op_scope.h>

namespace ampgrad {

// Note [Defining an op]
// An op is four things, each written once (ops/unary.cpp, ops/loss.cpp and
// examples/custom_op.cpp are all written this way; docs/architecture.md walks through one):
//  1. A record, at namespace scope: const OpInfo kSwish{"swish", amp::Category::fp32, true,
//     "why this category"}. Constructing it registers the op: amp::op_table(), `ampgrad ops`
//     (`--load` for a program's shared library), the trace and the tests' registry walks see it.
//  2. Its kernels, if it has kernels of its own: AG_DECLARE_KERNEL(name, signature) once in a
//     header, and AG_REGISTER_KERNEL(name, kCPU, fn) / (name, kCUDA, fn) in each device's file
//     (Note [Kernel dispatch] in core/dispatch.h). Without a CUDA implementation a CUDA tensor
//     gets an ag::Error naming the op, the kernel and the device.
//  3. The function: copy the tensor arguments, open an OpScope on them (autocast casts them
//     by the record's category, the trace logs the call), check them (AG_CHECK, with the op's
//     name, shapes, dtypes, devices), allocate the output, call the kernel on its device.
//  4. Its backward, when an input requires grad: autograd::record(op, out, inputs, saved,
//     formula). The formula maps the output's gradient to one gradient per input (undefined
//     for none); written with ops, it runs on every device. The engine sums each gradient to
//     its input's shape and casts it to its dtype.
// Then return scope.finish(out), which hands the output's dtype to the trace.

// "add: expected all tensors on the same device, got float32 [2] on cpu and float32 [2] on cuda:0"
void check_same_device(const OpInfo& op, const Tensor& a, const Tensor& b);
// "add: first input is an undefined tensor"
void check_defined(const OpInfo& op, const Tensor& t, std::string_view what);

}  // namespace ampgrad
