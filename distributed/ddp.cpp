// DistributedDataParallel (distributed/ddp.h).
#include "distributed/ddp.h"

#include <string>
#include <vector>

#include "autograd/node.h"
#include "ops/ops.h"

#if AMPGRAD_WITH_CUDA
#include "cuda/check.h"
#include "cuda/runtime.h"
#endif

namespace ampgrad::distributed {

// Note [DistributedDataParallel]
// Parameters go into buckets of at most bucket_cap_mb, one dtype each (float32 parameters
// give float32 buckets; 16-bit parameters, as with master weights, 16-bit ones), in reverse
// registration order, roughly the order backward produces their gradients. After backward
// accumulates a parameter's gradient (a post-accumulate hook), the gradient is copied into
// its bucket slot once and the parameter's grad becomes a view of that slot, so later steps
// accumulate straight into the bucket. When a bucket's last gradient is in, an event on the
// library stream releases a communication stream that all-reduces the bucket with ncclAvg,
// while backward goes on computing earlier layers' gradients. After the last bucket the
// library stream waits for the communication stream, so the optimizer sees averaged
// gradients, and the host never waits. Every parameter must receive a gradient in every
// backward (PyTorch's find_unused_parameters=False); a bucket left incomplete is reported at
// the next forward, naming the parameters that got none.

#if AMPGRAD_WITH_CUDA

struct DistributedDataParallel::State {
  struct Bucket {
    Tensor flat;
    std::vector<size_t> params;
    int pending = 0;
  };
  ProcessGroup* pg = nullptr;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset_of;
  std::vector<bool> seen;
  std::vector<Bucket> buckets;
  int buckets_left = 0;
  cudaStream_t comm = nullptr;
  cudaEvent_t ready = nullptr, done = nullptr;

  ~State() {
    if (comm) (void)cudaStreamSynchronize(comm);
    if (ready) (void)cudaEventDestroy(ready);
    if (done) (void)cudaEventDestroy(done);
    if (comm) (void)cudaStreamDestroy(comm);
  }

  void reset() {
    for (Bucket& b : buckets) b.pending = static_cast<int>(b.params.size());
    std::fill(seen.begin(), seen.end(), false);
    buckets_left = static_cast<int>(buckets.size());
  }

  void on_gradient(size_t i) {
    AG_CHECK(!seen[i], "DistributedDataParallel: parameter '{}' received a second gradient in one backward",
             names[i]);
    seen[i] = true;
    const Tensor& p = params[i];
    Bucket& b = buckets[bucket_of[i]];
    Tensor slot = b.flat.narrow(0, offset_of[i], p.numel()).view(p.shape());
    const Tensor g = p.grad();
    if (g.data_ptr() != slot.data_ptr()) {
      NoGradGuard no_grad;
      slot.copy_(g);
      p.set_grad(slot);
    }
    if (--b.pending > 0) return;
    const cudaStream_t compute = cuda::current_stream(pg->local_rank());
    AG_CUDA_CHECK(cudaEventRecord(ready, compute));
    AG_CUDA_CHECK(cudaStreamWaitEvent(comm, ready, 0));
    pg->all_reduce_on(b.flat, ReduceOp::Avg, comm);
    if (--buckets_left > 0) return;
    AG_CUDA_CHECK(cudaEventRecord(done, comm));
    AG_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
    reset();
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& pg,
                                                 DDPOptions options)
    : module_(std::move(module)), state_(std::make_shared<State>()) {
  AG_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  AG_CHECK(options.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got {}",
           options.bucket_cap_mb);
  State& st = *state_;
  st.pg = &pg;
  const Device dev = pg.device();
  cuda::DeviceGuard guard(dev.index);
  NoGradGuard no_grad;
  for (auto& [name, p] : module_->named_parameters()) {
    AG_CHECK(p.device() == dev && p.is_contiguous(),
             "DistributedDataParallel: parameter '{}' ({}) must be contiguous on {} (the rank's device)", name,
             p.desc(), dev.str());
    pg.broadcast(p, 0);
    if (!p.requires_grad()) continue;
    st.names.push_back(name);
    st.params.push_back(p);
  }
  for (auto& [name, b] : module_->named_buffers()) {
    AG_CHECK(b.device() == dev && b.is_contiguous(), "DistributedDataParallel: buffer '{}' ({}) must be on {}", name,
             b.desc(), dev.str());
    pg.broadcast(b, 0);
  }
  AG_CHECK(!st.params.empty(), "DistributedDataParallel: the module has no parameters that require grad");
  // Buckets in reverse registration order, one dtype each, up to the cap.
  const auto cap = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  st.bucket_of.assign(st.params.size(), 0);
  st.offset_of.assign(st.params.size(), 0);
  std::vector<int64_t> sizes;
  std::vector<DType> dtypes;
  for (size_t k = st.params.size(); k-- > 0;) {
    const Tensor& p = st.params[k];
    if (st.buckets.empty() || dtypes.back() != p.dtype() ||
        (sizes.back() > 0 && (sizes.back() + p.numel()) * static_cast<int64_t>(p.element_size()) > cap)) {
      st.buckets.emplace_back();
      sizes.push_back(0);
      dtypes.push_back(p.dtype());
    }
    st.bucket_of[k] = st.buckets.size() - 1;
    st.offset_of[k] = sizes.back();
    st.buckets.back().params.push_back(k);
    sizes.back() += p.numel();
  }
  for (size_t b = 0; b < st.buckets.size(); ++b)
    st.buckets[b].flat = zeros({sizes[b]}, TensorOptions(dtypes[b]).device(dev));
  st.seen.assign(st.params.size(), false);
  st.reset();
  AG_CUDA_CHECK(cudaStreamCreateWithFlags(&st.comm, cudaStreamNonBlocking));
  AG_CUDA_CHECK(cudaEventCreateWithFlags(&st.ready, cudaEventDisableTiming));
  AG_CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < st.params.size(); ++i)
    st.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto s = weak.lock()) s->on_gradient(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::operator()(const Tensor& x) {
  State& st = *state_;
  if (st.buckets_left != static_cast<int>(st.buckets.size())) {
    std::string missing;
    for (size_t i = 0; i < st.params.size(); ++i)
      if (!st.seen[i]) missing += (missing.empty() ? "'" : ", '") + st.names[i] + "'";
    st.reset();
    AG_CHECK(false,
             "DistributedDataParallel: the last backward gave no gradient to {}; every parameter must be used in "
             "every step",
             missing);
  }
  return (*module_)(x);
}

size_t DistributedDataParallel::num_buckets() const { return state_->buckets.size(); }

#else  // a CPU-only build

struct DistributedDataParallel::State {};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup&, DDPOptions)
    : module_(std::move(module)) {
  AG_CHECK(false, "DistributedDataParallel: this ampgrad was built without CUDA (NCCL)");
}
DistributedDataParallel::~DistributedDataParallel() = default;
Tensor DistributedDataParallel::operator()(const Tensor& x) { return (*module_)(x); }
size_t DistributedDataParallel::num_buckets() const { return 0; }

#endif

}  // namespace ampgrad::distributed
