// Fuzz target: rendezvous requests as a client could send them, through the
// service's stateless checks (request_checks.h), the round rules and a
// run's store (scoped_store.h). The first byte picks the
// message (Join, KeepAlive, Leave, Watch, store calls), the rest is its wire
// encoding; the rules' state carries over between inputs (reset when it
// grows), so sequences of calls are explored too.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/limits.h"
#include "rendezvous/request_checks.h"
#include "rendezvous/rules.h"
#include "rendezvous/scoped_store.h"

namespace cpptorchrun::rdzv {
namespace {

Limits FuzzLimits() {
  Limits l;
  l.max_nodes_per_run = 64;
  return l;
}

const Limits& TheLimits() {
  static const Limits limits = FuzzLimits();
  return limits;
}

struct World {
  RunState state = NewRun("fuzz", RoundOptions{.min_nodes = 1, .max_nodes = 4});
  absl::Time now = absl::FromUnixSeconds(1700000000);
  int calls = 0;
  int64_t store_bytes = 0;
  ScopedStore store{"fuzz", &TheLimits(), &store_bytes};
};

void Step(World& w, uint8_t kind, const uint8_t* data, size_t size) {
  const Limits& limits = TheLimits();
  w.now += absl::Milliseconds(kind % 7 * 300);
  switch (kind % 6) {
    case 0: {
      v1::JoinRequest r;
      if (!r.ParseFromArray(data, static_cast<int>(size))) return;
      if (!CheckRequest(r, limits).ok()) return;
      auto options = RoundOptionsFromProto(r.options(), limits.max_nodes_per_run);
      if (!options.ok()) return;
      (void)ApplyJoin(w.now, &w.state, r.node(), *options, r.last_round(), r.failure());
      SetPolling(w.now, &w.state, r.node().node_id(), (kind & 0x40) != 0);
      break;
    }
    case 1: {
      v1::KeepAliveRequest r;
      if (!r.ParseFromArray(data, static_cast<int>(size))) return;
      if (!CheckRequest(r, limits).ok()) return;
      // A round the rules could have formed may be re-registered.
      if (ValidateAssignment(r.assignment(), r.node_id(), w.state.options).ok()) {
        ReRegister(w.now, &w.state, r);
      }
      (void)ApplyKeepAlive(w.now, &w.state, r, (kind & 0x80) != 0);
      break;
    }
    case 2: {
      v1::LeaveRequest r;
      if (!r.ParseFromArray(data, static_cast<int>(size))) return;
      if (!CheckRequest(r, limits).ok()) return;
      ApplyLeave(w.now, &w.state, r.node_id(), r.reason());
      break;
    }
    case 3: {
      v1::WatchRequest r;
      if (!r.ParseFromArray(data, static_cast<int>(size))) return;
      (void)EventFor(w.state, r.node_id(), r.round());
      (void)AssignmentFor(w.state, r.node_id(), 2);
      (void)WaitingNodes(w.state);
      break;
    }
    case 4: {
      v1::MultiSetRequest r;
      if (!r.ParseFromArray(data, static_cast<int>(size))) return;
      if (!CheckRequest(r, limits).ok()) return;
      // The store of the run's rounds, as the service keeps it: writes,
      // reads that wait, and rounds dropped as the rules move on.
      ScopedStore::Entries entries;
      for (const auto& kv : r.entries()) entries.emplace_back(kv.key(), kv.value());
      ScopedStore::Answered answered;
      (void)w.store.Set(r.scope().round(), entries, &answered);
      if (!entries.empty()) {
        StoreRead read{.round = r.scope().round(), .keys = {std::string(entries[0].first)}};
        if (!w.store.Read(&read)) w.store.StopReading(&read);
      }
      (void)w.store.DropRoundsBefore(w.state.active_round - 1);
      break;
    }
    case 5:
      (void)ApplyTick(w.now, &w.state);
      (void)NextDeadline(w.state);
      if (kind & 0x20) ApplyClose(w.now, &w.state, "fuzz");
      break;
  }
  (void)FindDeadParticipants(w.now, w.state);
}

}  // namespace
}  // namespace cpptorchrun::rdzv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cpptorchrun::rdzv::World;
  static World* world = new World();
  if (size == 0) return 0;
  if (++world->calls > 2000 || world->state.participants.size() + world->state.joiners.size() +
                                       world->state.spares.size() > 256) {
    delete world;
    world = new World();
  }
  cpptorchrun::rdzv::Step(*world, data[0], data + 1, size - 1);
  return 0;
}
