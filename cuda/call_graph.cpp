// One-call CUDA graphs for calls that repeat (Note [Call graphs] in cuda/call_graph.h).
#include <ampgrad/cuda/call_graph.h>

#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <string>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/device_error.h>
#include <ampgrad/cuda/graph.h>
#include <ampgrad/cuda/runtime.h>

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

// Note [Call-graph table size]
// A training step's distinct calls must fit: in least-recently-used order a loop with more
// calls than entries misses on every call, and each is captured again. Two loops taken in
// turns need both their sets. The LSTMCell loop of `ampgrad bench step` (2 layers, 64 time
// steps, ~1800 kernel launches and ~500 GEMMs a step) takes its fp32 and AMP steps in turns:
// together more keys than a table of 4096 entries holds. The overflow fed on itself: evicted
// keys ran directly and were captured again, the slower host let the device catch up, the
// backlog probe (below) then sent every kernel through the table too, and more was evicted.
// Which state a process settled in was chance, so the AMP row was bimodal (7.4 against 10-13
// ms a step in runs of one build). Measured on an H200 in one run (ampgrad bench step --models
// lstm_cells --reps 15, pinned, two rounds; ms a step fp32 / AMP, calls outside graphs and keys
// evicted per step): 4096 entries 7.6 / 6.2 and 9.7 / 9.4, 43-47 and 10-11; 8192 6.5 / 6.1 and
// 6.8 / 7.6, 21 and 0; 16384 6.6 / 5.2 and 7.1 / 8.1, 21 and 0; 4096 with a single backlog
// horizon 12.2 / 7.8 and 11.8 / 10.2, 84. (The 21 calls a step that still miss at 8192 are
// keys that change every step, not evictions.) Peak RSS was the same (959-1008 MB): a graph
// costs memory while it is in the table, and the table holds what recurs. 16384 leaves room for
// models with more calls a step than this one. (test_cuda's RSS of 100-128 GB on an H200 is
// its op table's n x n tril row at n = 65537, not this table: the same at 4096 entries as at
// 16384.)
constexpr int64_t kCallGraphEntries = 16384;

// Calls of a key that run directly before the next one is captured.
constexpr int kDirectCalls = 2;
constexpr int kMaxDevices = 64;
constexpr int kBatchEntries = 1024;

// A key's graph: for a call, captured from its enqueue (the graph kept, for batches); for a
// batch, composed of the graphs of its calls.
struct Entry {
  CallKey key;
  uint64_t id = 0;        // a call's, unique for the process: batches are keyed by these
  int calls = 0;
  bool never = false;     // its capture (or composition) failed
  bool launched = false;  // its graph launched once from run_call: later calls may be held back
  int device = -1;        // whose stream it was captured on (keys hold the stream)
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

struct KeyHash {
  size_t operator()(const CallKey& k) const { return k.hash(); }
};

// Hashes of keys seen once kept at most (then forgotten, all at once).
constexpr size_t kSeenOnceMax = 8192;

// A graph no longer in a cache whose call may still be held back: destroyed once nothing is
// held on its device.
struct Retired {
  int device = -1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

// Keys and their graphs, least recently used first out. A key takes a place on its second
// sighting; the first leaves only its hash (Note [Call graphs]).
class GraphCache {
 public:
  explicit GraphCache(size_t capacity) : capacity_(capacity) {}

