#include "rendezvous/acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::rdzv {

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Start(const std::string& host, int port,
                                                          std::function<void(int fd)> serve) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  const socklen_t len = res->ai_addrlen;
  freeaddrinfo(res);
  if (addr.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(port);
  }
  std::unique_ptr<Acceptor> a(new Acceptor());
  a->serve_ = std::move(serve);
  a->listen_fd_ = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (a->listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(a->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr.ss_family == AF_INET6) {
    int zero = 0;  // "::" takes IPv4 too
    setsockopt(a->listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (bind(a->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(a->listen_fd_, 1024) != 0) {
    const int err = errno;
    close(a->listen_fd_);
    a->listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", strerror(err)));
  }
  sockaddr_storage got{};
  socklen_t got_len = sizeof(got);
  getsockname(a->listen_fd_, reinterpret_cast<sockaddr*>(&got), &got_len);
  a->port_ = got.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&got)->sin_port)
                                      : ntohs(reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  a->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  a->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (a->wake_fd_ < 0 || a->reserve_fd_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("acceptor: no descriptor to spare: ", strerror(errno)));
  }
  a->thread_ = std::thread([p = a.get()] { p->Loop(); });
  return a;
}

void Acceptor::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int* fd : {&listen_fd_, &wake_fd_, &reserve_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

Acceptor::~Acceptor() { Stop(); }

void Acceptor::Loop() {
  absl::Time last_warning = absl::InfinitePast();
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    for (;;) {  // every connection waiting
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof(peer);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        char text[INET6_ADDRSTRLEN] = {0};
        if (peer.ss_family == AF_INET) {
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
        } else if (peer.ss_family == AF_INET6) {
          inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, text, sizeof(text));
        }
        {
          absl::MutexLock lock(&peers_mu_);
          peers_[fd] = text;
        }
        ++accepted_;
        serve_(fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: shed this connection with the reserve one,
        // so the listener never stalls on a connection it cannot take.
        if (reserve_fd_ >= 0) {
          close(reserve_fd_);
          reserve_fd_ = -1;
        }
        int shed = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (shed >= 0) {
          close(shed);
          ++shed_;
        }
        reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        const absl::Time now = absl::Now();
        if (now - last_warning > absl::Seconds(10)) {
          spdlog::warn("out of file descriptors ({}): shedding new connections ({} so far)",
                       strerror(errno == 0 ? EMFILE : errno), shed_.load());
          last_warning = now;
        }
        if (shed < 0) {
          // Not even the reserve could be had: wait a little (waking for a
          // shutdown) rather than spin on a listener that stays readable.
          pollfd wake = {wake_fd_, POLLIN, 0};
          if (poll(&wake, 1, 100) > 0) return;
          break;
        }
        continue;
      }
      spdlog::warn("accept: {}", strerror(errno));
      break;
    }
  }
}

std::string Acceptor::PeerAddress(absl::string_view grpc_peer) const {
  absl::string_view rest = grpc_peer;
  int fd = -1;
  if (!absl::ConsumePrefix(&rest, "fd:") || !absl::SimpleAtoi(rest, &fd)) return "";
  absl::MutexLock lock(&peers_mu_);
  auto it = peers_.find(fd);
  return it == peers_.end() ? "" : it->second;
}

int64_t RaiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return static_cast<int64_t>(lim.rlim_cur);
}

}  // namespace cpptorchrun::rdzv
