// CPU reference kernels: batched gemm and index_select/index_add.
#include <cstring>
#include <type_traits>
#include <vector>

#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/blas.h>

namespace ampgrad::cpu {

namespace {

// Widens one [rows, cols] matrix with arbitrary strides into a dense row-major buffer.
template <class T, class A>
void load_matrix(const T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, std::vector<A>& dst) {
  dst.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = static_cast<A>(static_cast<acc_t<T>>(p[i * rs + j * cs]));
}

// One batch through BLAS: dense row-major copies in float (or double), C computed in place.
template <class T, class A>
void gemm_blas(const std::vector<A>& am, const std::vector<A>& bm, T* ob, int64_t m, int64_t n, int64_t k, double alpha,
               double beta) {
  std::vector<A> c(static_cast<size_t>(m * n));
  if (beta != 0)
    for (int64_t i = 0; i < m * n; ++i) c[i] = static_cast<A>(static_cast<acc_t<T>>(ob[i]));
  if constexpr (std::is_same_v<A, double>) {
    blas_dgemm(false, false, m, n, k, alpha, am.data(), k, bm.data(), n, beta, c.data(), n);
  } else {
    blas_sgemm(false, false, m, n, k, static_cast<float>(alpha), am.data(), k, bm.data(), n, static_cast<float>(beta),
               c.data(), n);
  }
  for (int64_t i = 0; i < m * n; ++i) ob[i] = static_cast<T>(c[i]);
}

template <class T>
void gemm_typed(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  // 16-bit and float32 inputs accumulate in float, as cuBLAS does with CUBLAS_COMPUTE_32F.
  using A = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, int64_t, float>>;
  const int64_t batch = a.size(0), m = a.size(1), kdim = a.size(2), n = b.size(2);
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  std::vector<A> am, bm, acc(static_cast<size_t>(n));
  for (int64_t bi = 0; bi < batch; ++bi) {
    load_matrix(pa + bi * a.stride(0), m, kdim, a.stride(1), a.stride(2), am);
    load_matrix(pb + bi * b.stride(0), kdim, n, b.stride(1), b.stride(2), bm);
    T* ob = po + bi * m * n;
    if constexpr (!std::is_integral_v<T>) {
      if (blas_available()) {
        gemm_blas<T, A>(am, bm, ob, m, n, kdim, alpha, beta);
        continue;
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t kk = 0; kk < kdim; ++kk) {
        const A av = am[i * kdim + kk];
        const A* brow = bm.data() + kk * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += av * brow[j];
      }
      for (int64_t j = 0; j < n; ++j) {
        A v = static_cast<A>(alpha) * acc[j];
        if (beta != 0) v += static_cast<A>(beta) * static_cast<A>(static_cast<acc_t<T>>(ob[i * n + j]));
        ob[i * n + j] = static_cast<T>(v);
      }
    }
  }
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      AG_INTERNAL_ASSERT(false, "cpu gemm on bool");
    } else {
      gemm_typed<T>(a, b, out, alpha, beta);
    }
  });
}

void index_select(const Tensor& x, const Tensor& index, const Tensor& out) {
  const int64_t outer = x.size(0), d = x.size(1), inner = x.size(2), n = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const size_t es = x.element_size();
  const char* px = static_cast<const char*>(x.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(po + ((o * n + j) * inner) * es, px + ((o * d + idx[j]) * inner) * es, inner * es);
}

void index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      AG_INTERNAL_ASSERT(false, "cpu index_add on bool");
    } else {
      const int64_t outer = out.size(0), d = out.size(1), inner = out.size(2), n = index.numel();
      const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
      const T* ps = static_cast<const T*>(src.data_ptr());
      T* po = static_cast<T*>(out.data_ptr());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            T& dst = po[(o * d + idx[j]) * inner + i];
            dst = static_cast<T>(static_cast<acc_t<T>>(dst) + static_cast<acc_t<T>>(ps[(o * n + j) * inner + i]));
          }
    }
  });
}

AG_REGISTER_KERNEL(kernel::gemm, kCPU, gemm);
AG_REGISTER_KERNEL(kernel::index_select, kCPU, index_select);
AG_REGISTER_KERNEL(kernel::index_add, kCPU, index_add);

}  // namespace ampgrad::cpu
