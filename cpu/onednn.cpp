// dlopen of oneDNN, its engine and stream, and the primitive cache (Note [oneDNN]).
#include <ampgrad/cpu/onednn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ampgrad/core/dtype.h>
#include <ampgrad/core/error.h>
#include <ampgrad/cpu/parallel.h>

#if AMPGRAD_WITH_ONEDNN
#include <dlfcn.h>
#endif

namespace ampgrad::cpu::onednn {

#if !AMPGRAD_WITH_ONEDNN

bool available() { return false; }
size_t primitives_built() { return 0; }

#else

namespace {

struct Library {
  Api api;
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  bool ok = false;
};

const Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* off = std::getenv("AMPGRAD_NO_ONEDNN");
    if (off && off[0] == '1') return;
    void* h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    bool all = true;
#define AG_ONEDNN_RESOLVE(f)                                          \
  lib.api.f = reinterpret_cast<decltype(&::f)>(dlsym(h, #f)); \
  all = all && lib.api.f != nullptr;
    AG_ONEDNN_FUNCTIONS(AG_ONEDNN_RESOLVE)
#undef AG_ONEDNN_RESOLVE
    if (!all) return;
    if (lib.api.dnnl_engine_create(&lib.engine, dnnl_cpu, 0) != dnnl_success) return;
    if (lib.api.dnnl_stream_create(&lib.stream, lib.engine, dnnl_stream_default_flags) != dnnl_success) return;
    lib.ok = true;
  });
  return lib;
}

void check(dnnl_status_t s, const char* call, const char* what) {
  if (s != dnnl_success) ampgrad::detail::throw_error(fmt::format("{}: oneDNN's {} failed (status {})", what, call, static_cast<int>(s)));
}

// Scratch buffers of this thread, reused from call to call: [0] the scratchpad, then one per
// reordered argument, and kReorderScratchSlot the reorders' own scratchpad.
constexpr size_t kReorderScratchSlot = 64;
std::vector<char>& scratch(size_t slot, size_t bytes) {
  thread_local std::vector<std::vector<char>> buffers;
  if (buffers.size() <= slot) buffers.resize(slot + 1);
  if (buffers[slot].size() < bytes) buffers[slot].resize(bytes + 64);
  return buffers[slot];
}

void* aligned(std::vector<char>& b) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(b.data()) + 63) & ~uintptr_t(63));
}

struct Cache {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Primitive>> prims;  // null: cannot be built
  std::map<std::string, dnnl_primitive_desc_t> hints;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: primitives may outlive static destruction order
  return *c;
}

}  // namespace

bool available() { return library().ok; }
size_t primitives_built() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  size_t n = 0;
  for (const auto& [key, p] : c.prims) n += p != nullptr;
  return n;
}
const Api& api() { return library().api; }

dnnl_data_type_t data_type(DType d) {
  switch (d) {
    case kFloat32: return dnnl_f32;
    case kBFloat16: return dnnl_bf16;
    case kFloat16: return dnnl_f16;
    default: return dnnl_data_type_undef;
  }
}

dnnl_memory_desc_t plain_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, DType d) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dd, ss;
  for (size_t i = 0; i < dims.size(); ++i) {
    dd[i] = dims[i];
    ss[i] = strides[i];
  }
  // A dim of size 1 is never stepped along, so its stride is free; oneDNN refuses some (0, or
  // one that orders it among the others oddly: [B, T, 1, E] transposed to [B, 1, T, E]). It
  // gets the stride it would have if dense after the dim inside it.
  for (size_t i = dims.size(); i-- > 0;)
    if (dims[i] == 1) ss[i] = i + 1 < dims.size() ? ss[i + 1] * std::max<int64_t>(dd[i + 1], 1) : 1;
  const dnnl_status_t st = api().dnnl_memory_desc_init_by_strides(&md, static_cast<int>(dims.size()), dd, data_type(d), ss);
  if (st != dnnl_success)
    check(st, "dnnl_memory_desc_init_by_strides",
          fmt::format("oneDNN (a {} memory of dims [{}], strides [{}])", dtype_name(d), fmt::join(dims, ", "),
                      fmt::join(std::vector<int64_t>(ss, ss + dims.size()), ", "))
              .c_str());
  return md;
}

