// Parsing and formatting of rendezvous endpoints (see endpoint.h).
#include "rendezvous/endpoint.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::rdzv {
namespace {

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad endpoint '", text, "': ", why));
}

absl::StatusOr<int> ParsePort(absl::string_view text, absl::string_view port) {
  if (port.empty()) return Invalid(text, "empty port after ':'");
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return Invalid(text, absl::StrCat("port '", port, "' is not a number"));
    }
  }
  int value = 0;
  if (port.size() > 5 || !absl::SimpleAtoi(port, &value) || value > 65535) {
    return Invalid(text, absl::StrCat("port '", port, "' is out of range 0..65535"));
  }
  return value;
}

bool IsHostNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool IsV6Char(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.' ||
         c == '%' || absl::ascii_isalnum(static_cast<unsigned char>(c));
}

}  // namespace

absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view raw, int default_port) {
  absl::string_view text = absl::StripAsciiWhitespace(raw);
  if (text.empty()) return Invalid(raw, "empty endpoint");
  Endpoint endpoint;
  endpoint.port = default_port;
  absl::string_view rest;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos) return Invalid(raw, "unclosed '[' (expected '[v6]:port')");
    absl::string_view host = text.substr(1, close - 1);
    if (host.empty()) return Invalid(raw, "empty host inside '[]'");
    for (char c : host) {
      if (!IsV6Char(c)) {
        return Invalid(raw, absl::StrCat("character '", std::string(1, c),
                                         "' cannot be in an IPv6 address"));
      }
    }
    if (host.find(':') == absl::string_view::npos) {
      return Invalid(raw, "'[...]' must hold an IPv6 address");
    }
    endpoint.host = std::string(host);
    rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return Invalid(raw, absl::StrCat("unexpected '", rest, "' after ']' (expected ':port')"));
      }
      absl::StatusOr<int> port = ParsePort(raw, rest.substr(1));
      if (!port.ok()) return port.status();
      endpoint.port = *port;
    }
    return endpoint;
  }
  if (text.find(']') != absl::string_view::npos) return Invalid(raw, "']' without '['");
  size_t colon = text.find(':');
  if (colon != absl::string_view::npos && text.find(':', colon + 1) != absl::string_view::npos) {
    return Invalid(raw, "an IPv6 address needs brackets, as in '[::1]:29400'");
  }
  absl::string_view host = text.substr(0, colon);
  if (host.empty()) return Invalid(raw, "empty host");
  for (char c : host) {
    if (!IsHostNameChar(c)) {
      return Invalid(raw,
                     absl::StrCat("character '", std::string(1, c), "' cannot be in a host name"));
    }
  }
  endpoint.host = std::string(host);
  if (colon != absl::string_view::npos) {
    absl::StatusOr<int> port = ParsePort(raw, text.substr(colon + 1));
    if (!port.ok()) return port.status();
    endpoint.port = *port;
  }
  return endpoint;
}

std::string FormatEndpoint(const Endpoint& endpoint) {
  if (absl::StrContains(endpoint.host, ':')) {
    return absl::StrCat("[", endpoint.host, "]:", endpoint.port);
  }
  return absl::StrCat(endpoint.host, ":", endpoint.port);
}

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace cpptorchrun::rdzv
