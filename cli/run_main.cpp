// `ampgrad-run -n N <command> [args...]`: one process per GPU on this host, with RANK,
// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (distributed/launch.h).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ampgrad/core/error.h>
#include <ampgrad/distributed/launch.h>

int main(int argc, char** argv) {
  const char* usage =
      "usage: ampgrad-run -n N <command> [args...]\n"
      "  runs N copies of the command on this host, one per GPU, with RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "  MASTER_ADDR and MASTER_PORT set; if one fails, the others are stopped.\n"
      "  example: ampgrad-run -n 2 ampgrad train --gpus 2\n";
  int n = -1, i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if ((a == "-n" || a == "--nproc") && i + 1 < argc) {
      char* end = nullptr;
      n = static_cast<int>(std::strtol(argv[++i], &end, 10));
      if (!end || *end) n = -1;
      continue;
    }
    if (a == "--") ++i;
    break;
  }
  if (n < 1 || i >= argc) {
    std::fputs(usage, stderr);
    return 2;
  }
  try {
    return ampgrad::distributed::launch_local(n, std::vector<std::string>(argv + i, argv + argc));
  } catch (const ampgrad::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
