#include "launcher/workers/std_spec.h"

namespace cpptorchrun::launcher {

int StdSpec::ForLocalRank(int local_rank) const {
  if (!per_rank_form) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? kStdNone : it->second;
}

}  // namespace cpptorchrun::launcher
