// Ports: free-port discovery by binding port 0.
#include "launcher/workers/ports.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace cpptorchrun::launcher {
namespace {

// Binds a TCP socket at host:port with SO_REUSEADDR and listens (or, to
// `hold` it, does not listen); returns the fd and the port bound, or an
// error. SO_REUSEADDR as every listener of ours (the rendezvous' acceptor,
// gRPC's and the HTTP server's) binds: a port whose last connections are
// in TIME_WAIT is free to them, and so it is here.
absl::StatusOr<int> BindAt(const std::string& host, int port, int* bound_port, bool hold = false) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (host.empty()) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(port);
    len = sizeof(*a);
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
    }
    std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
    len = res->ai_addrlen;
    freeaddrinfo(res);
    if (addr.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(port);
    } else {
      reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(port);
    }
  }
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || (!hold && listen(fd, 1) != 0)) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("bind ", host, ":", port, ": ", strerror(err)));
  }
  sockaddr_storage got{};
  socklen_t got_len = sizeof(got);
  getsockname(fd, reinterpret_cast<sockaddr*>(&got), &got_len);
  *bound_port = got.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&got)->sin_port)
                                         : ntohs(reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  return fd;
}

class RealPortFinder final : public PortFinder {
 public:
  ~RealPortFinder() override { ReleaseHeld(); }
  absl::StatusOr<int> FindFreePort(const std::string& host) override {
    int port = 0;
    auto fd = BindAt(host, 0, &port, /*hold=*/true);
    if (!fd.ok()) return fd.status();
    absl::MutexLock lock(&mu_);
    held_.push_back(*fd);
    return port;
  }
  void ReleaseHeld() override {
    absl::MutexLock lock(&mu_);
    for (int fd : held_) close(fd);
    held_.clear();
  }

 private:
  absl::Mutex mu_;
  std::vector<int> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<PortFinder> NewRealPortFinder() { return std::make_unique<RealPortFinder>(); }

bool PortIsFree(const std::string& host, int port) {
  int bound = 0;
  auto fd = BindAt(host, port, &bound);
  if (!fd.ok()) return false;
  close(*fd);
  return true;
}

}  // namespace cpptorchrun::launcher
