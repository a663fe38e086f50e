// The CUDA backend: runtime and allocator, copies and casts, and every row of the op table on
// CUDA against the CPU reference (forward and gradients) in f32/f16/bf16, over contiguous,
// strided, transposed and broadcast operands of sizes 1, 7, 1023 and 65537 (Note [Op table]).
// Tolerance: atol + rtol*|ref| with both scaled by eps(dtype) (and by the length of the sums
// an op does).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "common.h"
#include "op_table.h"

namespace {

using Shape = ag::Shape;
using V = std::vector<ag::Tensor>;
using op_table::relayout;
const std::vector<int64_t> kSizes = {1, 7, 1023, 65537};
const ag::Device kGpu(ag::kCUDA);
const ag::DType kFloatTypes[] = {ag::kFloat32, ag::kFloat16, ag::kBFloat16};
constexpr double kEps32 = 1.1920928955078125e-07;

// The backend tests' own inputs, drawn on the CPU in float32.
ag::Tensor uni(const Shape& s, double lo, double hi) { return ag::rand(s) * (hi - lo) + lo; }
ag::Tensor sym(const Shape& s) { return uni(s, -1, 1); }

// A NaN-filled block handed back to the memory pool: outputs that a kernel forgets to write
// are then NaN, not a plausible leftover.
void poison_cuda_cache() {
  ag::NoGradGuard no_grad;
  (void)ag::full({int64_t{8} << 20}, NAN, ag::TensorOptions(ag::kFloat32).device(kGpu));
}

struct Tol {
  double atol, rtol;
};
using Kind = op_table::Tol;
// elementwise: one rounding each side. sum: float32 accumulation of n terms of size ~1 on
// CUDA against the CPU's. normalized: a result divided by such a sum (relative error). chain:
// a sum whose intermediates of size ~sqrt(n) were rounded to d (an ulp there, carried through
// the rest of the chain: a few terms of size ~1).
Tol tolerance(Kind k, ag::DType d, int64_t n) {
  const double e = eps_of(d);
  switch (k) {
    case Kind::sum: return {4 * e + 4 * kEps32 * static_cast<double>(n), 4 * e};
    case Kind::normalized: {
      const double r = 4 * e + 4 * kEps32 * std::sqrt(static_cast<double>(n));
      return {r, r};
    }
    case Kind::chain: {
      const double n_ = static_cast<double>(n);
      return {4 * e + 4 * kEps32 * n_ + 8 * e * std::sqrt(n_), 4 * e};
    }
    default: return {4 * e, 4 * e};
  }
}

Tol tolerance_of(const op_table::Row& r, ag::DType d, int64_t n) {
  const Tol t = tolerance(r.tol, d, n);
  return {t.atol * r.tol_scale, t.rtol * r.tol_scale};
}

// The row's inputs for one run: floating ones in d (constant ones in float32), moved, laid
// out, fresh leaves.
V prepare(const V& made, const op_table::Row& r, ag::DType d, ag::Device dev, int layout, bool grad) {
  V out;
  for (size_t i = 0; i < made.size(); ++i) {
    const bool floating = made[i].is_floating_point(), varying = floating && !r.in[i].constant;
    ag::Tensor t = made[i].detach().to(dev, varying ? d : (floating ? ag::kFloat32 : made[i].dtype())).clone();
    t = op_table::relayout(t, layout).detach();
    if (varying && grad) t.requires_grad_(true);
    out.push_back(t);
  }
  return out;
}

std::string desc(const V& in) {
  std::string s;
  for (const auto& t : in) s += fmt::format("{} strides {}; ", t.desc(), ag::shape_str(t.strides()));
  return s;
}

}  // namespace

TEST_CASE("cuda: every registered op has a row in the op table that the CUDA check reads", "[cuda]") {
  // Needs no device: it keeps the table complete on machines without a GPU too.
  const std::vector<std::string> missing = op_table::ops_without(op_table::Check::cuda);
  INFO("ops without a CUDA row in tests/op_rows.cpp: " << fmt::format("{}", fmt::join(missing, ", ")));
  CHECK(missing.empty());
}

