// Which of a worker's streams go to its log files (torchrun's --redirects
// and --tee), for every local rank or rank by rank.
#ifndef CPPTORCHRUN_LAUNCHER_WORKERS_STD_SPEC_H_
#define CPPTORCHRUN_LAUNCHER_WORKERS_STD_SPEC_H_

#include <map>

namespace cpptorchrun::launcher {

// Which of a worker's streams go to files: torchrun's Std values.
enum StdMask : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

// --redirects / --tee: one mask for every local rank, or per local rank
// ("0:1,1:2"; ranks not named get kStdNone).
struct StdSpec {
  int all = kStdNone;
  std::map<int, int> per_rank;
  bool per_rank_form = false;
  int ForLocalRank(int local_rank) const;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_WORKERS_STD_SPEC_H_
