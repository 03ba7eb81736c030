#include "rendezvous/connect.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "rendezvous/etcd/etcd_kv.h"
#include "rendezvous/etcd/etcd_rendezvous.h"

namespace cpptorchrun::rdzv {

absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateRendezvousClient(const ClientOptions& options) {
  absl::StatusOr<RendezvousTarget> target = ParseRendezvousTarget(options.endpoint);
  if (!target.ok()) return target.status();
  if (target->backend == RendezvousTarget::Backend::kGrpc) return CreateGrpcRendezvousClient(options);
  etcd::EtcdOptions kv_options;
  kv_options.endpoints = target->etcd_members;
  kv_options.call_timeout = options.call_timeout;
  kv_options.tls_ca_file = options.tls_root_cert_file;
  kv_options.tls_cert_file = options.tls_cert_file;
  kv_options.tls_key_file = options.tls_key_file;
  if (!options.token.empty()) {
    const size_t colon = options.token.find(':');
    if (colon == std::string::npos || colon == 0) {
      return absl::InvalidArgumentError(
          "etcd credentials: expected user:password (as etcdctl --user) in the token file");
    }
    kv_options.user = options.token.substr(0, colon);
    kv_options.password = options.token.substr(colon + 1);
  }
  absl::StatusOr<std::unique_ptr<etcd::Kv>> kv = etcd::NewEtcdKv(kv_options);
  if (!kv.ok()) return kv.status();
  etcd::EtcdRendezvousOptions rdzv_options;
  rdzv_options.prefix = target->etcd_prefix;
  rdzv_options.max_spare_wait = options.max_spare_wait;
  rdzv_options.retry_budget = options.retry_budget;
  return etcd::NewEtcdRendezvousClient(std::shared_ptr<etcd::Kv>(std::move(*kv)), rdzv_options);
}

}  // namespace cpptorchrun::rdzv
