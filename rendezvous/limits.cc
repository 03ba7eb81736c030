// Checks of identifiers and sizes against the server's limits (limits.h).
#include "rendezvous/limits.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::rdzv {

absl::Status ValidateRunId(absl::string_view run_id, const Limits& limits) {
  if (run_id.empty()) return absl::InvalidArgumentError("run_id is empty");
  if (static_cast<int>(run_id.size()) > limits.max_run_id_length) {
    return absl::InvalidArgumentError(absl::StrCat("run_id is ", run_id.size(),
                                                   " characters; the limit is ",
                                                   limits.max_run_id_length));
  }
  for (char c : run_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("run_id '", absl::CHexEscape(run_id), "' has character '",
                       absl::CHexEscape(absl::string_view(&c, 1)),
                       "'; allowed are [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The offset of the first control character (C0 or DEL), or npos.
size_t FirstControl(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return i;
  }
  return absl::string_view::npos;
}

}  // namespace

absl::Status ValidateReason(absl::string_view reason, const Limits& limits) {
  if (static_cast<int>(reason.size()) > limits.max_reason_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("reason is ", reason.size(), " bytes; the limit (max_reason_bytes) is ",
                                                   limits.max_reason_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateNodeId(absl::string_view node_id, const Limits& limits) {
  if (node_id.empty()) return absl::InvalidArgumentError("node_id is empty");
  if (size_t at = FirstControl(node_id); at != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("node_id has a control character at byte ", at));
  }
  if (static_cast<int>(node_id.size()) > limits.max_node_id_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("node_id is ", node_id.size(),
                                                   " bytes; the limit is ",
                                                   limits.max_node_id_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateNodeInfo(const v1::NodeInfo& node, const Limits& limits) {
  if (absl::Status s = ValidateNodeId(node.node_id(), limits); !s.ok()) return s;
  if (node.host().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node.node_id(), "' has no host"));
  }
  if (size_t at = FirstControl(node.host()); at != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("host of node '", node.node_id(), "' has a control character at byte ", at));
  }
  if (static_cast<int>(node.host().size()) > limits.max_node_id_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("host of node '", node.node_id(), "' is ",
                                                   node.host().size(), " bytes; the limit is ",
                                                   limits.max_node_id_bytes));
  }
  if (node.local_world_size() < 1 || node.local_world_size() > limits.max_local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat("local_world_size of node '", node.node_id(),
                                                   "' must be in 1..", limits.max_local_world_size,
                                                   " (max_local_world_size), got ",
                                                   node.local_world_size()));
  }
  if (node.free_port() < 0 || node.free_port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("free_port of node '", node.node_id(),
                                                   "' is out of range 0..65535: ",
                                                   node.free_port()));
  }
  return absl::OkStatus();
}

absl::Status ValidateScope(const v1::Scope& scope, const Limits& limits) {
  if (absl::Status s = ValidateRunId(scope.run_id(), limits); !s.ok()) return s;
  if (scope.round() < 0 || scope.round() > (int64_t{1} << 60)) {
    return absl::InvalidArgumentError(absl::StrCat("scope round must be in 0..2^60, got ", scope.round()));
  }
  return absl::OkStatus();
}

absl::Status ValidateKey(absl::string_view key, const Limits& limits) {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (static_cast<int>(key.size()) > limits.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("key is ", key.size(),
                                                   " bytes; the limit (max_key_bytes) is ",
                                                   limits.max_key_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateValue(absl::string_view key, absl::string_view value, const Limits& limits) {
  if (static_cast<int>(value.size()) > limits.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("value of key '", absl::CHexEscape(key.substr(0, 64)),
                                                     "' is ", value.size(),
                                                     " bytes; the limit (max_value_bytes) is ",
                                                     limits.max_value_bytes));
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::rdzv
