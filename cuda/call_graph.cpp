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

// Captures enqueue's work into a graph of its own and instantiates it; nullptr (and the
// stream out of capture, no work enqueued) if any step fails. Rethrows what enqueue throws.
cudaGraphExec_t capture(cudaStream_t stream, void (*enqueue)(void*), void* ctx) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  try {
    enqueue(ctx);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || graph == nullptr) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return exec;
}

}  // namespace

void run_call(int device, CUstream_st* stream, const CallKey& key, void (*enqueue)(void*), void* ctx) {
  Table& t = table();
  if (!t.enabled.load(std::memory_order_relaxed) || capturing(device)) {
    {
      std::lock_guard<std::mutex> lock(t.mu);
      ++t.stats.direct;
    }
    enqueue(ctx);
    return;
  }
  std::unique_lock<std::mutex> lock(t.mu);
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
  if (e.exec) {
    ++t.stats.launched;
    AG_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
    return;
  }
  if (e.never || ++e.calls <= kDirectCalls) {
    ++t.stats.direct;
    lock.unlock();
    enqueue(ctx);
    return;
  }
  // The lock is held through the capture: no other thread may enqueue on the stream meanwhile.
  e.exec = capture(stream, enqueue, ctx);
  if (!e.exec) {
    e.never = true;
    ++t.stats.failed;
    ++t.stats.direct;
    lock.unlock();
    enqueue(ctx);  // the failed capture enqueued nothing
    return;
  }
  ++t.stats.captured;
  ++t.stats.launched;
  AG_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
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
