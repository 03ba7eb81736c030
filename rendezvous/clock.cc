// The real clock (see clock.h).
#include "rendezvous/clock.h"

namespace cpptorchrun::rdzv {
namespace {
class WallClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};
}  // namespace

Clock* RealClock() {
  static Clock* const clock = new WallClock();
  return clock;
}

}  // namespace cpptorchrun::rdzv
