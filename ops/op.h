// The op record: every op declares itself once, with its name, autocast category and
// whether it is differentiable; the registry of records feeds amp::op_table() and the
// tests that walk every op (Note [Op registry]).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <ampgrad/amp/category.h>

namespace ampgrad {

// Note [Op registry]
// Each op's .cpp defines one `const OpInfo kFoo{...}` next to the op's function, its checks
// and its backward formula. The constructor adds the record to the registry at load time,
// so the op table cannot miss an op, and an op cannot exist without an autocast category.
// The library is shared so that every record is linked in.
struct OpInfo {
  std::string_view name;
  amp::Category category;
  bool differentiable;
  // For ops that exist only as views or as other ops' helpers: shown in the table, but
  // exempt from the per-op test cases. Empty otherwise.
  std::string_view reason;  // one line: why this category (range, accumulation, tensor cores)
  std::string_view alternative;  // for banned ops: what to use instead
  // fp32 ops whose kernels read float16/bfloat16 as they are and compute in float32: autocast
  // passes such inputs uncast and the op returns float32 (Note [Reading 16-bit inputs] in
  // ops/softmax.cpp).
  bool reads_16bit = false;
  // Ops that only move or convert values (to, copy_, clone, views): the only ones a float8
  // tensor may enter; any other op refuses one (Note [Float8 tensors] in core/dtype.h).
  bool moves_float8 = false;
  // Set when another record already has this name (a program's op named like a built-in
  // one): calling the op then raises an error, as a registration cannot throw.
  bool duplicate = false;

  OpInfo(std::string_view name, amp::Category category, bool differentiable, std::string_view reason,
         std::string_view alternative = {}, bool reads_16bit = false, bool moves_float8 = false);
  OpInfo(const OpInfo&) = delete;
  OpInfo& operator=(const OpInfo&) = delete;
};

// For OpInfo's last argument: `OpInfo kView{"view", ..., {}, false, kMovesFloat8}`.
inline constexpr bool kMovesFloat8 = true;

const std::vector<const OpInfo*>& op_registry();
const OpInfo* find_op(std::string_view name);
// Loads a shared library of ops (a program's own, Note [Defining an op] in ops/define_op.h):
// its records and kernel registrations run as it loads, so the registry, autocast and
// `ampgrad ops --load` see its ops. As torch.ops.load_library. Throws if it cannot load.
void load_op_library(const std::string& path);

}  // namespace ampgrad
