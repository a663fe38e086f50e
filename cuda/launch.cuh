// Kernel launches, as one-kernel CUDA graphs once their arguments repeat (Note [Kernel graphs]).
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/common.cuh>

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
// (~65 kernels, 0.58 -> 0.61 ms, measured without launch batches; the small MLP's step,
// device-bound too, did not move; with batches, the CNN's eager step is faster the longer
// the probe's horizon, 0.652 ms at 512 launches and 0.655 with every kernel through run_call,
// against 0.688 at 128). So kernels go through run_call only while the host is what binds
// (KernelGraphs::when_host_bound, the default): every 16th launch records an event, after
// asking whether one recorded earlier has completed: once the one 512 launches old has not,
// the device is that far behind the host, the host's time is free, and kernels launch
// directly, until the one 128 launches old has (the backlog probe in cuda/call_graph.cpp says
// why two horizons).
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

// The key of a kernel launch: the kernel, its configuration, the stream and the bytes of
// every argument (as the kernel takes them).
template <class... P, class... A>
CallKey kernel_key(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const A&... args) {
  CallKey key;
  key.add(reinterpret_cast<const void*>(kernel))
      .add(uint64_t{grid.x} | uint64_t{grid.y} << 32)
      .add(uint64_t{grid.z} | uint64_t{block.x} << 32)
      .add(uint64_t{block.y} | uint64_t{block.z} << 32)
      .add(static_cast<uint64_t>(smem))
      .add(static_cast<const void*>(stream));
  (add_argument(key, args), ...);
  return key;
}

}  // namespace detail

// Queues `enqueue`'s work (a kernel launch, a byte copy or fill on ctx.stream) as a kernel is
// queued: through run_call, keyed by make_key(), while kernels go as graphs; else directly,
// after the calls held back (Note [Launch batches]). The key is built only when it is used.
template <class K, class F>
void launch_call(const KernelContext& ctx, K&& make_key, F&& enqueue) {
  if (!launch_kernels_as_graphs(ctx.device, ctx.stream)) {
    submit_launches(ctx.device);
    return enqueue();
  }
  run_call(ctx.device, ctx.stream, make_key(), enqueue);
}

// kernel<<<grid, block, smem, ctx.stream>>>(args...), checked, as a graph when it repeats.
template <class... P, class... A>
void launch(const KernelContext& ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: wrong number of kernel arguments");
  const std::tuple<std::remove_cv_t<P>...> params(detail::implicitly<std::remove_cv_t<P>>(std::forward<A>(args))...);
  launch_call(
      ctx,
      [&] {
        return std::apply([&](const auto&... p) { return detail::kernel_key(kernel, grid, block, smem, ctx.stream, p...); },
                          params);
      },
      [&] {
        std::apply([&](const auto&... p) { kernel<<<grid, block, smem, ctx.stream>>>(p...); }, params);
        AG_CUDA_CHECK_LAUNCH();
      });
}

}  // namespace ampgrad::cuda
