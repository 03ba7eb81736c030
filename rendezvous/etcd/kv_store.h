// NewKvStore: the round-scoped Store (rendezvous/store.h) on etcd's data
// model (a Kv): every key of the scope under one prefix, so that closing a
// run is one DeletePrefix. Waiting reads are a read, then a Watch from the
// read's revision (no polling); Add is a compare-on-revision transaction
// retried on conflict, which also writes a mark of its own beside the key so
// that an Add whose answer was lost (etcd applied it, then the member
// died) finds it applied when it reads again, and does not add twice; CompareSet and Delete are single transactions.
// Thread-safe as the Kv is.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_KV_STORE_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_KV_STORE_H_

#include <memory>
#include <string>

#include "rendezvous/etcd/kv.h"
#include "rendezvous/store.h"

namespace cpptorchrun::rdzv::etcd {

// `kv` must outlive the store; `prefix` (e.g. "/cpptorchrun/<run>/rounds/
// <round>/store/") is put before every key.
std::unique_ptr<Store> NewKvStore(Kv* kv, std::string prefix);

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_KV_STORE_H_
