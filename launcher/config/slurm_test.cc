#include "launcher/config/slurm.h"

#include <csignal>

#include "gtest/gtest.h"
#include "launcher/config/cli.h"

namespace cpptorchrun::launcher {
namespace {

using Hosts = std::vector<std::string>;

TEST(ExpandHostlist, SlurmsNotation) {
  EXPECT_EQ(*ExpandHostlist("node01"), Hosts{"node01"});
  EXPECT_EQ(*ExpandHostlist("node[01-04,07]"), (Hosts{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(*ExpandHostlist("a,b[8-10],c"), (Hosts{"a", "b8", "b9", "b10", "c"}));
  EXPECT_EQ(*ExpandHostlist("rack[1-2]-n[1-2]"), (Hosts{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(*ExpandHostlist("gpu[098-101]"), (Hosts{"gpu098", "gpu099", "gpu100", "gpu101"}));
}

TEST(ExpandHostlist, BrokenListsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"node[01-04", "without its ']'"}, {"node01-04]", "without its '['"}, {"n[[1]]", "nested"},
      {"n[4-1]", "runs backwards"},     {"n[a-b]", "not a number"},        {"n[]", "not a number"},
      {"", "no hosts"},                  {"n[0-99999999]", "more than"},
  };
  for (const auto& [list, why] : cases) {
    auto hosts = ExpandHostlist(list, 1000);
    ASSERT_FALSE(hosts.ok()) << list;
    EXPECT_NE(hosts.status().message().find(why), std::string::npos) << hosts.status();
  }
}

std::map<std::string, std::string> SrunEnv() {
  return {{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"},
          {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}};
}

TEST(SlurmDefaults, OnlyInsideAJobStep) {
  auto env = SrunEnv();
  EXPECT_FALSE(SlurmDefaultsFrom(env)->values.empty());
  env.erase("SLURM_STEP_ID");  // the batch script itself, not srun
  EXPECT_TRUE(SlurmDefaultsFrom(env)->values.empty());
  env = SrunEnv();
  env["CPPTORCHRUN_SLURM"] = "0";
  EXPECT_TRUE(SlurmDefaultsFrom(env)->values.empty());
  env = SrunEnv();
  env["SLURM_JOB_NODELIST"] = "gpu[07-";
  auto bad = SlurmDefaultsFrom(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("SLURM_JOB_NODELIST"), std::string::npos);
}

LaunchConfig Launch(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {"cpptorchrun"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto parsed = ParseCommandLine(argv, env);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->launch : LaunchConfig{};
}

TEST(SlurmDefaults, FillWhatTheCommandLineDoesNotSay) {
  LaunchConfig c = Launch({"--nproc_per_node=2", "train"}, SrunEnv());
  EXPECT_EQ(c.min_nodes, 2);
  EXPECT_EQ(c.max_nodes, 2);
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kC10d);
  EXPECT_EQ(c.rdzv_endpoint.host, "gpu07");
  EXPECT_EQ(c.rdzv_endpoint.port, SlurmRendezvousPort(4242, 0));
  EXPECT_EQ(c.rdzv_id, "4242.0");
  EXPECT_NE(std::find(c.signals_to_handle.begin(), c.signals_to_handle.end(), SIGUSR1), c.signals_to_handle.end());
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("Slurm job 4242 step 0 (node 1): took "), std::string::npos) << c.notes[0];
  EXPECT_NE(c.notes[0].find("--nnodes 2 (SLURM_NNODES)"), std::string::npos) << c.notes[0];
  EXPECT_NE(c.notes[0].find("--rdzv_id 4242.0 (SLURM_JOB_ID.SLURM_STEP_ID)"), std::string::npos) << c.notes[0];
  // The command line and PET_* win; only what is left comes from Slurm.
  auto env = SrunEnv();
  env["PET_RDZV_ID"] = "mine";
  c = Launch({"--nnodes=1:2", "--rdzv_endpoint=head:1234", "train"}, env);
  EXPECT_EQ(c.max_nodes, 2);
  EXPECT_EQ(c.min_nodes, 1);
  EXPECT_EQ(c.rdzv_endpoint.host, "head");
  EXPECT_EQ(c.rdzv_id, "mine");
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_EQ(c.notes[0].find("--rdzv_id"), std::string::npos) << c.notes[0];
  // --standalone takes nothing from Slurm.
  c = Launch({"--standalone", "--nproc_per_node=2", "train"}, SrunEnv());
  EXPECT_EQ(c.max_nodes, 1);
  EXPECT_TRUE(c.notes.empty());
}

// A step on part of its allocation (salloc -N2; srun -N1 -w gpu08 ...)
// meets on its own nodes, with its own node count.
TEST(SlurmDefaults, AStepOnPartOfItsAllocationMeetsOnItsOwnNodes) {
  auto env = SrunEnv();
  env["SLURM_STEP_NODELIST"] = "gpu08";
  env["SLURM_STEP_NUM_NODES"] = "1";
  env["SLURM_NODELIST"] = "gpu08";
  env["SLURM_NODEID"] = "0";
  env["SLURM_STEP_ID"] = "3";
  LaunchConfig c = Launch({"--nproc_per_node=2", "train"}, env);
  EXPECT_EQ(c.rdzv_endpoint.host, "gpu08");
  EXPECT_EQ(c.max_nodes, 1);
  EXPECT_EQ(c.rdzv_id, "4242.3");
  EXPECT_NE(c.notes[0].find("(the first host of SLURM_STEP_NODELIST; port 29400 + (job x 97 + step) mod 100)"),
            std::string::npos)
      << c.notes[0];
}

// Two steps at once in one allocation are two runs at two ports, whatever
// nodes they share.
TEST(SlurmDefaults, TwoStepsOfAJobAreTwoRunsOnTwoPorts) {
  auto env = SrunEnv();
  env["SLURM_STEP_NODELIST"] = "gpu[07-08]";
  LaunchConfig a = Launch({"train"}, env);
  env["SLURM_STEP_ID"] = "1";
  LaunchConfig b = Launch({"train"}, env);
  EXPECT_NE(a.rdzv_id, b.rdzv_id);
  EXPECT_EQ(a.rdzv_endpoint.host, b.rdzv_endpoint.host);
  EXPECT_NE(a.rdzv_endpoint.port, b.rdzv_endpoint.port);
  // Every port in [29400, 29500): below torchrun's MASTER_PORT default;
  // 100 steps of a job, and one step of 100 jobs in a row, never share one.
  for (uint64_t job : {uint64_t{1}, uint64_t{4242}, uint64_t{18446744073709551615u}}) {
    for (uint64_t step = 0; step < 100; ++step) {
      const int port = SlurmRendezvousPort(job, step);
      EXPECT_GE(port, 29400);
      EXPECT_LT(port, 29500);
      if (step > 0) {
        EXPECT_NE(port, SlurmRendezvousPort(job, step - 1));
      }
    }
  }
  for (uint64_t job = 1000; job < 1099; ++job) {
    for (uint64_t other = job + 1; other < 1100; ++other) {
      EXPECT_NE(SlurmRendezvousPort(job, 0), SlurmRendezvousPort(other, 0)) << job << " " << other;
    }
  }
}

TEST(TasksOnNode, SlurmsNotation) {
  EXPECT_EQ(*TasksOnNode("1", 0), 1);
  EXPECT_EQ(*TasksOnNode("2(x3),1", 0), 2);
  EXPECT_EQ(*TasksOnNode("2(x3),1", 2), 2);
  EXPECT_EQ(*TasksOnNode("2(x3),1", 3), 1);
  EXPECT_EQ(*TasksOnNode("1,4", 1), 4);
  for (const auto& [spec, node] : std::vector<std::pair<std::string, int>>{
           {"2(x3),1", 4}, {"x", 0}, {"2(x0)", 0}, {"2(3)", 0}, {"", 0}, {"-1", 0}, {"1", -1}, {"2(x3", 0}}) {
    EXPECT_FALSE(TasksOnNode(spec, node).ok()) << spec << " node " << node;
  }
}

// --ntasks-per-node=2 inherited from a GPU batch script: two launchers on a
// node would be two nodes of the world and hang; each refuses, naming it.
TEST(SlurmDefaults, SeveralTasksOnANodeAreRefusedNamingTheVariable) {
  auto env = SrunEnv();
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  auto refused = SlurmDefaultsFrom(env);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("Slurm started 2 tasks of this step on this node "
                                            "(SLURM_STEP_TASKS_PER_NODE=2(x2))"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("srun --ntasks-per-node=1"), std::string::npos);
  EXPECT_FALSE(ParseCommandLine({"cpptorchrun", "train"}, env).ok());
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  EXPECT_TRUE(SlurmDefaultsFrom(env).ok());
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  env["CPPTORCHRUN_SLURM"] = "0";
  EXPECT_TRUE(SlurmDefaultsFrom(env).ok());
  env = SrunEnv();
  env["SLURM_STEP_ID"] = "batch";
  EXPECT_FALSE(SlurmDefaultsFrom(env).ok());
}

}  // namespace
}  // namespace cpptorchrun::launcher
