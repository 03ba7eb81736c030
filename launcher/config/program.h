// The program: turns the training script and its mode (.py under python,
// -m module, --no_python, or another executable) into the argv that each
// worker execs, with argv[0] resolved to a path before anything starts.
#ifndef CPPTORCHRUN_LAUNCHER_PROGRAM_H_
#define CPPTORCHRUN_LAUNCHER_PROGRAM_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/config/cli.h"

namespace cpptorchrun::launcher {

// True when `path` names an executable regular file (tests inject a fake).
using IsExecutableFn = std::function<bool(const std::string& path)>;
// True when `path` names an existing file.
using ExistsFn = std::function<bool(const std::string& path)>;

bool IsExecutableFile(const std::string& path);
bool FileExists(const std::string& path);

// Finds `name` (no '/') in `path_var` (colon-separated); empty when absent.
std::string SearchPath(const std::string& name, const std::string& path_var,
                       const IsExecutableFn& is_executable);

// The worker argv: python = $PYTHON_EXEC (else python3) searched on PATH.
// Errors (InvalidArgument, naming training_script or PYTHON_EXEC): a
// program that is not found or not executable, a missing .py file.
absl::StatusOr<std::vector<std::string>> ResolveProgram(
    const LaunchConfig& config, const std::map<std::string, std::string>& env,
    const IsExecutableFn& is_executable = IsExecutableFile, const ExistsFn& exists = FileExists);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_PROGRAM_H_
