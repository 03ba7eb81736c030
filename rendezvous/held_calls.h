// HeldCalls: the registry of the calls the rendezvous service holds open
// (long-polled Joins, Watches, waiting Gets and MultiGets), each with the
// run it belongs to and the deadline by which it must be answered at the
// latest. It answers nothing itself: it says which calls are held, which
// are due by a given time, and how many each run holds; whoever takes a
// call out (Release) answers it.
//
// No gRPC, no clock and no lock: the owner passes the time in and
// serialises every call (the service, under its mutex).
#ifndef CPPTORCHRUN_RENDEZVOUS_HELD_CALLS_H_
#define CPPTORCHRUN_RENDEZVOUS_HELD_CALLS_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace cpptorchrun::rdzv {

// What the registry knows of a call; the service's held call derives from
// it. Not copyable: the registry holds its address.
struct HeldCall {
  explicit HeldCall(std::string run_id) : run_id(std::move(run_id)) {}
  HeldCall(const HeldCall&) = delete;
  HeldCall& operator=(const HeldCall&) = delete;

  const std::string run_id;
  // Both set by HeldCalls.
  bool held = false;
  absl::Time deadline;
};

class HeldCalls {
 public:
  // Holds `call` (not held now) until `deadline` at the latest.
  void Hold(HeldCall* call, absl::Time deadline);
  // Takes `call` out; false when it was not held (someone else took it).
  bool Release(HeldCall* call);

  // The held call with the earliest deadline when that is `now` or before;
  // nullptr when none is due.
  HeldCall* Due(absl::Time now) const;
  // The held call with the earliest deadline; nullptr when none is held.
  HeldCall* First() const;
  // The calls held for `run_id`, by deadline.
  std::vector<HeldCall*> OfRun(const std::string& run_id) const;
  // How many calls `run_id` holds.
  int HeldFor(const std::string& run_id) const;
  int size() const { return static_cast<int>(by_deadline_.size()); }

 private:
  std::set<std::pair<absl::Time, HeldCall*>> by_deadline_;
  absl::flat_hash_map<std::string, int> per_run_;
};

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_HELD_CALLS_H_
