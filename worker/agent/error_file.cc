// The error file's JSON and its atomic write.
#include "worker/agent/error_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json.h"

namespace cpptorchrun::worker {

std::string ErrorJson(const std::string& type, const std::string& what, const std::string& context,
                      int64_t unix_seconds) {
  return absl::StrCat("{\"message\": {\"message\": ", base::JsonString(absl::StrCat(type, ": ", what)),
                      ", \"extraInfo\": {\"py_callstack\": ", base::JsonString(context),
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
