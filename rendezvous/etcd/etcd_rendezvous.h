// The rendezvous on etcd: a RendezvousClient (rendezvous/client.h) whose
// round rules run in each agent, on a run state kept in etcd, instead of in
// a rendezvous server. There is no coordinator to lose: any agent applies
// the rules (rendezvous/rules.h, the same functions as the gRPC service's)
// and writes the outcome with a transaction on the state key's revision,
// so two agents deciding at once cannot both win; the loser rereads and
// decides again on what the winner wrote. docs/RENDEZVOUS.md ("On etcd")
// has the key layout (keys.h), the transactions and what etcd guarantees.
//
// Liveness is etcd's: each node holds a lease of TTL keep_alive_interval x
// keep_alive_max_attempt, renewed by KeepAlive (and while Join or Watch
// wait), with its alive key on it. A node whose lease expired (it died, or
// lost every etcd member for that long) has no alive key, and the next
// agent to read the state finds it dead, as the service finds a node that
// sent no keep-alive. Time-based rules (last_call_timeout, join_timeout)
// compare timestamps written by the agents' clocks: keep them in sync (NTP)
// to well within those timeouts.
//
// Security: etcd's own (its auth, TLS, who may write under the prefix).
// Whoever can write the prefix can change the run; the service's assignment
// signatures and node secrets have no part here.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "base/clock.h"
#include "rendezvous/client.h"
#include "rendezvous/etcd/keys.h"
#include "rendezvous/etcd/kv.h"

namespace cpptorchrun::rdzv::etcd {

struct EtcdRendezvousOptions {
  // The job's key prefix (keys.h ParsePrefix).
  std::string prefix = kDefaultPrefix;
  // Not owned. The rules' clock; leases expire on etcd's.
  base::Clock* clock = base::RealClock();
  // As ClientOptions::max_spare_wait.
  absl::Duration max_spare_wait = absl::Hours(24);
  // As ClientOptions::retry_budget: how long Join keeps trying while etcd
  // cannot answer (members down, no quorum) before it gives up with the
  // error etcd gave.
  absl::Duration retry_budget = absl::Seconds(60);
  // Most nodes a run may have (the service's Limits::max_nodes_per_run).
  int max_nodes_per_run = 1 << 16;
  // A state update that lost this many transactions in a row to other
  // writers gives up with ABORTED.
  int max_conflicts = 200;
};

std::unique_ptr<RendezvousClient> NewEtcdRendezvousClient(std::shared_ptr<Kv> kv,
                                                          const EtcdRendezvousOptions& options);

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_
