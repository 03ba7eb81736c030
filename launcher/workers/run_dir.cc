// The run folder.
#include "launcher/workers/run_dir.h"

#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

// sockaddr_un's sun_path is 108 bytes.
constexpr size_t kMaxSocketPath = 100;

// mkdir -p, then a writable folder.
bool MakeWritableDirs(const std::string& path, std::string* error) {
  if (absl::Status made = base::MakeDirs(path); !made.ok()) {
    *error = std::string(made.message());
    return false;
  }
  if (access(path.c_str(), W_OK) != 0) {
    *error = absl::StrCat(path, ": not writable");
    return false;
  }
  return true;
}

}  // namespace

void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return remove(p) == 0 ? 0 : 0; }, 16,
      FTW_DEPTH | FTW_PHYS);
}

absl::StatusOr<std::unique_ptr<RunDir>> RunDir::Create(const std::string& log_dir,
                                                       const std::string& run_id) {
  auto dir = std::unique_ptr<RunDir>(new RunDir());
  const char* tmp = std::getenv("TMPDIR");
  std::string base = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  if (base.size() + 40 > kMaxSocketPath) base = "/tmp";
  std::string templ = base + "/cpptorchrun-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a private folder in ", base, ": ", strerror(errno)));
  }
  chmod(templ.c_str(), 0700);
  dir->private_dir_ = templ;
  std::string error;
  if (log_dir.empty()) {
    // <private folder>/<run_id>_<unique>, the layout --log_dir gets.
    std::string own = absl::StrCat(templ, "/", run_id, "_XXXXXX");
    if (mkdtemp(own.data()) == nullptr) {
      const int err = errno;
      RemoveTree(templ);
      return absl::InternalError(absl::StrCat("cannot create a folder in ", templ, ": ", strerror(err)));
    }
    dir->log_root_ = own;
    dir->logs_in_private_ = true;
  } else {
    // A folder of this launcher's own (torchrun's <run_id>_<unique>): nodes
    // sharing --log_dir (one shared filesystem) and earlier runs of the same
    // id never write into each other's files. mkdtemp creates it with
    // O_EXCL semantics, so two launchers cannot both get one name.
    if (!MakeWritableDirs(log_dir, &error)) {
      RemoveTree(templ);
      return absl::InvalidArgumentError(absl::StrCat("--log_dir: cannot create ", error));
    }
    std::string own = absl::StrCat(log_dir, "/", run_id, "_XXXXXX");
    if (mkdtemp(own.data()) == nullptr) {
      const int err = errno;
      RemoveTree(templ);
      return absl::InvalidArgumentError(
          absl::StrCat("--log_dir: cannot create a folder in ", log_dir, ": ", strerror(err)));
    }
    chmod(own.c_str(), 0755);
    dir->log_root_ = own;
  }
  return dir;
}

void RunDir::Finish(bool keep_logs) {
  unlink(socket_path().c_str());
  if (logs_in_private_ && keep_logs) {
    spdlog::info("worker logs are in {}", log_root_);
    return;
  }
  RemoveTree(private_dir_);
}

}  // namespace cpptorchrun::launcher
