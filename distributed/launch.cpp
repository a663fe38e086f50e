// One process per GPU on this host (distributed/launch.h).
#include "distributed/launch.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.h"

namespace ampgrad::distributed {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  AG_CHECK(fd >= 0, "distributed: cannot create a socket: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  AG_CHECK(ok, "distributed: cannot find a free port: {}", std::strerror(errno));
  return ntohs(addr.sin_port);
}

int launch_local(int n, const std::vector<std::string>& argv) {
  AG_CHECK(n >= 1, "ampgrad-run: -n must be at least 1, got {}", n);
  AG_CHECK(!argv.empty(), "ampgrad-run: no command to run");
  const char* inherited = std::getenv("MASTER_PORT");
  const std::string port = inherited && *inherited ? inherited : std::to_string(free_port());
  std::fflush(nullptr);
  std::map<pid_t, int> ranks;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    AG_CHECK(pid >= 0, "ampgrad-run: fork failed: {}", std::strerror(errno));
    if (pid == 0) {
      const std::string rank = std::to_string(r), world = std::to_string(n);
      ::setenv("RANK", rank.c_str(), 1);
      ::setenv("LOCAL_RANK", rank.c_str(), 1);
      ::setenv("WORLD_SIZE", world.c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "ampgrad-run: rank %d: cannot run %s: %s\n", r, args[0], std::strerror(errno));
      ::_exit(127);
    }
    ranks[pid] = r;
  }
  int result = 0;
  while (!ranks.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = ranks.find(pid);
    if (it == ranks.end()) continue;
    const int rank = it->second;
    ranks.erase(it);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (code != 0 && result == 0) {
      result = code;
      std::fprintf(stderr, "ampgrad-run: rank %d exited with status %d; stopping the other ranks\n", rank, code);
      for (auto& [other, r] : ranks) ::kill(other, SIGTERM);
    }
  }
  return result;
}

}  // namespace ampgrad::distributed
