// One-call CUDA graphs for calls that repeat (Note [Call graphs] in cuda/call_graph.h).
#include "cuda/call_graph.h"

#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "cuda/check.h"
#include "cuda/graph.h"

namespace ampgrad::cuda {

void CallKey::spill(uint64_t v) {
  if (heap_.empty()) {
    heap_.reserve(4 * kInlineWords);
    heap_.assign(inline_, inline_ + n_);
  }
  heap_.push_back(v);
}

CallKey& CallKey::add_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t w;
    std::memcpy(&w, b, 8);
    add(w);
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, b, n);
    add(w);
  }
  return *this;
}

size_t CallKey::hash() const {
  // Four independent FNV-1a lanes, so that a kernel's few hundred words hash in a few hundred
  // cycles rather than one multiply's latency per word.
  uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull};
  const uint64_t* w = data();
  for (int i = 0; i < n_; ++i) {
    uint64_t& l = h[i & 3];
    l = (l ^ w[i]) * 1099511628211ull;
  }
  uint64_t r = static_cast<uint64_t>(n_);
  for (uint64_t l : h) r = (r ^ (l ^ (l >> 29))) * 0xbf58476d1ce4e5b9ull;
  return static_cast<size_t>(r ^ (r >> 32));
}

namespace {

// Calls of a key that run directly before the next one is captured.
constexpr int kDirectCalls = 2;

struct Entry {
  CallKey key;
  int calls = 0;
  bool never = false;  // its capture failed
  cudaGraphExec_t exec = nullptr;
};

struct KeyHash {
  size_t operator()(const CallKey& k) const { return k.hash(); }
};

// Hashes of keys seen once kept at most (then forgotten, all at once).
constexpr size_t kSeenOnceMax = 8192;

struct Table {
  std::mutex mu;
  std::unordered_set<size_t> seen_once;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<CallKey, std::list<Entry>::iterator, KeyHash> index;
  CallGraphStats stats;
  std::atomic<bool> enabled{true};
  std::atomic<KernelGraphs> kernels{KernelGraphs::when_host_bound};
  bool trace = false;  // AMPGRAD_CALL_GRAPHS_TRACE=1: every new key to stderr

  Table() {
    const char* env = std::getenv("AMPGRAD_CALL_GRAPHS");
    if (env && env[0] == '0') enabled = false;
    const char* kenv = std::getenv("AMPGRAD_KERNEL_GRAPHS");
    if (kenv && kenv[0] == '0') kernels = KernelGraphs::off;
    if (kenv && kenv[0] == '1') kernels = KernelGraphs::always;
    const char* tenv = std::getenv("AMPGRAD_CALL_GRAPHS_TRACE");
    trace = tenv && tenv[0] == '1';
  }
  void clear() {
    for (Entry& e : lru)
      if (e.exec) (void)cudaGraphExecDestroy(e.exec);
    lru.clear();
    index.clear();
    seen_once.clear();
  }
};

Table& table() {
  static auto* t = new Table();  // leaked: graphs must not be destroyed after the driver shuts down
  return *t;
}

// Set while this thread captures a call: a call made from inside another's enqueue (a kernel
// launched by a library call's work) is part of that capture and runs directly, without
// taking the table's lock again.
thread_local bool t_capturing = false;

// Captures enqueue's work into a graph of its own and instantiates it; nullptr (with the
// stream out of capture mode and no work enqueued) if anything fails, enqueue throwing
// included: a library call that cannot be captured reports an error from inside the capture.
cudaGraphExec_t capture(cudaStream_t stream, void (*enqueue)(void*), void* ctx) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  bool threw = false;
  t_capturing = true;
  try {
    enqueue(ctx);
  } catch (...) {
    threw = true;
  }
  t_capturing = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  size_t nodes = 0;
  const bool ok = !threw && ended == cudaSuccess && graph != nullptr &&
                  cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess && nodes > 0;
  cudaGraphExec_t exec = nullptr;
  // An empty graph means the work went to another stream, i.e. it ran now: never replay that.
  if (ok && cudaGraphInstantiateWithFlags(&exec, graph, 0) != cudaSuccess) exec = nullptr;
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  return exec;
}

// A key seen for the first time, for finding the calls whose keys do not repeat: its hash,
// length and first word, which for a kernel launch is the kernel's host stub (printed as
// module+offset: addr2line -f -C -e the unstripped module names it) and for a library call
// its plan.
void trace_new_key(const CallKey& key) {
  const uint64_t first = key.size() > 0 ? key.word(0) : 0;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(first), &info) && info.dli_fname) {
    std::fprintf(stderr, "call graphs: new key %016zx, %d words, %s+0x%llx\n", key.hash(), key.size(),
                 info.dli_fname, static_cast<unsigned long long>(first - reinterpret_cast<uintptr_t>(info.dli_fbase)));
  } else {
    std::fprintf(stderr, "call graphs: new key %016zx, %d words, first word 0x%llx\n", key.hash(), key.size(),
                 static_cast<unsigned long long>(first));
  }
}

}  // namespace

