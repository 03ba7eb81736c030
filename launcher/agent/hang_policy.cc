#include "launcher/agent/hang_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::launcher {

void ObserveStep(StepProgress& p, absl::Time now, int64_t step, int64_t total_steps) {
  p.total_steps = total_steps;
  if (p.step < 0) {
    // The first step heard of: the clock starts (at STARTED when that came first).
    if (!p.last_progress.has_value()) p.last_progress = now;
    p.step = step;
    return;
  }
  if (step < p.step) {
    p.recent_step_seconds.clear();
    p.first_step_estimate = false;
    p.stepping = false;
    p.step = step;
    p.last_progress = now;
    return;
  }
  if (step == p.step) return;
  const int64_t advanced = step - p.step;
  // The first advance since the start covers start-up, not steps.
  if (p.stepping) {
    const double each = absl::ToDoubleSeconds(now - *p.last_progress) / static_cast<double>(advanced);
    if (p.first_step_estimate) p.recent_step_seconds.clear();
    p.first_step_estimate = false;
    p.recent_step_seconds.push_back(each);
    while (p.recent_step_seconds.size() > kStepWindow) p.recent_step_seconds.pop_front();
  }
  p.step = step;
  p.last_progress = now;
  p.stepping = total_steps <= 0 || step < total_steps;
}

void ObserveFirstStep(StepProgress& p, absl::Time now, int64_t step, absl::Duration took) {
  if (p.stepping) return;  // its heartbeats showed it stepping already
  p.step = std::max(p.step, step);
  p.last_progress = now;
  p.stepping = p.total_steps <= 0 || p.step < p.total_steps;
  p.recent_step_seconds.assign(1, absl::ToDoubleSeconds(took));
  p.first_step_estimate = true;
}

namespace {

// `multiple` x the slowest recent step plus two heartbeat periods, between
// `floor` and the ceiling.
absl::Duration Adaptive(const StepProgress& p, const HangOptions& o, absl::Duration floor) {
  double slowest = 0;
  for (double s : p.recent_step_seconds) slowest = std::max(slowest, s);
  return std::clamp(absl::Seconds(slowest * o.multiple) + 2 * o.heartbeat_interval, floor, o.ceiling);
}

}  // namespace

absl::Duration HangDeadline(const StepProgress& p, const HangOptions& o) {
  return p.stepping ? Adaptive(p, o, o.floor) : o.startup;
}

namespace {

// When a heartbeating rank was last heard of, and when its step last
// advanced (before any step: its first sign of life), as the agent could
// see them: never before its watch began (RankWatch::watched_since).
absl::Time LastHeard(const RankWatch& r) { return std::max(*r.last_heartbeat, r.watched_since); }
absl::Time ProgressFrom(const RankWatch& r) {
  return std::max(r.progress.last_progress.value_or(*r.last_heartbeat), r.watched_since);
}

bool Stopped(const RankWatch& r) { return r.last_heartbeat.has_value() && r.stopped_since.has_value(); }

// The stopped rule's deadline (hang_policy.h): the adaptive one with the
// stopped floor; before the first step and after the last, the floor.
absl::Duration StoppedDeadline(const StepProgress& p, const HangOptions& o) {
  return p.stepping ? Adaptive(p, o, o.stopped_floor) : o.stopped_floor;
}

}  // namespace

absl::Duration RankDeadline(const RankWatch& r, const HangOptions& o) {
  return Stopped(r) ? std::min(StoppedDeadline(r.progress, o), HangDeadline(r.progress, o))
                    : HangDeadline(r.progress, o);
}

std::optional<absl::Time> StoppedLook(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (r.stopped_since.has_value()) return now + o.stopped_look;
  if (!r.last_heartbeat.has_value() || o.fixed_silence.has_value()) return std::nullopt;
  const absl::Time late = LastHeard(r) + 1.5 * o.heartbeat_interval;
  return late > now ? late : now + o.stopped_look;
}

bool BehindInCollectives(const RankWatch& r) { return r.job_collective_seq > r.collective_seq; }

