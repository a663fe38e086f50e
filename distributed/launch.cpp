// One process per GPU on this host (distributed/launch.h).
#include <ampgrad/distributed/launch.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include <ampgrad/core/error.h>

extern char** environ;

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

namespace {

volatile sig_atomic_t g_signal = 0;
void remember_signal(int sig) { g_signal = sig; }

bool is_rank_variable(const char* entry) {
  for (const char* v : {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="})
    if (std::strncmp(entry, v, std::strlen(v)) == 0) return true;
  return false;
}

}  // namespace

// Each rank is its own process group (setpgid), so that stopping it also stops what it
// started (a shell's children), and dies with the launcher (PR_SET_PDEATHSIG): a killed
// launcher must not leave ranks holding GPUs or waiting in NCCL. SIGINT and SIGTERM to the
// launcher are passed on to every rank; ranks still alive 10 s after being stopped get SIGKILL.
int launch_local(int n, const std::vector<std::string>& argv) {
  AG_CHECK(n >= 1, "ampgrad-run: -n must be at least 1, got {}", n);
  AG_CHECK(!argv.empty(), "ampgrad-run: no command to run");
  const char* inherited = std::getenv("MASTER_PORT");
  const std::string port = inherited && *inherited ? inherited : std::to_string(free_port());
  // Everything the children need is built before fork: after it they only exec.
  std::vector<std::vector<std::string>> envs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::vector<std::string>& e = envs[static_cast<size_t>(r)];
    for (char** v = environ; *v; ++v)
      if (!is_rank_variable(*v)) e.emplace_back(*v);
    e.push_back("RANK=" + std::to_string(r));
    e.push_back("LOCAL_RANK=" + std::to_string(r));
    e.push_back("WORLD_SIZE=" + std::to_string(n));
    e.push_back("MASTER_ADDR=127.0.0.1");
    e.push_back("MASTER_PORT=" + port);
  }
  std::vector<std::vector<char*>> envps(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (std::string& v : envs[static_cast<size_t>(r)]) envps[static_cast<size_t>(r)].push_back(v.data());
    envps[static_cast<size_t>(r)].push_back(nullptr);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string exec_error = "ampgrad-run: cannot run " + argv[0] + "\n";

  struct sigaction forward {}, old_int{}, old_term{}, old_chld{}, dfl{};
  forward.sa_handler = remember_signal;  // no SA_RESTART: waitpid returns EINTR
  sigemptyset(&forward.sa_mask);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  g_signal = 0;
  ::sigaction(SIGINT, &forward, &old_int);
  ::sigaction(SIGTERM, &forward, &old_term);
  ::sigaction(SIGCHLD, &dfl, &old_chld);  // an inherited SIG_IGN would make waitpid fail
  auto restore = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    ::sigaction(SIGCHLD, &old_chld, nullptr);
  };
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  std::map<pid_t, int> ranks;
  auto signal_all = [&](int sig) {
    for (auto& [pid, r] : ranks) ::kill(-pid, sig);
  };
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      signal_all(SIGKILL);
      for (auto& [p, rr] : ranks) ::waitpid(p, nullptr, 0);
      restore();
      AG_CHECK(false, "ampgrad-run: fork failed: {}", std::strerror(err));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);  // the launcher died before prctl took effect
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      ::execvpe(args[0], args.data(), envps[static_cast<size_t>(r)].data());
      (void)!::write(2, exec_error.data(), exec_error.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here: whichever runs first
    ranks[pid] = r;
  }
  int result = 0;
  bool stopping = false;
  auto deadline = std::chrono::steady_clock::now();
  auto stop = [&](int sig) {
    if (stopping) return;
    stopping = true;
    signal_all(sig);
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  };
  while (!ranks.empty()) {
    if (g_signal != 0) {
      const int sig = g_signal;
      g_signal = 0;
      if (result == 0) result = 128 + sig;
      signal_all(sig);
      stop(SIGTERM);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      if (stopping && std::chrono::steady_clock::now() > deadline) signal_all(SIGKILL);
      if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) break;
    auto it = ranks.find(pid);
    if (it == ranks.end()) continue;
    const int rank = it->second;
    ranks.erase(it);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (code != 0 && result == 0) {
      result = code;
      std::fprintf(stderr, "ampgrad-run: rank %d exited with status %d; stopping the other ranks\n", rank, code);
      stop(SIGTERM);
    }
  }
  restore();
  return result;
}

}  // namespace ampgrad::distributed
