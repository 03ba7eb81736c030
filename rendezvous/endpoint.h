// Rendezvous endpoints: parsing "host[:port]" and "[v6addr][:port]" as the
// launcher's --rdzv_endpoint and the server's --host take them, and
// formatting them back as gRPC targets / listening addresses.
#ifndef CPPTORCHRUN_RENDEZVOUS_ENDPOINT_H_
#define CPPTORCHRUN_RENDEZVOUS_ENDPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::rdzv {

// torchrun's default rendezvous port.
inline constexpr int kDefaultRendezvousPort = 29400;

struct Endpoint {
  // A host name, an IPv4 address, or an IPv6 address without brackets.
  std::string host;
  // 0..65535; 0 only makes sense for a server asking for any free port.
  int port = kDefaultRendezvousPort;
};

// Parses "host", "host:port", "[v6]" or "[v6]:port" (surrounding blanks are
// ignored); a missing port is `default_port`. Errors (InvalidArgument) name
// the text and what is wrong: empty endpoint or host, an unclosed or stray
// bracket, an IPv6 address without brackets, a port that is not a number in
// 0..65535, characters that cannot be in a host.
absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text,
                                       int default_port = kDefaultRendezvousPort);

// "host:port", or "[v6]:port" when the host holds a ':'; usable as a gRPC
// target and as a listening address.
std::string FormatEndpoint(const Endpoint& endpoint);

// True for "localhost", 127.0.0.0/8 and ::1 (the server warns when it binds
// anything else without a token).
bool IsLoopbackHost(absl::string_view host);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_ENDPOINT_H_