bool NeedsJobCollectives(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (!r.last_heartbeat.has_value() || o.fixed_silence.has_value()) return false;
  if (r.frozen || now - LastHeard(r) > 3 * o.heartbeat_interval) return false;
  return now >= ProgressFrom(r) + HangDeadline(r.progress, o);
}

bool IsCulprit(const RankWatch& r, absl::Time now, const HangOptions& o) {
  return r.frozen || r.stopped_since.has_value() || BehindInCollectives(r) ||
         (r.last_heartbeat.has_value() && now - LastHeard(r) > 3 * o.heartbeat_interval);
}

std::optional<absl::Time> HangTime(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (!r.last_heartbeat.has_value()) {
    if (r.stopped_since.has_value()) return *r.stopped_since + o.stopped_floor;
    return std::nullopt;
  }
  if (o.fixed_silence.has_value()) return LastHeard(r) + *o.fixed_silence;
  const absl::Time from = ProgressFrom(r);
  const absl::Duration deadline = HangDeadline(r.progress, o);
  const absl::Time at = from + (IsCulprit(r, now, o) ? deadline : deadline * o.waiting_factor);
  if (!Stopped(r)) return at;
  // The stopped rule: stopped at every look for stopped_for, and no
  // advance for its own deadline.
  return std::min(at, std::max(*r.stopped_since + o.stopped_for, from + StoppedDeadline(r.progress, o)));
}

bool IsHung(const RankWatch& r, absl::Time now, const HangOptions& o) {
  std::optional<absl::Time> at = HangTime(r, now, o);
  return at.has_value() && now >= *at;
}

std::string HungMessage(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (!r.last_heartbeat.has_value()) {
    return absl::StrCat("hung: its process has been stopped (T) for ",
                        absl::FormatDuration(now - r.stopped_since.value_or(now)),
                        " without using CPU time (a worker without heartbeats: ", absl::FormatDuration(o.stopped_floor),
                        " stopped is a hang); killed");
  }
  if (o.fixed_silence.has_value()) {
    return absl::StrCat("hung: no heartbeat for ", absl::FormatDuration(now - r.last_heartbeat.value_or(now)),
                        " (--worker_timeout ", absl::FormatDuration(*o.fixed_silence), "); killed");
  }
  const StepProgress& p = r.progress;
  const absl::Time from = ProgressFrom(r);
  const std::string what =
      p.stepping ? absl::StrCat("step ", p.step, " has not advanced")
                 : (p.step > 0 && p.total_steps > 0 && p.step >= p.total_steps
                        ? absl::StrCat("no word since its last step (", p.step, ")")
                        : std::string("no first step"));
  const bool stopped = Stopped(r) && RankDeadline(r, o) < HangDeadline(p, o);
  const absl::Duration floor = stopped ? o.stopped_floor : o.floor;
  std::string rule =
      p.stepping ? absl::StrCat(o.multiple, " x its slowest recent step, ", absl::FormatDuration(floor), " to ",
                                absl::FormatDuration(o.ceiling))
                 : (stopped ? absl::StrCat(absl::FormatDuration(floor), " without a step")
                            : "before the first step and after the last");
  if (stopped) {
    absl::StrAppend(&rule, "; its process stopped (T) at every look for ",
                    absl::FormatDuration(now - *r.stopped_since));
  }
  const bool culprit = IsCulprit(r, now, o);
  std::string why;
  if (BehindInCollectives(r)) {
    why = absl::StrCat("it never issued collective ", r.job_collective_seq, " that its peers wait in (its newest: ",
                       r.collective_seq, "); ");
  } else if (culprit) {
    why = "its heartbeats stopped or it is frozen; ";
  }
  return absl::StrCat("hung: ", what, " for ", absl::FormatDuration(now - from), " (deadline ",
                      absl::FormatDuration(RankDeadline(r, o)), ": ", rule,
                      culprit ? "" : absl::StrCat("; x", o.waiting_factor, " while it still heartbeats"), "); ",
                      why, "killed");
}

}  // namespace cpptorchrun::launcher
