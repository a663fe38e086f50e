// ampgrad: the one header a program includes. `namespace ag = ampgrad;`
#pragma once

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/op_table.h"
#include "amp/trace.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/config.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "cuda/runtime.h"
#if AMPGRAD_WITH_CUDA
#include "cuda/graph.h"
#endif
