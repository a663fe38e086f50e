// Trace: recording, and the table the demo and `explain` print.
#include <ampgrad/amp/trace.h>

#include <fmt/format.h>

namespace ampgrad::amp {

namespace {
std::string dtypes_str(const std::vector<DType>& ds) {
  std::string s;
  for (size_t i = 0; i < ds.size(); ++i) s += fmt::format("{}{}", i ? "," : "", traits(ds[i]).short_name);
  return s;
}
}  // namespace

std::string format_trace(const std::vector<OpRecord>& records) {
  std::string out = fmt::format("{:<3} {:<14} {:<11} {:<14} {:<7} {:<6} {:>5} {:>8} {:>10} {:>11}\n", "#", "op",
                                "category", "inputs", "chosen", "output", "casts", "read 16b", "cache hits",
                                "bytes cast");
  for (size_t i = 0; i < records.size(); ++i) {
    const OpRecord& r = records[i];
    out += fmt::format("{:<3} {:<14} {:<11} {:<14} {:<7} {:<6} {:>5} {:>8} {:>10} {:>11}\n", i + 1, r.op,
                       category_name(r.category), dtypes_str(r.input_dtypes),
                       r.chosen_dtype ? traits(*r.chosen_dtype).short_name : "-", traits(r.output_dtype).short_name,
                       r.casts, r.read_16bit, r.cache_hits, r.bytes_converted);
    if (!r.path.empty()) out += fmt::format("    {}\n", r.path);
  }
  return out;
}

}  // namespace ampgrad::amp
