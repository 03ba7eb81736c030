// The error file's JSON and its atomic write.
#include "worker/agent/error_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cpptorchrun::worker {

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string ErrorJson(const std::string& type, const std::string& what, const std::string& context,
                      int64_t unix_seconds) {
  return absl::StrCat("{\"message\": {\"message\": ", JsonQuote(absl::StrCat(type, ": ", what)),
                      ", \"extraInfo\": {\"py_callstack\": ", JsonQuote(context),
                      ", \"timestamp\": \"", unix_seconds, "\"}}}\n");
}

absl::Status WriteErrorFile(const std::string& path, const std::string& type,
                            const std::string& what, const std::string& context,
                            int64_t unix_seconds) {
  const std::string temp = path + ".tmp";
  std::FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot write the error file ", path, ": ", std::strerror(errno)));
  }
  const std::string json = ErrorJson(type, what, context, unix_seconds);
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write the error file ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::worker
