// The NCCL process group: one process per GPU, ranks found through distributed/store.h,
// collectives on the library stream (Note [Process group]).
#pragma once

#include <memory>
#include <optional>

#include <ampgrad/core/tensor.h>
#include <ampgrad/distributed/store.h>

namespace ampgrad::distributed {

enum class ReduceOp { Sum, Avg, Max };

class ProcessGroup {
 public:
  // Makes cuda:local_rank current, exchanges NCCL's unique id over TCP and joins the NCCL
  // communicator. Throws ag::Error without CUDA, without libnccl, or when ranks do not meet.
  explicit ProcessGroup(const Options& o);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return o_.rank; }
  int world_size() const { return o_.world_size; }
  int local_rank() const { return o_.local_rank; }
  Device device() const { return Device(kCUDA, o_.local_rank); }

  // In place, on t's device's library stream: t = op over all ranks' t. t contiguous CUDA.
  void all_reduce(const Tensor& t, ReduceOp op);
  // The same on `stream` (a cudaStream_t), for DistributedDataParallel's bucket reductions.
  void all_reduce_on(const Tensor& t, ReduceOp op, void* stream);
  // In place: every rank's t becomes root's t.
  void broadcast(const Tensor& t, int root);

 private:
  Options o_;
  void* comm_ = nullptr;  // ncclComm_t
};

// Whether libnccl can be opened here (Note [Process group]); never throws.
bool nccl_available();

// The process group of this process, from the environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT) unless options are given. It also makes every GradScaler
// all-reduce its found-inf flag with MAX (Note [Process group]).
ProcessGroup& init_process_group(std::optional<Options> options = std::nullopt);
bool is_initialized();
ProcessGroup& default_group();
void destroy_process_group();

}  // namespace ampgrad::distributed
