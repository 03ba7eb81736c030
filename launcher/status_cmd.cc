// The status subcommand: the table, the JSON, the watch loop.
#include "launcher/status_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/json.h"
#include "base/printable.h"
#include "base/token.h"
#include "rendezvous/connect.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/job_page.h"

namespace cpptorchrun::launcher {
namespace {

std::string Age(int64_t ms) {
  if (ms < 0) return "-";
  if (ms < 10000) return absl::StrFormat("%.1fs", ms / 1000.0);
  return absl::StrFormat("%ds", ms / 1000);
}

const char* StateName(rdzv::v1::RunStatusResponse::State s) {
  switch (s) {
    case rdzv::v1::RunStatusResponse::FORMING:
      return "FORMING";
    case rdzv::v1::RunStatusResponse::ACTIVE:
      return "ACTIVE";
    case rdzv::v1::RunStatusResponse::CLOSED:
      return "CLOSED";
    default:
      return "UNKNOWN";
  }
}

std::string UtcTime(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

std::string UtcMillis(int64_t unix_ms) { return UtcTime(absl::FromUnixMillis(unix_ms)); }

// "1,3"; "-" for none. Hosts are printed as printable text.
template <typename List>
std::string Listed(const List& items) {
  if (items.empty()) return "-";
  return absl::StrJoin(items, ",", [](std::string* out, const auto& item) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(item)>>) {
      absl::StrAppend(out, item);
    } else {
      absl::StrAppend(out, base::Printable(item));
    }
  });
}

// Each node's latest hang and straggler (NodeFaults), two tables, only
// when some node had one.
void AppendFaults(const rdzv::v1::RunStatusResponse& st, std::string* out) {
  bool header = false;
  for (const auto& n : st.nodes()) {
    if (!n.faults().has_last_hang()) continue;
    if (!header) {
      absl::StrAppendFormat(out, "\n%-5s %-20s %-9s %-14s %-8s %-8s %-10s %-8s %s\n", "NODE", "LAST_HANG",
                            "CULPRITS", "CULPRIT_HOSTS", "WAITING", "STEP", "COLLECTIVE", "WAITED_S", "STATES");
      header = true;
    }
    const rdzv::v1::HangReport& h = n.faults().last_hang();
    absl::StrAppendFormat(out, "%-5d %-20s %-9s %-14s %-8s %-8d %-10d %-8.1f %s\n", n.participant().group_rank(),
                          UtcMillis(h.unix_ms()), Listed(h.culprit_ranks()), Listed(h.culprit_hosts()),
                          Listed(h.waiting_ranks()), h.step(), h.collective_seq(), h.waited_s(),
                          base::Printable(h.process_states()));
  }
  header = false;
  for (const auto& n : st.nodes()) {
    if (!n.faults().has_last_straggler()) continue;
    if (!header) {
      absl::StrAppendFormat(out, "\n%-5s %-20s %-9s %-14s %-9s %s\n", "NODE", "LAST_STRAGGLER", "RANKS", "HOSTS",
                            "SLOWDOWN", "POLICY");
      header = true;
    }
    const rdzv::v1::StragglerReport& g = n.faults().last_straggler();
    absl::StrAppendFormat(out, "%-5d %-20s %-9s %-14s %-9.2f %s\n", n.participant().group_rank(),
                          UtcMillis(g.unix_ms()), Listed(g.ranks()), Listed(g.hosts()), g.slowdown(),
                          base::Printable(g.policy()));
  }
}

}  // namespace