  // The key's entry, now the most recently used; nullptr on its first sighting. An entry
  // pushed out goes to `retired`.
  Entry* find(const CallKey& key, std::vector<Retired>& retired, bool* first_sighting) {
    *first_sighting = false;
    auto it = index_.find(key);
    if (it != index_.end()) {
      if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
      return &*it->second;
    }
    // (A direct-mapped filter of hashes lost keys for good when two that recur every step
    // shared a slot.)
    const size_t h = key.hash();
    if (seen_once_.erase(h) == 0) {
      if (seen_once_.size() >= kSeenOnceMax) seen_once_.clear();
      seen_once_.insert(h);
      *first_sighting = true;
      return nullptr;
    }
    if (lru_.size() >= capacity_) evict_last(retired);
    lru_.push_front(Entry{key});
    lru_.front().calls = 1;  // the first sighting
    index_.emplace(key, lru_.begin());
    return &lru_.front();
  }
  void clear(std::vector<Retired>& retired) {
    for (Entry& e : lru_) retired.push_back({e.device, e.graph, e.exec});
    lru_.clear();
    index_.clear();
    seen_once_.clear();
  }
  size_t size() const { return lru_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t evicted() const { return evicted_; }
  // A smaller table pushes its least recently used entries out now.
  void set_capacity(size_t capacity, std::vector<Retired>& retired) {
    capacity_ = capacity;
    while (lru_.size() > capacity_) evict_last(retired);
  }

 private:
  void evict_last(std::vector<Retired>& retired) {
    Entry& last = lru_.back();
    retired.push_back({last.device, last.graph, last.exec});
    index_.erase(last.key);
    lru_.pop_back();
    ++evicted_;
  }
  size_t capacity_;
  uint64_t evicted_ = 0;  // entries pushed out (not those cleared)
  std::unordered_set<size_t> seen_once_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<CallKey, std::list<Entry>::iterator, KeyHash> index_;
};

// A call held back (Note [Launch batches]).
struct Held {
  uint64_t id;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  std::string_view op;  // the op that asked for it (CurrentOp), named if its launch fails
  bool backward;
};

struct HeldCalls {
  cudaStream_t stream = nullptr;
  std::vector<Held> calls;
};

struct Table {
  std::mutex mu;
  GraphCache calls{kCallGraphEntries};
  GraphCache batches{kBatchEntries};
  uint64_t next_id = 0;
  HeldCalls held[kMaxDevices];
  std::atomic<size_t> held_count[kMaxDevices] = {};  // held[d].calls.size(), read without the lock
  std::vector<Retired> retired;
  // A submit that failed where it could not throw (a free): thrown by the next run_call or
  // submit_launches() that can.
  std::string failed_submit;
  std::atomic<bool> has_failed_submit{false};  // !failed_submit.empty(), read without the lock
  CallGraphStats stats;
  std::atomic<bool> enabled{true};
  std::atomic<bool> batching{true};
  std::atomic<KernelGraphs> kernels{KernelGraphs::when_host_bound};
  bool trace = false;  // AMPGRAD_CALL_GRAPHS_TRACE=1: every new key to stderr

