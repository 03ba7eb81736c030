// `cpptorchrun status`: asks the rendezvous service for a run's status and
// prints it as a table (nodes, ranks, round, restarts, each rank's last
// step and loss, and the age of its last heartbeat).
#ifndef CPPTORCHRUN_LAUNCHER_STATUS_CMD_H_
#define CPPTORCHRUN_LAUNCHER_STATUS_CMD_H_

#include <map>
#include <string>

#include "launcher/config/cli.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/client.h"

namespace cpptorchrun::launcher {

// The table, one row per node and one per rank. Pure.
std::string FormatStatusTable(const rdzv::v1::RunStatusResponse& status);

// Prints the table to stdout: 0, or 1 with an error on stderr (unknown
// run, unreachable service). `client` null: a gRPC client of the endpoint.
int RunStatusCommand(const StatusConfig& config, const std::map<std::string, std::string>& env,
                     rdzv::RendezvousClient* client = nullptr);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_STATUS_CMD_H_
