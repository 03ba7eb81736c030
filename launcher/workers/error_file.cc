// Error files, parsed with protobuf's JSON support into a Struct.
#include "launcher/workers/error_file.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace cpptorchrun::launcher {

absl::StatusOr<WorkerError> ParseErrorJson(const std::string& json) {
  google::protobuf::Struct root;
  auto st = google::protobuf::util::JsonStringToMessage(json, &root);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("error file is not JSON: ", st.message().ToString()));
  }
  auto it = root.fields().find("message");
  if (it == root.fields().end()) {
    return absl::InvalidArgumentError("error file has no \"message\"");
  }
  WorkerError out;
  const google::protobuf::Value& m = it->second;
  if (m.has_string_value()) {
    out.message = m.string_value();
    return out;
  }
  if (!m.has_struct_value()) {
    return absl::InvalidArgumentError("error file: \"message\" is neither a string nor an object");
  }
  const auto& fields = m.struct_value().fields();
  auto msg = fields.find("message");
  if (msg == fields.end() || !msg->second.has_string_value()) {
    return absl::InvalidArgumentError("error file: no message.message string");
  }
  out.message = msg->second.string_value();
  auto extra = fields.find("extraInfo");
  if (extra != fields.end() && extra->second.has_struct_value()) {
    const auto& ef = extra->second.struct_value().fields();
    auto cs = ef.find("py_callstack");
    if (cs != ef.end() && cs->second.has_string_value()) out.traceback = cs->second.string_value();
    auto ts = ef.find("timestamp");
    if (ts != ef.end()) {
      if (ts->second.has_string_value()) {
        int64_t v = 0;
        if (absl::SimpleAtoi(ts->second.string_value(), &v)) out.timestamp = v;
      } else if (ts->second.has_number_value()) {
        out.timestamp = static_cast<int64_t>(ts->second.number_value());
      }
    }
  }
  return out;
}

absl::StatusOr<WorkerError> ReadErrorFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no error file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseErrorJson(ss.str());
}

}  // namespace cpptorchrun::launcher
