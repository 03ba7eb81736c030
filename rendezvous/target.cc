#include "rendezvous/target.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rendezvous/etcd/endpoints.h"
#include "rendezvous/etcd/keys.h"

namespace cpptorchrun::rdzv {

absl::StatusOr<RendezvousTarget> ParseRendezvousTarget(const std::string& text) {
  RendezvousTarget t;
  if (!absl::StartsWith(text, kEtcdScheme)) {
    t.endpoint = text;
    return t;
  }
  t.backend = RendezvousTarget::Backend::kEtcd;
  std::string rest = text.substr(sizeof(kEtcdScheme) - 1);
  std::string members = rest;
  t.etcd_prefix = etcd::kDefaultPrefix;
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    members = rest.substr(0, slash);
    absl::StatusOr<std::string> prefix = etcd::ParsePrefix(rest.substr(slash));
    if (!prefix.ok()) return absl::InvalidArgumentError(absl::StrCat("rendezvous \"", text, "\": ", prefix.status().message()));
    t.etcd_prefix = *prefix;
  }
  absl::StatusOr<std::vector<std::string>> parsed = etcd::ParseEtcdEndpoints(members);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("rendezvous \"", text, "\": ", parsed.status().message()));
  t.etcd_members = *std::move(parsed);
  return t;
}

std::string FormatRendezvousTarget(const RendezvousTarget& t) {
  if (t.backend == RendezvousTarget::Backend::kGrpc) return t.endpoint;
  return absl::StrCat(kEtcdScheme, absl::StrJoin(t.etcd_members, ","), t.etcd_prefix);
}

}  // namespace cpptorchrun::rdzv
