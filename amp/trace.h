// amp::Trace: records every op run in its scope, with what autocast did to it.
#pragma once

#include <string>
#include <vector>

#include <ampgrad/amp/autocast.h>

namespace ampgrad::amp {

// RAII. While alive, each outermost op call on this thread appends an OpRecord. Traces
// nest: the inner one records, the outer one resumes when the inner ends.
class Trace {
 public:
  Trace();
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;
  const std::vector<OpRecord>& records() const { return records_; }

 private:
  friend class TraceWriter;  // amp/autocast.cpp
  std::vector<OpRecord> records_;
  Trace* prev_;
};

// A fixed-width table: one line per op with category, dtypes in and out, casts and cache hits.
std::string format_trace(const std::vector<OpRecord>& records);

}  // namespace ampgrad::amp