void run_call(int device, CUstream_st* stream, const CallKey& key, void (*enqueue)(void*), void* ctx) {
  if (t_capturing) return enqueue(ctx);
  Table& t = table();
  auto direct = [&](std::unique_lock<std::mutex>& lock) {
    ++t.stats.direct;
    lock.unlock();
    enqueue(ctx);
  };
  std::unique_lock<std::mutex> lock(t.mu);
  if (!t.enabled.load(std::memory_order_relaxed) || capturing(device)) return direct(lock);
  auto it = t.index.find(key);
  if (it == t.index.end()) {
    // A key enters the table on its second sighting (Note [Call graphs]): keys seen once
    // (a kernel argument that changes every call) must not push out the graphs of keys that
    // repeat. The first sighting leaves only its hash. (A direct-mapped filter of hashes
    // lost keys for good when two that recur every step shared a slot.)
    const size_t h = key.hash();
    if (t.seen_once.erase(h) == 0) {
      if (t.seen_once.size() >= kSeenOnceMax) t.seen_once.clear();
      t.seen_once.insert(h);
      if (t.trace) trace_new_key(key);
      return direct(lock);
    }
    if (static_cast<int>(t.lru.size()) >= kCallGraphEntries) {
      Entry& last = t.lru.back();
      if (last.exec) (void)cudaGraphExecDestroy(last.exec);
      t.index.erase(last.key);
      t.lru.pop_back();
    }
    t.lru.push_front(Entry{key, 1});
    it = t.index.emplace(key, t.lru.begin()).first;
  } else if (it->second != t.lru.begin()) {
    t.lru.splice(t.lru.begin(), t.lru, it->second);
  }
  Entry& e = *it->second;
  if (!e.exec) {
    if (e.never || ++e.calls <= kDirectCalls) return direct(lock);
    // An error already pending would surface inside the capture and be cleared with it: let
    // the direct call report it, and capture another time.
    if (cudaPeekAtLastError() != cudaSuccess) {
      --e.calls;
      return direct(lock);
    }
    // Captured under the lock; other threads must not queue work on this stream meanwhile,
    // which ampgrad's one-thread-at-a-time rule ensures (Note [CUDA stream]): their work would
    // join the capture.
    e.exec = capture(stream, enqueue, ctx);
    if (!e.exec) {
      e.never = true;
      ++t.stats.failed;
      return direct(lock);  // the failed capture enqueued nothing; a real error throws here
    }
    ++t.stats.captured;
  }
  if (cudaGraphLaunch(e.exec, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaGraphExecDestroy(e.exec);
    e.exec = nullptr;
    e.never = true;
    ++t.stats.failed;
    return direct(lock);  // the launch queued nothing; a device error throws from the direct call
  }
  ++t.stats.launched;
}

CallGraphStats call_graph_stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  CallGraphStats s = t.stats;
  s.entries = static_cast<int64_t>(t.lru.size());
  return s;
}

void set_call_graphs_enabled(bool enabled) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.enabled = enabled;
  if (!enabled) t.clear();
}

bool call_graphs_enabled() { return table().enabled.load(std::memory_order_relaxed); }

void set_kernel_graphs(KernelGraphs mode) { table().kernels = mode; }

KernelGraphs kernel_graphs() { return table().kernels.load(std::memory_order_relaxed); }

namespace {

// Note [Kernel graphs] (the backlog probe): every kProbeLaunches-th kernel launch records an
// event in a ring of kProbeEvents; before it does, it asks whether the event it overwrites,
// recorded kProbeLaunches * kProbeEvents launches ago, has completed. If not, the device is
// that far behind the host and launches go directly until the next probe.
constexpr int kProbeLaunches = 16;
constexpr int kProbeEvents = 2;
constexpr int kMaxProbeDevices = 64;

struct Backlog {
  std::mutex mu;
  int launches = 0;
  int next = 0;
  bool behind = false;
  cudaStream_t stream = nullptr;
  cudaEvent_t events[kProbeEvents] = {};
};

Backlog& backlog(int device) {
  static auto* all = new Backlog[kMaxProbeDevices];  // leaked: events outlive static destruction
  return all[device];
}

// Whether the device is far behind the host on `stream` (see above).
bool device_behind(int device, cudaStream_t stream) {
  Backlog& b = backlog(device);
  std::lock_guard<std::mutex> lock(b.mu);
  if (++b.launches < kProbeLaunches && b.stream == stream) return b.behind;
  b.launches = 0;
  if (b.stream != stream) {  // a new stream (the first launch): start over
    for (cudaEvent_t& e : b.events) {
      if (e) (void)cudaEventDestroy(e);
      e = nullptr;
    }
    b.stream = stream;
    b.next = 0;
    b.behind = false;
  }
  // A capture ampgrad does not know of (another device's CudaGraph in global mode, say): no
  // events now, and kernels go directly.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return b.behind = true;
  }
  cudaEvent_t& e = b.events[b.next];
  if (e) {
    const cudaError_t q = cudaEventQuery(e);
    b.behind = q == cudaErrorNotReady;
    if (q != cudaSuccess && q != cudaErrorNotReady) (void)cudaGetLastError();  // reported by the launch
  } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    e = nullptr;
    return b.behind;
  }
  if (cudaEventRecord(e, stream) != cudaSuccess) (void)cudaGetLastError();
  b.next = (b.next + 1) % kProbeEvents;
  return b.behind;
}

}  // namespace

bool launch_kernels_as_graphs(int device, CUstream_st* stream) {
  const KernelGraphs mode = kernel_graphs();
  if (mode == KernelGraphs::off || !call_graphs_enabled() || t_capturing || capturing(device)) return false;
  if (mode == KernelGraphs::always || device < 0 || device >= kMaxProbeDevices) return true;
  return !device_behind(device, stream);
}

}  // namespace ampgrad::cuda
