// Tests of the command line: spellings, defaults, PET_* fallbacks, and every
// kind of bad value (one-line InvalidArgument naming the flag).
#include "launcher/config/cli.h"

#include <csignal>

#include "gmock/gmock.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "rendezvous/endpoint.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

absl::StatusOr<ParsedCommandLine> Parse(std::vector<std::string> args, const Env& env = {}) {
  args.insert(args.begin(), "cpptorchrun");
  return ParseCommandLine(args, env);
}

LaunchConfig MustLaunch(std::vector<std::string> args, const Env& env = {}) {
  auto parsed = Parse(std::move(args), env);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return {};
  EXPECT_EQ(parsed->kind, ParsedCommandLine::Kind::kLaunch);
  return parsed->launch;
}

TEST(Cli, UnambiguousPrefixesNameTheirFlagAsArgparseDoes) {
  LaunchConfig c = MustLaunch({"--nproc=2", "--redirect", "3", "--max-rest=4", "--stand", "train", "--nproc=9"});
  EXPECT_EQ(c.nproc_per_node, 2);
  EXPECT_EQ(c.redirects.all, 3);
  EXPECT_EQ(c.max_restarts, 4);
  EXPECT_TRUE(c.standalone);
  // The program's own flags are its own.
  EXPECT_EQ(c.training_script_args, (std::vector<std::string>{"--nproc=9"}));
  // An exact name wins over being a prefix of another (--role, not --role_x).
  EXPECT_EQ(MustLaunch({"--role", "trainer", "p"}).role, "trainer");
}

TEST(Cli, WorkerTimeoutIsAutoOrSeconds) {
  EXPECT_FALSE(MustLaunch({"--worker_timeout=auto", "p"}).worker_timeout.has_value());
  EXPECT_EQ(MustLaunch({"--worker_timeout=7.5", "p"}).worker_timeout, absl::Seconds(7.5));
  EXPECT_EQ(MustLaunch({"p"}, {{"PET_WORKER_TIMEOUT", "9"}}).worker_timeout, absl::Seconds(9));
  EXPECT_EQ(MustLaunch({"--failures_without_progress=0", "p"}).failures_without_progress, 0);
  EXPECT_EQ(MustLaunch({"--job_max_restarts=12", "p"}).job_max_restarts, 12);
  EXPECT_EQ(MustLaunch({"p"}).job_max_restarts, 0);
  LaunchConfig checked = MustLaunch({"--health_check", "test -e /dev/nvidia0", "--health_check_timeout=5", "p"});
  EXPECT_EQ(checked.health_check, "test -e /dev/nvidia0");
  EXPECT_EQ(checked.health_check_timeout, absl::Seconds(5));
  EXPECT_EQ(checked.health_check_give_up, absl::Seconds(600));
  EXPECT_EQ(MustLaunch({"p"}).health_check, "");
  LaunchConfig stragglers = MustLaunch({"--straggler_factor=2", "--straggler_policy=replace", "p"});
  EXPECT_EQ(stragglers.straggler_factor, 2);
  EXPECT_EQ(stragglers.straggler_policy, "replace");
  EXPECT_EQ(MustLaunch({"p"}).straggler_factor, 1.5);
  EXPECT_EQ(MustLaunch({"p"}).straggler_policy, "warn");
}

