#include "rendezvous/etcd/endpoints.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rendezvous/endpoint.h"

namespace cpptorchrun::rdzv::etcd {

absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(const std::string& text) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoints \"", text, "\": an empty entry (a stray or doubled comma?)"));
    }
    absl::StatusOr<Endpoint> e = ParseEndpoint(entry, kDefaultEtcdPort);
    if (!e.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoints: entry \"", entry, "\": ", e.status().message()));
    }
    if (e->port == 0) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoints: entry \"", entry,
                                                     "\": port 0 is not an etcd member's port"));
    }
    std::string target = FormatEndpoint(*e);
    if (!seen.insert(target).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoints: \"", target, "\" is listed twice"));
    }
    out.push_back(std::move(target));
  }
  return out;
}

}  // namespace cpptorchrun::rdzv::etcd