std::string FormatStatusTable(const rdzv::v1::RunStatusResponse& st) {
  std::string out;
  int ranks = 0;
  for (const auto& n : st.nodes()) ranks += n.participant().local_world_size();
  absl::StrAppendFormat(&out, "run %s  round %d  state %s  nodes %d (waiting %d)  ranks %d\n",
                        base::Printable(st.run_id()), st.round(), StateName(st.state()), st.nodes_size(),
                        st.waiting_size(), ranks);
  if (!st.closed_reason().empty()) absl::StrAppendFormat(&out, "closed: %s\n", base::Printable(st.closed_reason()));
  if (st.server_store_budget() > 0) {
    absl::StrAppendFormat(&out, "server store: %.1f of %.1f MiB\n", st.server_store_bytes() / 1048576.0,
                          st.server_store_budget() / 1048576.0);
  }
  absl::StrAppendFormat(&out, "\n%-5s %-32s %-22s %-9s %-8s %s\n", "NODE", "NODE_ID", "HOST", "RANKS",
                        "RESTARTS", "KEEPALIVE_AGE");
  for (const auto& n : st.nodes()) {
    const auto& p = n.participant();
    std::string rank_range = p.local_world_size() > 0
                                 ? absl::StrCat(p.rank_offset(), "-", p.rank_offset() + p.local_world_size() - 1)
                                 : "-";
    absl::StrAppendFormat(&out, "%-5d %-32s %-22s %-9s %-8d %s\n", p.group_rank(), base::Printable(p.node_id()),
                          base::Printable(p.host()), rank_range, n.restart_count(), Age(n.heartbeat_age_ms()));
  }
  for (const auto& w : st.waiting()) {
    absl::StrAppendFormat(&out, "%-5s %-32s %-22s %-9s %-8s %s\n", "wait", base::Printable(w.node_id()),
                          base::Printable(w.host()), "-", "-", "-");
  }
  if (st.quarantined_size() > 0) {
    absl::StrAppendFormat(&out, "\n%-22s %-9s %-10s %s\n", "QUARANTINED_HOST", "FAILURES", "FOR", "WHY");
    for (const auto& q : st.quarantined()) {
      absl::StrAppendFormat(&out, "%-22s %-9d %-10s %s\n", base::Printable(q.host()), q.failures(),
                            Age(q.remaining_ms()), base::Printable(q.reason()));
    }
  }
  absl::StrAppendFormat(&out, "\n%-5s %-5s %-5s %-6s %-15s %-10s %-10s %s\n", "RANK", "LOCAL", "NODE", "EPOCH",
                        "STEP", "LOSS", "SAMPLES/S", "HEARTBEAT_AGE");
  for (const auto& n : st.nodes()) {
    for (const auto& r : n.progress()) {
      std::string step = r.total_steps() > 0 ? absl::StrCat(r.step(), "/", r.total_steps())
                                             : absl::StrCat(r.step());
      absl::StrAppendFormat(&out, "%-5d %-5d %-5d %-6d %-15s %-10.4f %-10.1f %s\n", r.rank(), r.local_rank(),
                            n.participant().group_rank(), r.epoch(), step, r.loss(), r.samples_per_s(),
                            Age(r.heartbeat_age_ms()));
    }
  }
  // Each node's last restart, where its launcher's time went.
  bool header = false;
  for (const auto& n : st.nodes()) {
    if (!n.has_last_restart() || n.last_restart().cause().empty()) continue;
    if (!header) {
      absl::StrAppendFormat(&out, "\n%-5s %-14s %-9s %-6s %-9s %-9s %-12s %-9s %-8s %-12s %-12s %s\n", "NODE",
                            "LAST_RESTART", "PATH", "ROUND", "TOTAL_S", "STOP_S", "RENDEZVOUS_S", "START_S", "COMM_S",
                            "CHECKPOINT_S", "FIRST_STEP_S", "TO_FIRST_STEP_S");
      header = true;
    }
    const auto& r = n.last_restart();
    // The workers' part is "-" until every worker has made its first step
    // (or for workers that send no start-up events).
    auto workers = [&r](double v) {
      return r.total_to_first_step_s() > 0 ? absl::StrFormat("%.3f", v) : std::string("-");
    };
    absl::StrAppendFormat(&out, "%-5d %-14s %-9s %-6d %-9.3f %-9.3f %-12.3f %-9.3f %-8s %-12s %-12s %s\n",
                          n.participant().group_rank(), base::Printable(r.cause()),
                          r.path().empty() ? std::string("gang") : base::Printable(r.path()), r.round(), r.total_s(),
                          r.detected_to_stopped_s(), r.stopped_to_joined_s(), r.joined_to_started_s(),
                          workers(r.started_to_comm_ready_s()), workers(r.comm_ready_to_restored_s()),
                          workers(r.restored_to_first_step_s()), workers(r.total_to_first_step_s()));
  }
  AppendFaults(st, &out);
  return out;
}

