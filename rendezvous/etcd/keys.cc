#include "rendezvous/etcd/keys.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

bool Plain(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string EscapeKeyPart(absl::string_view part) {
  std::string out;
  out.reserve(part.size());
  for (char c : part) {
    if (Plain(c)) {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

absl::StatusOr<std::string> UnescapeKeyPart(absl::string_view escaped) {
  std::string out;
  for (size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '%') {
      out.push_back(escaped[i]);
      continue;
    }
    if (i + 2 >= escaped.size()) {
      return absl::InvalidArgumentError(absl::StrCat("key part '", escaped, "': '%' without two hex digits after it"));
    }
    const int a = HexValue(escaped[i + 1]);
    const int b = HexValue(escaped[i + 2]);
    if (a < 0 || b < 0) {
      return absl::InvalidArgumentError(absl::StrCat("key part '", escaped, "': '%' not followed by two hex digits"));
    }
    out.push_back(static_cast<char>(a * 16 + b));
    i += 2;
  }
  return out;
}

absl::StatusOr<std::string> ParsePrefix(absl::string_view text) {
  std::string p(text);
  if (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p.empty() || p[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("etcd key prefix '", text, "': must start with '/'"));
  }
  if (p == "/") return absl::InvalidArgumentError("etcd key prefix '/': the whole key space; name a folder");
  if (p.size() > 256) return absl::InvalidArgumentError("etcd key prefix: longer than 256 bytes");
  if (p.find('\0') != std::string::npos) return absl::InvalidArgumentError("etcd key prefix: holds a NUL byte");
  return p;
}

RunKeys::RunKeys(absl::string_view prefix, absl::string_view run_id)
    : run_(absl::StrCat(prefix, "/runs/", EscapeKeyPart(run_id), "/")) {}

std::string RunKeys::Alive(absl::string_view node_id) const {
  return absl::StrCat(AlivePrefix(), EscapeKeyPart(node_id));
}

std::string RunKeys::Progress(absl::string_view node_id) const {
  return absl::StrCat(ProgressPrefix(), EscapeKeyPart(node_id));
}

std::string RunKeys::Store(int64_t round) const { return absl::StrCat(Rounds(), round, "/store/"); }

}  // namespace cpptorchrun::rdzv::etcd
