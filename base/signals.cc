#include "base/signals.h"

#include <csignal>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun {
namespace {

const std::vector<std::pair<std::string, int>>& SignalTable() {
  static const auto* table = new std::vector<std::pair<std::string, int>>{
      {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},
      {"SIGILL", SIGILL},   {"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},
      {"SIGBUS", SIGBUS},   {"SIGFPE", SIGFPE},   {"SIGKILL", SIGKILL},
      {"SIGUSR1", SIGUSR1}, {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
      {"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
      {"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},
      {"SIGTSTP", SIGTSTP}, {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ},
      {"SIGSYS", SIGSYS},
  };
  return *table;
}

}  // namespace

absl::StatusOr<int> SignalFromName(const std::string& name) {
  std::string upper = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
  if (!absl::StartsWith(upper, "SIG")) upper = "SIG" + upper;
  for (const auto& [n, v] : SignalTable()) {
    if (n == upper) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown signal '", name, "'"));
}

std::string SignalName(int signo) {
  for (const auto& [n, v] : SignalTable()) {
    if (v == signo) return n;
  }
  return absl::StrCat("SIG", signo);
}

}  // namespace cpptorchrun