  Table() {
    const char* env = std::getenv("AMPGRAD_CALL_GRAPHS");
    if (env && env[0] == '0') enabled = false;
    const char* kenv = std::getenv("AMPGRAD_KERNEL_GRAPHS");
    if (kenv && kenv[0] == '0') kernels = KernelGraphs::off;
    if (kenv && kenv[0] == '1') kernels = KernelGraphs::always;
    const char* benv = std::getenv("AMPGRAD_LAUNCH_BATCHES");
    if (benv && benv[0] == '0') batching = false;
    const char* tenv = std::getenv("AMPGRAD_CALL_GRAPHS_TRACE");
    trace = tenv && tenv[0] == '1';
    // The table's size (set_call_graph_capacity), for measuring others: 64 to 1M entries.
    if (const char* cenv = std::getenv("AMPGRAD_CALL_GRAPH_ENTRIES")) {
      const long n = std::atol(cenv);
      if (n >= 64 && n <= (1L << 20)) calls.set_capacity(static_cast<size_t>(n), retired);
    }
  }
  // Destroys the graphs pushed out of the caches that no held call can be.
  void bury() {
    size_t kept = 0;
    for (const Retired& r : retired) {
      if (r.device >= 0 && r.device < kMaxDevices && !held[r.device].calls.empty()) {
        retired[kept++] = r;
        continue;
      }
      if (r.exec) (void)cudaGraphExecDestroy(r.exec);
      if (r.graph) (void)cudaGraphDestroy(r.graph);
    }
    retired.resize(kept);
  }
  // Throws the error of a submit that could not report it (see failed_submit).
  void rethrow_failed_submit() {
    if (failed_submit.empty()) return;
    std::string what;
    what.swap(failed_submit);
    has_failed_submit = false;
    throw Error(what);
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
// Set by launch_kernels_as_graphs() when it sends a kernel to run_call, which then holds it or
// not by that answer rather than probing the backlog a second time for the same launch.
thread_local bool t_probed = false;

// Captures enqueue's work into a graph of its own and instantiates it; false (with the stream
// out of capture mode and no work enqueued) if anything fails, enqueue throwing included: a
// library call that cannot be captured reports an error from inside the capture.
bool capture(cudaStream_t stream, void (*enqueue)(void*), void* ctx, Entry& e) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
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
  (void)cudaGetLastError();
  if (!exec) {
    if (graph) (void)cudaGraphDestroy(graph);
    return false;
  }
  e.graph = graph;
  e.exec = exec;
  return true;
}

// One graph whose nodes are the calls' graphs, in order, each after the one before.
cudaGraphExec_t compose(const std::vector<Held>& calls) {
  cudaGraph_t g = nullptr;
  if (cudaGraphCreate(&g, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  cudaGraphNode_t prev = nullptr;
  bool ok = true;
  for (const Held& h : calls) {
    cudaGraphNode_t node = nullptr;
    ok = cudaGraphAddChildGraphNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, h.graph) == cudaSuccess;
    if (!ok) break;
    prev = node;
  }
  cudaGraphExec_t exec = nullptr;
  if (ok && cudaGraphInstantiateWithFlags(&exec, g, 0) != cudaSuccess) exec = nullptr;
  (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
  return exec;
}

// Launches a held call's graph. It launched before, so a failure now is the device's: reported.
void launch_held(const Held& h, cudaStream_t stream) {
  const cudaError_t err = cudaGraphLaunch(h.exec, stream);
  if (err != cudaSuccess)
    detail::throw_cuda_error_in(CurrentOp::label(h.op, h.backward), err, "cudaGraphLaunch (a call held back)", __FILE__,
                                __LINE__);
}

// Submits the calls held back on `device`, as one batch graph where this sequence of calls
// repeats (Note [Launch batches]). The caller has the device current and holds the lock.
void submit_locked(Table& t, int device) {
  if (device < 0 || device >= kMaxDevices) return;
  HeldCalls& h = t.held[device];
  if (h.calls.empty()) return;
  std::vector<Held> calls;
  calls.reserve(kMaxHeldCalls);  // h.calls gets this buffer: no regrowth while the next batch is held
  calls.swap(h.calls);
  t.held_count[device].store(0, std::memory_order_relaxed);
  struct Bury {
    Table& t;
    ~Bury() { t.bury(); }
  } bury{t};
  if (calls.size() == 1) return launch_held(calls[0], h.stream);
  CallKey key;
  key.add(uint64_t{3}).add(static_cast<const void*>(h.stream));  // 3: a batch
  for (const Held& c : calls) key.add(c.id);
  bool first = false;
  Entry* b = t.batches.find(key, t.retired, &first);
  if (b && !b->exec && !b->never && ++b->calls > kDirectCalls) {
    b->exec = compose(calls);
    if (b->exec) {
      ++t.stats.batches_composed;
    } else {
      b->never = true;
      ++t.stats.failed;
    }
  }
  if (b && b->exec) {
    if (cudaGraphLaunch(b->exec, h.stream) == cudaSuccess) {
      ++t.stats.batches;
      t.stats.batched += static_cast<int64_t>(calls.size());
      return;
    }
    (void)cudaGetLastError();
    t.retired.push_back({device, nullptr, b->exec});
    b->exec = nullptr;
    b->never = true;
    ++t.stats.failed;
  }
  for (const Held& c : calls) launch_held(c, h.stream);
}

// Submits what is held on every device (a switch turned off). The caller holds the lock.
void submit_all_locked(Table& t) {
  for (int d = 0; d < kMaxDevices; ++d)
    if (!t.held[d].calls.empty()) {
      DeviceGuard guard(d);
      submit_locked(t, d);
    }
}

// Note [Kernel graphs] (the backlog probe): every kProbeLaunches-th kernel launch records an
// event in a ring of kProbeEvents, after asking whether an event recorded earlier has
// completed. The device counts as behind once the event recorded 512 launches ago has not (it
// has that much work queued ahead of the host), and as caught up again once the one recorded
// 128 launches ago has; while behind, launches go directly.
// Why two horizons, and why these: a batch of held calls reaches the device at once, so a
// horizon shorter than a batch (32 launches, once) found the device behind on each batch's own
// work. With one horizon of 128 launches, a step near the balance of host and device (the
// LSTMCell loop of `ampgrad bench step`, ~1800 small launches a step) flipped between the two
// modes many times a step: direct launches made the host slower, the device caught up, held
// calls resumed, and every flip cut the held sequences at a new place. Measured on the H200 in
// one call, in turns, ms/step against one horizon of 128 (docs/benchmarks.md, "The backlog
// probe"): the LSTMCell loop 8.5-10.2 against 11.9-12.4 (fp32) and 5.6-9.4 against 9.9-10.0
// (AMP), the Fashion-MNIST CNN's eager step 0.652 against 0.688 (fp32) and 0.511 against 0.564
// (AMP), the MLP and 4x Linear(4096) rows unchanged. AMPGRAD_PROBE_ENTER and
// AMPGRAD_PROBE_EXIT set the two horizons, in launches, to measure others: rounded down to a
// multiple of 16, from 16 to 1024 (others are ignored), the exit horizon at most the enter one.
constexpr int kProbeLaunches = 16;
constexpr int kProbeEvents = 64;  // the ring: horizons of up to 1024 launches
constexpr int kEnterProbes = 32, kExitProbes = 8;  // the horizons' defaults: 512 and 128 launches
static_assert(kProbeLaunches * kExitProbes >= 2 * kMaxHeldCalls && kExitProbes <= kEnterProbes &&
              kEnterProbes <= kProbeEvents);

// The two horizons (above), in probes of kProbeLaunches launches each.
struct Horizons {
  int enter = kEnterProbes, exit = kExitProbes;
  Horizons() {
    auto read = [](const char* name, int& v) {
      const char* e = std::getenv(name);
      if (!e) return;
      const int launches = std::atoi(e);
      if (launches >= kProbeLaunches && launches <= kProbeLaunches * kProbeEvents) v = launches / kProbeLaunches;
    };
    read("AMPGRAD_PROBE_ENTER", enter);
    read("AMPGRAD_PROBE_EXIT", exit);
    if (exit > enter) exit = enter;
  }
};
const Horizons& horizons() {
  static const Horizons h;
  return h;
}

struct Backlog {
  std::mutex mu;
  int launches = 0;
  int next = 0;      // the ring's slot the next probe records into
  int recorded = 0;  // events recorded since the stream was set, up to kProbeEvents
  std::atomic<bool> behind{false};  // read without the lock by kernels_as_graphs_now
  cudaStream_t stream = nullptr;
  cudaEvent_t events[kProbeEvents] = {};
};

Backlog& backlog(int device) {
  static auto* all = new Backlog[kMaxDevices];  // leaked: events outlive static destruction
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
    b.recorded = 0;
    b.behind = false;
  }
  // A capture ampgrad does not know of (another device's CudaGraph in global mode, say): no
  // events now, and kernels go directly.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return b.behind = true;
  }
  const Horizons& hz = horizons();
  const int ago = b.behind ? hz.exit : hz.enter;
  if (b.recorded >= ago) {
    cudaEvent_t old = b.events[(b.next - ago + kProbeEvents) % kProbeEvents];
    const cudaError_t q = cudaEventQuery(old);
    b.behind = q == cudaErrorNotReady;
    if (q != cudaSuccess && q != cudaErrorNotReady) (void)cudaGetLastError();  // reported by the launch
  }
  cudaEvent_t& e = b.events[b.next];
  if (!e && cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    e = nullptr;
    return b.behind;
  }
  if (cudaEventRecord(e, stream) != cudaSuccess) (void)cudaGetLastError();
  b.next = (b.next + 1) % kProbeEvents;
  if (b.recorded < kProbeEvents) ++b.recorded;
  return b.behind;
}

// Whether kernels go through run_call now, by the mode and the backlog probe's last answer
// (Note [Kernel graphs]): only then is the host what binds, and are calls held back (Note
// [Launch batches]). While the device is behind, holding would only delay its work; while
// kernels launch directly, each of them would submit the calls held before it.
// A library call (not probed by launch_kernels_as_graphs) probes here, so that a loop of library
// calls alone sees the backlog too.
bool kernels_as_graphs_now(Table& t, int device, cudaStream_t stream, bool probed) {
  const KernelGraphs mode = t.kernels.load(std::memory_order_relaxed);
  if (mode != KernelGraphs::when_host_bound) return mode == KernelGraphs::always;
  if (device >= kMaxDevices) return true;
  return probed ? !backlog(device).behind.load(std::memory_order_relaxed) : !device_behind(device, stream);
}

// Whether the held calls are submitted after this one (Note [Launch batches], the cuts): after
// kMinBatchCalls, at calls whose mixed id falls in one of kCutEvery buckets.
constexpr size_t kMinBatchCalls = 8;
constexpr uint64_t kCutEvery = 32;
bool cuts_batch(uint64_t id, size_t held) {
  if (held < kMinBatchCalls) return false;
  uint64_t z = id * 0x9E3779B97F4A7C15ull;  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return ((z ^ (z >> 31)) % kCutEvery) == 0;
}

// Holds a call back on `device`, behind those held already.
void hold(Table& t, int device, cudaStream_t stream, const Entry& e) {
  HeldCalls& h = t.held[device];
  if (!h.calls.empty() && h.stream != stream) submit_locked(t, device);
  h.stream = stream;
  h.calls.push_back({e.id, e.graph, e.exec, CurrentOp::name(), CurrentOp::backward()});
  t.held_count[device].store(h.calls.size(), std::memory_order_relaxed);
  if (h.calls.size() >= static_cast<size_t>(kMaxHeldCalls) || cuts_batch(e.id, h.calls.size())) submit_locked(t, device);
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
  const bool probed = std::exchange(t_probed, false);
  if (t_capturing) return enqueue(ctx);
  Table& t = table();
  std::unique_lock<std::mutex> lock(t.mu);
  t.rethrow_failed_submit();
  // Run directly: after the calls held back, which come first in stream order.
  auto direct = [&] {
    ++t.stats.direct;
    submit_locked(t, device);
    lock.unlock();
    enqueue(ctx);
  };
  if (!t.enabled.load(std::memory_order_relaxed) || capturing(device)) return direct();
  bool first = false;
  Entry* e = t.calls.find(key, t.retired, &first);
  if (!e) {
    if (first && t.trace) trace_new_key(key);
    return direct();
  }
  if (!e->exec) {
    if (e->never || ++e->calls <= kDirectCalls) return direct();
    // An error already pending would surface inside the capture and be cleared with it: let
    // the direct call report it, and capture another time.
    if (cudaPeekAtLastError() != cudaSuccess) {
      --e->calls;
      return direct();
    }
    // Captured under the lock; other threads must not queue work on this stream meanwhile,
    // which ampgrad's one-thread-at-a-time rule ensures (Note [CUDA stream]): their work would
    // join the capture. Capturing queues nothing, so calls held back may stay held.
    if (!capture(stream, enqueue, ctx, *e)) {
      e->never = true;
      ++t.stats.failed;
      return direct();  // the failed capture enqueued nothing; a real error throws here
    }
    e->id = ++t.next_id;
    e->device = device;
    ++t.stats.captured;
  }
  // Only the library stream's calls are held.
  if (e->launched && t.batching.load(std::memory_order_relaxed) && device >= 0 && device < kMaxDevices &&
      stream == launch_stream(device) && kernels_as_graphs_now(t, device, stream, probed)) {
    hold(t, device, stream, *e);
    ++t.stats.launched;
    return;
  }
  submit_locked(t, device);
  if (cudaGraphLaunch(e->exec, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    t.retired.push_back({device, e->graph, e->exec});
    e->graph = nullptr;
    e->exec = nullptr;
    e->never = true;
    ++t.stats.failed;
    t.bury();
    return direct();  // the launch queued nothing; a device error throws from the direct call
  }
  e->launched = true;
  ++t.stats.launched;
}

namespace {
// Whether `device` has nothing held and no failed submit to report (read without the lock),
// or is not one a submit may touch now: inside a call's capture (a library's work asking for
// the stream) nothing may join it.
bool nothing_to_submit(const Table& t, int device) {
  if (t_capturing || device < 0 || device >= kMaxDevices) return true;
  return t.held_count[device].load(std::memory_order_relaxed) == 0 &&
         !t.has_failed_submit.load(std::memory_order_relaxed);
}
}  // namespace

void submit_launches(int device) {
  Table& t = table();
  if (nothing_to_submit(t, device)) return;
  DeviceGuard guard(device);
  std::lock_guard<std::mutex> lock(t.mu);
  t.rethrow_failed_submit();
  submit_locked(t, device);
}

void finish_held_launches(int device) {
  Table& t = table();
  if (nothing_to_submit(t, device)) return;
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    t.rethrow_failed_submit();
    if (t.held[device].calls.empty()) return;
    stream = t.held[device].stream;
    submit_locked(t, device);
    ++t.stats.raw_waits;
  }
  AG_CUDA_CHECK(cudaStreamSynchronize(stream));
  check_device_errors(device);  // Note [Device-side errors] in cuda/device_error.h
}

void try_submit_launches(int device) noexcept {
  try {
    submit_launches(device);
  } catch (const std::exception& e) {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    if (t.failed_submit.empty()) t.failed_submit = e.what();
    t.has_failed_submit = true;
  } catch (...) {
  }
}

void set_launch_batches(bool enabled) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.batching = enabled;
  if (!enabled) submit_all_locked(t);
}

bool launch_batches() { return table().batching.load(std::memory_order_relaxed); }

CallGraphStats call_graph_stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  CallGraphStats s = t.stats;
  s.entries = static_cast<int64_t>(t.calls.size());
  s.capacity = static_cast<int64_t>(t.calls.capacity());
  s.evicted = static_cast<int64_t>(t.calls.evicted());
  return s;
}

void set_call_graph_capacity(int64_t entries) {
  AG_CHECK(entries >= 1, "set_call_graph_capacity: the table needs at least one entry, got {}", entries);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.calls.set_capacity(static_cast<size_t>(entries), t.retired);
  t.bury();  // graphs of held calls stay until those are submitted
}

void set_call_graphs_enabled(bool enabled) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.enabled = enabled;
  if (!enabled) {
    submit_all_locked(t);
    t.calls.clear(t.retired);
    t.batches.clear(t.retired);
    t.bury();
  }
}

bool call_graphs_enabled() { return table().enabled.load(std::memory_order_relaxed); }

void set_kernel_graphs(KernelGraphs mode) { table().kernels = mode; }

KernelGraphs kernel_graphs() { return table().kernels.load(std::memory_order_relaxed); }

bool launch_kernels_as_graphs(int device, CUstream_st* stream) {
  const KernelGraphs mode = kernel_graphs();
  if (mode == KernelGraphs::off || !call_graphs_enabled() || t_capturing || capturing(device)) return false;
  if (mode == KernelGraphs::always || device < 0 || device >= kMaxDevices) return true;
  return t_probed = !device_behind(device, stream);
}

}  // namespace ampgrad::cuda
