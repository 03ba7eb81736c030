// Assignment signatures: how the service tells an assignment it issued from
// one a client made up. Every Assignment the service hands out carries an
// HMAC-SHA256, under the service's key, of the node it was issued to (node
// id, group rank, rank offset) and a SHA-256 digest of what the round's
// nodes share (run id, round, world sizes, MASTER_ADDR/PORT, every
// participant). The digest of each round issued is computed once and kept
// (per run, the latest round), so signing a round's N assignments and
// checking keep-alives cost O(N), not O(N^2). A KeepAlive may re-create a round (after a server
// restart) only from an assignment that verifies, so a forged one cannot
// replace a live job's ranks or its MASTER_ADDR; and the signature is the
// node's proof of identity where a call speaks for it (a Leave that would
// end a standing round, a keep-alive that keeps it alive).
//
// The key: a key file only the server reads (a durable secret no client
// holds); else derived from the rendezvous token (durable across restarts,
// but every token holder could derive it); else random per process (not
// durable: a restarted server cannot verify what its predecessor signed).
#ifndef CPPTORCHRUN_RENDEZVOUS_SIGNING_H_
#define CPPTORCHRUN_RENDEZVOUS_SIGNING_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/rendezvous.pb.h"

namespace cpptorchrun::rdzv {

struct SigningKey {
  std::string bytes;
  // Survives a restart of the server (a key file, or the token).
  bool durable = false;
  // For the log: "key file", "token", "random".
  std::string source;
};

// 32 random bytes from the kernel; not durable.
SigningKey RandomSigningKey();
// Derived from the token (HMAC of a fixed label): durable.
SigningKey SigningKeyFromToken(const std::string& token);
// The key file's bytes (at least 16 of them, surrounding whitespace kept
// out): durable. Errors name the file.
absl::StatusOr<SigningKey> ReadSigningKeyFile(const std::string& path);

class AssignmentSigner {
 public:
  explicit AssignmentSigner(SigningKey key) : key_(std::move(key)) {}

  // Sets the signature of `assignment`, issued to `node_id` in `run_id`.
  // Thread-safe.
  void Sign(const std::string& run_id, const std::string& node_id, v1::Assignment* assignment);
  // True when `assignment`'s signature is this key's for (`run_id`,
  // `node_id`) and its fields. A round this signer issued is checked
  // against the digest it kept (a forged participant list of an issued
  // round changes nothing: the service re-creates only rounds it has not
  // seen). Thread-safe.
  bool Verify(const std::string& run_id, const std::string& node_id, const v1::Assignment& assignment);
  // Forgets what was kept for `run_id` (the run closed or was forgotten).
  void Forget(const std::string& run_id);

  bool durable() const { return key_.durable; }
  const std::string& source() const { return key_.source; }

 private:
  struct Issued {
    int64_t round = 0;
    int participants = 0;
    int32_t world_size = 0;
    std::string digest;
  };
  std::string DigestOf(const std::string& run_id, const v1::Assignment& a, bool keep);
  std::string Mac(const std::string& digest, const std::string& node_id, const v1::Assignment& a) const;

  const SigningKey key_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Issued> issued_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_SIGNING_H_
