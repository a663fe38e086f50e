// The speed-ups of the reference path: their switches and counters (Note [Speed-ups]).
#pragma once

#include <cstdint>

namespace ampgrad::speedups {

// Note [Speed-ups]
// The reference path (ops, the backward engine, autocast, the scaler, the optimizers) reads as
// the algorithms it implements. Its seams let a speed-up answer a question whose plain answer is
// "no"; this folder holds the answers to two of them, registered while the library loads, and
// no file of the reference path names it:
//  - the backward context (Note [Backward context] in autograd/backward_context.h), answered by
//    speedups/backward.cpp (Note [Backward speed-ups]): a formula adds its input gradient into
//    the engine's running sum in its own kernel, writes the 16-bit rounding the node below would
//    cast, and backward()'s seed of ones is kept from step to step;
//  - cast reuse (Note [Cast reuse] in amp/cast_reuse.h), answered by speedups/casts.cpp (Note
//    [Cast speed-ups]): a parameter's 16-bit working copy is kept across autocast regions and
//    written by the optimizer's kernel; a fused fp32 op writes its output's 16-bit cast in the
//    same pass;
// A third seam is the optimizer step's launch (Note [One-launch scaled step] in
// core/fused_kernels.h), where the scaler's check and update may ride: a program asks for it
// explicitly with GradScaler::step_and_update (amp/grad_scaler.h), so it needs no switch here.
// What each buys, measured, is in its Note and in docs/benchmarks.md. Each has a switch; off,
// the library runs the plain path, and the tests check that both give the same values, bit for
// bit. AMPGRAD_SPEEDUPS=0 in the environment turns them all off at start.

// The backward context's answers (speedups/backward.cpp). On by default.
void set_backward_speedups(bool on);
bool backward_speedups();

// Parameters' 16-bit working copies kept across autocast regions (speedups/casts.cpp). On by
// default; off also drops the kept copies.
void set_working_copies(bool on);
bool working_copies();

// Fused fp32 ops' ready casts (speedups/casts.cpp). On by default.
void set_ready_casts(bool on);
bool ready_casts();

// All three at once.
void set_all(bool on);

// This thread's counts since it started, for tests and `ampgrad explain`.
struct Stats {
  int64_t running_sums = 0;      // gradients a formula added into the engine's sum itself
  int64_t roundings_taken = 0;   // casts of a gradient served by a formula's own rounding
  int64_t seeds_reused = 0;      // backward() seeds of ones kept from an earlier backward
  int64_t working_copy_hits = 0;  // autocast casts of a parameter served by its working copy
  int64_t ready_cast_hits = 0;    // autocast casts of an op's output served by its ready cast
};
Stats stats();

// How many working copies are kept now, and dropping them (they are made again as needed).
int64_t working_copy_count();
void clear_working_copies();

}  // namespace ampgrad::speedups
