// etcd_cluster (tests only): EtcdCluster (etcd_cluster.h) for the Python
// scenarios, driven over stdin/stdout, one line each way:
//
//   etcd_cluster_main --members 3 --dir DIR [--host 10.1.0.1]
//   -> "endpoints HOST:P1,HOST:P2,HOST:P3"   once every member serves
//   <- "kill I" | "restart I" | "leader"
//   -> "ok [...]" | "error <why>"
//
// End of stdin (the test finished, or died) stops every member and reaps it.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rendezvous/etcd/etcd_cluster.h"

namespace {

int Usage() {
  std::fprintf(stderr, "usage: etcd_cluster_main --members N --dir DIR [--host IPV4]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int members = 3;
  std::string dir;
  std::string host = "127.0.0.1";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--members") {
      if (!absl::SimpleAtoi(argv[i + 1], &members) || members < 1 || members > 7) return Usage();
    } else if (flag == "--host") {
      host = argv[i + 1];
    } else if (flag == "--dir") {
      dir = argv[i + 1];
    } else {
      return Usage();
    }
  }
  if (dir.empty() || argc % 2 == 0) return Usage();
  std::signal(SIGPIPE, SIG_IGN);
  auto cluster = cpptorchrun::rdzv::etcd::EtcdCluster::Start(members, dir, absl::Seconds(30), host);
  if (!cluster.ok()) {
    std::cout << "error " << cluster.status().message() << std::endl;
    return 1;
  }
  std::cout << "endpoints " << (*cluster)->EndpointList() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty()) continue;
    int index = -1;
    if (words.size() == 2 && (!absl::SimpleAtoi(words[1], &index) || index < 0 || index >= members)) {
      std::cout << "error member index '" << words[1] << "' is not 0.." << members - 1 << std::endl;
      continue;
    }
    if (words[0] == "kill" && index >= 0) {
      absl::Status s = (*cluster)->Kill(index);
      std::cout << (s.ok() ? "ok" : absl::StrCat("error ", s.message())) << std::endl;
    } else if (words[0] == "restart" && index >= 0) {
      absl::Status s = (*cluster)->Restart(index);
      std::cout << (s.ok() ? "ok" : absl::StrCat("error ", s.message())) << std::endl;
    } else if (words[0] == "leader") {
      absl::StatusOr<int> leader = (*cluster)->Leader();
      std::cout << (leader.ok() ? absl::StrCat("ok ", *leader) : absl::StrCat("error ", leader.status().message()))
                << std::endl;
    } else {
      std::cout << "error unknown command '" << line << "' (kill I, restart I, leader)" << std::endl;
    }
  }
  return 0;
}