dnnl_memory_desc_t any_md(const std::vector<int64_t>& dims, DType d) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dd;
  for (size_t i = 0; i < dims.size(); ++i) dd[i] = dims[i];
  check(api().dnnl_memory_desc_init_by_tag(&md, static_cast<int>(dims.size()), dd, data_type(d), dnnl_format_tag_any),
        "dnnl_memory_desc_init_by_tag", "oneDNN");
  return md;
}

Attr::Attr(float alpha, float beta) {
  const Api& a = api();
  check(a.dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create", "oneDNN");
  check(a.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode", "oneDNN");
  check(a.dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict), "set_fpmath_mode", "oneDNN");
  if (alpha != 1.0f) check(a.dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "set_output_scales", "oneDNN");
  if (beta != 0.0f) {
    dnnl_post_ops_t po = nullptr;
    check(a.dnnl_post_ops_create(&po), "dnnl_post_ops_create", "oneDNN");
    check(a.dnnl_post_ops_append_sum(po, beta), "dnnl_post_ops_append_sum", "oneDNN");
    check(a.dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops", "oneDNN");
    a.dnnl_post_ops_destroy(po);
  }
}
Attr::~Attr() {
  if (attr) api().dnnl_primitive_attr_destroy(attr);
}

void key_add(std::string& key, std::initializer_list<int64_t> values) {
  for (int64_t v : values) key.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void key_add(std::string& key, const std::vector<int64_t>& values) {
  key_add(key, {static_cast<int64_t>(values.size())});
  for (int64_t v : values) key_add(key, {v});
}
void key_add(std::string& key, const Tensor& t) {
  if (!t.defined()) {
    key_add(key, {-1});
    return;
  }
  key_add(key, {static_cast<int64_t>(t.dtype()), t.dim()});
  for (int64_t i = 0; i < t.dim(); ++i) key_add(key, {t.size(i), t.stride(i)});
}

Primitive::~Primitive() {
  const Api& a = api();
  for (Arg& g : args_)
    if (g.reorder) a.dnnl_primitive_destroy(g.reorder);
  if (prim_) a.dnnl_primitive_destroy(prim_);
  if (pd_) a.dnnl_primitive_desc_destroy(pd_);
}

namespace {
// oneDNN fixes a primitive's threading and blocking when it is created: the team's size is
// part of every key (a primitive built for one thread would stay on one).
std::string keyed(const std::string& key) {
  std::string k = key;
  key_add(k, {get_num_threads()});
  return k;
}
}  // namespace

const Primitive* find(const std::string& key, bool* found) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.prims.find(keyed(key));
  *found = it != c.prims.end();
  return *found ? it->second.get() : nullptr;
}

const_dnnl_primitive_desc_t hint_pd(const std::string& key, const_dnnl_op_desc_t op_desc) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.hints.find(keyed(key));
  if (it != c.hints.end()) return it->second;
  dnnl_primitive_desc_t pd = nullptr;
  if (api().dnnl_primitive_desc_create(&pd, op_desc, nullptr, library().engine, nullptr) != dnnl_success) pd = nullptr;
  c.hints.emplace(keyed(key), pd);
  return pd;
}

const Primitive* refuse(const std::string& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.prims.emplace(keyed(key), nullptr);
  return nullptr;
}

const Primitive* build(const std::string& key, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_desc_t hint,
                       const_dnnl_primitive_attr_t attr, const std::vector<ArgSpec>& args) {
  const Api& a = api();
  const Library& lib = library();
  auto p = std::make_unique<Primitive>();
  bool ok = a.dnnl_primitive_desc_create(&p->pd_, op_desc, attr, lib.engine, hint) == dnnl_success;
  if (ok) {
    const char* impl = nullptr;
    ok = a.dnnl_primitive_desc_query(p->pd_, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         std::strncmp(impl, "ref", 3) != 0;
  }
  if (ok) ok = a.dnnl_primitive_create(&p->prim_, p->pd_) == dnnl_success;
  for (const ArgSpec& s : args) {
    if (!ok) break;
    Primitive::Arg g{s, s.md};
    const dnnl_memory_desc_t* inner = a.dnnl_primitive_desc_query_md(p->pd_, s.query, s.index);
    if (inner == nullptr || inner->ndims == 0) {
      ok = false;
      break;
    }
    g.inner = *inner;
    if (!a.dnnl_memory_desc_equal(&g.inner, &s.md)) {
      dnnl_primitive_desc_t rpd = nullptr;
      const dnnl_memory_desc_t* from = s.output ? &g.inner : &s.md;
      const dnnl_memory_desc_t* to = s.output ? &s.md : &g.inner;
      // A user-managed scratchpad for reorders too: a cached primitive runs on any thread, and
      // a library-managed scratchpad belongs to the thread that created it.
      Attr rattr;
      ok = a.dnnl_reorder_primitive_desc_create(&rpd, from, lib.engine, to, lib.engine, rattr.attr) == dnnl_success;
      if (ok) ok = a.dnnl_primitive_create(&g.reorder, rpd) == dnnl_success;
      if (ok) {
        const dnnl_memory_desc_t* sp = a.dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
        if (sp && sp->ndims > 0) {
          g.reorder_scratch = a.dnnl_memory_desc_get_size(sp);
          g.reorder_scratch_md = *sp;
        }
      }
      if (rpd) a.dnnl_primitive_desc_destroy(rpd);
      g.bytes = a.dnnl_memory_desc_get_size(&g.inner);
    }
    p->args_.push_back(g);
  }
  if (ok) {
    const dnnl_memory_desc_t* sp = a.dnnl_primitive_desc_query_md(p->pd_, dnnl_query_scratchpad_md, 0);
    p->scratch_ = sp ? a.dnnl_memory_desc_get_size(sp) : 0;
  }
  if (!ok) p.reset();
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto [it, fresh] = c.prims.emplace(keyed(key), std::move(p));
  return it->second.get();
}

void Primitive::run(const std::vector<void*>& ptrs, const char* what) const {
  const Api& a = api();
  const Library& lib = library();
  AG_INTERNAL_ASSERT(ptrs.size() == args_.size(), "{}: {} pointers for {} oneDNN arguments", what, ptrs.size(),
                     args_.size());
  std::vector<dnnl_memory_t> owned;
  auto memory = [&](const dnnl_memory_desc_t& md, void* ptr) {
    dnnl_memory_t m = nullptr;
    check(a.dnnl_memory_create(&m, &md, lib.engine, ptr), "dnnl_memory_create", what);
    owned.push_back(m);
    return m;
  };
  struct Cleanup {
    const Api& a;
    std::vector<dnnl_memory_t>& owned;
    ~Cleanup() {
      for (dnnl_memory_t m : owned) a.dnnl_memory_destroy(m);
    }
  } cleanup{a, owned};
  std::vector<dnnl_exec_arg_t> exec;
  std::vector<std::pair<size_t, dnnl_memory_t>> reorder_out;  // (arg, inner memory)
  auto reorder = [&](const Arg& g, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t r[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, nullptr}};
    int n = 2;
    if (g.reorder_scratch > 0) {
      r[2].memory = memory(g.reorder_scratch_md, aligned(scratch(kReorderScratchSlot, g.reorder_scratch)));
      n = 3;
    }
    check(a.dnnl_primitive_execute(g.reorder, lib.stream, n, r), "reorder", what);
  };
  for (size_t i = 0; i < args_.size(); ++i) {
    const Arg& g = args_[i];
    if (!g.reorder) {
      exec.push_back({g.spec.arg, memory(g.spec.md, ptrs[i])});
      continue;
    }
    dnnl_memory_t inner = memory(g.inner, aligned(scratch(1 + i, g.bytes)));
    if (!g.spec.output) {
      reorder(g, memory(g.spec.md, ptrs[i]), inner);
    } else {
      reorder_out.push_back({i, inner});
    }
    exec.push_back({g.spec.arg, inner});
  }
  if (scratch_ > 0) {
    const dnnl_memory_desc_t* sp = a.dnnl_primitive_desc_query_md(pd_, dnnl_query_scratchpad_md, 0);
    exec.push_back({DNNL_ARG_SCRATCHPAD, memory(*sp, aligned(scratch(0, scratch_)))});
  }
  check(a.dnnl_primitive_execute(prim_, lib.stream, static_cast<int>(exec.size()), exec.data()), "execute", what);
  for (auto& [i, inner] : reorder_out) {
    reorder(args_[i], inner, memory(args_[i].spec.md, ptrs[i]));
  }
  check(a.dnnl_stream_wait(lib.stream), "dnnl_stream_wait", what);
}

#endif

}  // namespace ampgrad::cpu::onednn
