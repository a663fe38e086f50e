// The consumer's own core/tensor.h, on its include path before ampgrad's: ampgrad's headers
// must not pick it up (they include <ampgrad/core/tensor.h>), and the consumer's
// #include "core/tensor.h" gets this one.
#pragma once

struct ConsumerOwnTensor {
  int value = 42;
};
