// The launcher's metrics (see launcher_metrics.h).
#include "launcher/agent/launcher_metrics.h"

#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::launcher {
namespace {

using base::prom::Type;

const EventValue* Field(const std::vector<EventField>& fields, absl::string_view name) {
  for (const auto& [key, value] : fields) {
    if (key == name) return &value;
  }
  return nullptr;
}

int64_t IntField(const std::vector<EventField>& fields, absl::string_view name, int64_t otherwise = 0) {
  const EventValue* v = Field(fields, name);
  if (v == nullptr) return otherwise;
  if (const int64_t* i = std::get_if<int64_t>(v)) return *i;
  if (const double* d = std::get_if<double>(v)) return static_cast<int64_t>(*d);
  return otherwise;
}

double DoubleField(const std::vector<EventField>& fields, absl::string_view name) {
  const EventValue* v = Field(fields, name);
  if (v == nullptr) return 0;
  if (const double* d = std::get_if<double>(v)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return 0;
}

std::string StringField(const std::vector<EventField>& fields, absl::string_view name) {
  const EventValue* v = Field(fields, name);
  if (v == nullptr) return "";
  if (const std::string* s = std::get_if<std::string>(v)) return *s;
  return "";
}

std::vector<double> RestartBuckets() { return {0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600}; }

}  // namespace

std::pair<std::string, std::string> FailureLabels(const std::string& status) {
  int code = 0;
  if (absl::StartsWith(status, "exit code ") && absl::SimpleAtoi(status.substr(10), &code) && code >= 0 &&
      code <= 255) {
    return {"code", absl::StrCat(code)};
  }
  if (absl::StartsWith(status, "signal SIG")) {
    const std::string name = status.substr(7, status.find(' ', 7) - 7);
    bool plain = name.size() <= 12;
    for (char c : name) plain = plain && ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-');
    if (plain) return {"signal", name};
  }
  if (status == "hung") return {"hung", ""};
  return {"other", ""};
}

MetricsEventLog::MetricsEventLog(EventLog* next) : next_(next) {
  counters_.restart_seconds.bounds = RestartBuckets();
  counters_.restart_seconds.counts.assign(counters_.restart_seconds.bounds.size() + 1, 0);
}

void MetricsEventLog::Record(absl::string_view event, std::vector<EventField> fields) {
  {
    absl::MutexLock lock(&mu_);
    LauncherCounters& c = counters_;
    if (event == "round_joined") {
      ++c.rounds_joined;
      c.round = IntField(fields, "round");
      c.group_rank = IntField(fields, "group_rank", -1);
      c.world_size = IntField(fields, "world_size");
    } else if (event == "workers_started") {
      ++c.group_starts;
      c.workers_started += IntField(fields, "local_world_size");
    } else if (event == "worker_failed") {
      ++c.worker_failures[FailureLabels(StringField(fields, "status"))];
    } else if (event == "worker_resumed") {
      ++c.resumes;
    } else if (event == "restart_completed") {
      // The workers' part of the same restart, once every worker made its first step.
      for (const char* phase : {"started_to_comm_ready_s", "comm_ready_to_restored_s", "restored_to_first_step_s"}) {
        c.last_restart_phases[phase] = DoubleField(fields, phase);
      }
      c.last_restart_phases["total_to_first_step_s"] = DoubleField(fields, "total_s");
    } else if (event == "recovered") {
      // Every recovery once complete, by the path it took (docs/DESIGN.md).
      ++c.recoveries[StringField(fields, "path") == "in_place" ? "in_place" : "gang"];
    } else if (event == "round_ended") {
      ++c.round_ends;
    } else if (event == "restart") {
      std::string cause = StringField(fields, "cause");
      if (cause != "worker_failed" && cause != "membership") cause = "other";
      ++c.restarts[cause];
      c.last_restart_phases.clear();  // a new restart: the workers' part follows
      for (const char* phase : {"detected_to_stopped_s", "stopped_to_joined_s", "joined_to_started_s", "total_s"}) {
        c.last_restart_phases[phase] = DoubleField(fields, phase);
      }
      const double total = DoubleField(fields, "total_s");
      base::prom::HistogramData& h = c.restart_seconds;
      size_t i = 0;
      while (i < h.bounds.size() && total > h.bounds[i]) ++i;
      ++h.counts[i];
      h.sum += total;
      ++h.count;
    } else if (event == "finished") {
      c.exit_code = IntField(fields, "exit_code");
    } else if (event == "hang_detected") {
      ++c.hangs;
    } else if (event == "straggler_detected") {
      ++c.stragglers;
    } else if (event == "file_timer_expired") {
      ++c.file_timers_expired;
    } else if (event == "health_check_failed") {
      ++c.health_checks_failed;
    } else if (event == "quarantined") {
      ++c.quarantined;
    } else if (event == "worker_unkillable") {
      ++c.workers_unkillable;
    }
  }
  if (next_ != nullptr) next_->Record(event, std::move(fields));
}

LauncherCounters MetricsEventLog::Counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void AppendLauncherMetrics(const LauncherCounters& c, const std::vector<RankReport>& ranks, absl::Time now,
                           base::prom::Exposition* out) {
  out->Get("cpptorchrun_launcher_rounds_joined_total", "Rounds this launcher joined.", Type::kCounter)
      .Add({}, c.rounds_joined);
  out->Get("cpptorchrun_launcher_round", "The round this launcher last joined.", Type::kGauge).Add({}, c.round);
  out->Get("cpptorchrun_launcher_group_rank", "This node's group rank in its round (-1: none yet).",
           Type::kGauge)
      .Add({}, c.group_rank);
  out->Get("cpptorchrun_launcher_world_size", "Workers in this launcher's round.", Type::kGauge)
      .Add({}, c.world_size);
  out->Get("cpptorchrun_launcher_worker_group_starts_total", "Times this launcher started its workers.",
           Type::kCounter)
      .Add({}, c.group_starts);
  out->Get("cpptorchrun_launcher_workers_started_total", "Worker processes started.", Type::kCounter)
      .Add({}, c.workers_started);
  auto& failures = out->Get("cpptorchrun_launcher_worker_failures_total",
                            "Workers that failed, by how: exit code, signal, or hung (killed).",
                            Type::kCounter);
  for (const auto& [labels, n] : c.worker_failures) {
    failures.Add({{"kind", labels.first}, {"value", labels.second}}, n);
  }
  out->Get("cpptorchrun_launcher_round_ends_total", "Rounds that ended under this launcher.", Type::kCounter)
      .Add({}, c.round_ends);
  out->Get("cpptorchrun_launcher_hangs_detected_total", "Hangs this launcher detected (hang_detected events).",
           Type::kCounter)
      .Add({}, c.hangs);
  out->Get("cpptorchrun_launcher_stragglers_detected_total",
           "Straggler reports of this launcher (straggler_detected events).", Type::kCounter)
      .Add({}, c.stragglers);
  out->Get("cpptorchrun_launcher_file_timers_expired_total",
           "torchrun file timers that expired and killed their worker.", Type::kCounter)
      .Add({}, c.file_timers_expired);
  out->Get("cpptorchrun_launcher_health_checks_failed_total", "--health_check runs that failed.", Type::kCounter)
      .Add({}, c.health_checks_failed);
  out->Get("cpptorchrun_launcher_quarantined_total",
           "Joins on which the rendezvous kept this node out (quarantined events).", Type::kCounter)
      .Add({}, c.quarantined);
  out->Get("cpptorchrun_launcher_workers_unkillable_total",
           "Workers still alive after SIGKILL that the launcher went on without.", Type::kCounter)
      .Add({}, c.workers_unkillable);
  out->Get("cpptorchrun_launcher_worker_resumes_total", "Workers that resumed from a checkpoint.",
           Type::kCounter)
      .Add({}, c.resumes);
  auto& restarts = out->Get("cpptorchrun_launcher_restarts_total", "Restarts of this node's workers, by cause.",
                            Type::kCounter);
  for (const char* cause : {"worker_failed", "membership", "other"}) {
    auto it = c.restarts.find(cause);
    restarts.Add({{"cause", cause}}, it == c.restarts.end() ? 0 : it->second);
  }
  auto& recoveries = out->Get("cpptorchrun_launcher_recoveries_total",
                              "Recoveries of this node's workers completed (every worker made its next step), by "
                              "path: in_place (the survivors kept running) or gang (the whole group restarted).",
                              Type::kCounter);
  for (const char* path : {"in_place", "gang"}) {
    auto it = c.recoveries.find(path);
    recoveries.Add({{"path", path}}, it == c.recoveries.end() ? 0 : it->second);
  }
  out->Get("cpptorchrun_launcher_restart_duration_seconds",
           "Each restart's time in the launcher, from the failure's detection to the new workers' start.",
           Type::kHistogram)
      .AddHistogram({}, c.restart_seconds);
  auto& phases = out->Get("cpptorchrun_launcher_last_restart_phase_seconds",
                          "The last restart's phases (detected_to_stopped, stopped_to_joined, "
                          "joined_to_started, total; then the workers' started_to_comm_ready, "
                          "comm_ready_to_restored, restored_to_first_step, total_to_first_step).",
                          Type::kGauge);
  for (const auto& [phase, seconds] : c.last_restart_phases) {
    phases.Add({{"phase", phase.substr(0, phase.size() - 2)}}, seconds);
  }
  out->Get("cpptorchrun_launcher_exit_code", "The launcher's exit code once it finished (-1: running).",
           Type::kGauge)
      .Add({}, c.exit_code);
  auto& step = out->Get("cpptorchrun_launcher_rank_step", "The rank's latest step.", Type::kGauge);
  auto& epoch = out->Get("cpptorchrun_launcher_rank_epoch", "The rank's latest epoch.", Type::kGauge);
  auto& loss = out->Get("cpptorchrun_launcher_rank_loss", "The rank's latest loss.", Type::kGauge);
  auto& speed = out->Get("cpptorchrun_launcher_rank_samples_per_second", "The rank's latest samples/s.",
                         Type::kGauge);
  auto& age = out->Get("cpptorchrun_launcher_rank_heartbeat_age_seconds",
                       "Seconds since the rank's last heartbeat (absent before its first).", Type::kGauge);
  for (const RankReport& r : ranks) {
    if (!r.last_heartbeat.has_value() || r.heartbeat.pid() == 0) continue;  // no heartbeat yet
    const base::prom::Labels labels = {{"rank", absl::StrCat(r.heartbeat.rank())},
                                       {"local_rank", absl::StrCat(r.heartbeat.local_rank())}};
    step.Add(labels, r.heartbeat.step());
    epoch.Add(labels, r.heartbeat.epoch());
    loss.Add(labels, r.heartbeat.loss());
    speed.Add(labels, r.heartbeat.samples_per_s());
    age.Add(labels, absl::ToDoubleSeconds(now - *r.last_heartbeat));
  }
}

}  // namespace cpptorchrun::launcher
