// Rendezvous over TCP: rank 0 hands a small payload (NCCL's unique id) to every other rank,
// which connect to MASTER_ADDR:MASTER_PORT (Note [Rendezvous]).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ampgrad::distributed {

// How this process finds its peers: PyTorch's env:// convention.
struct Options {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::seconds timeout{300};
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK (default: RANK), MASTER_ADDR (default 127.0.0.1) and
// MASTER_PORT (default 29500); a missing or malformed RANK or WORLD_SIZE is an ag::Error
// naming the variable.
Options options_from_env();

// Rank 0 sends `payload` to ranks 1..world_size-1 and returns it; the others return what they
// received. Every rank also learns that all ranks arrived (rank 0 answers only then), so
// this is a barrier as well. Throws ag::Error on timeout, naming the address and the ranks
// still missing.
std::vector<uint8_t> broadcast_from_root(const Options& o, const std::vector<uint8_t>& payload);

}  // namespace ampgrad::distributed
