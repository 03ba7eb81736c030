// The hierarchical communicator (Horovod's hierarchical all-reduce): for
// ranks on several nodes, each node's ranks reduce among themselves over
// shared memory, one leader per node (its local rank 0) all-reduces the
// node's sum with the other leaders over Gloo, and each leader hands the
// result back to its node over shared memory. Only one rank per node puts
// bytes on the network, and only 1/nodes of the Gloo ring's traffic crosses
// it per node instead of (world-1)/world per rank.
//
// The ranks of a node must be contiguous (the rendezvous gives a node the
// ranks [offset, offset + LOCAL_WORLD_SIZE), nodes in GROUP_RANK order); the
// bootstrap checks it through the store and refuses otherwise. Collectives
// run on a CommThread (asynchronous, in issue order); a failure of any stage
// aborts both inner communicators, so the node's other ranks fail fast
// instead of waiting out the timeout.
#ifndef CPPTORCHRUN_WORKER_COMM_HIERARCHICAL_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_HIERARCHICAL_COMM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

// Where the nodes' ranks start: first_rank[g] is the lowest rank of the node
// of group rank g; the node holds [first_rank[g], first_rank[g + 1]) (the last
// one up to world_size).
struct NodeLayout {
  std::vector<int> first_rank;
  int world_size = 0;
};

// InvalidArgument unless the layout starts at rank 0, grows strictly, and
// every node has at least one rank below world_size.
absl::Status CheckLayout(const NodeLayout& layout);
// The group rank of the node holding `rank` (the layout must be valid and
// `rank` in [0, world_size)).
int NodeOfRank(const NodeLayout& layout, int rank);

// Builds the communicator from its parts: `local` over the node's ranks
// (rank = local rank), `leaders` over one rank per node (rank = group rank;
// null on ranks that are not their node's local rank 0).
std::unique_ptr<Communicator> ComposeHierarchical(std::unique_ptr<Communicator> local,
                                                  std::unique_ptr<Communicator> leaders,
                                                  NodeLayout layout, int rank);

struct HierarchicalOptions {
  // Borrowed; used only during NewHierarchicalCommunicator.
  rdzv::Store* store = nullptr;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  // Where the leaders' Gloo listens (CPPTORCHRUN_LOCAL_ADDR).
  std::string local_addr = "127.0.0.1";
  // Prefix of every bootstrap key in the store.
  std::string key_prefix = "hier/";
  // Bounds the bootstrap and every collective.
  absl::Duration timeout = absl::Seconds(60);
};

// Publishes this node's ranks (its leader does), reads every node's, checks
// the layout, then builds the shared-memory communicator of the node and,
// on leaders, the Gloo communicator of the leaders. Errors name the stage:
// InvalidArgument for inconsistent options, FailedPrecondition for a layout
// whose nodes' ranks are not contiguous, the inner communicators' errors
// otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> NewHierarchicalCommunicator(
    const HierarchicalOptions& options);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_HIERARCHICAL_COMM_H_
