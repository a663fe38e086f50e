// A kernel of test_call_graphs' own (call_graphs_kernels.cu).
#pragma once

#include <ampgrad/core/tensor.h>

// x *= s in place (contiguous float32 on CUDA) through cuda::launch, `threads` threads a block:
// more than 1024 is a configuration the launch refuses.
void launch_scale(const ampgrad::Tensor& x, float s, unsigned threads);
