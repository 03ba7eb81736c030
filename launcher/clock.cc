// The real clock.
#include "launcher/clock.h"

namespace cpptorchrun::launcher {
namespace {
class WallClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};
}  // namespace

Clock* RealClock() {
  static Clock* clock = new WallClock();
  return clock;
}

}  // namespace cpptorchrun::launcher
