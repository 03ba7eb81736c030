// The console log sink.
#include "launcher/workers/console_log.h"

#include <memory>
#include <mutex>

#include "launcher/workers/log_mux.h"
#include "spdlog/details/null_mutex.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    absl::MutexLock lock(&ConsoleMutex());
    WriteAll(2, absl::string_view(formatted.data(), formatted.size()));
  }
  void flush_() override {}
};

}  // namespace

void SetUpConsoleLog(const std::string& level) {
  auto logger = std::make_shared<spdlog::logger>("cpptorchrun", std::make_shared<ConsoleSink>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [cpptorchrun] [%l] %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

void WriteConsole(int fd, const std::string& text) {
  absl::MutexLock lock(&ConsoleMutex());
  WriteAll(fd, text);
}

}  // namespace cpptorchrun::launcher
