// The NCCL process group (distributed/process_group.h), NCCL loaded at run time.
#include <ampgrad/distributed/process_group.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <ampgrad/amp/grad_scaler.h>

#if AMPGRAD_WITH_CUDA
#include <nccl.h>

#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/runtime.h>
#endif

namespace ampgrad::distributed {

// Note [Process group]
// One process per GPU, as in torch.distributed: rank r drives cuda:LOCAL_RANK. Rank 0 makes
// NCCL's unique id and hands it to the others over TCP (Note [Rendezvous]); then every rank
// joins the communicator with ncclCommInitRank. Collectives run on the library stream (or on
// DistributedDataParallel's communication stream), ordered with the kernels around them and
// never synchronizing the host.
// libnccl is opened at run time (dlopen), like OpenBLAS (Note [CPU BLAS]): it is 200 MB, the
// library must load where it is absent, and only distributed training needs it. It is looked
// up as AMPGRAD_NCCL_LIBRARY, then libnccl.so.2 on the loader's path.
// Skipped steps: with gradients averaged across ranks an inf on one rank reaches all of
// them, but an inf that appears after the reduction (or a rank whose check runs on other
// data) would let one rank step while another skips, and the ranks' weights would drift
// apart. init_process_group therefore installs a found-inf reducer in amp::GradScaler:
// every scaler all-reduces its flag with MAX before it gates the optimizer, on every rank.

#if AMPGRAD_WITH_CUDA
namespace {

struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const Nccl& nccl() {
  static Nccl lib;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("AMPGRAD_NCCL_LIBRARY");
    const std::string name = env && *env ? env : "libnccl.so.2";
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      error = fmt::format("cannot load {} ({}); set AMPGRAD_NCCL_LIBRARY to libnccl.so.2's path", name,
                          ::dlerror());
      return;
    }
    auto sym = [&](const char* s) {
      void* p = ::dlsym(h, s);
      if (!p && error.empty()) error = fmt::format("{} has no symbol {}", name, s);
      return p;
    };
    lib.get_unique_id = reinterpret_cast<decltype(lib.get_unique_id)>(sym("ncclGetUniqueId"));
    lib.comm_init_rank = reinterpret_cast<decltype(lib.comm_init_rank)>(sym("ncclCommInitRank"));
    lib.comm_destroy = reinterpret_cast<decltype(lib.comm_destroy)>(sym("ncclCommDestroy"));
    lib.all_reduce = reinterpret_cast<decltype(lib.all_reduce)>(sym("ncclAllReduce"));
    lib.broadcast = reinterpret_cast<decltype(lib.broadcast)>(sym("ncclBroadcast"));
    lib.error_string = reinterpret_cast<decltype(lib.error_string)>(sym("ncclGetErrorString"));
  });
  AG_CHECK(error.empty(), "distributed: {}", error);
  return lib;
}

}  // namespace

bool nccl_available() {
  try {
    (void)nccl();
    return true;
  } catch (const Error&) {
    return false;
  }
}