std::string FormatStatusJson(const rdzv::v1::RunStatusResponse& st) {
  using base::JsonNumber;
  using base::JsonString;
  std::string out = absl::StrCat("{\"schema_version\": 1, \"run_id\": ", JsonString(st.run_id()),
                                 ", \"state\": ", JsonString(StateName(st.state())),
                                 ", \"round\": ", JsonNumber(st.round()),
                                 ", \"version\": ", JsonNumber(st.version()),
                                 ", \"closed_reason\": ", JsonString(st.closed_reason()), ", \"nodes\": [");
  for (int i = 0; i < st.nodes_size(); ++i) {
    const auto& n = st.nodes(i);
    const auto& p = n.participant();
    std::string ranks;
    for (int r = 0; r < p.local_world_size(); ++r) {
      absl::StrAppend(&ranks, r > 0 ? ", " : "", JsonNumber(int64_t{p.rank_offset()} + r));
    }
    absl::StrAppend(&out, i > 0 ? ", " : "", "{\"group_rank\": ", JsonNumber(int64_t{p.group_rank()}),
                    ", \"node_id\": ", JsonString(p.node_id()), ", \"host\": ", JsonString(p.host()),
                    ", \"local_world_size\": ", JsonNumber(int64_t{p.local_world_size()}),
                    ", \"ranks\": [", ranks, "], \"restart_count\": ", JsonNumber(int64_t{n.restart_count()}),
                    ", \"keepalive_age_ms\": ", JsonNumber(n.heartbeat_age_ms()), ", \"last_restart\": ");
    if (n.has_last_restart() && !n.last_restart().cause().empty()) {
      const auto& r = n.last_restart();
      absl::StrAppend(&out, "{\"cause\": ", JsonString(r.cause()),
                      ", \"path\": ", JsonString(r.path().empty() ? std::string("gang") : r.path()),
                      ", \"round\": ", JsonNumber(r.round()),
                      ", \"total_s\": ", JsonNumber(r.total_s()),
                      ", \"detected_to_stopped_s\": ", JsonNumber(r.detected_to_stopped_s()),
                      ", \"stopped_to_joined_s\": ", JsonNumber(r.stopped_to_joined_s()),
                      ", \"joined_to_started_s\": ", JsonNumber(r.joined_to_started_s()),
                      ", \"started_to_comm_ready_s\": ", JsonNumber(r.started_to_comm_ready_s()),
                      ", \"comm_ready_to_restored_s\": ", JsonNumber(r.comm_ready_to_restored_s()),
                      ", \"restored_to_first_step_s\": ", JsonNumber(r.restored_to_first_step_s()),
                      ", \"total_to_first_step_s\": ", JsonNumber(r.total_to_first_step_s()), "}");
    } else {
      out += "null";
    }
    absl::StrAppend(&out, ", \"faults\": ", rdzv::NodeFaultsJson(n.faults()), "}");
  }
  out += "], \"waiting\": [";
  for (int i = 0; i < st.waiting_size(); ++i) {
    const auto& w = st.waiting(i);
    absl::StrAppend(&out, i > 0 ? ", " : "", "{\"node_id\": ", JsonString(w.node_id()), ", \"host\": ",
                    JsonString(w.host()), ", \"local_world_size\": ", JsonNumber(int64_t{w.local_world_size()}),
                    "}");
  }
  out += "], \"quarantined\": [";
  for (int i = 0; i < st.quarantined_size(); ++i) {
    const auto& q = st.quarantined(i);
    absl::StrAppend(&out, i > 0 ? ", " : "", "{\"host\": ", JsonString(q.host()),
                    ", \"failures\": ", JsonNumber(int64_t{q.failures()}),
                    ", \"remaining_ms\": ", JsonNumber(q.remaining_ms()), ", \"reason\": ", JsonString(q.reason()),
                    "}");
  }
  out += "], \"ranks\": [";
  bool first = true;
  for (const auto& n : st.nodes()) {
    for (const auto& r : n.progress()) {
      absl::StrAppend(&out, first ? "" : ", ", "{\"rank\": ", JsonNumber(int64_t{r.rank()}),
                      ", \"local_rank\": ", JsonNumber(int64_t{r.local_rank()}),
                      ", \"group_rank\": ", JsonNumber(int64_t{n.participant().group_rank()}),
                      ", \"epoch\": ", JsonNumber(r.epoch()), ", \"step\": ", JsonNumber(r.step()),
                      ", \"total_steps\": ", JsonNumber(r.total_steps()), ", \"loss\": ", JsonNumber(r.loss()),
                      ", \"samples_per_s\": ", JsonNumber(r.samples_per_s()),
                      ", \"heartbeat_age_ms\": ", JsonNumber(r.heartbeat_age_ms()), "}");
      first = false;
    }
  }
  absl::StrAppend(&out, "], \"server_store\": {\"bytes\": ", JsonNumber(st.server_store_bytes()),
                  ", \"budget\": ", JsonNumber(st.server_store_budget()), "}}");
  return out;
}

