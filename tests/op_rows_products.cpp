// The op table's rows of the ternary elementwise ops, the products and the writes by index
// (Note [Op table] in op_table.h).
#include "op_rows.h"

namespace op_table {

std::vector<Row> product_rows() {
  return {
      // ---- Ternary elementwise (core/elementwise_kinds.def) ----------------------------------
      row("addcmul", "value 0.5, broadcast", {nrm({3, N}), nrm({N}), nrm({3, 1})},
          [](const V& v) { return ag::addcmul(v[0], v[1], v[2], 0.5); }),
      row("addcmul", "of a transpose", {nrm({N, 3}), nrm({3, N}), nrm({3, N})},
          [](const V& v) { return ag::addcmul(v[0].t(), v[1], v[2]); }),
      row("addcdiv", "value -2", {nrm({3, N}), nrm({3, N}), nz({3, N})}, [](const V& v) { return ag::addcdiv(v[0], v[1], v[2], -2); }),
      row("lerp", "tensor weight", {nrm({3, N}), nrm({3, N}), uni({3, N}, -0.2, 1.2)},
          [](const V& v) { return ag::lerp(v[0], v[1], v[2]); }),
      row("lerp", "scalar weight 0.7, broadcast end", {nrm({3, N}), nrm({N})}, [](const V& v) { return ag::lerp(v[0], v[1], 0.7); }),

      // ---- Products composed of matmul --------------------------------------------------------
      sum_row("dot", "", {nrm({N}), nrm({N})}, [](const V& v) { return ag::dot(v[0], v[1]); }),
      sum_row("vdot", "strided", {nrm({N, 2}), nrm({N})}, [](const V& v) { return ag::vdot(ag::select(v[0], 1, 0), v[1]); }),
      sum_row("tensordot", "dims 2", {nrm({2, 3, N}), nrm({3, N, 4})}, [](const V& v) { return ag::tensordot(v[0], v[1], 2); }),
      sum_row("tensordot", "dims lists {0, 2} x {1, 0}", {nrm({N, 3, 4}), nrm({4, N, 5})},
              [](const V& v) { return ag::tensordot(v[0], v[1], {0, 2}, {1, 0}); }),
      // Each output sums in1 x in2 = 12 (6) products whatever n is, and Tol::sum's bound grows
      // with n: at n = 1 it is 8 float32 ulps, which one seed exceeded on the H200 (1.61e-6
      // against 1.42e-6 at -0.97); three times that covers 12 roundings of terms near 1.
      sum_row("bilinear", "bias", {nrm({N, 3}), nrm({N, 4}), nrm({5, 3, 4}), nrm({5})},
              [](const V& v) { return ag::bilinear(v[0], v[1], v[2], v[3]); })
          .tolerance(Tol::sum, 3),
      sum_row("bilinear", "batch dims, no bias", {nrm({2, N, 3}), nrm({2, N, 2}), nrm({4, 3, 2})},
              [](const V& v) { return ag::bilinear(v[0], v[1], v[2]); })
          .tolerance(Tol::sum, 3),
      row("cross", "dim -1", {nrm({N, 3}), nrm({N, 3})}, [](const V& v) { return ag::cross(v[0], v[1], -1); }),
      // vecdot takes one dtype, as PyTorch's (the autocast check's mixed row brings 16 bits in).
      sum_row("linalg_vecdot", "dim -1, broadcast", {nrm({3, N}), nrm({N})},
              [](const V& v) { return ag::linalg::vecdot(v[0], v[1].to(v[0].dtype())); }),
      sum_row("linalg_vecdot", "dim 0", {nrm({N, 3}), nrm({N, 1})},
              [](const V& v) { return ag::linalg::vecdot(v[0], v[1].to(v[0].dtype()), 0); }),
      row("cross", "first dim of size 3, broadcast", {nrm({3, N}), nrm({3, 1})}, [](const V& v) { return ag::cross(v[0], v[1]); }),

      // ---- Writes by index ----------------------------------------------------------------
      // Repeated indices: CUDA's atomic adds land in any order, each rounded in 16 bits, so up
      // to 7 adds onto one row differ from the CPU's in-order ones by a few ulps (the
      // elementwise bound failed by 2-5 bf16/fp16 ulps for about one seed in three on the H200).
      row("index_add", "dim 0, repeated indices, alpha 2", {nrm({5, N}), In{{7}, indices(5)}, nrm({7, N})},
          [](const V& v) { return ag::index_add(v[0], 0, v[1], v[2], 2); })
          .tolerance(Tol::elementwise, 4),
      row("index_add", "dim 1", {nrm({3, N}), In{{2}, distinct(N)}, nrm({3, 2})},
          [](const V& v) { return ag::index_add(v[0], 1, v[1], v[2]); })
          .at_sizes({2, 7, 1023}, 4),
      // index_copy takes one dtype (no autocast action, as PyTorch 2.11's): the source is cast
      // to the input's first, which the autocast check's 16-bit source needs.
      row("index_copy", "dim 0", {nrm({5, N}), In{{3}, distinct(5)}, nrm({3, N})},
          [](const V& v) { return ag::index_copy(v[0], 0, v[1], v[2].to(v[0].dtype())); }),
      row("index_copy", "dim 1 of a transpose", {nrm({N, 4}), In{{2}, distinct(N)}, nrm({4, 2})},
          [](const V& v) { return ag::index_copy(v[0].t(), 1, v[1], v[2].to(v[0].dtype())); })
          .at_sizes({2, 7, 1023}, 4),
      row("gather", "dim 1", {nrm({3, N}), In{{3, 5}, indices(N)}}, [](const V& v) { return ag::gather(v[0], 1, v[1]); }),
      row("gather", "dim 0, smaller index", {nrm({4, N}), In{{6, 2}, indices(4)}}, [](const V& v) { return ag::gather(v[0], 0, v[1]); })
          .at_sizes({2, 7, 1023}, 4),
      row("scatter_add", "dim 1, repeated targets", {nrm({3, N}), In{{3, 6}, indices(N)}, nrm({3, 6})},
          [](const V& v) { return ag::scatter_add(v[0], 1, v[1], v[2]); }),
      row("scatter_add", "dim 0, src larger than index", {nrm({4, N}), In{{5, 2}, indices(4)}, nrm({6, 3})},
          [](const V& v) { return ag::scatter_add(v[0], 0, v[1], v[2]); })
          .at_sizes({3, 7, 1023}, 4),
      row("index_put", "two leading dims, values broadcast", {nrm({4, N, 3}), In{{3}, distinct(4)}, In{{3}, distinct(N)}, nrm({3})},
          [](const V& v) { return ag::index_put(v[0], {v[1], v[2]}, v[3]); })
          .at_sizes({3, 7, 100}, 4),
      row("index_put", "accumulate, repeated rows", {nrm({5, N}), In{{6}, indices(5)}, nrm({6, N})},
          [](const V& v) { return ag::index_put(v[0], {v[1]}, v[2], true); }),

      // ---- prelu (#22) ---------------------------------------------------------------------
      row("prelu", "one weight", {kinked({3, N}, {0}), uni({1}, 0.1, 0.4)}, [](const V& v) { return ag::prelu(v[0], v[1]); }),
      row("prelu", "a weight per channel of images", {kinked({2, 3, N, 2}, {0}), uni({3}, 0.1, 0.4)},
          [](const V& v) { return ag::prelu(v[0], v[1]); }),
      // ---- The matmul family (ops/matmul_family.cpp) -------------------------------------
      sum_row("mv", "", {nrm({N, 3}), nrm({3})}, [](const V& v) { return ag::mv(v[0], v[1]); }),
      sum_row("mv", "transposed matrix", {nrm({3, N}), nrm({3})}, [](const V& v) { return ag::mv(v[0].t(), v[1]); }),
      sum_row("addmv", "beta 0.5, alpha 2", {nrm({N}), nrm({N, 3}), nrm({3})},
              [](const V& v) { return ag::addmv(v[0], v[1], v[2], 0.5, 2); }),
      sum_row("addmv", "broadcast input", {nrm({1}), nrm({N, 3}), nrm({3})}, [](const V& v) { return ag::addmv(v[0], v[1], v[2]); }),
      sum_row("addr", "beta 2, alpha -1", {nrm({N, 4}), nrm({N}), nrm({4})}, [](const V& v) { return ag::addr(v[0], v[1], v[2], 2, -1); }),
      sum_row("baddbmm", "beta 0.5, alpha 1.5", {nrm({2, N, 4}), nrm({2, N, 3}), nrm({2, 3, 4})},
              [](const V& v) { return ag::baddbmm(v[0], v[1], v[2], 0.5, 1.5); }),
      sum_row("baddbmm", "broadcast input, transposed batch", {nrm({4}), nrm({2, 3, N}), nrm({2, 3, 4})},
              [](const V& v) { return ag::baddbmm(v[0], v[1].transpose(1, 2), v[2]); }),
      sum_row("addbmm", "beta 2", {nrm({N, 4}), nrm({3, N, 5}), nrm({3, 5, 4})}, [](const V& v) { return ag::addbmm(v[0], v[1], v[2], 2); }),
      sum_row("multi_dot", "1-D ends", {nrm({N}), nrm({N, 3}), nrm({3, 5}), nrm({5})},
              [](const V& v) { return ag::multi_dot({v[0], v[1], v[2], v[3]}); })
              .tolerance(Tol::chain),
      sum_row("multi_dot", "four matrices", {nrm({2, N}), nrm({N, 3}), nrm({3, 6}), nrm({6, 2})},
              [](const V& v) { return ag::multi_dot({v[0], v[1], v[2], v[3]}); })
              .tolerance(Tol::chain),
      sum_row("chain_matmul", "three matrices", {nrm({N, 2}), nrm({2, 5}), nrm({5, 3})},
              [](const V& v) { return ag::chain_matmul({v[0], v[1], v[2]}); })
              .tolerance(Tol::chain),
  };
}

}  // namespace op_table
