// ampgrad: the one header a program includes. `namespace ag = ampgrad;` It gives the public
// API; a program that defines ops or kernels of its own also includes <ampgrad/ops/define_op.h>
// (OpInfo records, OpScope, autograd::record, kernel stubs: Note [Defining an op]).
#pragma once

#include <ampgrad/amp/autocast.h>
#include <ampgrad/amp/fp8.h>
#include <ampgrad/amp/grad_health.h>
#include <ampgrad/amp/grad_scaler.h>
#include <ampgrad/amp/numerics.h>
#include <ampgrad/speedups/speedups.h>
#include <ampgrad/amp/op_table.h>
#include <ampgrad/amp/trace.h>
#include <ampgrad/autograd/anomaly.h>
#include <ampgrad/autograd/gradcheck.h>
#include <ampgrad/autograd/grad_mode.h>
#include <ampgrad/core/config.h>
#include <ampgrad/core/float8.h>
#include <ampgrad/core/generator.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/cpu/parallel.h>
#include <ampgrad/data/fashion_mnist.h>
#include <ampgrad/data/idx.h>
#include <ampgrad/data/loader.h>
#include <ampgrad/ops/op.h>
#include <ampgrad/nn/attention.h>
#include <ampgrad/nn/functional.h>
#include <ampgrad/nn/init.h>
#include <ampgrad/nn/layers.h>
#include <ampgrad/nn/losses.h>
#include <ampgrad/nn/module.h>
#include <ampgrad/nn/rnn.h>
#include <ampgrad/ops/float8_ops.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/ops/rnn_ops.h>
#include <ampgrad/nn/checkpoint.h>
#include <ampgrad/nn/safetensors.h>
#include <ampgrad/optim/adam.h>
#include <ampgrad/optim/sgd.h>
#include <ampgrad/cuda/runtime.h>
#if AMPGRAD_WITH_CUDA
#include <ampgrad/cuda/graph.h>
#endif
#include <ampgrad/distributed/ddp.h>
#include <ampgrad/distributed/process_group.h>
#include <ampgrad/distributed/sampler.h>