namespace {

// Erase to the end of each line (a shorter line leaves nothing of the
// longer one it overwrites), and below the last one.
std::string InPlace(const std::string& header, const std::string& body) {
  return absl::StrCat("\x1b[H", absl::StrReplaceAll(absl::StrCat(header, body), {{"\n", "\x1b[K\n"}}), "\x1b[J");
}

// Errors that another call may cure: the service is down, restarting, busy
// or slow.
bool Transient(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsResourceExhausted(s) ||
         absl::IsAborted(s) || absl::IsInternal(s) || absl::IsUnknown(s) || absl::IsCancelled(s);
}

}  // namespace

WatchTick DecideWatchTick(const WatchOptions& o, const WatchState& state, absl::Time now,
                          const absl::StatusOr<rdzv::v1::RunStatusResponse>& answer) {
  WatchTick tick;
  tick.state = state;
  const std::string where = absl::StrCat("cpptorchrun status: ", o.endpoint, ": ");
  if (!answer.ok()) {
    const absl::Status& s = answer.status();
    if (absl::IsNotFound(s) && state.seen_run) {
      // Forgotten after its end (the service keeps an ended run a while).
      tick.err = absl::StrCat(where, "the service no longer knows the run: it is over\n");
      tick.done = true;
      return tick;
    }
    // The service's messages are outside text: printable before printing.
    if (!Transient(s)) {
      tick.err = absl::StrCat(where, base::Printable(s.ToString()), "\n");
      tick.done = true;
      tick.exit_code = 1;
      return tick;
    }
    if (!state.failing_since) tick.state.failing_since = now;
    const absl::Duration failing = now - *tick.state.failing_since;
    if (failing >= o.unreachable_limit) {
      tick.err = absl::StrCat(where, "no answer for ", absl::FormatDuration(absl::Trunc(failing, absl::Seconds(1))),
                              " (more than ", absl::FormatDuration(o.unreachable_limit),
                              "): ", base::Printable(s.ToString()), "\n");
      tick.done = true;
      tick.exit_code = 1;
      return tick;
    }
    const std::string note =
        absl::StrCat("no answer since ", UtcTime(*tick.state.failing_since), ", retrying for up to ",
                     absl::FormatDuration(o.unreachable_limit), ": ", base::Printable(s.ToString()), "\n");
    if (o.terminal && !o.json) {
      tick.out = InPlace(absl::StrCat(note, "\n"), state.last_body);
    } else if (!state.failing_since) {
      tick.err = absl::StrCat(where, note);  // once a streak
    }
    return tick;
  }
  const rdzv::v1::RunStatusResponse& st = *answer;
  tick.state.failing_since.reset();
  tick.state.seen_run = true;
  if (st.nodes_size() > 0) tick.state.seen_nodes = true;
  // A finished job's nodes leave; its run stays, past its first round, with
  // nobody in it or waiting (the service forgets it later).
  const bool all_left = st.round() > 0 && st.nodes_size() == 0 && st.waiting_size() == 0;
  tick.done = all_left || st.state() == rdzv::v1::RunStatusResponse::CLOSED;
  std::string body;
  if (o.json) {
    body = FormatStatusJson(st) + "\n";
  } else if (all_left && state.seen_nodes) {
    // The last table that had the nodes says more than an empty one.
    body = absl::StrCat(state.last_body, "\nevery node has left the run: it is over\n");
  } else {
    body = FormatStatusTable(st);
  }
  if (o.json) {
    tick.out = body;
  } else if (o.terminal) {
    tick.out = InPlace(absl::StrCat("every ", absl::FormatDuration(o.interval), "  ", o.endpoint, "  ",
                                    UtcTime(now), tick.done ? "  (run over)" : "", "\n\n"),
                       body);
  } else if (body != state.last_body) {
    tick.out = absl::StrCat("-- ", UtcTime(now), " --\n", body, "\n");
  }
  tick.state.last_body = body;
  return tick;
}

