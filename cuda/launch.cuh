// Kernel launches, as one-kernel CUDA graphs once their arguments repeat (Note [Kernel graphs]).
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/call_graph.h"
#include "cuda/common.cuh"

namespace ampgrad::cuda {

// Note [Kernel graphs]
// Queuing a kernel costs the host 3.5-4.8 us on the lent H200 machines (<<<>>>, any launch
// API; benchmarks/profile_launch.cu), and a small network's step is a dozen such launches
// besides its GEMMs: its eager step is bound by the host. A CUDA graph holding the same one
// kernel launches in 1.3-2.1 us, with or without 256 bytes of arguments. So launch() makes a
// kernel launch a call of run_call (Note [Call graphs] in cuda/call_graph.h), keyed by the
// kernel, its grid, block, dynamic shared memory and stream, and the bytes of every argument:
// a kernel's arguments are values, copied when it is queued, and a graph's kernel node holds
// a copy of them, so a graph launched for an equal key runs exactly the kernel the launch
// would queue now, reading and writing memory when it runs, in stream order. The third launch
// of a key is captured; later ones launch the graph. A training loop's steady state repeats
// every launch: the allocator hands each step's tensors the same addresses (Note [Host block
// cache] in cuda/allocator.cpp; with the last freed block first they cycled, and most keys
// never repeated).
// What it costs: device time. A kernel launched as a graph starts a little later after the
// one before it: nothing measurable for one kernel repeated (profile_launch), 3 % for 64
// different ones in turn, and 4-5 % of the Fashion-MNIST CNN's device-bound eager step
// (~65 kernels, 0.58 -> 0.61 ms; the small MLP's step, device-bound too, did not move). So
// kernels go through run_call only while the host is what binds (KernelGraphs::
// when_host_bound, the default): every 16th launch records an event, after asking whether
// the event it replaces, 32 launches old, has completed; while it has not, the device is
// that far behind the host, the host's time is free, and kernels launch directly.
// Argument types must have no padding bytes (their contents are indeterminate, and a key
// holding them would rarely repeat: no error, just direct launches); the structs passed to
// kernels spell out their padding. Empty arguments (stateless functors) add nothing.
// Launches with an argument that changes every call (the dropout mask's RNG offset) run
// directly after their first sighting, as any key seen fewer than three times does.
// set_kernel_graphs(KernelGraphs::off) or AMPGRAD_KERNEL_GRAPHS=0 launches directly, =1
// through run_call whatever the backlog; set_call_graphs_enabled(false) turns both off.

namespace detail {

template <class T> T implicitly(T v) { return v; }

template <class T> void add_argument(CallKey& key, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied as bytes");
  if constexpr (!std::is_empty_v<T>) key.add_bytes(&v, sizeof(T));
}

}  // namespace detail

// kernel<<<grid, block, smem, ctx.stream>>>(args...), checked, as a graph when it repeats.
template <class... P, class... A>
void launch(const KernelContext& ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: wrong number of kernel arguments");
  const std::tuple<std::remove_cv_t<P>...> params(detail::implicitly<std::remove_cv_t<P>>(std::forward<A>(args))...);
  auto enqueue = [&] {
    std::apply([&](const auto&... p) { kernel<<<grid, block, smem, ctx.stream>>>(p...); }, params);
    AG_CUDA_CHECK_LAUNCH();
  };
  if (!launch_kernels_as_graphs(ctx.device, ctx.stream)) {
    submit_launches(ctx.device);  // the calls held back come first (Note [Launch batches])
    return enqueue();
  }
  CallKey key;
  key.add(reinterpret_cast<const void*>(kernel))
      .add(uint64_t{grid.x} | uint64_t{grid.y} << 32)
      .add(uint64_t{grid.z} | uint64_t{block.x} << 32)
      .add(uint64_t{block.y} | uint64_t{block.z} << 32)
      .add(static_cast<uint64_t>(smem))
      .add(static_cast<const void*>(ctx.stream));
  std::apply([&](const auto&... p) { (detail::add_argument(key, p), ...); }, params);
  run_call(ctx.device, ctx.stream, key, enqueue);
}

// A byte copy or fill on ctx.stream (enqueue), keyed by `key`: like a kernel, as a graph when
// it repeats while kernels go through run_call, else directly.
template <class F>
void launch_stream_op(const KernelContext& ctx, const CallKey& key, F&& enqueue) {
  if (!launch_kernels_as_graphs(ctx.device, ctx.stream)) {
    submit_launches(ctx.device);  // the calls held back come first (Note [Launch batches])
    return enqueue();
  }
  run_call(ctx.device, ctx.stream, key, enqueue);
}

}  // namespace ampgrad::cuda
