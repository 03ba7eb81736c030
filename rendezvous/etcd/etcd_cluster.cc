#include "rendezvous/etcd/etcd_cluster.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "rendezvous/etcd/etcd_kv.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

// Ports the kernel picks, each held bound until all are picked, so that no
// two are the same.
absl::StatusOr<std::vector<int>> FreePorts(const std::string& host, int n) {
  std::vector<int> fds, ports;
  absl::Status error;
  for (int i = 0; i < n && error.ok(); ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
      error = absl::InvalidArgumentError(absl::StrCat("etcd cluster host '", host, "': not an IPv4 address"));
      break;
    }
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      error = absl::InternalError(absl::StrCat("bind ", host, ":0: ", strerror(errno)));
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  if (!error.ok()) return error;
  return ports;
}


void StopPid(pid_t pid, absl::Duration grace) {
  if (pid <= 0) return;
  kill(-pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    pid_t r = waitpid(pid, nullptr, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(-pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

std::string EtcdCluster::Binary() {
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (absl::string_view dir : absl::StrSplit(dirs, ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/etcd");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(int members, const std::string& dir,
                                                                 absl::Duration ready_timeout,
                                                                 const std::string& host,
                                                                 const EtcdClusterTls& tls) {
  if (members < 1) return absl::InvalidArgumentError("an etcd cluster needs at least one member");
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  cluster->host_ = host;
  cluster->tls_ = tls;
  cluster->binary_ = Binary();
  if (cluster->binary_.empty()) {
    return absl::FailedPreconditionError("etcd is not on PATH (Debian's etcd-server; tools/bootstrap installs it)");
  }
  absl::StatusOr<std::vector<int>> ports = FreePorts(host, 2 * members);
  if (!ports.ok()) return ports.status();
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = absl::StrCat("m", i);
    m.data_dir = absl::StrCat(dir, "/", m.name);
    m.log_path = absl::StrCat(dir, "/", m.name, ".log");
    m.client_port = (*ports)[2 * i];
    m.peer_port = (*ports)[2 * i + 1];
    peers.push_back(absl::StrCat(m.name, "=", cluster->Url(m.peer_port)));
    cluster->members_.push_back(m);
  }
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < members; ++i) {
    absl::Status s = cluster->Spawn(i, /*existing=*/false);
    if (!s.ok()) return s;
  }
  for (int i = 0; i < members; ++i) {
    absl::Status s = cluster->WaitServing(i, ready_timeout);
    if (!s.ok()) return s;
  }
  return cluster;
}

EtcdCluster* EtcdCluster::Shared(std::string* why_not) {
  struct Holder {
    std::unique_ptr<EtcdCluster> cluster;
    std::string why_not;
  };
  static Holder* holder = [] {
    auto* h = new Holder;
    if (Binary().empty()) {
      h->why_not = "etcd is not installed (Debian's etcd-server; tools/bootstrap installs it)";
      return h;
    }
    const char* tmp = getenv("TEST_TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/shared-etcd-", getpid());
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      h->why_not = absl::StrCat("mkdir ", dir, ": ", strerror(errno));
      return h;
    }
    absl::StatusOr<std::unique_ptr<EtcdCluster>> c = Start(3, dir);
    if (c.ok()) {
      h->cluster = std::move(*c);
    } else {
      h->why_not = std::string(c.status().message());
    }
    // Stopped (and reaped) at exit; PR_SET_PDEATHSIG covers a crash.
    atexit([] { holder->cluster.reset(); });
    return h;
  }();
  if (why_not != nullptr) *why_not = holder->why_not;
  return holder->cluster.get();
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) {
    StopPid(m.pid, absl::Seconds(5));
    m.pid = -1;
  }
}

std::vector<std::string> EtcdCluster::Endpoints() const {
  std::vector<std::string> out;
  for (const Member& m : members_) out.push_back(absl::StrCat(host_, ":", m.client_port));
  return out;
}

std::string EtcdCluster::EndpointList() const { return absl::StrJoin(Endpoints(), ","); }

absl::Status EtcdCluster::Spawn(int i, bool existing) {
  Member& m = members_[i];
  std::vector<std::string> args = {
      binary_,
      "--name", m.name,
      "--data-dir", m.data_dir,
      "--listen-client-urls", ClientUrl(m.client_port),
      "--advertise-client-urls", ClientUrl(m.client_port),
      "--listen-peer-urls", Url(m.peer_port),
      "--initial-advertise-peer-urls", Url(m.peer_port),
      "--initial-cluster", initial_cluster_,
      "--initial-cluster-state", existing ? "existing" : "new",
      "--initial-cluster-token", "cpptorchrun-test",
      "--logger", "zap",
      "--log-outputs", "stderr",
      "--log-level", "warn",
  };
  if (!tls_.cert_file.empty()) {
    args.insert(args.end(), {"--cert-file", tls_.cert_file, "--key-file", tls_.key_file});
    if (!tls_.ca_file.empty()) args.insert(args.end(), {"--trusted-ca-file", tls_.ca_file});
    if (tls_.client_cert_auth) args.push_back("--client-cert-auth");
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log = open(m.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("open ", m.log_path, ": ", strerror(errno)));
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log);
  setpgid(pid, pid);
  m.pid = pid;
  return absl::OkStatus();
}

std::string EtcdCluster::LogTail(int i) const {
  std::ifstream in(members_[i].log_path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
  return text;
}

EtcdOptions EtcdCluster::ClientOptions(int i) const {
  EtcdOptions options;
  options.endpoints = {absl::StrCat(host_, ":", members_[i].client_port)};
  options.call_timeout = absl::Seconds(1);
  if (!tls_.cert_file.empty()) {
    options.tls_ca_file = tls_.ca_file.empty() ? tls_.cert_file : tls_.ca_file;
    if (tls_.client_cert_auth) {
      // The tests' certificates are their own CA: the member's serves as the client's.
      options.tls_cert_file = tls_.cert_file;
      options.tls_key_file = tls_.key_file;
    }
  }
  return options;
}

absl::Status EtcdCluster::WaitServing(int i, absl::Duration timeout) {
  Member& m = members_[i];
  EtcdOptions options = ClientOptions(i);
  absl::StatusOr<std::unique_ptr<Kv>> kv = NewEtcdKv(options);
  if (!kv.ok()) return kv.status();
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  for (int attempt = 0; absl::Now() < deadline && attempt < 10000; ++attempt) {
    int status = 0;
    if (waitpid(m.pid, &status, WNOHANG) == m.pid) {
      m.pid = -1;
      return absl::InternalError(absl::StrCat("etcd member ", m.name, " exited at start (status ", status,
                                              "); its log:\n", LogTail(i)));
    }
    absl::StatusOr<int64_t> put = (*kv)->Put(absl::StrCat("/cpptorchrun-test/ready/", m.name), "1");
    if (put.ok()) return absl::OkStatus();
    last = put.status();
    absl::SleepFor(absl::Milliseconds(50));  // a bounded poll of the member
  }
  return absl::DeadlineExceededError(absl::StrCat("etcd member ", m.name, " did not serve within ",
                                                  absl::FormatDuration(timeout), " (", last.message(),
                                                  "); its log:\n", LogTail(i)));
}

absl::Status EtcdCluster::Kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return absl::FailedPreconditionError(absl::StrCat("etcd member ", m.name, " is not running"));
  kill(-m.pid, SIGKILL);
  while (waitpid(m.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  m.pid = -1;
  return absl::OkStatus();
}

absl::Status EtcdCluster::Restart(int i, absl::Duration ready_timeout) {
  if (members_[i].pid > 0) {
    return absl::FailedPreconditionError(absl::StrCat("etcd member ", members_[i].name, " is running"));
  }
  absl::Status s = Spawn(i, /*existing=*/true);
  if (!s.ok()) return s;
  return WaitServing(i, ready_timeout);
}

absl::StatusOr<int> EtcdCluster::Leader() {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].pid <= 0) continue;
    absl::StatusOr<MemberStatus> st = EtcdMemberStatus(ClientOptions(static_cast<int>(i)));
    if (!st.ok() || st->leader == 0) continue;
    if (st->leader == st->member_id) return static_cast<int>(i);
  }
  return absl::NotFoundError("no running etcd member is the leader");
}

}  // namespace cpptorchrun::rdzv::etcd
