// The registry of held calls (see held_calls.h).
#include "rendezvous/held_calls.h"

namespace cpptorchrun::rdzv {

void HeldCalls::Hold(HeldCall* call, absl::Time deadline) {
  call->held = true;
  call->deadline = deadline;
  by_deadline_.emplace(deadline, call);
  ++per_run_[call->run_id];
}

bool HeldCalls::Release(HeldCall* call) {
  if (!call->held) return false;
  call->held = false;
  by_deadline_.erase({call->deadline, call});
  auto count = per_run_.find(call->run_id);
  if (--count->second == 0) per_run_.erase(count);
  return true;
}

HeldCall* HeldCalls::Due(absl::Time now) const {
  HeldCall* first = First();
  return first != nullptr && first->deadline <= now ? first : nullptr;
}

HeldCall* HeldCalls::First() const {
  return by_deadline_.empty() ? nullptr : by_deadline_.begin()->second;
}

std::vector<HeldCall*> HeldCalls::OfRun(const std::string& run_id) const {
  std::vector<HeldCall*> calls;
  if (!per_run_.contains(run_id)) return calls;
  for (const auto& [deadline, call] : by_deadline_) {
    if (call->run_id == run_id) calls.push_back(call);
  }
  return calls;
}

int HeldCalls::HeldFor(const std::string& run_id) const {
  auto count = per_run_.find(run_id);
  return count == per_run_.end() ? 0 : count->second;
}

}  // namespace cpptorchrun::rdzv
