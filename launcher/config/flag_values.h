// The value parsers behind the launcher's flags: each takes the text as
// written and `what` (the flag or PET_* variable it came from) and returns
// the value, or InvalidArgument "<what>: expected <allowed>; got '<text>'".
#ifndef CPPTORCHRUN_LAUNCHER_CONFIG_FLAG_VALUES_H_
#define CPPTORCHRUN_LAUNCHER_CONFIG_FLAG_VALUES_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/workers/std_spec.h"
#include "rendezvous/target.h"

namespace cpptorchrun::launcher {

// The one error form: "<what>: expected <allowed>; got '<got>'".
absl::Status Bad(const std::string& what, const std::string& allowed, const std::string& got);

// An integer in [min, max]; `allowed` says so in the error.
absl::StatusOr<int> ParseInt(const std::string& text, const std::string& what, int min, int max,
                             const std::string& allowed);

// Seconds as a decimal (at most 1e7); zero only when `allow_zero`.
absl::StatusOr<absl::Duration> ParseSeconds(const std::string& text, const std::string& what,
                                            bool allow_zero);

// --redirects / --tee: "0".."3" for every local rank, or "LOCAL_RANK:VALUE,...".
absl::StatusOr<StdSpec> ParseStdSpec(const std::string& text, const std::string& what);

// A run id names a folder under --log_dir: 1..128 of [A-Za-z0-9_.-], never
// "." or "..".
bool ValidRunId(const std::string& id);

// A host name or an IP address (letters, digits, '-', '.', '_', ':', '%').
bool ValidHost(const std::string& host);

// --rdzv_conf KEY=VALUE,...: known keys checked by kind; unknown keys (that
// torchrun would hand to its backend) kept out and named in `warnings`.
absl::StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& text,
                                                                 const std::string& what,
                                                                 std::vector<std::string>* warnings);

// The signals --signals_to_handle may name.
const std::set<int>& HandleableSignals();

// --rdzv_backend etcd: the member list `endpoint_text` (--rdzv_endpoint)
// and `conf`'s prefix (--rdzv_conf) as one target (rendezvous/target.h),
// for the launch and for `status` alike. Errors name the flag.
absl::StatusOr<rdzv::RendezvousTarget> EtcdTargetFromFlags(const std::string& endpoint_text,
                                                           const std::map<std::string, std::string>& conf);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_CONFIG_FLAG_VALUES_H_
