#include "launcher/config/flag_values.h"

#include <algorithm>
#include <csignal>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "rendezvous/etcd/endpoints.h"

namespace cpptorchrun::launcher {
namespace {

// rdzv_conf keys and what their values must be.
// kIgnoredByC10dSeconds: seconds that only the etcd backend reads.
// kCountOrOff: a count, or 0 to turn the rule off.
enum class ConfKind { kSeconds, kIgnoredByC10dSeconds, kCount, kCountOrOff, kBool, kString };
const std::map<std::string, ConfKind>& ConfKeys() {
  static const auto* keys = new std::map<std::string, ConfKind>{
      {"join_timeout", ConfKind::kSeconds},   {"last_call_timeout", ConfKind::kSeconds},
      {"close_timeout", ConfKind::kSeconds},  {"keep_alive_interval", ConfKind::kSeconds},
      {"keep_alive_max_attempt", ConfKind::kCount}, {"timeout", ConfKind::kIgnoredByC10dSeconds},
      {"read_timeout", ConfKind::kSeconds},   {"is_host", ConfKind::kBool},
      {"use_libuv", ConfKind::kBool},         {"token_file", ConfKind::kString},
      // TLS to the rendezvous: the CA that signed its certificate; a node
      // that serves the endpoint serves it with cert and key.
      {"cacert", ConfKind::kString},          {"cert", ConfKind::kString},
      {"key", ConfKind::kString},
      // --rdzv_backend etcd: the run's keys live under this prefix.
      {"prefix", ConfKind::kString},
      // Keeping a failing host out (rendezvous/rules.h, "Quarantine").
      {"quarantine_after", ConfKind::kCountOrOff}, {"quarantine_window", ConfKind::kSeconds},
      {"quarantine_cooldown", ConfKind::kSeconds},
  };
  return *keys;
}

}  // namespace

absl::Status Bad(const std::string& what, const std::string& allowed, const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected ", allowed, "; got '", got, "'"));
}

absl::StatusOr<int> ParseInt(const std::string& text, const std::string& what, int min, int max,
                             const std::string& allowed) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return Bad(what, allowed, text);
  }
  return value;
}

absl::StatusOr<absl::Duration> ParseSeconds(const std::string& text, const std::string& what,
                                            bool allow_zero) {
  double seconds = 0;
  if (!absl::SimpleAtod(text, &seconds) || !(seconds >= 0) || seconds > 1e7 ||
      (!allow_zero && seconds == 0)) {
    return Bad(what, allow_zero ? "seconds >= 0" : "seconds > 0", text);
  }
  return absl::Seconds(seconds);
}


namespace {

absl::StatusOr<int> ParseStdMask(const std::string& text, const std::string& what) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0 || v > 3) {
    return Bad(what, "0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:VALUE,...", text);
  }
  return v;
}

}  // namespace

absl::StatusOr<StdSpec> ParseStdSpec(const std::string& text, const std::string& what) {
  StdSpec spec;
  if (text.find(':') == std::string::npos) {
    auto mask = ParseStdMask(text, what);
    if (!mask.ok()) return mask.status();
    spec.all = *mask;
    return spec;
  }
  spec.per_rank_form = true;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, ':');
    int rank = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || rank < 0) {
      return Bad(what, "0..3 or LOCAL_RANK:VALUE,... (e.g. 0:1,1:2)", text);
    }
    auto mask = ParseStdMask(kv[1], what);
    if (!mask.ok()) return Bad(what, "0..3 or LOCAL_RANK:VALUE,... (e.g. 0:1,1:2)", text);
    if (!spec.per_rank.emplace(rank, *mask).second) {
      return Bad(what, "each local rank at most once", text);
    }
  }
  return spec;
}

