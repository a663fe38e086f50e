// DistributedDataParallel (distributed/ddp.h).
#include <ampgrad/distributed/ddp.h>

#include <exception>
#include <string>
#include <vector>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

#if AMPGRAD_WITH_CUDA
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/runtime.h>
#endif

namespace ampgrad::distributed {

// Note [DistributedDataParallel]
// Parameters go into buckets of at most bucket_cap_mb, one dtype each (float32 parameters
// give float32 buckets; 16-bit parameters, as with master weights, 16-bit ones), in reverse
// registration order, roughly the order backward produces their gradients. After backward
// accumulates a parameter's gradient (a post-accumulate hook), the gradient is copied into
// its bucket slot once and the parameter's grad becomes a view of that slot, so later steps
// accumulate straight into the bucket. Buckets start in index order (the same on every rank):
// when the next bucket's last gradient is in, an event on the library stream releases a
// communication stream that all-reduces it with ncclAvg while backward goes on computing
// earlier layers' gradients (the engine accumulates a leaf's gradient as soon as it is
// complete, so the hooks fire during backward, not after it). A callback at the end of
// backward (autograd::queue_callback) makes the library stream wait for the communication
// stream, so the scaler and the optimizer see averaged gradients and the host never waits,
// and reports a bucket left incomplete (a parameter that got no gradient: every parameter
// must be used in every step, PyTorch's find_unused_parameters=False) before any rank steps.

#if AMPGRAD_WITH_CUDA

struct DistributedDataParallel::State {
  struct Bucket {
    Tensor flat;
    std::vector<size_t> params;
    int pending = 0;
  };
  std::weak_ptr<State> self;
  ProcessGroup* pg = nullptr;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<Tensor> buffers;
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset_of;
  std::vector<bool> seen;
  std::vector<Bucket> buckets;
  size_t next_launch = 0;  // buckets start in index order, the same on every rank
  bool callback_queued = false;
  cudaStream_t comm = nullptr;
  cudaEvent_t ready = nullptr, done = nullptr;

  ~State() {
    if (std::uncaught_exceptions() > 0) {
      // Unwinding from an error: a peer may never issue the all-reduce the communication
      // stream waits for, so do not wait; leak the buckets NCCL may still touch.
      for (Bucket& b : buckets) new Tensor(std::move(b.flat));
      return;
    }
    if (comm) (void)cudaStreamSynchronize(comm);
    if (ready) (void)cudaEventDestroy(ready);
    if (done) (void)cudaEventDestroy(done);
    if (comm) (void)cudaStreamDestroy(comm);
  }

  void reset() {
    for (Bucket& b : buckets) b.pending = static_cast<int>(b.params.size());
    std::fill(seen.begin(), seen.end(), false);
    next_launch = 0;
  }

  std::string unseen() const {
    std::string missing;
    for (size_t i = 0; i < params.size(); ++i)
      if (!seen[i]) missing += (missing.empty() ? "'" : ", '") + names[i] + "'";
    return missing;
  }

  void on_gradient(size_t i) {
    if (!callback_queued) {
      std::weak_ptr<State> weak = self;
      autograd::queue_callback([weak] {
        if (auto s = weak.lock()) s->finish_backward();
      });
      callback_queued = true;
    }
    AG_CHECK(!seen[i], "DistributedDataParallel: parameter '{}' received a second gradient in one backward",
             names[i]);
    seen[i] = true;
    const Tensor& p = params[i];
    Bucket& b = buckets[bucket_of[i]];
    Tensor slot = b.flat.narrow(0, offset_of[i], p.numel()).view(p.shape());
    const Tensor g = p.grad();
    if (ampgrad::detail::address(g) != ampgrad::detail::address(slot)) {
      NoGradGuard no_grad;
      slot.copy_(g);
      p.set_grad(slot);
    }
    --b.pending;
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(buckets[next_launch++]);
  }

  // The library stream has written the bucket's gradients; the communication stream averages
  // it while backward goes on.
  void launch(Bucket& b) {
    const cudaStream_t compute = cuda::current_stream(pg->local_rank());
    AG_CUDA_CHECK(cudaEventRecord(ready, compute));
    AG_CUDA_CHECK(cudaStreamWaitEvent(comm, ready, 0));
    pg->all_reduce_on(b.flat, ReduceOp::Avg, comm);
  }

  // After backward's last node: what follows on the library stream (the scaler's check, the
  // optimizer) waits for the reductions; a bucket left incomplete is an error now, not a
  // silent divergence of the replicas.
  void finish_backward() {
    callback_queued = false;
    const cudaStream_t compute = cuda::current_stream(pg->local_rank());
    AG_CUDA_CHECK(cudaEventRecord(done, comm));
    AG_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
    const bool complete = next_launch == buckets.size();
    const std::string missing = complete ? std::string() : unseen();
    reset();
    AG_CHECK(complete,
             "DistributedDataParallel: this backward gave no gradient to {}; every parameter must be used in every "
             "step (their buckets were not averaged)",
             missing);
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& pg,
                                                 DDPOptions options)
    : module_(std::move(module)), state_(std::make_shared<State>()) {
  AG_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  AG_CHECK(options.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got {}",
           options.bucket_cap_mb);
  State& st = *state_;
  st.self = state_;
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
    st.buffers.push_back(b);
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
  const std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < st.params.size(); ++i)
    st.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto s = weak.lock()) s->on_gradient(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::operator()(const Tensor& x) { return (*module_)(x); }

void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  for (const Tensor& b : state_->buffers) state_->pg->broadcast(b, 0);
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
void DistributedDataParallel::sync_buffers() {}
size_t DistributedDataParallel::num_buckets() const { return 0; }

#endif

}  // namespace ampgrad::distributed