namespace {

void check(ncclResult_t r, const char* call) {
  AG_CHECK(r == ncclSuccess, "NCCL error: {} failed: {}", call, nccl().error_string(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float64: return ncclFloat64;
    case DType::Int64: return ncclInt64;
    case DType::Int32: return ncclInt32;
    case DType::UInt8: return ncclUint8;
    case DType::Bool: return ncclUint8;
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: break;
  }
  AG_CHECK(false, "distributed: collectives on {} tensors are not supported (cast to a wider dtype first)",
           dtype_name(t));
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

void check_collective(const char* what, const Tensor& t, const ProcessGroup& pg) {
  AG_CHECK(t.defined() && t.is_cuda() && t.device().index == pg.local_rank() && t.is_contiguous(),
           "distributed.{}: expected a contiguous tensor on cuda:{}, got {}", what, pg.local_rank(),
           t.defined() ? t.desc() : std::string("an undefined tensor"));
}

}  // namespace

ProcessGroup::ProcessGroup(const Options& o) : o_(o) {
  AG_CHECK(cuda::is_available(), "distributed: no CUDA device is visible to rank {}", o.rank);
  AG_CHECK(o.local_rank < cuda::device_count(), "distributed: LOCAL_RANK {} but only {} CUDA device(s) are visible",
           o.local_rank, cuda::device_count());
  const Nccl& lib = nccl();
  cuda::set_device(o.local_rank);
  ncclUniqueId id{};
  std::vector<uint8_t> payload;
  if (o.rank == 0) {
    check(lib.get_unique_id(&id), "ncclGetUniqueId");
    payload.assign(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id));
  }
  payload = broadcast_from_root(o, payload);
  AG_CHECK(payload.size() == sizeof(id), "distributed: rank {} got a {}-byte NCCL id", o.rank, payload.size());
  std::memcpy(&id, payload.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  check(lib.comm_init_rank(&comm, o.world_size, id, o.rank), "ncclCommInitRank");
  comm_ = comm;
}

ProcessGroup::~ProcessGroup() {
  if (comm_) {
    (void)cudaDeviceSynchronize();
    (void)nccl().comm_destroy(static_cast<ncclComm_t>(comm_));
  }
}

void ProcessGroup::all_reduce_on(const Tensor& t, ReduceOp op, void* stream) {
  check_collective("all_reduce", t, *this);
  check(nccl().all_reduce(ampgrad::detail::address(t), ampgrad::detail::address(t), static_cast<size_t>(t.numel()),
                          nccl_type(t.dtype()), nccl_op(op), static_cast<ncclComm_t>(comm_),
                          static_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
  t.bump_version();  // written in place, like any in-place op (Note [Version counter])
}

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  all_reduce_on(t, op, cuda::current_stream(o_.local_rank));
}

void ProcessGroup::broadcast(const Tensor& t, int root) {
  check_collective("broadcast", t, *this);
  AG_CHECK(root >= 0 && root < o_.world_size, "distributed.broadcast: root {} is not a rank of {}", root,
           o_.world_size);
  check(
      nccl().broadcast(ampgrad::detail::address(t), ampgrad::detail::address(t), static_cast<size_t>(t.numel()),
                       nccl_type(t.dtype()), root, static_cast<ncclComm_t>(comm_), cuda::current_stream(o_.local_rank)),
      "ncclBroadcast");
  t.bump_version();
}

#else  // a CPU-only build

bool nccl_available() { return false; }

ProcessGroup::ProcessGroup(const Options& o) : o_(o) {
  AG_CHECK(false, "distributed: this ampgrad was built without CUDA; NCCL process groups need a CUDA build");
}
ProcessGroup::~ProcessGroup() = default;
void ProcessGroup::all_reduce_on(const Tensor&, ReduceOp, void*) {}
void ProcessGroup::all_reduce(const Tensor&, ReduceOp) {}
void ProcessGroup::broadcast(const Tensor&, int) {}

#endif

namespace {
std::unique_ptr<ProcessGroup>& default_slot() {
  static auto* slot = new std::unique_ptr<ProcessGroup>();  // leaked: NCCL must not be torn down at exit
  return *slot;
}
}  // namespace

ProcessGroup& init_process_group(std::optional<Options> options) {
  AG_CHECK(!default_slot(), "distributed.init_process_group: already initialized (rank {} of {})",
           default_slot()->rank(), default_slot()->world_size());
  const Options o = options ? *options : options_from_env();
  default_slot() = std::make_unique<ProcessGroup>(o);
  ProcessGroup* pg = default_slot().get();
  amp::set_found_inf_reducer([pg](const Tensor& found_inf) { pg->all_reduce(found_inf, ReduceOp::Max); });
  return *pg;
}

bool is_initialized() { return default_slot() != nullptr; }

ProcessGroup& default_group() {
  AG_CHECK(default_slot(), "distributed: no process group; call init_process_group() first");
  return *default_slot();
}

void destroy_process_group() {
  amp::set_found_inf_reducer(nullptr);
  default_slot().reset();
}

}  // namespace ampgrad::distributed