TEST(Cli, Torchrun2Flags) {
  LaunchConfig c = MustLaunch({"--duplicate-stdout-filters", "apple,,pie,orange", "--duplicate_stderr_filters=err",
                               "--virtual-local-rank", "--event-log-handler", "console", "p"});
  EXPECT_EQ(c.duplicate_stdout_filters, (std::vector<std::string>{"apple,pie", "orange"}));
  EXPECT_EQ(c.duplicate_stderr_filters, (std::vector<std::string>{"err"}));
  EXPECT_TRUE(c.virtual_local_rank);
  EXPECT_EQ(c.event_log_handler, "console");
  EXPECT_FALSE(MustLaunch({"p"}).virtual_local_rank);
  // TORCH_ELASTIC_SHUTDOWN_TIMEOUT when --shutdown_timeout is not given.
  EXPECT_EQ(MustLaunch({"p"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown_timeout, absl::Seconds(7));
  EXPECT_EQ(MustLaunch({"--shutdown_timeout=3", "p"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown_timeout,
            absl::Seconds(3));
  auto bad = Parse({"p"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"), std::string::npos);
}

TEST(Cli, WarmStartFlags) {
  LaunchConfig d = MustLaunch({"p.py"});
  EXPECT_EQ(d.start_method, "spawn");
  EXPECT_EQ(d.forkserver_preload, (std::vector<std::string>{"torch", "torch.distributed"}));
  EXPECT_TRUE(d.warm_spares);
  LaunchConfig c = MustLaunch({"--start-method", "forkserver", "--forkserver_preload", "torch,numpy.random,_my_mod",
                               "--warm_spares", "false", "p.py"});
  EXPECT_EQ(c.start_method, "forkserver");
  EXPECT_EQ(c.forkserver_preload, (std::vector<std::string>{"torch", "numpy.random", "_my_mod"}));
  EXPECT_FALSE(c.warm_spares);
  EXPECT_TRUE(MustLaunch({"--forkserver_preload", "", "p.py"}).forkserver_preload.empty());
  EXPECT_FALSE(MustLaunch({"p.py"}, {{"PET_WARM_SPARES", "0"}}).warm_spares);
}

TEST(Cli, UnknownRdzvConfKeysAreWarningsAsInTorchrun) {
  LaunchConfig c = MustLaunch({"--rdzv_conf=store_type=tcp,join_timeout=9", "p"});
  EXPECT_EQ(c.rdzv_conf.count("store_type"), 0u);
  EXPECT_EQ(c.rdzv_conf.at("join_timeout"), "9");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("key 'store_type' is not used by cpptorchrun"), std::string::npos);
  EXPECT_TRUE(MustLaunch({"--logs-specs=default", "p"}).warnings.empty());
}

// PyTorch's test_launch_elastic passes the value quoted inside a Python
// argument list: the quotes reach the launcher as part of the first key and
// the last value. torchrun's c10d backend never reads either and goes on.
TEST(Cli, RdzvConfQuotedTwiceAsPyTorchsOwnTestPassesItIsWarnedNotRefused) {
  LaunchConfig c = MustLaunch({"--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400",
                               "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "p"});
  EXPECT_EQ(c.rdzv_conf.count("join_timeout"), 0u) << "the key is 'join_timeout, quote included";
  EXPECT_EQ(c.rdzv_conf.at("last_call_timeout"), "1");
  EXPECT_EQ(c.rdzv_conf.count("timeout"), 0u);
  ASSERT_EQ(c.warnings.size(), 2u) << absl::StrJoin(c.warnings, "\n");
  EXPECT_NE(c.warnings[0].find("key ''join_timeout' is not used by cpptorchrun"), std::string::npos);
  EXPECT_NE(c.warnings[0].find("quoted twice"), std::string::npos);
  EXPECT_NE(c.warnings[1].find("--rdzv_conf timeout: expected seconds > 0; got '5''"), std::string::npos)
      << c.warnings[1];
  // A key the c10d backend reads keeps its value checked, as torchrun does.
  EXPECT_FALSE(ParseCommandLine({"cpptorchrun", "--rdzv_conf=last_call_timeout=1'", "p"}, {}).ok());
  // `timeout` is the etcd backend's join deadline (and only its).
  EXPECT_EQ(MustLaunch({"--rdzv_conf=timeout=7", "p"}).rdzv_conf.at("timeout"), "7");
  EXPECT_EQ(MustLaunch({"--rdzv_conf=quarantine_after=0,quarantine_window=60", "p"}).rdzv_conf.at("quarantine_after"),
            "0");
}

TEST(Cli, TorchrunDefaults) {
  LaunchConfig c = MustLaunch({"train"});
  EXPECT_EQ(c.min_nodes, 1);
  EXPECT_EQ(c.max_nodes, 1);
  EXPECT_EQ(c.nproc_kind, NprocKind::kCount);
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kStatic);
  EXPECT_FALSE(c.has_rdzv_endpoint);
  EXPECT_EQ(c.rdzv_id, "none");
  EXPECT_TRUE(c.rdzv_conf.empty());
  EXPECT_FALSE(c.standalone);
  EXPECT_EQ(c.max_restarts, 0);
  EXPECT_EQ(c.monitor_interval, absl::Seconds(5));
  EXPECT_EQ(c.role, "default");
  EXPECT_FALSE(c.module);
  EXPECT_FALSE(c.no_python);
  EXPECT_EQ(c.log_dir, "");
  EXPECT_EQ(c.redirects.all, kStdNone);
  EXPECT_EQ(c.tee.all, kStdNone);
  EXPECT_TRUE(c.local_ranks_filter.empty());
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_FALSE(c.master_port_given);
  EXPECT_THAT(c.signals_to_handle, ElementsAre(SIGTERM, SIGINT, SIGHUP, SIGQUIT));
  EXPECT_EQ(c.fake_gpus, 0);
  EXPECT_FALSE(c.worker_timeout.has_value());  // auto: the adaptive deadline
  EXPECT_EQ(c.failures_without_progress, 5);
  EXPECT_EQ(c.shutdown_timeout, absl::Seconds(30));
  EXPECT_EQ(c.exit_barrier_timeout, absl::Seconds(300));
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.training_script, "train");
  EXPECT_TRUE(c.training_script_args.empty());
}

TEST(Cli, ProgramArgumentsAfterTheScriptAreNotParsed) {
  LaunchConfig c = MustLaunch({"--nproc_per_node=2", "train", "--epochs", "1", "--nnodes", "x", "-m"});
  EXPECT_EQ(c.nproc_per_node, 2);
  EXPECT_EQ(c.training_script, "train");
  EXPECT_THAT(c.training_script_args, ElementsAre("--epochs", "1", "--nnodes", "x", "-m"));
  EXPECT_FALSE(c.module);
  EXPECT_EQ(c.max_nodes, 1);
}

TEST(Cli, DoubleDashEndsTheFlags) {
  LaunchConfig c = MustLaunch({"--nproc_per_node", "3", "--", "prog", "-x"});
  EXPECT_EQ(c.nproc_per_node, 3);
  EXPECT_EQ(c.training_script, "prog");
  EXPECT_THAT(c.training_script_args, ElementsAre("-x"));
}

TEST(Cli, DashedAndUnderscoredSpellingsAreEqual) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"--nproc_per_node=4", "--nproc-per-node=4"}, {"--node_rank=1", "--node-rank=1"},
      {"--max_restarts=3", "--max-restarts=3"},     {"--monitor_interval=0.5", "--monitor-interval=0.5"},
      {"--rdzv_id=job", "--rdzv-id=job"},           {"--log_dir=/tmp/x", "--log-dir=/tmp/x"},
      {"--master_port=1234", "--master-port=1234"}, {"--fake_gpus=2", "--fake-gpus=2"},
      {"--worker_timeout=7", "--worker-timeout=7"}, {"--local_ranks_filter=0", "--local-ranks-filter=0"},
      {"--failures_without_progress=2", "--failures-without-progress=2"},
  };
  for (const auto& [a, b] : pairs) {
    std::vector<std::string> extra = {"--nnodes=2", "--rdzv_endpoint=h:1"};
    LaunchConfig x = MustLaunch({a, "--nnodes=2", "--master_addr=h", "prog"});
    LaunchConfig y = MustLaunch({b, "--nnodes=2", "--master_addr=h", "prog"});
    EXPECT_EQ(x.nproc_per_node, y.nproc_per_node) << a;
    EXPECT_EQ(x.node_rank, y.node_rank) << a;
    EXPECT_EQ(x.max_restarts, y.max_restarts) << a;
    EXPECT_EQ(x.monitor_interval, y.monitor_interval) << a;
    EXPECT_EQ(x.rdzv_id, y.rdzv_id) << a;
    EXPECT_EQ(x.log_dir, y.log_dir) << a;
    EXPECT_EQ(x.master_port, y.master_port) << a;
    EXPECT_EQ(x.fake_gpus, y.fake_gpus) << a;
    EXPECT_EQ(x.worker_timeout, y.worker_timeout) << a;
    EXPECT_EQ(x.failures_without_progress, y.failures_without_progress) << a;
    EXPECT_EQ(x.local_ranks_filter, y.local_ranks_filter) << a;
  }
  LaunchConfig n = MustLaunch({"--no-python", "prog"});
  EXPECT_TRUE(n.no_python);
  LaunchConfig m = MustLaunch({"-m", "pkg.mod"});
  EXPECT_TRUE(m.module);
  EXPECT_EQ(ModeOf(m), ProgramMode::kModule);
}

TEST(Cli, AllFlagsParse) {
  LaunchConfig c = MustLaunch({"--nnodes=1:4", "--nproc_per_node=gpu", "--rdzv_backend=c10d",
                               "--rdzv_endpoint=[::1]:1234", "--rdzv_id=job-7",
                               "--rdzv_conf=join_timeout=30,keep_alive_interval=0.5",
                               "--max_restarts=2", "--monitor_interval=0.1", "--role=trainer",
                               "--log_dir=/tmp/logs", "-r", "0:1,1:3", "-t", "2",
                               "--local_ranks_filter=0,2", "--local_addr=10.0.0.1",
                               "--signals_to_handle=SIGUSR1,SIGTERM", "--shutdown_timeout=0",
                               "--exit_barrier_timeout=9", "--log_level=DEBUG", "x.py", "a"});
  EXPECT_EQ(c.min_nodes, 1);
  EXPECT_EQ(c.max_nodes, 4);
  EXPECT_EQ(c.nproc_kind, NprocKind::kGpu);
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kC10d);
  EXPECT_EQ(c.rdzv_endpoint.host, "::1");
  EXPECT_EQ(c.rdzv_endpoint.port, 1234);
  EXPECT_EQ(rdzv::FormatEndpoint(c.rdzv_endpoint), "[::1]:1234");
  EXPECT_EQ(c.rdzv_id, "job-7");
  EXPECT_EQ(c.rdzv_conf.at("join_timeout"), "30");
  EXPECT_EQ(c.rdzv_conf.at("keep_alive_interval"), "0.5");
  EXPECT_EQ(c.max_restarts, 2);
  EXPECT_EQ(c.monitor_interval, absl::Milliseconds(100));
  EXPECT_EQ(c.role, "trainer");
  EXPECT_EQ(c.redirects.ForLocalRank(0), kStdOut);
  EXPECT_EQ(c.redirects.ForLocalRank(1), kStdAll);
  EXPECT_EQ(c.redirects.ForLocalRank(2), kStdNone);
  EXPECT_EQ(c.tee.ForLocalRank(5), kStdErr);
  EXPECT_THAT(c.local_ranks_filter, ElementsAre(0, 2));
  EXPECT_EQ(c.local_addr, "10.0.0.1");
  EXPECT_THAT(c.signals_to_handle, ElementsAre(SIGUSR1, SIGTERM));
  EXPECT_EQ(c.shutdown_timeout, absl::ZeroDuration());
  EXPECT_EQ(c.exit_barrier_timeout, absl::Seconds(9));
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(ModeOf(c), ProgramMode::kPython);
}

TEST(Cli, NprocKinds) {
  EXPECT_EQ(MustLaunch({"--nproc_per_node=cpu", "p"}).nproc_kind, NprocKind::kCpu);
  EXPECT_EQ(MustLaunch({"--nproc_per_node=auto", "p"}).nproc_kind, NprocKind::kAuto);
  EXPECT_EQ(MustLaunch({"--nproc_per_node=GPU", "p"}).nproc_kind, NprocKind::kGpu);
  EXPECT_EQ(MustLaunch({"--nproc_per_node", "8", "p"}).nproc_per_node, 8);
}

TEST(Cli, EndpointDefaultPortAndForms) {
  LaunchConfig c = MustLaunch({"--rdzv_backend=c10d", "--rdzv_endpoint=node1", "p"});
  EXPECT_EQ(c.rdzv_endpoint.host, "node1");
  EXPECT_EQ(c.rdzv_endpoint.port, kDefaultC10dPort);
  auto hp = ParseEndpointFlag("[fe80::1%eth0]:5", 1, "x");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "fe80::1%eth0");
  EXPECT_EQ(hp->port, 5);
  hp = ParseEndpointFlag("::1", 7, "x");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 7);
  hp = ParseEndpointFlag("[::1]", 7, "x");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->port, 7);
  EXPECT_EQ(rdzv::FormatEndpoint(*ParseEndpointFlag("127.0.0.1:80", 1, "x")), "127.0.0.1:80");
}

