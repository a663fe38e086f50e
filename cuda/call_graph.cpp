// One-call CUDA graphs for calls that repeat (Note [Call graphs] in cuda/call_graph.h).
#include "cuda/call_graph.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>

#include "cuda/check.h"
#include "cuda/graph.h"

namespace ampgrad::cuda {

CallKey& CallKey::add(uint64_t v) {
  AG_INTERNAL_ASSERT(n_ < kWords, "CallKey: more than {} words", kWords);
  w_[n_++] = v;
  return *this;
}

size_t CallKey::hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (int i = 0; i < n_; ++i) {
    h ^= w_[i];
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h ^ (h >> 32));
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

struct Table {
  std::mutex mu;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<CallKey, std::list<Entry>::iterator, KeyHash> index;
  CallGraphStats stats;
  std::atomic<bool> enabled{true};

  Table() {
    const char* env = std::getenv("AMPGRAD_CALL_GRAPHS");
    if (env && env[0] == '0') enabled = false;
  }
  void clear() {
    for (Entry& e : lru)
      if (e.exec) (void)cudaGraphExecDestroy(e.exec);
    lru.clear();
    index.clear();
  }
};

Table& table() {
  static auto* t = new Table();  // leaked: graphs must not be destroyed after the driver shuts down
  return *t;
}

// Captures enqueue's work into a graph of its own and instantiates it; nullptr (with the
// stream out of capture mode and no work enqueued) if anything fails, enqueue throwing
// included: a library call that cannot be captured reports an error from inside the capture.
cudaGraphExec_t capture(cudaStream_t stream, void (*enqueue)(void*), void* ctx) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  bool threw = false;
  try {
    enqueue(ctx);
  } catch (...) {
    threw = true;
  }
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

}  // namespace

void run_call(int device, CUstream_st* stream, const CallKey& key, void (*enqueue)(void*), void* ctx) {
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
    if (static_cast<int>(t.lru.size()) >= kCallGraphEntries) {
      Entry& last = t.lru.back();
      if (last.exec) (void)cudaGraphExecDestroy(last.exec);
      t.index.erase(last.key);
      t.lru.pop_back();
    }
    t.lru.push_front(Entry{key});
    it = t.index.emplace(key, t.lru.begin()).first;
  } else if (it->second != t.lru.begin()) {
    t.lru.splice(t.lru.begin(), t.lru, it->second);
  }
  Entry& e = *it->second;
  if (!e.exec) {
    if (e.never || ++e.calls <= kDirectCalls) return direct(lock);
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

}  // namespace ampgrad::cuda
