// Who serves the rendezvous endpoint, and the address this node gives the
// others (its --local_addr default, MASTER_ADDR when it gets group rank 0,
// where its workers' Gloo listens). The decisions are pure functions of the
// configuration and of facts read off this machine (LocalHost); the readers
// of those facts are the only part that touches the system.
//
// The rule a torchrun user expects: the same command line on every node,
// `--rdzv_endpoint <host A>:29400`, and host A serves it. A node serves the
// endpoint when its host is loopback, an address of one of this machine's
// interfaces (directly or by what the name resolves to here), this
// machine's hostname or FQDN, or `--rdzv_conf is_host` says so. Where
// several nodes could (several launchers on one machine), the first to bind
// serves and the others are its clients.
#ifndef CPPTORCHRUN_LAUNCHER_HOSTING_H_
#define CPPTORCHRUN_LAUNCHER_HOSTING_H_

#include <optional>
#include <string>
#include <vector>

namespace cpptorchrun::launcher {

// Facts about this machine.
struct LocalHost {
  // Every address of every interface that is up (IPv4 and IPv6, numeric,
  // without a scope suffix), loopback included.
  std::vector<std::string> addresses;
  std::string hostname;  // gethostname()
  std::string fqdn;      // the canonical name of `hostname`, else `hostname`
  // What `fqdn` resolves to here (numeric).
  std::vector<std::string> fqdn_addresses;
};

// Reads the facts (getifaddrs, gethostname, getaddrinfo). Never fails: a
// fact that cannot be read is left empty.
LocalHost ReadLocalHost();

// The numeric addresses `host` resolves to here (itself when numeric);
// empty when it does not resolve.
std::vector<std::string> ResolveHost(const std::string& host);

// The source address the kernel would use to reach `address` (a numeric
// address): the local address of the route to it. nullopt when there is no
// route.
std::optional<std::string> RouteSource(const std::string& address);

// True when `host` is a numeric IPv4 or IPv6 address (not a name).
bool IsNumericAddress(const std::string& host);

// True for 127.0.0.0/8, ::1, ::ffff:127.x and "localhost".
bool IsLoopbackAddress(const std::string& address);

enum class Hosting {
  kEmbedded,     // a private server on 127.0.0.1, any free port
  kServe,        // serve the endpoint; failing to is an error
  kServeIfFree,  // serve it if its port is free here, else be a client
  kClient,       // someone else serves it
};

struct HostingInput {
  bool standalone = false;
  bool single_node = false;  // --nnodes 1 (max)
  bool has_endpoint = false;
  // Static multi-node: the endpoint is MASTER_ADDR:MASTER_PORT, served by
  // node rank 0.
  bool endpoint_from_master = false;
  int node_rank = 0;
  std::string endpoint_host;
  // --rdzv_conf is_host, when given.
  std::optional<bool> is_host;
  // What endpoint_host resolves to here.
  std::vector<std::string> endpoint_addresses;
};

struct HostingDecision {
  Hosting hosting = Hosting::kClient;
  std::string why;  // for the log
};

HostingDecision DecideHosting(const HostingInput& in, const LocalHost& local);

// Whether `host` (resolving here to `addresses`) names this machine.
bool NamesThisHost(const std::string& host, const std::vector<std::string>& addresses,
                   const LocalHost& local);

// Where a node that serves the endpoint listens: the endpoint's own host
// when it is written as an address or is loopback (nothing wider than
// asked); every interface when it is a name ("0.0.0.0", or "::" when the
// name resolves to an IPv6 address here), so the others reach it at
// whatever the name resolves to on their side. Pure.
std::string BindAddress(const std::string& endpoint_host, const std::vector<std::string>& endpoint_addresses);

struct AddressInput {
  std::string local_addr_flag;  // --local_addr ("" when not given)
  bool single_node = false;
  // The endpoint's host as the user wrote it, its first address here, and
  // the route's source to that address.
  std::string endpoint_host;
  std::string endpoint_address;
  std::optional<std::string> route_source;
};

struct AddressChoice {
  std::string address;
  std::string why;  // for the log
};

// This node's address: --local_addr; for a single node 127.0.0.1; else the
// local address of the route to the rendezvous endpoint, unless that is
// loopback while the endpoint as written is not (its name resolves to
// loopback here, as a Debian hostname does to 127.0.1.1: other nodes could
// not reach it); then an address the FQDN resolves to that is on an
// interface and not loopback; then the first such interface address (IPv4
// first); never loopback for a multi-node job unless nothing else exists.
AddressChoice ChooseNodeAddress(const AddressInput& in, const LocalHost& local);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_HOSTING_H_
