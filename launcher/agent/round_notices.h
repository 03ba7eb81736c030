// Round notices: what the launcher tells each worker that stays through a
// round change (in-place recovery, docs/DESIGN.md): per local rank a state
// (agent.proto's RoundUpdate: RUNNING, CHANGING, ASSIGNED with the new
// round's environment, STOP) and a generation that counts its changes. The
// worker long-polls it over the agent service (AwaitRound); the agent sets
// it. Thread-safe.
#ifndef CPPTORCHRUN_LAUNCHER_AGENT_ROUND_NOTICES_H_
#define CPPTORCHRUN_LAUNCHER_AGENT_ROUND_NOTICES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/agent.pb.h"

namespace cpptorchrun::launcher {

class RoundNotices {
 public:
  using Update = agent::v1::RoundUpdate;
  using Done = std::function<void(const Update&)>;

  // Local rank `local_rank`'s worker is now `pid` with `state` (env: the
  // new round's environment for ASSIGNED). Bumps the slot's generation and
  // answers the waiters of that slot whose pid is `pid`.
  // `at_step_boundary`: a CHANGING that may wait for the worker's next step
  // boundary (agent.proto).
  void Set(int local_rank, int64_t pid, Update::State state, const std::string& reason,
           std::map<std::string, std::string> env = {}, bool at_step_boundary = false);
  // Every slot goes to STOP (the group is stopped as a whole): waiters are
  // answered, later queries too.
  void StopAll(const std::string& reason);
  // A new group started as a whole: every slot forgotten (its workers are
  // new processes), a stop too. Waiters are answered STOP first.
  void Reset();
  // What (local_rank, pid) should be told now: its slot's update, or
  // RUNNING at generation 0 for a pid the slot does not hold.
  Update Current(int local_rank, int64_t pid) const;

  // Calls `done` exactly once, under the notices' lock (it must not call
  // back into them): at once when the update for (local_rank, pid) is newer
  // than `known`, else at its next change; unless Unwatch(id) comes first.
  // Returns the id (0: answered already).
  int64_t Watch(int local_rank, int64_t pid, int64_t known_generation, Done done);
  // After it returns, the watch's `done` is not called (if it has not been).
  void Unwatch(int64_t id);
  // Waiters now (for tests).
  int waiting() const;

 private:
  struct Slot {
    int64_t pid = 0;
    Update update;
  };
  struct Waiter {
    int local_rank = 0;
    int64_t pid = 0;
    int64_t known = 0;
    Done done;
  };
  Update CurrentLocked(int local_rank, int64_t pid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnswerLocked(int local_rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int, Slot> slots_ ABSL_GUARDED_BY(mu_);
  int64_t stop_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_AGENT_ROUND_NOTICES_H_
