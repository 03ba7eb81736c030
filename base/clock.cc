// The real clock (see clock.h).
#include "base/clock.h"

namespace cpptorchrun::base {
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

}  // namespace cpptorchrun::base
