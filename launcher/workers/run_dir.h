// The run folder: a private (0700) temporary folder per launcher holding
// the agent socket, and the root of the worker logs and error files:
// with --log_dir a new folder <log_dir>/<run_id>_<6 random characters> of
// this launcher's own (as torchrun's), else the same under the private
// folder: <private folder>/<run_id>_<6 random characters>.
#ifndef CPPTORCHRUN_LAUNCHER_RUN_DIR_H_
#define CPPTORCHRUN_LAUNCHER_RUN_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cpptorchrun::launcher {

class RunDir {
 public:
  // Creates the private folder (under $TMPDIR when its paths fit a Unix
  // socket, else /tmp) and the log root. Errors name --log_dir when the log
  // root cannot be created.
  static absl::StatusOr<std::unique_ptr<RunDir>> Create(const std::string& log_dir,
                                                        const std::string& run_id);
  const std::string& private_dir() const { return private_dir_; }
  const std::string& log_root() const { return log_root_; }
  std::string socket_path() const { return private_dir_ + "/agent.sock"; }
  // Removes the socket, and the private folder unless it holds logs the
  // user asked for (`keep_logs` and no --log_dir).
  void Finish(bool keep_logs);

 private:
  std::string private_dir_;
  std::string log_root_;
  bool logs_in_private_ = false;
};

// Removes `path` and everything below it. Best effort.
void RemoveTree(const std::string& path);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_RUN_DIR_H_
