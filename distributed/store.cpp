// Rendezvous over TCP for the process group (Note [Rendezvous]).
#include <ampgrad/distributed/store.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include <ampgrad/core/error.h>

namespace ampgrad::distributed {

// Note [Rendezvous]
// NCCL needs every rank to hold the same ncclUniqueId, which rank 0 creates. As in
// PyTorch's env:// init, rank 0 listens on MASTER_PORT; every other rank connects (retrying
// until the timeout, since rank 0 may start later), sends its rank as 4 bytes, and waits.
// Once all world_size - 1 ranks are in, rank 0 sends each of them the payload, length first.
// So no rank leaves before all arrived, and a rank that never shows up is named in the
// timeout error instead of hanging NCCL. Multi-node: MASTER_ADDR is resolved with
// getaddrinfo and rank 0 listens on all interfaces.

namespace {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

void send_all(int fd, const void* data, size_t n, const char* what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    AG_CHECK(w > 0, "distributed: sending {} failed: {}", what, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const char* what) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    AG_CHECK(wait_for(fd, POLLIN, deadline), "distributed: timed out waiting for {}", what);
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    AG_CHECK(r > 0, "distributed: receiving {} failed: {}", what, r == 0 ? "connection closed" : std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

std::vector<uint8_t> serve(const Options& o, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
  Socket listener(::socket(AF_INET6, SOCK_STREAM, 0));
  const bool v6 = listener.fd() >= 0;
  if (!v6) listener = Socket(::socket(AF_INET, SOCK_STREAM, 0));
  AG_CHECK(listener.fd() >= 0, "distributed: rank 0 cannot create a socket: {}", std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc = 0;
  if (v6) {
    ::setsockopt(listener.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 peers too
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(o.master_port));
    rc = ::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(o.master_port));
    rc = ::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  AG_CHECK(rc == 0, "distributed: rank 0 cannot listen on port {} (MASTER_PORT): {}", o.master_port,
           std::strerror(errno));
  AG_CHECK(::listen(listener.fd(), o.world_size) == 0, "distributed: listen on port {} failed: {}", o.master_port,
           std::strerror(errno));
  std::vector<Socket> peers;
  std::set<int> missing;
  for (int r = 1; r < o.world_size; ++r) missing.insert(r);
  while (!missing.empty()) {
    if (!wait_for(listener.fd(), POLLIN, deadline)) {
      std::string names;
      for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
      AG_CHECK(false, "distributed: rank 0 timed out after {} s waiting on port {} for rank(s) {}",
               o.timeout.count(), o.master_port, names);
    }
    Socket peer(::accept(listener.fd(), nullptr, nullptr));
    if (peer.fd() < 0) continue;
    // A connection that is not a waiting rank (a port scan, a stray client) is dropped.
    int32_t rank = -1;
    try {
      recv_all(peer.fd(), &rank, sizeof(rank), std::min(deadline, Clock::now() + std::chrono::seconds(5)),
               "a peer's rank");
    } catch (const Error&) {
      continue;
    }
    if (missing.erase(rank) != 1) continue;
    peers.push_back(std::move(peer));
  }
  const uint64_t n = payload.size();
  for (Socket& p : peers) {
    send_all(p.fd(), &n, sizeof(n), "the payload size");
    send_all(p.fd(), payload.data(), payload.size(), "the payload");
  }
  return payload;
}

std::vector<uint8_t> join(const Options& o, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(o.master_port);
  Socket s;
  std::string last_error = "no attempt";
  while (s.fd() < 0) {
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(o.master_addr.c_str(), port.c_str(), &hints, &res);
    if (gai != 0) {
      last_error = ::gai_strerror(gai);
    } else {
      for (addrinfo* a = res; a && s.fd() < 0; a = a->ai_next) {
        Socket c(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
        if (c.fd() < 0) continue;
        // connect() honours the send timeout: an unreachable address fails within the deadline.
        const int ms = std::max(1, std::min(ms_left(deadline), 5000));
        timeval tv{ms / 1000, (ms % 1000) * 1000};
        ::setsockopt(c.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (::connect(c.fd(), a->ai_addr, a->ai_addrlen) == 0) {
          s = std::move(c);
        } else {
          last_error = std::strerror(errno);
        }
      }
      ::freeaddrinfo(res);
    }
    if (s.fd() >= 0) break;
    AG_CHECK(Clock::now() < deadline, "distributed: rank {} could not reach rank 0 at {}:{} within {} s ({})", o.rank,
             o.master_addr, o.master_port, o.timeout.count(), last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not listen yet
  }
  const int one = 1;
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int32_t rank = o.rank;
  send_all(s.fd(), &rank, sizeof(rank), "this rank");
  uint64_t n = 0;
  recv_all(s.fd(), &n, sizeof(n), deadline, "the payload size from rank 0");
  AG_CHECK(n < (1u << 20), "distributed: rank 0 announced a payload of {} bytes", n);
  std::vector<uint8_t> payload(n);
  recv_all(s.fd(), payload.data(), n, deadline, "the payload from rank 0");
  return payload;
}

int env_int(const char* name, std::optional<int> fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    AG_CHECK(fallback.has_value(), "distributed: environment variable {} is not set (launch with ampgrad-run -n N)",
             name);
    return *fallback;
  }
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  AG_CHECK(end && *end == '\0' && x >= 0 && x <= 1 << 20, "distributed: {}='{}' is not a non-negative integer", name,
           v);
  return static_cast<int>(x);
}

}  // namespace

Options options_from_env() {
  Options o;
  o.rank = env_int("RANK", std::nullopt);
  o.world_size = env_int("WORLD_SIZE", std::nullopt);
  o.local_rank = env_int("LOCAL_RANK", o.rank);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", 29500);
  AG_CHECK(o.world_size >= 1 && o.rank < o.world_size, "distributed: RANK {} is not below WORLD_SIZE {}", o.rank,
           o.world_size);
  AG_CHECK(o.master_port > 0 && o.master_port < 65536, "distributed: MASTER_PORT {} is not a port", o.master_port);
  return o;
}

std::vector<uint8_t> broadcast_from_root(const Options& o, const std::vector<uint8_t>& payload) {
  AG_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "distributed: rank {} of world size {}", o.rank,
           o.world_size);
  if (o.world_size == 1) return payload;
  const auto deadline = Clock::now() + o.timeout;
  return o.rank == 0 ? serve(o, payload, deadline) : join(o, deadline);
}

}  // namespace ampgrad::distributed