TEST(Cli, PetEnvironmentFallbacksAndCommandLineWins) {
  Env env = {{"PET_NPROC_PER_NODE", "3"}, {"PET_MAX_RESTARTS", "4"}, {"PET_STANDALONE", "1"},
             {"PET_RDZV_ID", "envjob"}, {"CPPTORCHRUN_FAKE_GPUS", "2"}, {"PET_TEE", "3"},
             {"PET_NO_PYTHON", "true"}};
  LaunchConfig c = MustLaunch({"--max_restarts=1", "prog"}, env);
  EXPECT_EQ(c.nproc_per_node, 3);
  EXPECT_EQ(c.max_restarts, 1);
  EXPECT_TRUE(c.standalone);
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kC10d);
  EXPECT_EQ(c.rdzv_id, "envjob");
  EXPECT_EQ(c.fake_gpus, 2);
  EXPECT_EQ(c.tee.all, kStdAll);
  EXPECT_TRUE(c.no_python);
  EXPECT_TRUE(MustLaunch({"--master_port=9", "p"}).master_port_given);
  EXPECT_TRUE(MustLaunch({"p"}, {{"PET_MASTER_PORT", "9"}}).master_port_given);
}

TEST(Cli, StaticMultiNodeMeetsAtMaster) {
  LaunchConfig c = MustLaunch({"--nnodes=2", "--node_rank=1", "--master_addr=10.1.2.3",
                               "--master_port=4000", "p"});
  EXPECT_TRUE(c.has_rdzv_endpoint);
  EXPECT_TRUE(c.rdzv_endpoint_from_master);
  // MASTER_PORT stays the workers'; the rendezvous takes the port above.
  EXPECT_EQ(rdzv::FormatEndpoint(c.rdzv_endpoint), "10.1.2.3:4001");
  EXPECT_EQ(c.master_port, 4000);
  auto top = Parse({"--nnodes=2", "--master_port=65535", "p"});
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("port above it"), std::string::npos);
}

