// EtcdCluster (tests only): a real etcd cluster of N members (Debian's
// etcd-server), each its own process, data folder and pair of loopback
// ports, started and torn down by the test itself. Members can be killed
// (kill -9) and restarted into the same cluster, and the leader found, for
// the failure scenarios. Every member runs in its own process group with
// PR_SET_PDEATHSIG, so a test that dies leaves no etcd behind; the
// destructor stops them (SIGTERM, then SIGKILL after a grace period) and
// reaps them. Not thread-safe.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_CLUSTER_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rendezvous/etcd/etcd_kv.h"

namespace cpptorchrun::rdzv::etcd {

// TLS on the members' client port (peers stay plaintext on loopback): their
// certificate and key, the CA they trust, and whether they require a client
// certificate signed by it (etcd's --client-cert-auth).
struct EtcdClusterTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool client_cert_auth = false;
};

class EtcdCluster {
 public:
  // The etcd binary on PATH, or "" where etcd-server is not installed.
  static std::string Binary();

  // Starts `members` members with their data folders under `dir` (which
  // must exist), and waits, up to `ready_timeout`, until each serves reads
  // and writes. Errors name the member that did not come up and end with
  // the tail of its log.
  // Members listen on `host` (an IPv4 address of this machine: loopback, or
  // a test's network namespace's own).
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(
      int members, const std::string& dir, absl::Duration ready_timeout = absl::Seconds(30),
      const std::string& host = "127.0.0.1", const EtcdClusterTls& tls = {});

  // One 3-member cluster per test binary, started on first use under
  // $TEST_TMPDIR and stopped when the binary exits, for the contract tests
  // (each test keeps to its own keys). Null, with `*why_not` set, where
  // etcd is not installed or did not start.
  static EtcdCluster* Shared(std::string* why_not);

  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // Client endpoints, "host:port" each, and all of them comma-joined
  // (the form of --rdzv_endpoint).
  std::vector<std::string> Endpoints() const;
  std::string EndpointList() const;

  // kill -9 of member `i`, reaped.
  absl::Status Kill(int i);
  // Starts a killed member again on its ports and data, and waits until it
  // serves.
  absl::Status Restart(int i, absl::Duration ready_timeout = absl::Seconds(30));
  bool Running(int i) const { return members_[i].pid > 0; }
  // The index of the member that is the leader now, asked of the running
  // members (NotFound while there is none).
  absl::StatusOr<int> Leader();

 private:
  std::string Url(int port) const { return absl::StrCat("http://", host_, ":", port); }
  std::string ClientUrl(int port) const {
    return absl::StrCat(tls_.cert_file.empty() ? "http://" : "https://", host_, ":", port);
  }
  // What this helper's own calls (readiness, the leader) connect with.
  EtcdOptions ClientOptions(int i) const;

  std::string host_ = "127.0.0.1";
  EtcdClusterTls tls_;
  struct Member {
    std::string name;
    std::string data_dir;
    std::string log_path;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };
  EtcdCluster() = default;
  absl::Status Spawn(int i, bool existing);
  absl::Status WaitServing(int i, absl::Duration timeout);
  std::string LogTail(int i) const;

  std::string binary_;
  std::string initial_cluster_;
  std::vector<Member> members_;
};

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_CLUSTER_H_
