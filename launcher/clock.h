// Clock: the launcher's source of time, behind an interface so that the
// supervision loop and its timeouts are tested with a fake clock.
#ifndef CPPTORCHRUN_LAUNCHER_CLOCK_H_
#define CPPTORCHRUN_LAUNCHER_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cpptorchrun::launcher {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// The wall clock: a process-wide instance, never destroyed.
Clock* RealClock();

// Moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  // Moves to `t` if it is later than now.
  void AdvanceTo(absl::Time t) {
    absl::MutexLock lock(&mu_);
    if (t > now_) now_ = t;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_CLOCK_H_
