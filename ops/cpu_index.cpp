// CPU reference kernels of index_copy, gather, scatter_add and embedding's backward (the ops
// check every index against its dim's size before these run).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_loop.h>

namespace ampgrad::cpu {

namespace {
// x's strides with dim's set to 0: the offset of a position's other coordinates.
Shape without_dim(const Tensor& t, int64_t dim) {
  Shape s = t.strides();
  s[dim] = 0;
  return s;
}
}  // namespace

void index_copy(const Tensor& out, const Tensor& index, const Tensor& src) {
  const int64_t outer = out.size(0), d = out.size(1), inner = out.size(2), n = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const size_t es = out.element_size();
  const char* ps = static_cast<const char*>(src.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)  // in order: a repeated index keeps its last row
      std::memcpy(po + ((o * d + idx[j]) * inner) * es, ps + ((o * n + j) * inner) * es, inner * es);
}

void check_index(const Tensor& index, int64_t low, int64_t high, const char* op, const char* what) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  for (int64_t i = 0, n = index.numel(); i < n; ++i)
    AG_CHECK(idx[i] >= low && idx[i] < high, "{}: {} {} is out of range [{}, {}) at position {} of the {} ({} {})", op,
             what, idx[i], low, high, i, what, what, shape_str(index.shape()));
}

void gather(const Tensor& x, const Tensor& index, const Tensor& out, int64_t dim) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const size_t es = x.element_size();
  const char* px = static_cast<const char*>(x.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  const Shape xs = without_dim(x, dim);
  const int64_t step = x.stride(dim);
  for_each_offset<3>(index.shape(), {&out.strides(), &index.strides(), &xs}, [&](const std::array<int64_t, 3>& o) {
    std::memcpy(po + o[0] * es, px + (o[2] + idx[o[1]] * step) * es, es);
  });
}

void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      AG_INTERNAL_ASSERT(false, "cpu scatter_add on bool");
    } else {
      const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
      const T* ps = static_cast<const T*>(src.data_ptr());
      T* po = static_cast<T*>(out.data_ptr());
      const Shape os = without_dim(out, dim);
      const int64_t step = out.stride(dim);
      // In index order: the reference's sums have one fixed order.
      for_each_offset<3>(index.shape(), {&src.strides(), &index.strides(), &os}, [&](const std::array<int64_t, 3>& o) {
        T& dst = po[o[2] + idx[o[1]] * step];
        dst = static_cast<T>(static_cast<acc_t<T>>(dst) + static_cast<acc_t<T>>(ps[o[0]]));
      });
    }
  });
}

// Note [Embedding backward] in ops/embedding.cpp: positions stably sorted by index, each
// index's rows summed in ascending position order, as cuda/embedding.cu does.
void embedding_backward(const Tensor& grad, const Tensor& index, int64_t padding_idx, bool scale_grad_by_freq,
                        const Tensor& out) {
  const int64_t n = index.numel(), dim = grad.size(1), num = out.size(0);
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    if constexpr (!std::is_floating_point_v<A>) {
      AG_INTERNAL_ASSERT(false, "cpu embedding_backward on {}", dtype_name(out.dtype()));
    } else {
      const T* pg = static_cast<const T*>(grad.data_ptr());
      T* po = static_cast<T*>(out.data_ptr());
      std::vector<A> sum(static_cast<size_t>(dim));
      for (int64_t begin = 0; begin < n;) {
        const int64_t r = idx[order[begin]];
        int64_t end = begin;
        while (end < n && idx[order[end]] == r) ++end;
        if (r != padding_idx && r >= 0 && r < num) {
          std::fill(sum.begin(), sum.end(), A(0));
          for (int64_t k = begin; k < end; ++k)
            for (int64_t c = 0; c < dim; ++c) sum[c] += static_cast<A>(pg[order[k] * dim + c]);
          const A scale = scale_grad_by_freq ? A(1) / static_cast<A>(end - begin) : A(1);
          for (int64_t c = 0; c < dim; ++c) po[r * dim + c] = static_cast<T>(scale_grad_by_freq ? sum[c] * scale : sum[c]);
        }
        begin = end;
      }
    }
  });
}

AG_REGISTER_KERNEL(kernel::check_index, kCPU, check_index);
AG_REGISTER_KERNEL(kernel::embedding_backward, kCPU, embedding_backward);
AG_REGISTER_KERNEL(kernel::index_copy, kCPU, index_copy);
AG_REGISTER_KERNEL(kernel::gather, kCPU, gather);
AG_REGISTER_KERNEL(kernel::scatter_add, kCPU, scatter_add);

}  // namespace ampgrad::cpu
