// The sample log's files.
#include "worker/training/sample_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"

namespace cpptorchrun::worker {

absl::StatusOr<std::unique_ptr<SampleLog>> SampleLog::Open(const std::string& dir, int64_t round,
                                                           int rank, int world_size) {
  if (absl::Status made = base::MakeDirs(dir); !made.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--sample_log: ", made.message()));
  }
  const std::string path =
      absl::StrCat(dir, "/samples.round", round, ".rank", rank, ".pid", ::getpid(), ".txt");
  absl::StatusOr<int> fd = Create(path);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<SampleLog> log(new SampleLog(*fd, dir, path));
  log->Write(absl::StrCat("# round ", round, " rank ", rank, " world ", world_size, "\n"));
  return log;
}

absl::StatusOr<int> SampleLog::Create(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sample_log: cannot create ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

absl::Status SampleLog::NextRound(int64_t round, int rank, int world_size) {
  const std::string path =
      absl::StrCat(dir_, "/samples.round", round, ".rank", rank, ".pid", ::getpid(), ".txt");
  absl::StatusOr<int> fd = Create(path);
  if (!fd.ok()) return fd.status();
  ::close(fd_);
  fd_ = *fd;
  path_ = path;
  Write(absl::StrCat("# round ", round, " rank ", rank, " world ", world_size, "\n"));
  return absl::OkStatus();
}

SampleLog::~SampleLog() { ::close(fd_); }

void SampleLog::Write(const std::string& line) {
  // A test aid: a full disk shows as a short log, not as a failed run.
  (void)base::WriteAll(fd_, line, path_);
}

void SampleLog::OnResumed(int64_t global_step) { Write(absl::StrCat("# resumed ", global_step, "\n")); }

void SampleLog::OnBatchStart(const StepReport& report) {
  std::string line = absl::StrCat(report.global_step, " ", report.epoch);
  for (int64_t i : report.samples) absl::StrAppend(&line, " ", i);
  line += '\n';
  Write(line);
}

}  // namespace cpptorchrun::worker
