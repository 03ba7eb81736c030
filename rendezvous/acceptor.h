// Acceptor: the rendezvous server's own accept loop for plaintext ports.
//
// gRPC 1.51's listener stops accepting for good after one accept4 failure
// with EMFILE (every file descriptor in use, e.g. under a connection flood):
// the server then looks alive and serves nobody. This loop owns the
// listening socket instead and hands each accepted connection to gRPC
// (grpc::AddInsecureChannelFromFd). At EMFILE/ENFILE it sheds: it frees a
// descriptor it keeps in reserve, accepts the waiting connection and closes
// it at once, takes the reserve back, and goes on accepting; so the server
// serves again as soon as descriptors are free. (TLS ports keep gRPC's own
// listener: gRPC adds only plaintext channels from a descriptor.)
#ifndef CPPTORCHRUN_RENDEZVOUS_ACCEPTOR_H_
#define CPPTORCHRUN_RENDEZVOUS_ACCEPTOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace cpptorchrun::rdzv {

class Acceptor {
 public:
  // Binds and listens on host:port (port 0: any free one; SO_REUSEADDR,
  // never SO_REUSEPORT), and calls `serve(fd)` for each accepted connection
  // (non-blocking, close-on-exec, TCP_NODELAY) from its own thread; `serve`
  // owns the descriptor. Errors: the host does not resolve; Unavailable
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Acceptor>> Start(const std::string& host, int port,
                                                         std::function<void(int fd)> serve);
  // Stops accepting and closes the listening socket (idempotent; the
  // addresses of connections already handed on stay known).
  void Stop();
  ~Acceptor();

  int port() const { return port_; }
  // Connections accepted and handed on; connections shed at the descriptor
  // limit. Thread-safe.
  int64_t accepted() const { return accepted_.load(); }
  int64_t shed() const { return shed_.load(); }
  // The address (without port) of the client on descriptor `fd` as gRPC
  // names such a connection ("fd:12"; gRPC knows no address for it); ""
  // when unknown. Thread-safe.
  std::string PeerAddress(absl::string_view grpc_peer) const;

 private:
  Acceptor() = default;
  void Loop();

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int reserve_fd_ = -1;
  int port_ = 0;
  std::function<void(int)> serve_;
  mutable absl::Mutex peers_mu_;
  absl::flat_hash_map<int, std::string> peers_ ABSL_GUARDED_BY(peers_mu_);
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> shed_{0};
  std::thread thread_;
};

// Raises this process's soft RLIMIT_NOFILE to its hard limit; returns the
// limit now in force.
int64_t RaiseFileLimit();

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_ACCEPTOR_H_
