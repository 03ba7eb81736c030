#include "launcher/workers/python_stack.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::launcher {

bool FaultHandlerOn(const std::map<std::string, std::string>& env) {
  auto it = env.find("PYTHONFAULTHANDLER");
  return it != env.end() && !it->second.empty();
}

std::optional<std::string> PythonStackFromOutput(absl::string_view output) {
  const size_t start = output.rfind("Fatal Python error: ");
  if (start == absl::string_view::npos) return std::nullopt;
  std::vector<absl::string_view> lines;
  bool has_frame = false;
  for (absl::string_view line : absl::StrSplit(output.substr(start), '\n')) {
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StartsWith(line, "Extension modules:")) break;
    if (absl::StartsWith(line, "  File \"")) has_frame = true;
    lines.push_back(line);
  }
  if (!has_frame) return std::nullopt;
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string stack;
  bool cut = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (static_cast<int>(i) == kMaxStackLines || stack.size() + lines[i].size() + 1 > kMaxStackBytes) {
      cut = true;
      break;
    }
    if (i > 0) stack += '\n';
    stack.append(lines[i].data(), lines[i].size());
  }
  if (cut) stack += "\n  ...";
  return stack;
}

}  // namespace cpptorchrun::launcher
