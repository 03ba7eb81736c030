// Smoke test: CLI11 parses flags and rejects a bad value.
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "gtest/gtest.h"

TEST(Cli11Smoke, ParsesAndRejects) {
  CLI::App app{"smoke"};
  int nproc = 1;
  std::string endpoint;
  app.add_option("--nproc_per_node,--nproc-per-node", nproc)->check(CLI::PositiveNumber);
  app.add_option("--rdzv_endpoint", endpoint);
  std::vector<std::string> args = {"--rdzv_endpoint", "127.0.0.1:29400", "--nproc-per-node", "4"};
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector in reverse order
  app.parse(args);
  EXPECT_EQ(nproc, 4);
  EXPECT_EQ(endpoint, "127.0.0.1:29400");

  CLI::App bad{"smoke"};
  int n = 1;
  bad.add_option("--nproc_per_node", n)->check(CLI::PositiveNumber);
  std::vector<std::string> bad_args = {"0", "--nproc_per_node"};
  EXPECT_THROW(bad.parse(bad_args), CLI::ValidationError);
}
