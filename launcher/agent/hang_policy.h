// When a worker is hung: a deadline that adapts to each rank's own step
// times, as pure functions of (now, what its heartbeats said, options).
//
// A rank that heartbeats (the C++ `train` does) is hung when its step has
// not advanced for its deadline:
// - before its first step and after its last (start-up, evaluation, the
//   final checkpoint): `startup`;
// - while it steps: `multiple` x the slowest of its recent steps, plus two
//   heartbeat periods (the progress is seen a heartbeat late), kept
//   between `floor` and `ceiling`. A 30 ms step is declared hung after the
//   floor (10 s by default); a 60 s step is given 10 minutes. A job that
//   slows down gradually carries its deadline along: the window holds only
//   recent steps.
// A rank that still heartbeats while its step is stuck is most likely
// waiting in a collective for a peer, unless its flight recorder shows it
// never issued the collective the others are in (then it is the culprit):
// it is given `waiting_factor` x its deadline, so that the node of the peer that is itself stuck (its
// heartbeats stopped, or its process stopped or in uninterruptible sleep:
// the culprit) acts first and names it.
// An explicit --worker_timeout replaces the rule by today's: hung after
// that much silence (no heartbeat), whatever the steps.
// A rank that heartbeats and whose process has been seen stopped (T: a
// SIGSTOP, a terminal's stop) at every look, using no CPU time between
// looks, for `stopped_for` cannot step
// until someone continues it, and is in none of the slow moments the
// floor allows for (a page-fault storm, a slow file system, a long
// collective): its deadline's floor is `stopped_floor` instead, and before
// its first step it is hung once stopped that long. A stop shows first as
// silence: once a rank's heartbeat is late (1.5 periods) and while it is
// stopped, the monitor looks every `stopped_look`. A throttled rank (a CPU
// quota, stopped and continued many times a second) still steps, and is
// never stopped at every look with no advance.
// Time the agent itself did not run (a whole job suspended by Slurm, the
// launcher stopped with its workers) counts against nobody: RankWatch's
// `watched_since` moves to the look after the break.
// A worker that never heartbeats (a Python script) has no steps to judge:
// it is hung only when its process has been seen stopped (T) at every look,
// using no CPU time between looks, for `stopped_floor` (a SIGSTOP, a
// job-control stop), never for slowness, I/O (D, which may be brief) or a
// debugger's trace (t).
#ifndef CPPTORCHRUN_LAUNCHER_AGENT_HANG_POLICY_H_
#define CPPTORCHRUN_LAUNCHER_AGENT_HANG_POLICY_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace cpptorchrun::launcher {

struct HangOptions {
  // --worker_timeout, when given: a fixed bound on silence instead.
  std::optional<absl::Duration> fixed_silence;
  absl::Duration startup = absl::Seconds(300);
  absl::Duration floor = absl::Seconds(10);
  absl::Duration ceiling = absl::Minutes(30);
  double multiple = 10;
  double waiting_factor = 2;
  // A stopped rank (see above).
  absl::Duration stopped_floor = absl::Seconds(2);
  absl::Duration stopped_for = absl::Seconds(1);
  absl::Duration stopped_look = absl::Milliseconds(250);
  // The workers' heartbeat period (worker/agent/heartbeat.h: 1 s).
  absl::Duration heartbeat_interval = absl::Seconds(1);
};

// How many recent steps a rank's deadline looks at.
inline constexpr size_t kStepWindow = 32;

// A rank's progress as its heartbeats showed it (ProgressBoard keeps it).
struct StepProgress {
  // When its step last advanced; before the first step, when it started
  // (STARTED or its first heartbeat). None: never heard of.
  std::optional<absl::Time> last_progress;
  int64_t step = -1;         // the last step heard of; -1: none yet
  int64_t total_steps = 0;   // the job's, as the worker said; 0: unknown
  bool stepping = false;     // a step advanced since it started, and not the last one
  // Seconds per step over the last advances (newest last), at most kStepWindow.
  std::deque<double> recent_step_seconds;
  // recent_step_seconds holds only the first step's time (ObserveFirstStep),
  // replaced by the first measured step.
  bool first_step_estimate = false;
};

