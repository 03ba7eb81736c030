// Fuzz target: what a user or a scheduler hands the launcher. Lines of the
// input are the command line (after "cpptorchrun"); lines of the form
// NAME=VALUE starting with PET_, SLURM_ or TORCH_ are the environment. The
// whole input is also parsed as an endpoint, a --rdzv_conf, a hostlist, a
// CPU list and a token.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "base/token.h"
#include "launcher/config/cli.h"
#include "launcher/config/numa.h"
#include "launcher/config/slurm.h"
#include "rendezvous/endpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cpptorchrun;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> argv = {"cpptorchrun"};
  std::map<std::string, std::string> env;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const bool env_like = absl::StartsWith(line, "PET_") || absl::StartsWith(line, "SLURM_") ||
                          absl::StartsWith(line, "TORCH_");
    const size_t eq = line.find('=');
    if (env_like && eq != absl::string_view::npos) {
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    } else if (argv.size() < 64) {
      argv.emplace_back(line);
    }
  }
  (void)launcher::ParseCommandLine(argv, env);
  (void)launcher::SlurmDefaultsFrom(env);
  (void)launcher::ExpandHostlist(text, 4096);
  (void)launcher::ParseCpuList(text);
  (void)rdzv::ParseEndpoint(text);
  (void)launcher::ParseEndpointFlag(text, 29400, "--rdzv_endpoint");
  (void)base::ParseToken(text, "fuzz");
  return 0;
}
