// DdpStats arithmetic.
#include "worker/training/ddp_stats.h"

namespace cpptorchrun::worker {

DdpStats DdpStats::operator-(const DdpStats& before) const {
  DdpStats d;
  d.steps = steps - before.steps;
  d.wait_seconds = wait_seconds - before.wait_seconds;
  d.timed_steps = timed_steps - before.timed_steps;
  d.allreduce_seconds = allreduce_seconds - before.allreduce_seconds;
  d.hidden_seconds = hidden_seconds - before.hidden_seconds;
  d.bytes_sent = bytes_sent - before.bytes_sent;
  return d;
}

DdpStats& DdpStats::operator+=(const DdpStats& more) {
  steps += more.steps;
  wait_seconds += more.wait_seconds;
  timed_steps += more.timed_steps;
  allreduce_seconds += more.allreduce_seconds;
  hidden_seconds += more.hidden_seconds;
  bytes_sent += more.bytes_sent;
  return *this;
}

}  // namespace cpptorchrun::worker
