#include "launcher/agent/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/json.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

std::string Value(const EventValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&v)) return absl::StrFormat("%.6f", *d);
  if (const auto* s = std::get_if<std::string>(&v)) return base::JsonString(*s);
  if (const auto* list = std::get_if<std::vector<std::string>>(&v)) {
    std::vector<std::string> quoted;
    for (const std::string& item : *list) quoted.push_back(base::JsonString(item));
    return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
  }
  return absl::StrCat("[", absl::StrJoin(std::get<std::vector<int64_t>>(v), ", "), "]");
}

class FileEventLog final : public EventLog {
 public:
  FileEventLog(const std::string& path, bool console) : console_(console) {
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) spdlog::warn("event log {}: {}", path, std::strerror(errno));
  }
  ~FileEventLog() override {
    if (fd_ >= 0) close(fd_);
  }
  void Record(absl::string_view event, std::vector<EventField> fields) override {
    const std::string line = EventJson(absl::ToUnixMicros(absl::Now()) / 1e6, event, fields);
    if (console_) spdlog::info("event {}", line);
    if (fd_ < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    const std::string out = line + "\n";
    (void)!write(fd_, out.data(), out.size());
  }

 private:
  int fd_ = -1;
  bool console_;
  std::mutex mu_;
};

}  // namespace

std::string EventJson(double time, absl::string_view event, const std::vector<EventField>& fields) {
  std::string out = absl::StrFormat("{\"time\": %.6f, \"event\": %s", time, base::JsonString(event));
  for (const auto& [name, value] : fields) absl::StrAppend(&out, ", ", base::JsonString(name), ": ", Value(value));
  out += "}";
  return out;
}

std::unique_ptr<EventLog> NewFileEventLog(const std::string& path, bool console) {
  return std::make_unique<FileEventLog>(path, console);
}

void MemoryEventLog::Record(absl::string_view event, std::vector<EventField> fields) {
  events_.emplace_back(std::string(event), std::move(fields));
}

std::vector<std::pair<std::string, std::vector<EventField>>> MemoryEventLog::events() const { return events_; }

std::vector<std::string> MemoryEventLog::names() const {
  std::vector<std::string> out;
  for (const auto& e : events_) out.push_back(e.first);
  return out;
}

}  // namespace cpptorchrun::launcher