// Updates `p` with a heartbeat at `now` saying `step` of `total_steps`.
// An advance of several steps since the last one counts each as the
// average; a step that goes back (a restart's resume) restarts the window.
void ObserveStep(StepProgress& p, absl::Time now, int64_t step, int64_t total_steps);

// Updates `p` with the worker's FIRST_STEP event at `now` (its first step
// is `step`, and took `took` from its communicator or restore): it steps
// from now on, and `took` is its first step time (a generous one: it holds
// the warm-up; the first step measured from heartbeats replaces it), so that a worker stopped right after its first step is
// judged by its steps, not by the start-up deadline.
void ObserveFirstStep(StepProgress& p, absl::Time now, int64_t step, absl::Duration took);

// The rank's deadline, counted from p.last_progress (fixed_silence: from
// the last heartbeat; the caller applies it).
absl::Duration HangDeadline(const StepProgress& p, const HangOptions& options);

// A rank as the monitor sees it at a look.
struct RankWatch {
  StepProgress progress;
  std::optional<absl::Time> last_heartbeat;  // none: never heartbeated
  bool frozen = false;                       // stopped (T) or in uninterruptible sleep (D)
  // Since when its process has been stopped (T) at every look; none: it
  // is not stopped now.
  std::optional<absl::Time> stopped_since;
  // Its flight recorder's newest collective (agent.proto collective_seq),
  // and the newest any rank of the job issued, as far as known (0: not
  // known). Collectives run in the same order on every rank, so a rank
  // below the job's never issued the collective the others wait in: it is
  // stuck itself (its data loader, its own code), a culprit.
  int64_t collective_seq = 0;
  int64_t job_collective_seq = 0;
  // Since when the agent has looked without a break (see above): nothing
  // before counts against the rank.
  absl::Time watched_since = absl::InfinitePast();
};

// The deadline that applies to the rank, counted from its last progress:
// HangDeadline, or the stopped rule's while its process is stopped.
absl::Duration RankDeadline(const RankWatch& rank, const HangOptions& options);

// When the monitor should look at the rank next for the stopped rule (see
// above); none: no sooner than its deadline.
std::optional<absl::Time> StoppedLook(const RankWatch& rank, absl::Time now, const HangOptions& options);

// Whether `rank` is behind the job's collectives (see RankWatch).
bool BehindInCollectives(const RankWatch& rank);

// Whether the rank's verdict now depends on the other ranks' collectives:
// it heartbeats, is not a culprit by what this node sees, and is past its
// own deadline (only the collectives can make it a culprit before twice
// that). The monitor then learns the job's newest collective.
bool NeedsJobCollectives(const RankWatch& rank, absl::Time now, const HangOptions& options);

// Whether the rank is itself stuck at `now` (frozen, or silent for more
// than three heartbeat periods), not waiting on a peer.
bool IsCulprit(const RankWatch& rank, absl::Time now, const HangOptions& options);

// When the rank is hung, as things stand at `now` (for the monitor's next
// look); nullopt when never (no heartbeat yet).
std::optional<absl::Time> HangTime(const RankWatch& rank, absl::Time now, const HangOptions& options);

// Whether the rank is hung at `now`.
bool IsHung(const RankWatch& rank, absl::Time now, const HangOptions& options);

// What a hung worker's failure says: what it did not do for how long, and
// the bound of the rule that applied ("hung: step 120 has not advanced for
// 10.2s (deadline 10s: 10 x its slowest recent step, at least 10s); killed").
std::string HungMessage(const RankWatch& rank, absl::Time now, const HangOptions& options);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_AGENT_HANG_POLICY_H_
