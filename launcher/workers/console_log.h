// The launcher's own messages: spdlog with levels, written as whole lines to
// stderr under the same mutex as the workers' console lines.
#ifndef CPPTORCHRUN_LAUNCHER_CONSOLE_LOG_H_
#define CPPTORCHRUN_LAUNCHER_CONSOLE_LOG_H_

#include <string>

namespace cpptorchrun::launcher {

// Makes the default spdlog logger write "[time] [cpptorchrun] [level] msg"
// lines to stderr at `level` (trace|debug|info|warn|error|critical|off).
void SetUpConsoleLog(const std::string& level);

// Writes `text` to `fd` under the console mutex (whole lines stay whole).
void WriteConsole(int fd, const std::string& text);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_CONSOLE_LOG_H_
