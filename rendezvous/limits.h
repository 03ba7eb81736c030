// Server limits on what one client may ask for, and the checks of incoming
// identifiers and sizes against them. Each check's error names the limit.
#ifndef CPPTORCHRUN_RENDEZVOUS_LIMITS_H_
#define CPPTORCHRUN_RENDEZVOUS_LIMITS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/rendezvous.pb.h"

namespace cpptorchrun::rdzv {

struct Limits {
  // Largest request gRPC accepts (RESOURCE_EXHAUSTED beyond it).
  int max_message_bytes = 4 << 20;
  int max_key_bytes = 1024;
  int max_value_bytes = 1 << 20;
  int max_keys_per_run = 100000;
  // Bytes of keys and values held: per run, and in the whole server (a
  // store budget that one run cannot take alone).
  int64_t max_store_bytes_per_run = int64_t{64} << 20;
  int64_t max_store_bytes = int64_t{1} << 30;
  int max_runs = 1000;
  // Runs one client address may create when the server has no token
  // (anyone who reaches the port may then call); 0: no limit.
  int max_runs_per_client = 100;
  // Run ids: [A-Za-z0-9._-], 1..max_run_id_length characters.
  int max_run_id_length = 128;
  // Node ids and hosts: 1..max_node_id_bytes bytes.
  int max_node_id_bytes = 256;
  int max_nodes_per_run = 100000;
  // Leave and Close reasons (they are kept, logged and shown by Status).
  int max_reason_bytes = 1024;
  // Workers on one node (local_world_size), and progress rows in one
  // keep-alive.
  int max_local_world_size = 1 << 16;
  // Rounds with more nodes get assignments without the participant list
  // (their agents then cannot re-register after a server restart; they
  // re-join instead).
  int max_participants_in_assignment = 4096;
  // Keys in one MultiGet / MultiSet.
  int max_keys_per_call = 10000;
  // The longest the server holds one Join or Watch call before answering
  // PENDING / the unchanged event (the client re-issues it).
  absl::Duration long_poll_bound = absl::Seconds(5);
  // The longest one Get / MultiGet waits server-side (clients re-issue).
  absl::Duration store_wait_bound = absl::Seconds(30);

  // Connections (gRPC channel arguments of the server).
  // Concurrent calls on one connection (each agent and worker has its own
  // connections; the benchmark multiplexes ~300 agents on one).
  int max_concurrent_streams = 1000;
  // A connection with no call for this long is closed (clients reconnect
  // when they next call): idle, half-open and never-speaking sockets end.
  absl::Duration max_connection_idle = absl::Seconds(60);
  // The server pings a connection silent this long, and closes it when the
  // ping is not answered within keepalive_timeout (dead peers).
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // TLS ports: the handshake must finish within this.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Memory gRPC may use for its buffers (a ResourceQuota): past it, gRPC
  // shrinks reads and refuses new streams rather than growing.
  int64_t memory_budget_bytes = int64_t{512} << 20;
};

// InvalidArgument naming the rule broken. Node ids and hosts are printed in
// logs and tables: no control characters in them.
absl::Status ValidateRunId(absl::string_view run_id, const Limits& limits);
absl::Status ValidateNodeInfo(const v1::NodeInfo& node, const Limits& limits);
absl::Status ValidateNodeId(absl::string_view node_id, const Limits& limits);
absl::Status ValidateScope(const v1::Scope& scope, const Limits& limits);
absl::Status ValidateKey(absl::string_view key, const Limits& limits);
// A Leave or Close reason: at most max_reason_bytes.
absl::Status ValidateReason(absl::string_view reason, const Limits& limits);
// ResourceExhausted when over max_value_bytes.
absl::Status ValidateValue(absl::string_view key, absl::string_view value, const Limits& limits);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_LIMITS_H_