namespace {

// Runs one row on the CPU and on CUDA over dtypes, sizes and layouts and compares outputs and
// input gradients.
void check_row_on_cuda(const op_table::Row& r) {
  const ag::OpInfo* op = ag::find_op(r.op);
  REQUIRE(op != nullptr);
  std::vector<int64_t> sizes = r.sized() ? r.sizes : std::vector<int64_t>{r.n};
  // Under compute-sanitizer (gpu_run.sh memcheck) the sweep keeps the two smallest sizes:
  // every kernel's contiguous and strided paths, at a fraction of the time.
  if (std::getenv("AMPGRAD_TEST_QUICK") != nullptr && sizes.size() > 2) sizes.resize(2);
  for (ag::DType d : kFloatTypes) {
    for (int64_t n : sizes) {
      const V made = r.draw(n);
      for (int layout = 0; layout < (r.contiguous_only || n > 4096 ? 1 : 3); ++layout) {
        INFO(r.name() << " in " << ag::dtype_name(d) << ", n " << n << ", layout " << layout);
        const bool grad = op->differentiable;
        const uint64_t run_seed = fresh_seed();  // the same random draws (dropout) on both devices
        V cpu_in = prepare(made, r, d, ag::Device(ag::kCPU), layout, grad);
        V gpu_in = prepare(made, r, d, kGpu, layout, grad);
        INFO("inputs " << desc(gpu_in));
        ag::manual_seed(run_seed);
        ag::Tensor ref = r.run(cpu_in);
        poison_cuda_cache();
        ag::manual_seed(run_seed);
        ag::Tensor got = r.run(gpu_in);
        REQUIRE(got.is_cuda());
        REQUIRE(got.dtype() == ref.dtype());
        REQUIRE(got.shape() == ref.shape());
        const bool exact = !ref.is_floating_point();
        const Tol t = tolerance_of(r, d, n);
        check_close(got, ref.to_vector<double>(), exact ? 0 : t.atol, exact ? 0 : t.rtol);
        if (!grad || !ref.requires_grad()) continue;
        const ag::Tensor g = sym(ref.shape()).to(ref.dtype());
        ref.backward(g);
        got.backward(g.to(kGpu));
        const double scale = ag::is_reduced_float(d) ? 8 : 4;
        for (size_t i = 0; i < cpu_in.size(); ++i) {
          if (!cpu_in[i].requires_grad()) continue;
          INFO("gradient of input " << i);
          const ag::Tensor gc = cpu_in[i].grad(), gg = gpu_in[i].grad();
          REQUIRE(gc.defined() == gg.defined());
          // A broadcast input's gradient is a sum over the broadcast elements: allow for the
          // float32 rounding of a sum of that many terms, as the sum kind does.
          const double reduced = static_cast<double>(ref.numel()) / std::max<double>(1.0, gc.numel());
          const double ra = scale * t.atol + 4 * kEps32 * std::sqrt(reduced), rr = scale * t.rtol + 4 * kEps32 * std::sqrt(reduced);
          if (gc.defined()) check_close(gg, gc.to_vector<double>(), ra, rr);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("cuda: every row of the op table matches the CPU reference, forward and gradients", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  for (const op_table::Row& r : op_table::rows()) {
    if (!r.cuda) continue;
    try {
      check_row_on_cuda(r);
    } catch (const std::exception& e) {  // an ag::Error from one row: report it, go on to the next
      FAIL_CHECK(r.name() << " threw: " << e.what());
    }
  }
}

TEST_CASE("cuda: runtime queries and the library stream", "[cuda]") {
  if (skip_without_cuda()) return;
  CHECK(ag::cuda::device_count() > 0);
  const ag::cuda::DeviceProperties& p = ag::cuda::device_properties(0);
  CHECK(!p.name.empty());
  CHECK(p.sm_count > 0);
  CHECK(p.total_memory > (size_t{1} << 30));
  CHECK(p.major >= 7);
  CHECK(ag::cuda::current_stream() != nullptr);
  CHECK(ag::cuda::current_stream() == ag::cuda::current_stream(0));
  ag::cuda::synchronize();
  REQUIRE_THROWS_WITH_SUBSTR(ag::cuda::device_properties(ag::cuda::device_count()), "does not exist");
}

TEST_CASE("cuda: allocator statistics", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::cuda::synchronize();
  const ag::cuda::MemoryStats before = ag::cuda::memory_stats();
  ag::cuda::reset_peak_memory_stats();
  CHECK(ag::cuda::memory_stats().peak_allocated == before.allocated);
  {
    ag::Tensor a = ag::empty({1 << 20}, ag::TensorOptions(ag::kFloat32).device(kGpu));  // 4 MiB
    const ag::cuda::MemoryStats during = ag::cuda::memory_stats();
    CHECK(during.allocated == before.allocated + (size_t{4} << 20));
    CHECK(during.peak_allocated >= during.allocated);
    CHECK(during.reserved >= during.allocated);
    CHECK(during.num_allocs == before.num_allocs + 1);
  }
  const ag::cuda::MemoryStats after = ag::cuda::memory_stats();
  CHECK(after.allocated == before.allocated);
  CHECK(after.peak_allocated >= before.allocated + (size_t{4} << 20));
  // Freed memory stays cached in the pool (release threshold UINT64_MAX).
  CHECK(after.reserved >= (size_t{4} << 20));
  ag::cuda::reset_peak_memory_stats();
  CHECK(ag::cuda::memory_stats().peak_allocated == after.allocated);
}

TEST_CASE("cuda: small blocks are reused from the host-side cache, in stream order", "[cuda]") {
  if (skip_without_cuda()) return;
  const auto opt = ag::TensorOptions(ag::kFloat32).device(kGpu);
  ag::cuda::synchronize();
  const ag::cuda::MemoryStats before = ag::cuda::memory_stats();
  void* first = nullptr;
  {
    ag::Tensor a = ag::full({1000}, 3.0, opt);  // 4000 bytes: a 4096-byte size class
    first = a.data_ptr();
    CHECK(ag::cuda::memory_stats().allocated == before.allocated + 4096);
  }
  CHECK(ag::cuda::memory_stats().allocated == before.allocated);
  // Same size class: the block just freed comes back without a driver call. The kernel that
  // filled it may still be queued; the new one runs after it on the same stream.
  ag::Tensor b = ag::full({1001}, 5.0, opt);
  CHECK(b.data_ptr() == first);
  CHECK(ag::sum(b).item<float>() == 5005.0f);
  // A block of another size class does not take it.
  ag::Tensor c = ag::full({2000}, 1.0, opt);
  CHECK(c.data_ptr() != first);
  b = ag::Tensor();
  ag::cuda::empty_cache();  // the cached blocks go back to the pool, and the pool to the driver
  CHECK(ag::cuda::memory_stats().allocated == before.allocated + 8192);
  CHECK(ag::sum(c).item<float>() == 2000.0f);
}

TEST_CASE("cuda: a MemPool's blocks go back to it, and only its guard's allocations take them", "[cuda]") {
  if (skip_without_cuda()) return;
  // Note [Memory pools]. 777 * 128 floats: a size class nothing else in the process uses.
  const auto opt = ag::TensorOptions(ag::kFloat32).device(kGpu);
  const int64_t n = 777 * 128;
  ag::cuda::synchronize();
  const size_t before = ag::cuda::memory_stats().allocated;
  void* pooled = nullptr;
  void* shared_block = nullptr;
  ag::Tensor kept;
  {
    ag::cuda::MemPool pool(0);
    {
      ag::cuda::MemPoolGuard guard(pool);
      pooled = ag::full({n}, 2.0, opt).data_ptr();  // freed at once, into the pool's list
    }
    // Outside the guard the pool's block is not handed out; the shared list has none yet.
    ag::Tensor shared = ag::full({n}, 3.0, opt);
    CHECK(shared.data_ptr() != pooled);
    shared_block = shared.data_ptr();
    {
      ag::cuda::MemPoolGuard guard(pool);
      ag::Tensor again = ag::full({n}, 4.0, opt);
      CHECK(again.data_ptr() == pooled);  // back from the pool
      kept = again;  // alive past the guard and the pool
      shared = ag::Tensor();  // allocated outside: freed to the shared list, whatever the guard
      ag::Tensor other = ag::full({n}, 5.0, opt);
      CHECK(other.data_ptr() != shared_block);  // the pool's list is empty: a new block
    }
    ag::Tensor from_shared = ag::full({n}, 6.0, opt);
    CHECK(from_shared.data_ptr() == shared_block);
    CHECK(ag::sum(from_shared).item<float>() == 6.0f * static_cast<float>(n));
  }  // the pool's free blocks go back to the driver's pool
  // A block of a pool that is gone returns to the shared list when its tensor is freed: two
  // allocations now take the two blocks of that list.
  CHECK(ag::sum(kept).item<float>() == 4.0f * static_cast<float>(n));
  kept = ag::Tensor();
  ag::Tensor l1 = ag::full({n}, 1.0, opt), l2 = ag::full({n}, 1.0, opt);
  CHECK(std::set<void*>{l1.data_ptr(), l2.data_ptr()} == std::set<void*>{pooled, shared_block});
  l1 = l2 = ag::Tensor();
  CHECK(ag::cuda::memory_stats().allocated == before);
}

TEST_CASE("cuda: out of memory is an ag::Error and the process stays usable", "[cuda]") {
  if (skip_without_cuda()) return;
  const size_t total = ag::cuda::device_properties(0).total_memory;
  const uint64_t ooms = ag::cuda::memory_stats().num_ooms;
  const auto too_many = static_cast<int64_t>(total / 2);  // float32: twice the device
  const std::string msg =
      error_message([&] { (void)ag::empty({too_many}, ag::TensorOptions(ag::kFloat32).device(kGpu)); });
  CHECK_THAT(msg, Catch::Contains("out of memory on cuda:0") && Catch::Contains("tried to allocate") &&
                      Catch::Contains("in use") && Catch::Contains("cached") && Catch::Contains("device total"));
  CHECK(ag::cuda::memory_stats().num_ooms == ooms + 1);
  ag::Tensor x = ag::full({1000}, 2.0, ag::TensorOptions().device(kGpu));
  CHECK(ag::sum(x + 1).item<float>() == 3000.0f);
}

TEST_CASE("cuda: host<->device copies of non-contiguous tensors", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  for (int64_t n : kSizes) {
    INFO("n " << n);
    // CPU views to the device and back.
    const ag::Tensor base = sym({5, n + 1});
    const ag::Tensor view = base.slice(1, 1, n + 1).t();  // offset, transposed
    check_close(view.to(kGpu).cpu(), view.to_vector<double>(), 0, 0);
    // Device views to the host.
    const ag::Tensor on_gpu = base.to(kGpu);
    check_close(on_gpu.slice(1, 1, n + 1, 2).t().cpu(), base.slice(1, 1, n + 1, 2).t().to_vector<double>(), 0, 0);
    // copy_ into non-contiguous destinations, across devices and dtypes.
    ag::Tensor dst = ag::zeros({n + 1, 5}, ag::TensorOptions(ag::kFloat16).device(kGpu)).t();
    dst.copy_(base);
    check_close(dst, base.to(ag::kFloat16).to_vector<double>(), 0, 0);
    ag::Tensor host_dst = ag::zeros({n + 1, 5}).t();
    host_dst.copy_(on_gpu.to(ag::kFloat64));
    check_close(host_dst, base.to_vector<double>(), 0, 0);
  }
}

TEST_CASE("cuda: casts between all dtypes and fills agree with the CPU", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::DType all[] = {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64,
                           ag::kInt64,   ag::kInt32,   ag::kBool,     ag::kUInt8};
  // Values every dtype holds (non-negative, so casts to uint8 are defined on the CPU), with zeros.
  const ag::Tensor values = ag::where(ag::gt(ag::rand({1023}), 0.2), uni({1023}, 0, 100), ag::zeros({1023}));
  for (ag::DType from : all) {
    const ag::Tensor src = values.to(from);
    const ag::Tensor src_gpu = relayout(src.to(kGpu), 1);
    for (ag::DType to : all) {
      INFO(ag::dtype_name(from) << " -> " << ag::dtype_name(to));
      check_close(src_gpu.to(to), src.to(to).to_vector<double>(), 0, 0);
    }
    INFO("fill " << ag::dtype_name(from));
    ag::Tensor f = ag::empty({7, 9}, ag::TensorOptions(from).device(kGpu));
    f.fill_(3.75);
    check_close(f, ag::full({7, 9}, 3.75, from).to_vector<double>(), 0, 0);
    f.t().slice(0, 0, 9, 2).fill_(0);  // strided: a kernel, not the memset of contiguous zeros
    ag::Tensor fc = ag::full({7, 9}, 3.75, from);
    fc.t().slice(0, 0, 9, 2).fill_(0);
    check_close(f, fc.to_vector<double>(), 0, 0);
  }
}

TEST_CASE("cuda: reduction geometry, split passes, NaN and determinism", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const std::vector<Shape> shapes = {{65537, 3}, {3, 65537}, {2, 40000, 5}, {1, 1}, {300000}, {2, 33}};
  for (const Shape& s : shapes) {
    const ag::Tensor x = sym(s);
    const ag::Tensor xg = x.to(kGpu);
    for (int64_t dim = 0; dim < static_cast<int64_t>(s.size()); ++dim) {
      INFO(ag::shape_str(s) << " over dim " << dim);
      const int64_t r = s[static_cast<size_t>(dim)];
      const Tol t = tolerance(Kind::sum, ag::kFloat32, r);
      check_close(ag::sum(xg, {dim}), ag::sum(x, {dim}).to_vector<double>(), t.atol, t.rtol);
      check_close(ag::var(xg, {dim}), ag::var(x, {dim}).to_vector<double>(), t.atol, t.rtol);
      const Tol tn = tolerance(Kind::normalized, ag::kFloat32, r);
      check_close(ag::logsumexp(xg, {dim}), ag::logsumexp(x, {dim}).to_vector<double>(), tn.atol, tn.rtol);
      check_close(ag::softmax(xg, dim), ag::softmax(x, dim).to_vector<double>(), tn.atol, tn.rtol);
      auto [vg, ig] = ag::max(xg, dim);
      auto [vc, ic] = ag::max(x, dim);
      check_close(vg, vc.to_vector<double>(), 0, 0);
      check_close(ig, ic.to_vector<double>(), 0, 0);
      check_close(ag::argmin(xg, dim), ag::argmin(x, dim).to_vector<double>(), 0, 0);
    }
  }
  // Ties pick the first occurrence; NaN wins at its first occurrence; NaN poisons sums.
  const ag::Tensor ties = ag::tensor({1.f, 3.f, 3.f, NAN, 2.f, NAN, 3.f}, {7}).to(kGpu);
  CHECK(ag::argmax(ag::slice(ties, 0, 0, 3)).item<int64_t>() == 1);
  CHECK(ag::max(ties, 0).second.item<int64_t>() == 3);
  CHECK(std::isnan(ag::max(ties).item<float>()));
  CHECK(std::isnan(ag::sum(ties).item<float>()));
  CHECK(ag::argmin(ag::slice(ties, 0, 0, 3), 0).item<int64_t>() == 0);
  // Deterministic: the same bits twice (no atomics), with the split path.
  const ag::Tensor big = sym({1 << 20}).to(kGpu);
  CHECK(ag::sum(big).item<double>() == ag::sum(big).item<double>());
  // 2^26 elements: the split pass over a full reduction, exact for ones.
  const ag::Tensor ones = ag::ones({int64_t{1} << 26}, ag::TensorOptions().device(kGpu));
  CHECK(ag::sum(ones).item<double>() == static_cast<double>(int64_t{1} << 26));
  CHECK(ag::mean(ones + 1).item<double>() == 2.0);
}

TEST_CASE("cuda: elementwise edge geometry: 0-dim, empty, misaligned, integer dtypes", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::TensorOptions on_gpu = ag::TensorOptions().device(kGpu);
  CHECK((ag::tensor(3.f, on_gpu) + 1).item<float>() == 4.0f);
  CHECK(ag::exp(ag::tensor(0.f, on_gpu)).item<float>() == 1.0f);
  const ag::Tensor empty = ag::empty({0, 5}, on_gpu);
  CHECK(ag::exp(empty + empty).numel() == 0);
  check_close(ag::sum(empty, {0}), std::vector<double>(5, 0.0), 0, 0);
  for (int64_t n : kSizes) {
    INFO("n " << n);
    // One element past an aligned start: the vector paths must not be taken.
    const ag::Tensor base = sym({n + 1}), yb = sym({n + 1});
    const ag::Tensor x = base.slice(0, 1, n + 1), y = yb.slice(0, 1, n + 1);
    const ag::Tensor xg = base.to(kGpu).slice(0, 1, n + 1), yg = yb.to(kGpu).slice(0, 1, n + 1);
    check_close(ag::exp(xg), ag::exp(x).to_vector<double>(), 4 * kEps32, 4 * kEps32);
    check_close(xg * yg, (x * y).to_vector<double>(), 0, 0);
    const Tol t = tolerance(Kind::sum, ag::kFloat32, n);
    check_close(ag::sum(xg), ag::sum(x).to_vector<double>(), t.atol, t.rtol);
    // Integer arithmetic and comparisons are exact on both devices.
    for (ag::DType d : {ag::kInt64, ag::kInt32, ag::kUInt8}) {
      INFO(ag::dtype_name(d));
      const ag::Tensor a = uni({3, n}, 0, 50).to(d), b = uni({n}, 1, 50).to(d);
      const ag::Tensor ag_ = a.to(kGpu), bg = b.to(kGpu);
      check_close(ag_ + bg, (a + b).to_vector<double>(), 0, 0);
      check_close(ag::mul(ag_, bg), ag::mul(a, b).to_vector<double>(), 0, 0);
      check_close(ag::maximum(ag_, bg), ag::maximum(a, b).to_vector<double>(), 0, 0);
      check_close(ag::lt(ag_, bg), ag::lt(a, b).to_vector<double>(), 0, 0);
      check_close(ag::max(ag_, 1).first, ag::max(a, 1).first.to_vector<double>(), 0, 0);
      check_close(ag::argmax(ag_, 0), ag::argmax(a, 0).to_vector<double>(), 0, 0);
      check_close(ag::sum(ag_, {1}), ag::sum(a, {1}).to_vector<double>(), 0, 0);
    }
  }
}

TEST_CASE("cuda: gemm operand layouts, broadcast batches, TF32 and float64", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::Tensor a = sym({33, 17}), b = sym({17, 9});
  const ag::Tensor ag_ = a.to(kGpu), bg = b.to(kGpu);
  const std::vector<double> ref = ag::mm(a, b).to_vector<double>();
  const Tol t = tolerance(Kind::sum, ag::kFloat32, 17);
  // N/N, T/N, N/T, T/T through strides; then operands with no unit stride (copied).
  check_close(ag::mm(ag_, bg), ref, t.atol, t.rtol);
  check_close(ag::mm(relayout(ag_, 2), bg), ref, t.atol, t.rtol);
  check_close(ag::mm(ag_, relayout(bg, 2)), ref, t.atol, t.rtol);
  check_close(ag::mm(relayout(ag_, 2), relayout(bg, 2)), ref, t.atol, t.rtol);
  check_close(ag::mm(relayout(ag_, 1), relayout(relayout(bg, 2), 1)), ref, t.atol, t.rtol);
  // Vectors: size-1 dims with arbitrary strides.
  check_close(ag::mm(ag_.slice(0, 3, 4), bg), ag::mm(a.slice(0, 3, 4), b).to_vector<double>(), t.atol, t.rtol);
  check_close(ag::mm(ag_, bg.slice(1, 2, 3)), ag::mm(a, b.slice(1, 2, 3)).to_vector<double>(), t.atol, t.rtol);
  // A batch of 4 against one matrix: batch stride 0.
  const ag::Tensor x = sym({4, 5, 17});
  check_close(ag::matmul(x.to(kGpu), bg), ag::matmul(x, b).to_vector<double>(), t.atol, t.rtol);
  check_close(ag::matmul(bg.t(), x.to(kGpu).transpose(1, 2)), ag::matmul(b.t(), x.transpose(1, 2)).to_vector<double>(),
              t.atol, t.rtol);
  // float64 stays float64; TF32 only when allowed, and then close to float32 at TF32 precision.
  check_close(ag::mm(ag_.to(ag::kFloat64), bg.to(ag::kFloat64)),
              ag::mm(a.to(ag::kFloat64), b.to(ag::kFloat64)).to_vector<double>(), 1e-12, 1e-12);
  ag::set_allow_tf32(true);
  const ag::Tensor tf32 = ag::mm(ag_, bg);
  ag::set_allow_tf32(false);
  check_close(tf32, ref, 17 * 4 * 9.765625e-04, 4 * 9.765625e-04);
}

TEST_CASE("cuda: matmul tuning times cuBLASLt's candidates once per geometry, outside captures, and keeps the "
          "results", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  struct Tuning {
    bool prev = ag::cuda::matmul_tuning();
    Tuning() { ag::cuda::set_matmul_tuning(true); }
    ~Tuning() { ag::cuda::set_matmul_tuning(prev); }
  } on;
  // A weight gradient's geometry (a long K, a small output, the bias gradient in the
  // epilogue: Note [Matmul tuning]), in float16 and bfloat16, with and without gelu.
  const int64_t rows = 1024 + 8 * static_cast<int64_t>(fresh_seed() % 16), in = 96, out = 160;
  for (const ag::DType dt : {ag::kFloat16, ag::kBFloat16}) {
    for (const bool gelu : {false, true}) {
      INFO(ag::dtype_name(dt) << (gelu ? " linear_gelu" : " linear") << ", rows " << rows);
      const ag::Tensor x = sym({rows, in}).to(dt), w = sym({out, in}).to(dt), b = sym({out}).to(dt),
                       gy = sym({rows, out}).to(dt);
      // float64 reference from the same rounded inputs.
      const ag::Tensor x64 = x.to(ag::kFloat64).requires_grad_(true), w64 = w.to(ag::kFloat64).requires_grad_(true),
                       b64 = b.to(ag::kFloat64).requires_grad_(true);
      const ag::Tensor y64 = gelu ? ag::gelu(ag::linear(x64, w64, b64), "tanh") : ag::linear(x64, w64, b64);
      y64.backward(gy.to(ag::kFloat64));
      auto run = [&] {
        const ag::Tensor xg = x.to(kGpu).requires_grad_(true), wg = w.to(kGpu).requires_grad_(true),
                         bg = b.to(kGpu).requires_grad_(true);
        const ag::Tensor y = gelu ? ag::linear_gelu(xg, wg, bg) : ag::linear(xg, wg, bg);
        y.backward(gy.to(kGpu));
        return std::vector<ag::Tensor>{y.cpu(), xg.grad().cpu(), wg.grad().cpu(), bg.grad().cpu()};
      };
      const ag::cuda::MatmulTuningStats s0 = ag::cuda::matmul_tuning_stats();
      const std::vector<ag::Tensor> first = run();
      const ag::cuda::MatmulTuningStats s1 = ag::cuda::matmul_tuning_stats();
      // Three GEMMs a run (forward, input and weight gradients): each geometry timed at most
      // once, and candidates timed wherever the heuristic offered more than one.
      CHECK(s1.tuned - s0.tuned <= 3);
      CHECK(s1.timed - s0.timed >= 2 * (s1.tuned - s0.tuned));
      const std::vector<ag::Tensor> again = run();
      CHECK(ag::cuda::matmul_tuning_stats().tuned == s1.tuned);
      const V refs = {y64, x64.grad(), w64.grad(), b64.grad()};
      const int64_t sums[] = {in, out, rows, rows};
      for (size_t i = 0; i < refs.size(); ++i) {
        INFO("output " << i);
        const Tol t = tolerance(Kind::sum, dt, sums[i]);
        check_close(first[i], refs[i].to_vector<double>(), 2 * t.atol, 2 * t.rtol);
        CHECK(first[i].to_vector<double>() == again[i].to_vector<double>());  // the cached choice repeats
      }
    }
  }
  // Inside a capture a new geometry takes the heuristic's choice untimed; its first call
  // outside times it.
  const ag::Tensor a = sym({64, 2048 + 8 * static_cast<int64_t>(fresh_seed() % 64)}).to(ag::kFloat16).to(kGpu),
                   bm = sym({a.size(1), 72}).to(ag::kFloat16).to(kGpu);
  ag::Tensor c;
  const ag::cuda::MatmulTuningStats s2 = ag::cuda::matmul_tuning_stats();
  ag::cuda::CudaGraph graph;
  graph.capture([&] { c = ag::mm(a, bm); });
  CHECK(ag::cuda::matmul_tuning_stats().tuned == s2.tuned);
  graph.replay();
  const Tol t = tolerance(Kind::sum, ag::kFloat16, a.size(1));
  const std::vector<double> ref = ag::mm(a.cpu().to(ag::kFloat64), bm.cpu().to(ag::kFloat64)).to_vector<double>();
  check_close(c, ref, 2 * t.atol, 2 * t.rtol);
  check_close(ag::mm(a, bm), ref, 2 * t.atol, 2 * t.rtol);
  CHECK(ag::cuda::matmul_tuning_stats().tuned - s2.tuned <= 1);
  CHECK(ag::cuda::matmul_tuning_stats().timed - s2.timed >= 2 * (ag::cuda::matmul_tuning_stats().tuned - s2.tuned));
}

TEST_CASE("cuda: index_select and index_add skip out-of-range device indices, and the next read raises them",
          "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::Tensor x = sym({6, 4});
  const ag::Tensor idx = ag::tensor(std::vector<int64_t>{5, 0, 5, 2}).to(kGpu);
  check_close(ag::index_select(x.to(kGpu), 0, idx), ag::index_select(x, 0, idx.cpu()).to_vector<double>(), 0, 0);
  // Out of range: the ops layer cannot check device indices without a sync; the kernels
  // write zeros (select) or skip (add) instead of touching memory they do not own, and record
  // the first (Note [Device-side errors]): the next read raises it, the one after reads.
  const ag::Tensor bad = ag::tensor(std::vector<int64_t>{1, 6, -1, 1000000}).to(kGpu);
  const ag::Tensor xg = x.to(kGpu).requires_grad_(true);
  ag::Tensor sel = ag::index_select(xg, 0, bad);
  CHECK_THROWS_WITH(sel.to_vector<double>(), Catch::Contains("index_select: index ") &&
                                                 Catch::Contains("is out of range [0, 6) at position "));
  std::vector<double> want(16, 0.0);
  for (int j = 0; j < 4; ++j) want[static_cast<size_t>(j)] = x.to_vector<double>()[static_cast<size_t>(4 + j)];
  check_close(sel, want, 0, 0);
  ag::sum(sel).backward();
  CHECK_THROWS_WITH(ag::cuda::synchronize(), Catch::Contains("index_select's backward") &&
                                                 Catch::Contains("is out of range [0, 6) at position "));
  std::vector<double> grad(24, 0.0);
  for (int j = 4; j < 8; ++j) grad[static_cast<size_t>(j)] = 1;
  check_close(xg.grad(), grad, 0, 0);
  ag::cuda::synchronize();  // any fault would surface here
  CHECK(ag::sum(xg.detach() * 2).item<float>() == Approx(2 * ag::sum(x).item<float>()).epsilon(1e-5));
}


// Note [Device-side errors] in cuda/device_error.h.
TEST_CASE("cuda: an index or target out of range is raised at the next synchronization, naming the op, the value, "
          "its position and the shapes; the device goes on",
          "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::TensorOptions on = ag::TensorOptions().device(kGpu);
  auto ints = [&](std::vector<int64_t> v, ag::Shape s) { return ag::tensor(v, s).to(kGpu); };
  const ag::Tensor x = ag::randn({5, 3}, on), src = ag::randn({3, 3}, on), logits = ag::randn({4, 10}, on);
  const ag::Tensor bad = ints({0, 7, 1}, {3}), good = ints({0, 4, 1}, {3});
  const ag::Tensor bad2 = ints({0, 1, 2, 7, 0, 0}, {2, 3}), good2 = ints({0, 1, 2, 4, 0, 0}, {2, 3});
  const ag::Tensor bad_t = ints({1, 12, 3, 4}, {4}), good_t = ints({1, 9, 3, 4}, {4});
  struct Case {
    const char* name;
    std::function<ag::Tensor(bool bad)> run;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"index_select", [&](bool b) { return ag::index_select(x, 0, b ? bad : good); },
       "index_select: index 7 is out of range [0, 5) at position 1 of the index (inputs [5, 3], [3]; on cuda:0"},
      {"index_add", [&](bool b) { return ag::index_add(x, 0, b ? bad : good, src); },
       "index_add: index 7 is out of range [0, 5) at position 1 of the index (inputs [5, 3], [3], [3, 3];"},
      {"index_copy", [&](bool b) { return ag::index_copy(x, 0, b ? bad : good, src); },
       "index_copy: index 7 is out of range [0, 5) at position 1 of the index"},
      {"gather", [&](bool b) { return ag::gather(x, 0, b ? bad2 : good2); },
       "gather: index 7 is out of range [0, 5) at position 3 of the index (inputs [5, 3], [2, 3];"},
      {"scatter_add", [&](bool b) { return ag::scatter_add(x, 0, b ? bad2 : good2, ag::randn({2, 3}, on)); },
       "scatter_add: index 7 is out of range [0, 5) at position 3 of the index"},
      {"index_put", [&](bool b) { return ag::index_put(x, {b ? ints({0, 9}, {2}) : ints({0, -5}, {2})}, src.narrow(0, 0, 2)); },
       "index_put: index 9 is out of range [-5, 5) at position 1 of the index (inputs [5, 3], [2, 3], [2];"},
      {"embedding", [&](bool b) { return ag::embedding(b ? bad : good, x); },
       "embedding: index 7 is out of range [0, 5) at position 1 of the index (inputs [3], [5, 3];"},
      {"cross_entropy", [&](bool b) { return ag::cross_entropy(logits, b ? bad_t : good_t); },
       "cross_entropy: target 12 is out of range [0, 10) at position 1 of the target (inputs [4, 10], [4];"},
      {"nll_loss", [&](bool b) { return ag::nll_loss(ag::log_softmax(logits, 1), b ? bad_t : good_t); },
       "nll_loss: target 12 is out of range [0, 10) at position 1 of the target"},
      // The composite forms (class weights, other reductions, spatial) check their targets too.
      {"cross_entropy, class weights",
       [&](bool b) { return ag::cross_entropy(logits, b ? bad_t : good_t, ag::ones({10}, on), -100, ag::Reduction::Sum); },
       "cross_entropy: target 12 is out of range [0, 10) at position 1 of the target"},
      {"nll_loss, reduction None",
       [&](bool b) { return ag::nll_loss(logits, b ? bad_t : good_t, ag::Tensor(), -100, ag::Reduction::None); },
       "nll_loss: target 12 is out of range [0, 10) at position 1 of the target"},
  };
  // Each synchronizing route in turn.
  const std::vector<std::pair<const char*, std::function<void(const ag::Tensor&)>>> routes = {
      {"to(kCPU)", [](const ag::Tensor& t) { (void)t.to(ag::kCPU); }},
      {"to_vector", [](const ag::Tensor& t) { (void)t.to_vector<double>(); }},
      {"synchronize", [](const ag::Tensor&) { ag::cuda::synchronize(); }},
      {"item", [](const ag::Tensor& t) { (void)t.sum().item<double>(); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const auto& [route, sync] = routes[i % routes.size()];
    INFO(c.name << ", raised by " << route);
    ag::Tensor out;
    REQUIRE_NOTHROW(out = c.run(true));  // queued: nothing waits for the device here
    CHECK_THROWS_WITH(sync(out), Catch::Contains(c.message));
    // Cleared once raised, and the device is healthy: the same op with good indices.
    ag::Tensor ok;
    REQUIRE_NOTHROW(ok = c.run(false));
    REQUIRE_NOTHROW(ok.to_vector<double>());
    ag::cuda::synchronize();
  }
  // Sync debug: the op itself raises it.
  ag::cuda::set_sync_debug(true);
  CHECK_THROWS_WITH(ag::index_select(x, 0, bad), Catch::Contains("index_select: index 7 is out of range"));
  CHECK_NOTHROW(ag::index_select(x, 0, good));
  ag::cuda::set_sync_debug(false);
  CHECK_FALSE(ag::cuda::sync_debug());
  // A training step after a bad one trains.
  ag::Tensor w = ag::randn({3, 10}, on).requires_grad_();
  auto loss_of = [&](const ag::Tensor& t) { return ag::cross_entropy(ag::matmul(ag::randn({4, 3}, on), w), t); };
  ag::Tensor lost = loss_of(bad_t);
  lost.backward();
  CHECK_THROWS_WITH(ag::cuda::synchronize(), Catch::Contains("cross_entropy: target 12"));
  w.set_grad(ag::Tensor());
  ag::Tensor l = loss_of(good_t);
  l.backward();
  CHECK(std::isfinite(l.item<double>()));
  CHECK(w.grad().defined());
}
