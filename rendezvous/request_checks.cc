// The stateless checks of incoming calls (see request_checks.h).
#include "rendezvous/request_checks.h"

#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cpptorchrun::rdzv {
namespace {

// The first error among `statuses`, in order; OK when there is none. Every
// check is a pure function of the request, so evaluating all of them
// answers the same as stopping at the first failure.
absl::Status FirstError(std::initializer_list<absl::Status> statuses) {
  for (const absl::Status& status : statuses) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CheckBatchSize(int size, absl::string_view what, const Limits& limits) {
  if (size <= limits.max_keys_per_call) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(size, " ", what,
                                                 " in one call; the limit (max_keys_per_call) is ",
                                                 limits.max_keys_per_call));
}

absl::Status CheckText(const std::string& text, absl::string_view what, const Limits& limits) {
  if (static_cast<int>(text.size()) <= limits.max_reason_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is ", text.size(), " bytes; the limit (max_reason_bytes) is ", limits.max_reason_bytes));
}

absl::Status CheckRanks(int size, absl::string_view what, const Limits& limits) {
  if (size <= limits.max_local_world_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(size, " ", what, "; the limit (max_local_world_size) is ", limits.max_local_world_size));
}

absl::Status CheckHosts(const google::protobuf::RepeatedPtrField<std::string>& hosts, absl::string_view what,
                        const Limits& limits) {
  if (absl::Status s = CheckRanks(hosts.size(), what, limits); !s.ok()) return s;
  for (const std::string& h : hosts) {
    if (static_cast<int>(h.size()) > limits.max_node_id_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("a host in ", what, " is ", h.size(),
                                                     " bytes; the limit (max_node_id_bytes) is ",
                                                     limits.max_node_id_bytes));
    }
  }
  return absl::OkStatus();
}

// What a node says about itself in a keep-alive: bounded like the rest.
absl::Status CheckNodeReport(const v1::KeepAliveRequest& r, const Limits& l) {
  const v1::HangReport& hang = r.faults().last_hang();
  const v1::StragglerReport& straggler = r.faults().last_straggler();
  return FirstError({CheckText(r.last_restart().cause(), "last_restart.cause", l),
                     CheckText(r.last_restart().path(), "last_restart.path", l),
                     CheckRanks(hang.culprit_ranks_size(), "faults.last_hang.culprit_ranks", l),
                     CheckRanks(hang.waiting_ranks_size(), "faults.last_hang.waiting_ranks", l),
                     CheckHosts(hang.culprit_hosts(), "faults.last_hang.culprit_hosts", l),
                     CheckText(hang.process_states(), "faults.last_hang.process_states", l),
                     CheckRanks(straggler.ranks_size(), "faults.last_straggler.ranks", l),
                     CheckHosts(straggler.hosts(), "faults.last_straggler.hosts", l),
                     CheckText(straggler.policy(), "faults.last_straggler.policy", l)});
}

}  // namespace

absl::Status CheckRequest(const v1::JoinRequest& r, const Limits& l) {
  if (r.node_secret().size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_secret of ", r.node_secret().size(), " bytes; the limit is 256"));
  }
  if (static_cast<int>(r.failure().reason().size()) > l.max_reason_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("failure.reason is ", r.failure().reason().size(),
                                                   " bytes; the limit (max_reason_bytes) is ", l.max_reason_bytes));
  }
  return FirstError({ValidateRunId(r.run_id(), l), ValidateNodeInfo(r.node(), l)});
}
absl::Status CheckRequest(const v1::KeepAliveRequest& r, const Limits& l) {
  if (r.progress_size() > l.max_local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(r.progress_size(), " progress rows; the limit (max_local_world_size) is ",
                                                   l.max_local_world_size));
  }
  return FirstError({ValidateRunId(r.run_id(), l), ValidateNodeId(r.node_id(), l), CheckNodeReport(r, l)});
}
absl::Status CheckRequest(const v1::WatchRequest& r, const Limits& l) {
  return ValidateRunId(r.run_id(), l);
}
absl::Status CheckRequest(const v1::LeaveRequest& r, const Limits& l) {
  return FirstError({ValidateRunId(r.run_id(), l), ValidateReason(r.reason(), l)});
}
absl::Status CheckRequest(const v1::CloseRequest& r, const Limits& l) {
  return FirstError({ValidateRunId(r.run_id(), l), ValidateReason(r.reason(), l)});
}
absl::Status CheckRequest(const v1::RunStatusRequest& r, const Limits& l) {
  return ValidateRunId(r.run_id(), l);
}
absl::Status CheckRequest(const v1::GetRequest& r, const Limits& l) {
  return FirstError({ValidateScope(r.scope(), l), ValidateKey(r.key(), l)});
}
absl::Status CheckRequest(const v1::AddRequest& r, const Limits& l) {
  return FirstError({ValidateScope(r.scope(), l), ValidateKey(r.key(), l)});
}
absl::Status CheckRequest(const v1::DeleteRequest& r, const Limits& l) {
  return FirstError({ValidateScope(r.scope(), l), ValidateKey(r.key(), l)});
}
absl::Status CheckRequest(const v1::CompareSetRequest& r, const Limits& l) {
  return FirstError({ValidateScope(r.scope(), l), ValidateKey(r.key(), l),
                     ValidateValue(r.key(), r.desired(), l)});
}
absl::Status CheckRequest(const v1::MultiSetRequest& r, const Limits& l) {
  if (absl::Status s = FirstError({ValidateScope(r.scope(), l),
                                   CheckBatchSize(r.entries_size(), "entries", l)});
      !s.ok()) {
    return s;
  }
  for (const v1::KeyValue& kv : r.entries()) {
    if (absl::Status s =
            FirstError({ValidateKey(kv.key(), l), ValidateValue(kv.key(), kv.value(), l)});
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}
absl::Status CheckRequest(const v1::MultiGetRequest& r, const Limits& l) {
  if (absl::Status s =
          FirstError({ValidateScope(r.scope(), l), CheckBatchSize(r.keys_size(), "keys", l)});
      !s.ok()) {
    return s;
  }
  for (const std::string& key : r.keys()) {
    if (absl::Status s = ValidateKey(key, l); !s.ok()) return s;
  }
  return absl::OkStatus();
}


bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

bool BearerTokenMatches(absl::string_view authorization, absl::string_view token) {
  return ConstantTimeEquals(authorization, absl::StrCat("Bearer ", token));
}

std::string PeerHost(const std::string& peer) {
  absl::string_view p = peer;
  if (!absl::ConsumePrefix(&p, "ipv4:") && !absl::ConsumePrefix(&p, "ipv6:")) return "";
  if (absl::ConsumePrefix(&p, "[")) {
    const size_t close = p.find(']');
    return close == absl::string_view::npos ? "" : std::string(p.substr(0, close));
  }
  const size_t colon = p.rfind(':');
  return std::string(colon == absl::string_view::npos ? p : p.substr(0, colon));
}

}  // namespace cpptorchrun::rdzv
