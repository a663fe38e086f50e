// Starting one process per GPU on this host (`ampgrad-run -n N`, `ampgrad train --gpus N`).
#pragma once

#include <string>
#include <vector>

namespace ampgrad::distributed {

// A TCP port that was free a moment ago (the kernel's pick for port 0).
int free_port();

// Runs argv as n processes with RANK = LOCAL_RANK = 0..n-1, WORLD_SIZE = n, MASTER_ADDR =
// 127.0.0.1 and MASTER_PORT (inherited when set, else free_port()) and waits for all. When
// one fails, the others get SIGTERM: a dead rank must not leave the rest waiting in NCCL.
// Returns 0, or the first failure's exit status (128 + signal number for a signal).
int launch_local(int n, const std::vector<std::string>& argv);

}  // namespace ampgrad::distributed
