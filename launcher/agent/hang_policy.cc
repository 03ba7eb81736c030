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

absl::Duration HangDeadline(const StepProgress& p, const HangOptions& o) {
  if (!p.stepping) return o.startup;
  double slowest = 0;
  for (double s : p.recent_step_seconds) slowest = std::max(slowest, s);
  const absl::Duration adaptive = absl::Seconds(slowest * o.multiple) + 2 * o.heartbeat_interval;
  return std::clamp(adaptive, o.floor, o.ceiling);
}

bool BehindInCollectives(const RankWatch& r) { return r.job_collective_seq > r.collective_seq; }

bool NeedsJobCollectives(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (!r.last_heartbeat.has_value() || o.fixed_silence.has_value()) return false;
  if (r.frozen || now - *r.last_heartbeat > 3 * o.heartbeat_interval) return false;
  const absl::Time from = r.progress.last_progress.value_or(*r.last_heartbeat);
  return now >= from + HangDeadline(r.progress, o);
}

bool IsCulprit(const RankWatch& r, absl::Time now, const HangOptions& o) {
  return r.frozen || r.stopped_since.has_value() || BehindInCollectives(r) ||
         (r.last_heartbeat.has_value() && now - *r.last_heartbeat > 3 * o.heartbeat_interval);
}

std::optional<absl::Time> HangTime(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (!r.last_heartbeat.has_value()) {
    if (r.stopped_since.has_value()) return *r.stopped_since + o.floor;
    return std::nullopt;
  }
  if (o.fixed_silence.has_value()) return *r.last_heartbeat + *o.fixed_silence;
  // A worker that heartbeats without a step yet (an event only) counts
  // from its first sign of life.
  const absl::Time from = r.progress.last_progress.value_or(*r.last_heartbeat);
  const absl::Duration deadline = HangDeadline(r.progress, o);
  return from + (IsCulprit(r, now, o) ? deadline : deadline * o.waiting_factor);
}

bool IsHung(const RankWatch& r, absl::Time now, const HangOptions& o) {
  std::optional<absl::Time> at = HangTime(r, now, o);
  return at.has_value() && now >= *at;
}

std::string HungMessage(const RankWatch& r, absl::Time now, const HangOptions& o) {
  if (!r.last_heartbeat.has_value()) {
    return absl::StrCat("hung: its process has been stopped (T) for ",
                        absl::FormatDuration(now - r.stopped_since.value_or(now)), " (a worker without heartbeats: ",
                        absl::FormatDuration(o.floor), " stopped is a hang); killed");
  }
  if (o.fixed_silence.has_value()) {
    return absl::StrCat("hung: no heartbeat for ", absl::FormatDuration(now - r.last_heartbeat.value_or(now)),
                        " (--worker_timeout ", absl::FormatDuration(*o.fixed_silence), "); killed");
  }
  const StepProgress& p = r.progress;
  const absl::Time from = p.last_progress.value_or(r.last_heartbeat.value_or(now));
  const std::string what =
      p.stepping ? absl::StrCat("step ", p.step, " has not advanced")
                 : (p.step > 0 && p.total_steps > 0 && p.step >= p.total_steps
                        ? absl::StrCat("no word since its last step (", p.step, ")")
                        : std::string("no first step"));
  const std::string rule =
      p.stepping ? absl::StrCat(o.multiple, " x its slowest recent step, ", absl::FormatDuration(o.floor),
                                " to ", absl::FormatDuration(o.ceiling))
                 : "before the first step and after the last";
  const bool culprit = IsCulprit(r, now, o);
  std::string why;
  if (BehindInCollectives(r)) {
    why = absl::StrCat("it never issued collective ", r.job_collective_seq, " that its peers wait in (its newest: ",
                       r.collective_seq, "); ");
  } else if (culprit) {
    why = "its heartbeats stopped or it is frozen; ";
  }
  return absl::StrCat("hung: ", what, " for ", absl::FormatDuration(now - from), " (deadline ",
                      absl::FormatDuration(HangDeadline(p, o)), ": ", rule,
                      culprit ? "" : absl::StrCat("; x", o.waiting_factor, " while it still heartbeats"), "); ",
                      why, "killed");
}

}  // namespace cpptorchrun::launcher
