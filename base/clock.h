// Clock: the source of time for every decision that has a deadline (the
// rendezvous server's rounds and held calls, the launcher's supervision),
// behind an interface so that tests drive deadlines with a fake clock
// instead of sleeping. Waits that only bound real time (the exit barrier,
// draining output) use absl::Now directly.
#ifndef CPPTORCHRUN_BASE_CLOCK_H_
#define CPPTORCHRUN_BASE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cpptorchrun::base {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// The wall clock; a process-wide instance that is never destroyed.
Clock* RealClock();

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1)) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_CLOCK_H_
