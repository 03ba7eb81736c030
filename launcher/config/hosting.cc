#include "launcher/config/hosting.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::launcher {
namespace {

std::string Numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool IsLinkLocal(const std::string& a) {
  return absl::StartsWith(a, "169.254.") || absl::StartsWithIgnoreCase(a, "fe80:");
}

bool IsV4(const std::string& a) { return a.find(':') == std::string::npos; }

// A local, non-loopback, non-link-local address among `candidates`, IPv4
// first; "" when none.
std::string FirstReachable(const std::vector<std::string>& candidates, const LocalHost& local) {
  for (bool v4 : {true, false}) {
    for (const std::string& a : candidates) {
      if (IsV4(a) == v4 && Contains(local.addresses, a) && !IsLoopbackAddress(a) && !IsLinkLocal(a)) {
        return a;
      }
    }
  }
  return "";
}

}  // namespace

bool IsNumericAddress(const std::string& host) {
  in6_addr buf{};
  return inet_pton(AF_INET, host.c_str(), &buf) == 1 || inet_pton(AF_INET6, host.c_str(), &buf) == 1;
}

bool IsLoopbackAddress(const std::string& address) {
  std::string a = absl::AsciiStrToLower(address);
  if (absl::StartsWith(a, "::ffff:")) a = a.substr(7);
  return a == "localhost" || a == "::1" || absl::StartsWith(a, "127.");
}

LocalHost ReadLocalHost() {
  LocalHost local;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
      if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
      std::string a = Numeric(i->ifa_addr);
      if (!a.empty() && !Contains(local.addresses, a)) local.addresses.push_back(a);
    }
    freeifaddrs(list);
  }
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) == 0) local.hostname = name;
  local.fqdn = local.hostname;
  if (!local.hostname.empty()) {
    addrinfo hints{};
    hints.ai_flags = AI_CANONNAME;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(local.hostname.c_str(), nullptr, &hints, &res) == 0) {
      if (res != nullptr && res->ai_canonname != nullptr && *res->ai_canonname != '\0') {
        local.fqdn = res->ai_canonname;
      }
      for (addrinfo* r = res; r != nullptr; r = r->ai_next) {
        std::string a = Numeric(r->ai_addr);
        if (!a.empty() && !Contains(local.fqdn_addresses, a)) local.fqdn_addresses.push_back(a);
      }
      freeaddrinfo(res);
    }
  }
  return local;
}

std::vector<std::string> ResolveHost(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* r = res; r != nullptr; r = r->ai_next) {
    std::string a = Numeric(r->ai_addr);
    if (!a.empty() && !Contains(out, a)) out.push_back(a);
  }
  freeaddrinfo(res);
  return out;
}

std::optional<std::string> RouteSource(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr) == 1) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(9);  // any port: a UDP connect sends nothing
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(), &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr) == 1) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(9);
    family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return std::nullopt;
  }
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> source;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
      std::string a = Numeric(reinterpret_cast<sockaddr*>(&local));
      if (!a.empty()) source = a;
    }
  }
  close(fd);
  return source;
}

bool NamesThisHost(const std::string& host, const std::vector<std::string>& addresses,
                   const LocalHost& local) {
  if (IsLoopbackAddress(host)) return true;
  const std::string h = absl::AsciiStrToLower(host);
  if (!local.hostname.empty() && h == absl::AsciiStrToLower(local.hostname)) return true;
  if (!local.fqdn.empty() && h == absl::AsciiStrToLower(local.fqdn)) return true;
  if (Contains(local.addresses, host)) return true;
  for (const std::string& a : addresses) {
    // A name that resolves to loopback here (a Debian hostname's 127.0.1.1)
    // names this machine too.
    if (Contains(local.addresses, a) || IsLoopbackAddress(a)) return true;
  }
  return false;
}

HostingDecision DecideHosting(const HostingInput& in, const LocalHost& local) {
  if (in.standalone || (in.single_node && !in.has_endpoint)) {
    return {Hosting::kEmbedded, in.standalone ? "--standalone" : "a single node without --rdzv_endpoint"};
  }
  if (in.endpoint_from_master) {
    if (in.node_rank == 0) return {Hosting::kServe, "static rendezvous: node rank 0 serves MASTER_ADDR:MASTER_PORT"};
    return {Hosting::kClient, "static rendezvous: node rank 0 serves it"};
  }
  if (in.is_host.has_value()) {
    return *in.is_host ? HostingDecision{Hosting::kServe, "--rdzv_conf is_host=1"}
                       : HostingDecision{Hosting::kClient, "--rdzv_conf is_host=0"};
  }
  if (NamesThisHost(in.endpoint_host, in.endpoint_addresses, local)) {
    return {Hosting::kServeIfFree,
            absl::StrCat("the endpoint's host '", in.endpoint_host, "' is this machine")};
  }
  return {Hosting::kClient, absl::StrCat("the endpoint's host '", in.endpoint_host,
                                         "' is not this machine")};
}

std::string BindAddress(const std::string& endpoint_host, const std::vector<std::string>& endpoint_addresses) {
  if (IsLoopbackAddress(endpoint_host) || IsNumericAddress(endpoint_host)) return endpoint_host;
  const bool v4_only = std::all_of(endpoint_addresses.begin(), endpoint_addresses.end(), IsV4);
  return v4_only ? "0.0.0.0" : "::";
}

AddressChoice ChooseNodeAddress(const AddressInput& in, const LocalHost& local) {
  if (!in.local_addr_flag.empty()) return {in.local_addr_flag, "--local_addr"};
  if (in.single_node) return {"127.0.0.1", "a single-node job"};
  if (in.route_source.has_value() &&
      (!IsLoopbackAddress(*in.route_source) || IsLoopbackAddress(in.endpoint_host))) {
    return {*in.route_source,
            absl::StrCat("the local address of the route to the rendezvous endpoint ", in.endpoint_address)};
  }
  const std::string why_not_route =
      in.route_source.has_value()
          ? absl::StrCat("the endpoint '", in.endpoint_host, "' resolves to ", in.endpoint_address,
                         " here, loopback, which other nodes cannot reach; ")
          : std::string("no route to the rendezvous endpoint; ");
  if (std::string a = FirstReachable(local.fqdn_addresses, local); !a.empty()) {
    return {a, absl::StrCat(why_not_route, "an interface address of this host's name '", local.fqdn, "'")};
  }
  if (std::string a = FirstReachable(local.addresses, local); !a.empty()) {
    return {a, absl::StrCat(why_not_route, "the first non-loopback interface address")};
  }
  return {"127.0.0.1", absl::StrCat(why_not_route, "this machine has no other address")};
}

}  // namespace cpptorchrun::launcher
