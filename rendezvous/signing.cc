#include "rendezvous/signing.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/files.h"

namespace cpptorchrun::rdzv {
namespace {

constexpr size_t kMinKeyFileBytes = 16;
constexpr size_t kMaxRunsKept = 100000;

std::string Hmac(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// Length-prefixed fields: no two different assignments encode alike.
void Put(std::string* out, const std::string& field) {
  absl::StrAppend(out, field.size(), ":", field, ";");
}
void Put(std::string* out, int64_t v) { absl::StrAppend(out, v, ";"); }

}  // namespace

SigningKey RandomSigningKey() {
  SigningKey key;
  key.bytes.resize(32);
  size_t got = 0;
  while (got < key.bytes.size()) {
    ssize_t n = getrandom(key.bytes.data() + got, key.bytes.size() - got, 0);
    if (n > 0) got += n;
    else if (errno != EINTR) break;
  }
  key.durable = false;
  key.source = "random";
  return key;
}

SigningKey SigningKeyFromToken(const std::string& token) {
  SigningKey key;
  key.bytes = Hmac(token, "cpptorchrun assignment signing key v1");
  key.durable = true;
  key.source = "token";
  return key;
}

absl::StatusOr<SigningKey> ReadSigningKeyFile(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadWholeFile(path, "key file");
  if (!text.ok()) return text.status();
  std::string bytes(absl::StripAsciiWhitespace(*text));
  if (bytes.size() < kMinKeyFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the key file '", path, "' holds ", bytes.size(),
                                                   " bytes; a key is at least ", kMinKeyFileBytes));
  }
  SigningKey key;
  key.bytes = std::move(bytes);
  key.durable = true;
  key.source = "key file";
  return key;
}

std::string AssignmentSigner::DigestOf(const std::string& run_id, const v1::Assignment& a, bool keep) {
  {
    absl::MutexLock lock(&mu_);
    auto it = issued_.find(run_id);
    if (it != issued_.end() && it->second.round == a.round() &&
        it->second.participants == a.participants_size() && it->second.world_size == a.world_size()) {
      return it->second.digest;
    }
  }
  std::string data = "round v1;";
  Put(&data, run_id);
  Put(&data, a.round());
  Put(&data, a.group_world_size());
  Put(&data, a.world_size());
  Put(&data, a.master_addr());
  Put(&data, a.master_port());
  std::vector<const v1::Participant*> ps;
  ps.reserve(a.participants_size());
  for (const v1::Participant& p : a.participants()) ps.push_back(&p);
  std::stable_sort(ps.begin(), ps.end(), [](const v1::Participant* x, const v1::Participant* y) {
    return x->group_rank() < y->group_rank();
  });
  Put(&data, static_cast<int64_t>(ps.size()));
  for (const v1::Participant* p : ps) {
    Put(&data, p->node_id());
    Put(&data, p->host());
    Put(&data, p->group_rank());
    Put(&data, p->local_world_size());
    Put(&data, p->rank_offset());
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string digest(reinterpret_cast<const char*>(md), len);
  if (keep) {
    absl::MutexLock lock(&mu_);
    // Bounded: one entry per run, and no more runs than a server holds.
    if (issued_.size() >= kMaxRunsKept && !issued_.contains(run_id)) issued_.clear();
    issued_[run_id] = Issued{a.round(), a.participants_size(), a.world_size(), digest};
  }
  return digest;
}

std::string AssignmentSigner::Mac(const std::string& digest, const std::string& node_id,
                                  const v1::Assignment& a) const {
  std::string data = "node v1;";
  Put(&data, digest);
  Put(&data, node_id);
  Put(&data, a.group_rank());
  Put(&data, a.rank_offset());
  return Hmac(key_.bytes, data);
}

void AssignmentSigner::Sign(const std::string& run_id, const std::string& node_id,
                            v1::Assignment* assignment) {
  assignment->set_signature(Mac(DigestOf(run_id, *assignment, /*keep=*/true), node_id, *assignment));
}

bool AssignmentSigner::Verify(const std::string& run_id, const std::string& node_id,
                              const v1::Assignment& assignment) {
  if (assignment.signature().empty()) return false;
  const std::string expected = Mac(DigestOf(run_id, assignment, /*keep=*/false), node_id, assignment);
  return assignment.signature().size() == expected.size() &&
         CRYPTO_memcmp(assignment.signature().data(), expected.data(), expected.size()) == 0;
}

void AssignmentSigner::Forget(const std::string& run_id) {
  absl::MutexLock lock(&mu_);
  issued_.erase(run_id);
}

}  // namespace cpptorchrun::rdzv
