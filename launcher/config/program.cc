// The program's argv.
#include "launcher/config/program.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::launcher {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string SearchPath(const std::string& name, const std::string& path_var,
                       const IsExecutableFn& is_executable) {
  for (absl::string_view dir : absl::StrSplit(path_var, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (is_executable(candidate)) return candidate;
  }
  return "";
}

absl::StatusOr<std::vector<std::string>> ResolveProgram(
    const LaunchConfig& config, const std::map<std::string, std::string>& env,
    const IsExecutableFn& is_executable, const ExistsFn& exists) {
  auto path_it = env.find("PATH");
  const std::string path_var =
      path_it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : path_it->second;
  auto resolve = [&](const std::string& program, const std::string& what)
      -> absl::StatusOr<std::string> {
    if (program.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty"));
    if (program.find('/') != std::string::npos) {
      if (!is_executable(program)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": '", program, "' is not an executable file",
            exists(program) ? " (add execute permission, or run a .py under python)" : " (not found)"));
      }
      return program;
    }
    std::string found = SearchPath(program, path_var, is_executable);
    if (found.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", program, "' is neither a .py file nor a program on PATH"));
    }
    return found;
  };

  std::vector<std::string> argv;
  const ProgramMode mode = ModeOf(config);
  if (mode == ProgramMode::kExecutable) {
    auto exe = resolve(config.training_script, "training_script");
    if (!exe.ok()) return exe.status();
    argv.push_back(*exe);
  } else {
    auto py_it = env.find("PYTHON_EXEC");
    const bool from_env = py_it != env.end() && !py_it->second.empty();
    auto python = resolve(from_env ? py_it->second : "python3", from_env ? "PYTHON_EXEC" : "python3");
    if (!python.ok()) return python.status();
    argv = {*python, "-u"};
    if (mode == ProgramMode::kModule) {
      argv.push_back("-m");
    } else if (!exists(config.training_script)) {
      return absl::InvalidArgumentError(
          absl::StrCat("training_script: '", config.training_script, "' not found"));
    }
    argv.push_back(config.training_script);
  }
  argv.insert(argv.end(), config.training_script_args.begin(), config.training_script_args.end());
  return argv;
}

}  // namespace cpptorchrun::launcher
