// oneDNN, opened at run time, and a cache of its primitives (Note [oneDNN]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ampgrad/core/dtype.h>
#include <ampgrad/core/tensor.h>

#if AMPGRAD_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace ampgrad::cpu::onednn {

// Note [oneDNN]
// The fast CPU convolutions and bfloat16 GEMMs are oneDNN's (the library PyTorch's CPU path
// uses; its JIT kernels pick AVX-512, AVX512-BF16, or AMX where the CPU has it, at run time);
// float32 GEMMs are OpenBLAS's when it is there (Note [CPU BLAS] in cpu/blas.h), oneDNN's
// otherwise. Like OpenBLAS
// (Note [CPU BLAS] in cpu/blas.h) it is opened with dlopen on first use: libdnnl is 40 MB
// and pulls in OpenCL, and neither the library nor the binaries carried to another machine
// should require it. Headers are needed at build time only (Debian's libdnnl-dev, installed by
// scripts/setup.sh; without them AMPGRAD_WITH_ONEDNN is 0, and the convolutions and bfloat16
// GEMMs run their reference loops while float32 GEMMs still take OpenBLAS).
// AMPGRAD_NO_ONEDNN=1 in the environment does the same at run time.
//
// A primitive is built once per problem (op, shapes, strides, dtypes, parameters: the key),
// which costs tens of microseconds to milliseconds, and kept in a cache. oneDNN chooses each
// operand's layout ("any": its blocked formats are where its kernels are fastest); an operand
// whose chosen layout differs from the tensor's is reordered into a scratch buffer before the
// call (inputs) or out of one after it (outputs), by reorder primitives cached with it. A
// problem oneDNN cannot build (a dtype it lacks here, a shape its kernels refuse) is cached
// as such, and its kernel runs the reference loop. Keys include the team's thread count. An
// output laid out differently from its tensor is written whole from the scratch buffer, so a
// primitive that reads its output (a sum post-op: gemm's beta) takes the tensor's own layout
// (gemm passes plain descriptors, never "any").
bool available();
// Primitives built so far (refused problems not counted): the tests' proof that a case ran
// oneDNN.
size_t primitives_built();

#if AMPGRAD_WITH_ONEDNN

// The functions of libdnnl this library calls, resolved with dlsym.
#define AG_ONEDNN_FUNCTIONS(X)                                                                       \
  X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_memory_desc_init_by_strides)                    \
  X(dnnl_memory_desc_init_by_tag) X(dnnl_dilated_convolution_forward_desc_init)                      \
  X(dnnl_dilated_convolution_backward_data_desc_init) X(dnnl_dilated_convolution_backward_weights_desc_init) \
  X(dnnl_matmul_desc_init) X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_query_md)            \
  X(dnnl_primitive_desc_query) X(dnnl_primitive_create) X(dnnl_primitive_execute) X(dnnl_memory_create) \
  X(dnnl_memory_destroy) X(dnnl_reorder_primitive_desc_create) X(dnnl_primitive_attr_create)         \
  X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_scratchpad_mode)                          \
  X(dnnl_primitive_attr_set_fpmath_mode) X(dnnl_primitive_attr_set_output_scales)                    \
  X(dnnl_primitive_attr_set_post_ops) X(dnnl_post_ops_create) X(dnnl_post_ops_destroy)               \
  X(dnnl_post_ops_append_sum) X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size)                 \
  X(dnnl_primitive_desc_destroy) X(dnnl_primitive_destroy) X(dnnl_stream_wait)

struct Api {
#define AG_ONEDNN_MEMBER(f) decltype(&::f) f = nullptr;
  AG_ONEDNN_FUNCTIONS(AG_ONEDNN_MEMBER)
#undef AG_ONEDNN_MEMBER
};
// The opened library's functions (call only after available()).
const Api& api();

// oneDNN's data type for an ampgrad dtype (dnnl_data_type_undef for one it lacks).
dnnl_data_type_t data_type(DType d);
// A plain memory descriptor of `dims` with `strides` (elements) and dtype d.
dnnl_memory_desc_t plain_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, DType d);
// A descriptor of the same dims and dtype, layout left to the primitive (format "any").
dnnl_memory_desc_t any_md(const std::vector<int64_t>& dims, DType d);

// A primitive's attributes: a user-managed scratchpad, float32 kept float32 (no implicit
// down-conversion), out = alpha * result (+ beta * out, a sum post-op, when beta != 0).
struct Attr {
  explicit Attr(float alpha = 1.0f, float beta = 0.0f);
  ~Attr();
  Attr(const Attr&) = delete;
  Attr& operator=(const Attr&) = delete;
  dnnl_primitive_attr_t attr = nullptr;
};

// One argument of a primitive: its oneDNN argument index (DNNL_ARG_SRC ...), the tensor's own
// descriptor and whether the primitive writes it.
struct ArgSpec {
  int arg;
  dnnl_memory_desc_t md;
  bool output;
  // The query of the descriptor the primitive expects (dnnl_query_src_md ...) and its index
  // (1 for a bias: dnnl_query_weights_md, 1).
  dnnl_query_t query;
  int index = 0;
};

// A built primitive with the reorders its arguments need.
class Primitive {
 public:
  Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;
  ~Primitive();
  // Runs it on the tensors' pointers (one per ArgSpec, in order). `what` names the op in errors.
  void run(const std::vector<void*>& ptrs, const char* what) const;

 private:
  friend const Primitive* build(const std::string&, const_dnnl_op_desc_t, const_dnnl_primitive_desc_t,
                                const_dnnl_primitive_attr_t, const std::vector<ArgSpec>&);
  struct Arg {
    ArgSpec spec;
    dnnl_memory_desc_t inner;  // the primitive's layout
    dnnl_primitive_t reorder = nullptr;  // user -> inner (inputs) or inner -> user (outputs)
    size_t bytes = 0;  // inner's size when reordered
    size_t reorder_scratch = 0;  // the reorder's scratchpad, user-managed
    dnnl_memory_desc_t reorder_scratch_md{};
  };
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t prim_ = nullptr;
  std::vector<Arg> args_;
  size_t scratch_ = 0;
};

// Caches `key` as a problem oneDNN cannot do (its kernel runs the reference from now on).
const Primitive* refuse(const std::string& key);
// The cached primitive of `key`, built on first use from op_desc (hint: the forward primitive
// descriptor a backward one needs, or null) with user-managed scratchpad; null when oneDNN
// cannot build it or offers only its reference implementation, slower than ours ("ref:...").
const Primitive* build(const std::string& key, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_desc_t hint,
                       const_dnnl_primitive_attr_t attr, const std::vector<ArgSpec>& args);
// The cached primitive of `key`, or null with *found false when there is none yet.
const Primitive* find(const std::string& key, bool* found);
// A primitive descriptor for op_desc (a backward's hint), owned by the cache under `key`.
const_dnnl_primitive_desc_t hint_pd(const std::string& key, const_dnnl_op_desc_t op_desc);

// Appends values to a cache key.
void key_add(std::string& key, std::initializer_list<int64_t> values);
void key_add(std::string& key, const std::vector<int64_t>& values);
void key_add(std::string& key, const Tensor& t);  // dtype, sizes, strides

#endif

}  // namespace ampgrad::cpu::onednn
