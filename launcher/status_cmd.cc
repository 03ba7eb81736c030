// The status subcommand.
#include "launcher/status_cmd.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/printable.h"
#include "base/token.h"
#include "rendezvous/endpoint.h"

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

}  // namespace

std::string FormatStatusTable(const rdzv::v1::RunStatusResponse& st) {
  std::string out;
  int ranks = 0;
  for (const auto& n : st.nodes()) ranks += n.participant().local_world_size();
  absl::StrAppendFormat(&out, "run %s  round %d  state %s  nodes %d (waiting %d)  ranks %d\n",
                        st.run_id(), st.round(), StateName(st.state()), st.nodes_size(),
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
    absl::StrAppendFormat(&out, "%-5d %-32s %-22s %-9s %-8d %s\n", p.group_rank(), p.node_id(), p.host(),
                          rank_range, n.restart_count(), Age(n.heartbeat_age_ms()));
  }
  for (const auto& w : st.waiting()) {
    absl::StrAppendFormat(&out, "%-5s %-32s %-22s %-9s %-8s %s\n", "wait", w.node_id(), w.host(), "-", "-", "-");
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
      absl::StrAppendFormat(&out, "\n%-5s %-14s %-6s %-9s %-9s %-11s %s\n", "NODE", "LAST_RESTART", "ROUND",
                            "TOTAL_S", "STOP_S", "RENDEZVOUS_S", "START_S");
      header = true;
    }
    const auto& r = n.last_restart();
    absl::StrAppendFormat(&out, "%-5d %-14s %-6d %-9.3f %-9.3f %-11.3f %.3f\n", n.participant().group_rank(),
                          base::Printable(r.cause()), r.round(), r.total_s(), r.detected_to_stopped_s(),
                          r.stopped_to_joined_s(), r.joined_to_started_s());
  }
  return out;
}

int RunStatusCommand(const StatusConfig& config, const std::map<std::string, std::string>& env,
                     rdzv::RendezvousClient* client) {
  std::unique_ptr<rdzv::RendezvousClient> owned;
  if (client == nullptr) {
    rdzv::ClientOptions co;
    co.endpoint = rdzv::FormatEndpoint(config.rdzv_endpoint);
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
    owned = rdzv::NewGrpcRendezvousClient(co);
    client = owned.get();
  }
  auto st = client->RunStatus(config.rdzv_id);
  if (!st.ok()) {
    std::fprintf(stderr, "cpptorchrun status: %s: %s\n", rdzv::FormatEndpoint(config.rdzv_endpoint).c_str(),
                 st.status().ToString().c_str());
    return 1;
  }
  std::string table = FormatStatusTable(*st);
  std::fwrite(table.data(), 1, table.size(), stdout);
  return 0;
}

}  // namespace cpptorchrun::launcher
