// NewInMemoryKv: the Kv interface in memory, with etcd's revision, lease
// and watch semantics (kv.h), for testing the rendezvous on etcd without a
// cluster. Leases expire on `clock` (a base::FakeClock in tests): expiry is
// applied at the start of every call and by ExpireLeases(), which also wakes
// watchers, so a test that advances its fake clock calls it (or any other
// method) to see the effect. Watch timeouts are real time (they only bound a
// wait). Thread-safe.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_IN_MEMORY_KV_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_IN_MEMORY_KV_H_

#include <memory>

#include "base/clock.h"
#include "rendezvous/etcd/kv.h"

namespace cpptorchrun::rdzv::etcd {

class InMemoryKv : public Kv {
 public:
  // Applies every lease expiry due at clock->Now().
  virtual void ExpireLeases() = 0;
  // Forgets the history before `revision` (etcd's Compact): a Watch from an
  // earlier revision is answered OutOfRange.
  virtual void Compact(int64_t revision) = 0;
};

// `clock` must outlive the store.
std::unique_ptr<InMemoryKv> NewInMemoryKv(base::Clock* clock);

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_IN_MEMORY_KV_H_
