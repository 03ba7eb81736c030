// GlooStore: Gloo's rendezvous store (set / get / wait) over the project's
// rendezvous Store, so Gloo bootstraps through the round's store. Keys are
// prefixed, so several communicators can share one round's store.
#ifndef CPPTORCHRUN_WORKER_COMM_GLOO_STORE_H_
#define CPPTORCHRUN_WORKER_COMM_GLOO_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "rendezvous/store.h"

namespace cpptorchrun::worker {

// Gloo's interface reports failures by exception: every failure of the
// underlying store (including a timed-out wait) throws gloo::IoException
// whose message names the key. `store` is borrowed and must outlive this.
// Thread-safe as the underlying store is.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(rdzv::Store* store, std::string prefix, absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  rdzv::Store* const store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

// Waits until every key is set, one Get at a time within one overall
// `timeout`. (Single-key waits: the rendezvous service's MultiGet long poll
// was seen not to wake on a concurrent Set; see the worker's notes.)
absl::Status WaitForKeys(rdzv::Store& store, const std::vector<std::string>& keys,
                         absl::Duration timeout);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_GLOO_STORE_H_