TEST(Cli, HelpAndVersion) {
  auto h = Parse({"--help"});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->kind, ParsedCommandLine::Kind::kHelp);
  EXPECT_THAT(h->text, HasSubstr("--nproc_per_node"));
  EXPECT_THAT(h->text, HasSubstr("--fake_gpus"));
  auto v = Parse({"--version"});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->kind, ParsedCommandLine::Kind::kVersion);
  EXPECT_EQ(v->text, "cpptorchrun 0.1.0");
}

TEST(Cli, StatusSubcommand) {
  auto s = Parse({"status", "--rdzv_endpoint", "127.0.0.1:5000", "--rdzv_id", "j"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, ParsedCommandLine::Kind::kStatus);
  EXPECT_EQ(s->status.rdzv_endpoint.port, 5000);
  EXPECT_EQ(s->status.rdzv_id, "j");
  EXPECT_FALSE(Parse({"status", "--rdzv_id", "j"}).ok());
  EXPECT_FALSE(Parse({"status", "--rdzv_endpoint", "h:1", "--rdzv_id", "bad id"}).ok());
  EXPECT_FALSE(Parse({"status", "--rdzv_endpoint", "h:1", "--bogus"}).ok());
  EXPECT_FALSE(s->status.json);
  EXPECT_FALSE(s->status.watch);
  EXPECT_EQ(s->status.interval, absl::Seconds(1));
}

TEST(Cli, StatusOfAJobOnEtcd) {
  auto s = Parse({"status", "--rdzv_backend", "etcd", "--rdzv_endpoint", "e1:2379,e2", "--rdzv_id", "j",
                  "--rdzv_conf", "prefix=/jobs"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->status.rdzv_target, "etcd://e1:2379,e2:2379/jobs");
  auto bad = Parse({"status", "--rdzv_backend", "etcd", "--rdzv_endpoint", "e1,,e2", "--rdzv_id", "j"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--rdzv_endpoint"), std::string::npos) << bad.status();
  EXPECT_FALSE(Parse({"status", "--rdzv_backend", "zookeeper", "--rdzv_endpoint", "h:1", "--rdzv_id", "j"}).ok());
  auto service = Parse({"status", "--rdzv_endpoint", "h:1", "--rdzv_id", "j"});
  ASSERT_TRUE(service.ok());
  EXPECT_TRUE(service->status.rdzv_target.empty());
}

TEST(Cli, StatusJsonWatchAndInterval) {
  const std::vector<std::string> base = {"status", "--rdzv_endpoint", "127.0.0.1:5000", "--rdzv_id", "j"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return Parse(args);
  };
  auto s = with({"--json"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->status.json);
  EXPECT_FALSE(s->status.watch);
  s = with({"--watch", "--interval", "0.25", "--json"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->status.watch);
  EXPECT_TRUE(s->status.json);
  EXPECT_EQ(s->status.interval, absl::Milliseconds(250));
  s = with({"--watch", "--interval=3600"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->status.interval, absl::Hours(1));
  // Bad values are usage errors that name the flag.
  for (const char* bad : {"0", "-1", "0.05", "3601", "abc", "nan", "inf", "1e9", ""}) {
    auto r = with({"--watch", "--interval", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--interval"), std::string::npos) << r.status();
  }
  auto alone = with({"--interval", "2"});
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("--interval: only with --watch"), std::string::npos) << alone.status();
  EXPECT_FALSE(with({"--watch", "5"}).ok()) << "a switch takes no value";
  // Pure: the environment supplies the endpoint and id, never these.
  auto env = Parse({"status", "--watch", "--json"}, {{"PET_RDZV_ENDPOINT", "h:7"}, {"PET_RDZV_ID", "k"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->status.watch);
  EXPECT_EQ(env->status.rdzv_id, "k");
}

struct BadCase {
  std::vector<std::string> args;
  Env env;
  std::string names;  // the message must contain this
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << ::testing::PrintToString(c.args); }

class CliBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliBad, OneLineErrorNamingTheFlag) {
  auto parsed = Parse(GetParam().args, GetParam().env);
  ASSERT_FALSE(parsed.ok()) << "accepted: " << ::testing::PrintToString(GetParam().args);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(parsed.status().message());
  EXPECT_THAT(msg, HasSubstr(GetParam().names));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    EveryBadValue, CliBad,
    ::testing::Values(
        BadCase{{"--nnodes=0", "p"}, {}, "--nnodes"}, BadCase{{"--nnodes=x", "p"}, {}, "--nnodes"},
        BadCase{{"--nnodes=3:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h", "p"}, {}, "--nnodes"},
        BadCase{{"--nnodes=1:2:3", "p"}, {}, "--nnodes"},
        BadCase{{"--nnodes=0:2", "p"}, {}, "--nnodes"},
        BadCase{{"--nnodes=1:2", "p"}, {}, "--nnodes"},  // static needs fixed
        BadCase{{"--nproc_per_node=0", "p"}, {}, "--nproc_per_node"},
        BadCase{{"--nproc_per_node=-1", "p"}, {}, "--nproc_per_node"},
        BadCase{{"--nproc_per_node=tpu", "p"}, {}, "--nproc_per_node"},
        BadCase{{"--nproc_per_node=2.5", "p"}, {}, "--nproc_per_node"},
        BadCase{{"--node_rank=-1", "p"}, {}, "--node_rank"},
        BadCase{{"--node_rank=1", "p"}, {}, "--node_rank"},
        BadCase{{"--rdzv_backend=etcd", "p"}, {}, "--rdzv_backend"},
        BadCase{{"--rdzv_endpoint=h:70000", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"--rdzv_endpoint=h:", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:0", "p"}, {}, "port 0"},
        BadCase{{"--rdzv_endpoint=[::1", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"--rdzv_endpoint=[::1]x", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"--rdzv_endpoint=[]:5", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"--rdzv_endpoint=h o:5", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"--rdzv_id=a b", "p"}, {}, "--rdzv_id"},
        BadCase{{"--rdzv_id", "", "p"}, {}, "--rdzv_id"},
        BadCase{{"--rdzv_conf=bo\x1bgus=1", "p"}, {}, "--rdzv_conf"},
        BadCase{{"--n=2", "p"}, {}, "ambiguous flag '--n': could be --nnodes, --no_python, --node_rank, --nproc_per_node"},
        BadCase{{"--logs_specs=my_plugin", "p"}, {}, "Python plugins"},
        BadCase{{"--numa_binding=cores", "p"}, {}, "--numa_binding: expected node, socket, exclusive or core-complex"},
        BadCase{{"--rdzv_conf=join_timeout", "p"}, {}, "--rdzv_conf"},
        BadCase{{"--rdzv_conf=join_timeout=-3", "p"}, {}, "--rdzv_conf join_timeout"},
        BadCase{{"--rdzv_conf=keep_alive_max_attempt=0", "p"}, {}, "keep_alive_max_attempt"},
        BadCase{{"--rdzv_conf=quarantine_after=-1", "p"}, {}, "quarantine_after: expected an integer >= 0 (0: off)"},
        BadCase{{"--rdzv_conf=quarantine_cooldown=soon", "p"}, {}, "quarantine_cooldown"},
        BadCase{{"--rdzv_conf=is_host=maybe", "p"}, {}, "is_host"},
        BadCase{{"--max_restarts=-1", "p"}, {}, "--max_restarts"},
        BadCase{{"--max_restarts=two", "p"}, {}, "--max_restarts"},
        BadCase{{"--monitor_interval=0", "p"}, {}, "--monitor_interval"},
        BadCase{{"--monitor_interval=nan", "p"}, {}, "--monitor_interval"},
        BadCase{{"--start_method=thread", "p"}, {}, "--start_method"},
        BadCase{{"--forkserver_preload=torch;rm", "p"}, {}, "--forkserver_preload"},
        BadCase{{"--forkserver_preload=torch,,numpy", "p"}, {}, "--forkserver_preload"},
        BadCase{{"--forkserver_preload=9lives", "p"}, {}, "--forkserver_preload"},
        BadCase{{"--warm_spares=maybe", "p"}, {}, "--warm_spares"},
        BadCase{{"--role", "", "p"}, {}, "--role"}, BadCase{{"--role=a b", "p"}, {}, "--role"},
        BadCase{{"-r", "4", "p"}, {}, "--redirects"}, BadCase{{"-r", "0:9", "p"}, {}, "--redirects"},
        BadCase{{"-r", "0:1,0:2", "p"}, {}, "--redirects"},
        BadCase{{"-t", "x", "p"}, {}, "--tee"},
        BadCase{{"--local_ranks_filter=a", "p"}, {}, "--local_ranks_filter"},
        BadCase{{"--local_ranks_filter=0,0", "p"}, {}, "--local_ranks_filter"},
        BadCase{{"--local_ranks_filter=-1", "p"}, {}, "--local_ranks_filter"},
        BadCase{{"--master_addr=a b", "p"}, {}, "--master_addr"},
        BadCase{{"--master_port=0", "p"}, {}, "--master_port"},
        BadCase{{"--master_port=65536", "p"}, {}, "--master_port"},
        BadCase{{"--local_addr=x/y", "p"}, {}, "--local_addr"},
        BadCase{{"--signals_to_handle=SIGKILL", "p"}, {}, "--signals_to_handle"},
        BadCase{{"--signals_to_handle=SIGFOO", "p"}, {}, "--signals_to_handle"},
        BadCase{{"--signals_to_handle=", "p"}, {}, "--signals_to_handle"},
        BadCase{{"--fake_gpus=-2", "p"}, {}, "--fake_gpus"},
        BadCase{{"--worker_timeout=0", "p"}, {}, "--worker_timeout"},
        BadCase{{"--worker_timeout=soon", "p"}, {}, "--worker_timeout"},
        BadCase{{"--failures_without_progress=-1", "p"}, {}, "--failures_without_progress"},
        BadCase{{"--job_max_restarts=-2", "p"}, {}, "--job_max_restarts"},
        BadCase{{"--straggler_factor=0.5", "p"}, {}, "--straggler_factor"},
        BadCase{{"--straggler_policy=kill", "p"}, {}, "--straggler_policy"},
        BadCase{{"--straggler_window=1", "p"}, {}, "--straggler_window"},
        BadCase{{"--shutdown_timeout=-1", "p"}, {}, "--shutdown_timeout"},
        BadCase{{"--exit_barrier_timeout=x", "p"}, {}, "--exit_barrier_timeout"},
        BadCase{{"--log_level=loud", "p"}, {}, "--log_level"},
        BadCase{{"--bogus_flag", "p"}, {}, "--bogus_flag"},
        BadCase{{"--bogus_flag=3", "p"}, {}, "--bogus_flag"},
        BadCase{{"--nproc_per_node"}, {}, "nproc_per_node"},
        BadCase{{"--nproc_per_node=2"}, {}, "training_script"},
        BadCase{{}, {}, "training_script"},
        BadCase{{"-m", "--no_python", "p"}, {}, "--no_python"},
        BadCase{{"--run_path", "--no_python", "p"}, {}, "--run_path"},
        BadCase{{"--standalone", "--nnodes=2", "p"}, {}, "--standalone"},
        BadCase{{"--standalone", "--rdzv_endpoint=h:1", "p"}, {}, "--standalone"},
        BadCase{{"--rdzv_backend=c10d", "--nnodes=2", "p"}, {}, "--rdzv_endpoint"},
        BadCase{{"p"}, {{"PET_NPROC_PER_NODE", "zero"}}, "PET_NPROC_PER_NODE"},
        BadCase{{"p"}, {{"PET_STANDALONE", "maybe"}}, "PET_STANDALONE"},
        BadCase{{"p"}, {{"CPPTORCHRUN_FAKE_GPUS", "x"}}, "CPPTORCHRUN_FAKE_GPUS"},
        BadCase{{"p"}, {{"PET_NNODES", "0"}}, "PET_NNODES"}));

}  // namespace
}  // namespace cpptorchrun::launcher
