// Ports: finding a TCP port that is free on this node (MASTER_PORT, the
// embedded rendezvous), behind an interface so tests can pin ports.
#ifndef CPPTORCHRUN_LAUNCHER_PORTS_H_
#define CPPTORCHRUN_LAUNCHER_PORTS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cpptorchrun::launcher {

// Thread-safe.
class PortFinder {
 public:
  virtual ~PortFinder() = default;
  // A port that nothing listens on or is bound to at `host` (an address;
  // empty: any IPv4 address) at the time of the call, held until
  // ReleaseHeld (see NewRealPortFinder). Errors: no address, no socket.
  virtual absl::StatusOr<int> FindFreePort(const std::string& host) = 0;
  // Lets go of every port FindFreePort holds.
  virtual void ReleaseHeld() {}
};

// Asks the kernel for an ephemeral port by binding port 0, and keeps that
// socket bound (SO_REUSEADDR, not listening) until ReleaseHeld: between
// the round that hands the port out as MASTER_PORT and the worker that
// listens on it (seconds, for a Python worker importing torch), the kernel
// gives it to no ephemeral bind or connect and no binder without
// SO_REUSEADDR gets it, while the worker's TCPStore (which sets
// SO_REUSEADDR) binds and listens on it as usual.
std::unique_ptr<PortFinder> NewRealPortFinder();

// True when a server binding as ours do (SO_REUSEADDR, then listen) could
// listen on `port` at `host` right now: false while anything listens there;
// true for a port whose last connections are in TIME_WAIT (a job relaunched
// on the same endpoint at once) and for a port a PortFinder holds without
// listening (a worker's TCPStore may take it the same way).
bool PortIsFree(const std::string& host, int port);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_PORTS_H_