int WatchStatus(const std::string& run_id, const WatchOptions& options, rdzv::RendezvousClient* client,
                const WatchIo& io) {
  WatchState state;
  for (;;) {
    absl::StatusOr<rdzv::v1::RunStatusResponse> answer = client->RunStatus(run_id);
    WatchTick tick = DecideWatchTick(options, state, io.clock->Now(), answer);
    if (!tick.out.empty()) io.out(tick.out);
    if (!tick.err.empty()) io.err(tick.err);
    if (tick.done) return tick.exit_code;
    state = std::move(tick.state);
    if (io.wait(options.interval)) return 0;
  }
}

int RunStatusCommand(const StatusConfig& config, const std::map<std::string, std::string>& env,
                     rdzv::RendezvousClient* client, const WatchIo* io) {
  // Before any thread exists (the gRPC client's), so that every thread
  // inherits the mask and the loop's sigtimedwait takes these signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (config.watch && io == nullptr) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::unique_ptr<rdzv::RendezvousClient> owned;
  if (client == nullptr) {
    rdzv::ClientOptions co;
    co.endpoint = config.rdzv_target.empty() ? rdzv::FormatEndpoint(config.rdzv_endpoint) : config.rdzv_target;
    co.tls_cert_file = config.cert_file;
    co.tls_key_file = config.key_file;
    co.retry_budget = absl::Seconds(5);
    co.call_timeout = absl::Seconds(5);
    std::string token_file = config.token_file;
    if (auto it = env.find("CPPTORCHRUN_RDZV_TOKEN_FILE"); token_file.empty() && it != env.end()) {
      token_file = it->second;
    }
    if (!token_file.empty()) {
      absl::StatusOr<std::string> token = base::ReadTokenFile(token_file);
      if (!token.ok()) {
        std::fprintf(stderr, "cpptorchrun status: %s\n", std::string(token.status().message()).c_str());
        return 2;
      }
      co.token = *token;
    }
    co.tls_root_cert_file = config.ca_file;
    if (auto it = env.find("CPPTORCHRUN_RDZV_CA_FILE"); co.tls_root_cert_file.empty() && it != env.end()) {
      co.tls_root_cert_file = it->second;
    }
    absl::StatusOr<std::unique_ptr<rdzv::RendezvousClient>> created = rdzv::CreateRendezvousClient(co);
    if (!created.ok()) {
      std::fprintf(stderr, "cpptorchrun status: %s\n", std::string(created.status().message()).c_str());
      return 2;
    }
    owned = *std::move(created);
    client = owned.get();
  }
  WatchIo real_io;
  if (io == nullptr) {
    real_io.clock = base::RealClock();
    real_io.wait = [&stop_signals](absl::Duration d) {
      const timespec ts = absl::ToTimespec(d);
      for (;;) {
        if (sigtimedwait(&stop_signals, nullptr, &ts) >= 0) return true;
        if (errno != EINTR) return false;  // EAGAIN: the time is up
      }
    };
    real_io.out = [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
    real_io.err = [](const std::string& s) { std::fwrite(s.data(), 1, s.size(), stderr); };
    io = &real_io;
  }
  WatchOptions options;
  options.json = config.json;
  options.terminal = io == &real_io && isatty(STDOUT_FILENO) == 1;
  options.interval = config.interval;
  options.endpoint = rdzv::FormatEndpoint(config.rdzv_endpoint);
  if (config.watch) return WatchStatus(config.rdzv_id, options, client, *io);
  auto st = client->RunStatus(config.rdzv_id);
  if (!st.ok()) {
    io->err(absl::StrCat("cpptorchrun status: ", options.endpoint, ": ", base::Printable(st.status().ToString()),
                         "\n"));
    return 1;
  }
  io->out(config.json ? FormatStatusJson(*st) + "\n" : FormatStatusTable(*st));
  return 0;
}

}  // namespace cpptorchrun::launcher