bool ValidRunId(const std::string& id) {
  // It names a folder under --log_dir: never "." or "..".
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  for (char c : id) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

bool ValidHost(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  for (char c : host) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == ':' || c == '%')) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& text,
                                                                 const std::string& what,
                                                                 std::vector<std::string>* warnings) {
  std::map<std::string, std::string> conf;
  if (text.empty()) return conf;
  std::vector<std::string> names;
  for (const auto& [k, v] : ConfKeys()) names.push_back(k);
  const std::string allowed = absl::StrCat("KEY=VALUE,... with KEY one of ", absl::StrJoin(names, " "));
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) return Bad(what, allowed, text);
    auto it = ConfKeys().find(kv[0]);
    if (it == ConfKeys().end()) {
      // torchrun hands every key to its rendezvous backend, which reads
      // the ones it knows and ignores the rest (store_type=tcp, a plugin's
      // keys, and the quoted 'join_timeout of a value quoted twice, as
      // PyTorch's own test_launch_elastic passes it): a warning naming the
      // key, not an error. Printable ASCII only: a control character in a
      // key is no plugin's, and would reach the log as it is.
      bool printable = std::all_of(kv[0].begin(), kv[0].end(), [](char ch) { return ch > ' ' && ch < 0x7f; });
      if (!printable || kv[0].size() > 64) return Bad(what, allowed, std::string(item));
      const bool quoted = kv[0].find_first_of("'\"") != std::string::npos;
      warnings->push_back(absl::StrCat(what, ": key '", kv[0], "' is not used by cpptorchrun (ignored",
                                       quoted ? "; its quote marks are part of the key: quoted twice?" : "",
                                       "; known: ", absl::StrJoin(names, " "), ")"));
      continue;
    }
    const std::string key_what = absl::StrCat(what, " ", kv[0]);
    switch (it->second) {
      case ConfKind::kSeconds:
        if (auto d = ParseSeconds(kv[1], key_what, /*allow_zero=*/false); !d.ok()) return d.status();
        break;
      case ConfKind::kIgnoredByC10dSeconds:
        // torchrun sets `timeout` itself (--rdzv_timeout, default 900) and
        // its c10d backend never reads it: a bad value fails nothing there.
        if (auto d = ParseSeconds(kv[1], key_what, /*allow_zero=*/false); !d.ok()) {
          warnings->push_back(absl::StrCat(d.status().message(),
                                           " (ignored: the c10d rendezvous does not read it; join_timeout is the "
                                           "join deadline)"));
          continue;
        }
        break;
      case ConfKind::kCount:
        if (auto n = ParseInt(kv[1], key_what, 1, 1000000, "a positive integer"); !n.ok()) {
          return n.status();
        }
        break;
      case ConfKind::kCountOrOff:
        if (auto n = ParseInt(kv[1], key_what, 0, 1000000, "an integer >= 0 (0: off)"); !n.ok()) {
          return n.status();
        }
        break;
      case ConfKind::kBool:
        if (auto b = base::ParseBool(kv[1], key_what); !b.ok()) return b.status();
        break;
      case ConfKind::kString:
        if (kv[1].empty()) return Bad(key_what, "a non-empty value", kv[1]);
        break;
    }
    conf[kv[0]] = kv[1];
  }
  return conf;
}

const std::set<int>& HandleableSignals() {
  static const auto* s = new std::set<int>{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  return *s;
}

absl::StatusOr<rdzv::RendezvousTarget> EtcdTargetFromFlags(const std::string& endpoint_text,
                                                           const std::map<std::string, std::string>& conf) {
  std::string prefix;
  if (auto it = conf.find("prefix"); it != conf.end()) prefix = it->second;
  if (!prefix.empty() && prefix[0] != '/') return Bad("--rdzv_conf prefix", "a key prefix starting with '/'", prefix);
  // The member list first: its errors name the entry, not the whole target.
  if (auto members = rdzv::etcd::ParseEtcdEndpoints(endpoint_text); !members.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv_endpoint: ", members.status().message()));
  }
  absl::StatusOr<rdzv::RendezvousTarget> target =
      rdzv::ParseRendezvousTarget(absl::StrCat(rdzv::kEtcdScheme, endpoint_text, prefix));
  if (!target.ok()) return absl::InvalidArgumentError(absl::StrCat("--rdzv_endpoint: ", target.status().message()));
  return target;
}

}  // namespace cpptorchrun::launcher
