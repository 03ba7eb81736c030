// The elastic agent's health check before each join (health_check.h): runs
// --health_check through the process launcher, so that a stop signal
// during the check or the wait between tries ends it as anywhere else.
#include <signal.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/signals.h"
#include "launcher/agent/elastic_agent.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How long the check may take to go once killed.
constexpr absl::Duration kKilledCheckWait = absl::Seconds(5);

}  // namespace

ElasticAgent::HealthRun ElasticAgent::RunHealthCheck() {
  HealthRun run;
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", o_.health_check.command};
  spec.env = o_.base_env;
  const std::string out = o_.log_root + "/health_check.stdout.log";
  const std::string err = o_.log_root + "/health_check.stderr.log";
  spec.stdout_sink = StreamSink{"[health_check]:", 1, out, {}, ""};
  spec.stderr_sink = StreamSink{"[health_check]:", 2, err, {}, ""};
  absl::StatusOr<pid_t> pid = o_.processes->Start(spec);
  if (!pid.ok()) {
    run.status = "could not start";
    run.why = std::string(pid.status().message());
    return run;
  }
  const absl::Time deadline = o_.clock->Now() + o_.health_check.timeout;
  bool killed = false;
  std::optional<ExitStatus> status;
  while (!status.has_value()) {
    const absl::Time now = o_.clock->Now();
    if (!killed && now >= deadline) {
      o_.processes->SignalGroup(*pid, SIGKILL);
      killed = true;
    }
    if (killed && now >= deadline + kKilledCheckWait) break;  // not reaped yet; the reaper will
    for (const ProcessEvent& e : o_.processes->Wait(killed ? deadline + kKilledCheckWait : deadline)) {
      if (e.kind == ProcessEvent::Kind::kExited && e.pid == *pid) status = e.status;
      if (e.kind == ProcessEvent::Kind::kSignal && IsStopSignal(e.signo) && run.stop_signal == 0) {
        run.stop_signal = e.signo;
        o_.processes->SignalGroup(*pid, SIGKILL);
        killed = true;
      }
    }
  }
  o_.processes->DrainOutput(absl::Now() + absl::Seconds(1));
  if (run.stop_signal != 0) return run;
  if (killed) {
    run.status = absl::StrCat("timed out after ", absl::FormatDuration(o_.health_check.timeout));
  } else {
    run.passed = status->success();
    run.status = status->ToString();
  }
  run.why = LastLine(ReadAll(err));
  if (run.why.empty()) run.why = LastLine(ReadAll(out));
  return run;
}

bool ElasticAgent::AwaitHealthy() {
  if (o_.health_check.command.empty()) return true;
  std::optional<absl::Time> out_since;
  for (int64_t attempt = 1;; ++attempt) {
    HealthRun run = RunHealthCheck();
    int signo = run.stop_signal;
    const absl::Time now = o_.clock->Now();
    if (signo == 0 && run.passed) {
      if (out_since.has_value()) {
        spdlog::info("health check passed after {} tries: joining", attempt);
        Event("health_check_passed", {{"attempt", attempt}, {"out_s", absl::ToDoubleSeconds(now - *out_since)}});
      }
      return true;
    }
    if (signo == 0) {
      if (!out_since.has_value()) out_since = now;
      Event("health_check_failed", {{"command", o_.health_check.command}, {"status", run.status},
                                    {"reason", run.why}, {"attempt", attempt}});
      if (DecideHealth(false, *out_since, now, o_.health_check) == HealthNext::kGiveUp) {
        Conclude(Stopped{StopCause::kAgentError,
                         absl::StrCat("health check failed for ", absl::FormatDuration(now - *out_since),
                                      " (--health_check ", o_.health_check.command, "): ", run.status,
                                      run.why.empty() ? "" : ": ", run.why)},
                 run_.last_round);
        return false;
      }
      spdlog::warn("this node stays out: health check failed ({}){}{}; trying again in {}", run.status,
                   run.why.empty() ? "" : ": ", run.why, absl::FormatDuration(o_.health_check.retry_interval));
      // The wait between tries, answering stop signals.
      const absl::Time next = now + o_.health_check.retry_interval;
      while (signo == 0 && o_.clock->Now() < next) {
        for (const ProcessEvent& e : o_.processes->Wait(next)) {
          if (e.kind == ProcessEvent::Kind::kSignal && IsStopSignal(e.signo)) signo = e.signo;
        }
      }
    }
    if (signo != 0) {
      NoteStopSignal();
      spdlog::warn("received {} during the health check: exiting", SignalName(signo));
      Conclude(Stopped{StopCause::kStopSignal, absl::StrCat("signal ", SignalName(signo)), 128 + signo},
               run_.last_round);
      return false;
    }
  }
}

}  // namespace cpptorchrun::launcher
