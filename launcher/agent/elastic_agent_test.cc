// Tests of the elastic agent's loop with a fake process launcher, a fake
// clock, a fake rendezvous and a fake round monitor: no real process, no
// sleeping. Each test scripts when workers exit and checks what the agent did.
#include "launcher/agent/elastic_agent.h"

#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/fakes.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() : processes_(&clock_), board_(&clock_), ports_(40000) {
    const char* t = std::getenv("TEST_TMPDIR");
    log_root_ = absl::StrCat(t ? t : "/tmp", "/agent_XXXXXX");
    mkdtemp(log_root_.data());
    o_.run_id = "job";
    o_.max_restarts = 0;
    o_.monitor_interval = absl::Seconds(5);
    o_.hang.fixed_silence = absl::Seconds(10);
    o_.shutdown_timeout = absl::Seconds(30);
    o_.exit_barrier_timeout = absl::Seconds(1);
    o_.blocking_call_grace = absl::Seconds(60);  // the fakes answer at once
    o_.stop_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    o_.program_argv = {"/bin/train", "--epochs", "1"};
    o_.program_name = "train";
    o_.base_env = {{"PATH", "/bin"}};
    o_.local_world_size = 2;
    o_.node.set_node_id("node-a");
    o_.node.set_host("127.0.0.1");
    o_.node.set_local_world_size(2);
    o_.log_root = log_root_;
    o_.agent_socket = "/tmp/sock";
    o_.clock = &clock_;
    o_.processes = &processes_;
    o_.rdzv = &rdzv_;
    o_.ports = &ports_;
    o_.progress = &board_;
    o_.round_monitor = &monitor_;
    o_.print_summary = [this](const std::string& s) { printed_ += s; };
    o_.events = &events_;
  }

  AgentResult Run() {
    ElasticAgent agent(o_);
    return agent.Run();
  }

  // Every worker exits with `status` `after` its start (local rank `only`,
  // or all when -1).
  void ExitAfterStart(absl::Duration after, ExitStatus status, int only = -1) {
    processes_.on_start = [after, status, only](FakeProcessLauncher& p,
                                                const FakeProcessLauncher::Started& s) {
      int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
      if (only < 0 || lr == only) p.ExitAt(s.pid, s.time + after, status);
    };
  }

  std::string Env(int start_index, const std::string& key) {
    return processes_.started().at(start_index).spec.env.at(key);
  }

  base::FakeClock clock_{absl::FromUnixSeconds(1700000000)};
  FakeProcessLauncher processes_;
  ProgressBoard board_;
  FixedPortFinder ports_;
  FakeRendezvousClient rdzv_;
  FakeRoundMonitor monitor_;
  std::string log_root_;
  std::string printed_;
  MemoryEventLog events_;
  AgentOptions o_;
};

TEST_F(AgentTest, SuccessRunsOneGroupAndLeaves) {
  ExitAfterStart(absl::Seconds(1), ExitStatus::Exited(0));
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_EQ(processes_.started().size(), 2u);
  EXPECT_EQ(Env(0, "RANK"), "0");
  EXPECT_EQ(Env(1, "RANK"), "1");
  EXPECT_EQ(Env(1, "LOCAL_RANK"), "1");
  EXPECT_EQ(Env(1, "WORLD_SIZE"), "2");
  EXPECT_EQ(Env(1, "MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(Env(1, "MASTER_PORT"), "40000");
  EXPECT_EQ(Env(1, "TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(Env(1, "CPPTORCHRUN_AGENT_SOCKET"), "/tmp/sock");
  EXPECT_EQ(Env(1, "TORCHELASTIC_ERROR_FILE"), log_root_ + "/attempt_0/1/error.json");
  EXPECT_THAT(processes_.started()[0].spec.argv, ElementsAre("/bin/train", "--epochs", "1"));
  EXPECT_EQ(processes_.started()[1].spec.stdout_sink.prefix, "[default1]:");
  EXPECT_EQ(processes_.started()[1].spec.stdout_sink.console_fd, 1);
  EXPECT_EQ(processes_.started()[1].spec.stderr_sink.console_fd, 2);
  EXPECT_EQ(processes_.started()[1].spec.stdout_sink.file_path, "");
  EXPECT_THAT(rdzv_.leaves(), ElementsAre("finished"));
  EXPECT_TRUE(rdzv_.closes().empty());
  EXPECT_TRUE(printed_.empty());
}

TEST_F(AgentTest, EventsOfARestartAddUpPhaseByPhase) {
  o_.max_restarts = 1;
  int starts = 0;
  processes_.on_start = [&starts](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    // The first group: local rank 1 fails after 2 s; rank 0 ignores SIGTERM
    // (stopping it takes --shutdown_timeout, then SIGKILL). The second group
    // succeeds.
    if (++starts == 2) p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Exited(4));
    if (starts == 1) p.IgnoreSigterm(s.pid);
    if (starts > 2) p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(events_.names(), (std::vector<std::string>{"round_joined", "workers_started", "worker_failed",
                                                        "round_joined", "workers_started", "restart", "finished"}));
  const auto restart = events_.events()[5].second;
  std::map<std::string, EventValue> f(restart.begin(), restart.end());
  EXPECT_EQ(std::get<std::string>(f.at("cause")), "worker_failed");
  EXPECT_EQ(std::get<int64_t>(f.at("counted")), 1);
  const double total = std::get<double>(f.at("total_s"));
  const double sum = std::get<double>(f.at("detected_to_stopped_s")) + std::get<double>(f.at("stopped_to_joined_s")) +
                     std::get<double>(f.at("joined_to_started_s"));
  EXPECT_NEAR(std::get<double>(f.at("detected_to_stopped_s")), 30.0, 1e-6) << "the shutdown grace";
  EXPECT_NEAR(sum, total, 1e-6) << "the phases add up to the total";
  const auto finished = events_.events().back().second;
  EXPECT_EQ(std::get<int64_t>(finished[0].second), 0);
  // The keep-alives carry the same breakdown (through the progress board).
  auto last = board_.LastRestart();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->cause(), "worker_failed");
  EXPECT_NEAR(last->total_s(), total, 1e-6);
}

TEST_F(AgentTest, TheWorkersStartUpPhasesCompleteTheRestartsBreakdown) {
  o_.max_restarts = 1;
  int starts = 0;
  processes_.on_start = [this, &starts](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    // The first group: local rank 1 fails after 2 s. The second group's
    // workers report their start-up (local rank 1 a second later each
    // time), then succeed.
    if (++starts <= 2) {
      if (starts == 2) p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Exited(4));
      return;
    }
    const int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    auto event = [this, lr, pid = s.pid](agent::v1::WorkerEvent::Kind kind) {
      return [this, lr, pid, kind] {
        agent::v1::WorkerEvent e;
        e.set_local_rank(lr);
        e.set_pid(pid);
        e.set_kind(kind);
        ASSERT_TRUE(board_.RecordEvent(e).ok());
      };
    };
    const absl::Duration late = absl::Seconds(lr);
    p.CallAt(s.time + absl::Milliseconds(100), event(agent::v1::WorkerEvent::STARTED));
    p.CallAt(s.time + absl::Seconds(1) + late, event(agent::v1::WorkerEvent::COMMUNICATOR_READY));
    if (lr == 0) p.CallAt(s.time + absl::Seconds(3), event(agent::v1::WorkerEvent::RESUMED));
    p.CallAt(s.time + absl::Seconds(4) + late, event(agent::v1::WorkerEvent::FIRST_STEP));
    p.ExitAt(s.pid, s.time + absl::Seconds(8), ExitStatus::Exited(0));  // within --worker_timeout
  };
  ASSERT_EQ(Run().exit_code, 0);
  std::map<std::string, EventValue> restart, completed;
  for (const auto& [name, fields] : events_.events()) {
    if (name == "restart") restart = {fields.begin(), fields.end()};
    if (name == "restart_completed") completed = {fields.begin(), fields.end()};
  }
  ASSERT_FALSE(completed.empty()) << "every worker made its first step";
  auto d = [&completed](const char* key) { return std::get<double>(completed.at(key)); };
  // The slowest local rank in each phase: rank 1's communicator at 2 s, rank
  // 0's checkpoint at 3 s, rank 1's first step at 5 s after the start.
  EXPECT_NEAR(d("started_to_comm_ready_s"), 2.0, 1e-6);
  EXPECT_NEAR(d("comm_ready_to_restored_s"), 1.0, 1e-6);
  EXPECT_NEAR(d("restored_to_first_step_s"), 2.0, 1e-6);
  const double launcher = std::get<double>(restart.at("total_s"));
  EXPECT_NEAR(d("detected_to_stopped_s") + d("stopped_to_joined_s") + d("joined_to_started_s"), launcher, 1e-6);
  EXPECT_NEAR(launcher + d("started_to_comm_ready_s") + d("comm_ready_to_restored_s") + d("restored_to_first_step_s"),
              d("total_s"), 1e-6)
      << "the phases add up to the total, from the failure's detection to the last first step";
  auto last = board_.LastRestart();
  ASSERT_TRUE(last.has_value());
  EXPECT_NEAR(last->total_to_first_step_s(), d("total_s"), 1e-6) << "the keep-alives carry it";
}

// Once every worker of a group made its first step and said it can wait
// warm, the agent asks its process launcher to prepare the next start (warm
// spares), once per group; workers that cannot wait warm get none.
TEST_F(AgentTest, TheNextStartIsPreparedOnceTheGroupRunsWarmCapable) {
  o_.max_restarts = 1;
  int starts = 0;
  absl::Time second_group;
  processes_.on_start = [this, &starts, &second_group](FakeProcessLauncher& p,
                                                       const FakeProcessLauncher::Started& s) {
    ++starts;
    EXPECT_EQ(s.spec.slot, std::stoi(s.spec.env.at("LOCAL_RANK"))) << "the slot is the local rank";
    const int lr = s.spec.slot;
    // The first group's workers can wait warm; the second's (the same
    // program, say) do not say so.
    const bool warm = starts <= 2;
    if (starts == 3) second_group = s.time;
    auto event = [this, lr, pid = s.pid, warm](agent::v1::WorkerEvent::Kind kind) {
      return [this, lr, pid, kind, warm] {
        agent::v1::WorkerEvent e;
        e.set_local_rank(lr);
        e.set_pid(pid);
        e.set_kind(kind);
        e.set_can_wait_warm(warm);
        ASSERT_TRUE(board_.RecordEvent(e).ok());
      };
    };
    p.CallAt(s.time + absl::Milliseconds(100), event(agent::v1::WorkerEvent::STARTED));
    p.CallAt(s.time + absl::Seconds(1), event(agent::v1::WorkerEvent::COMMUNICATOR_READY));
    // Local rank 1 makes its first step a second after local rank 0.
    p.CallAt(s.time + absl::Seconds(2 + lr), event(agent::v1::WorkerEvent::FIRST_STEP));
    if (starts == 2) p.ExitAt(s.pid, s.time + absl::Seconds(6), ExitStatus::Exited(4));
    if (starts > 2) p.ExitAt(s.pid, s.time + absl::Seconds(6), ExitStatus::Exited(0));
  };
  ASSERT_EQ(Run().exit_code, 0);
  const std::vector<absl::Time> prepared = processes_.prepared();
  ASSERT_EQ(prepared.size(), 1u) << "once, for the first group only";
  const absl::Time first_start = processes_.started().front().time;
  EXPECT_EQ(prepared[0] - first_start, absl::Seconds(3)) << "when the last worker made its first step";
  EXPECT_LT(prepared[0], second_group);
}

// In-place recovery: local rank 1 dies; local rank 0 declared it and stays
// (never signalled), is told the round is changing and then its new round's
// environment; only local rank 1 starts again.
class InPlaceTest : public AgentTest {
 protected:
  void SetUpWorkers(bool declare) {
    o_.max_restarts = 1;
    o_.in_place = true;
    o_.notices = &notices_;
    processes_.on_start = [this, declare](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
      const pid_t pid = s.pid;
      Declare(p, s, declare);
      ++starts_;
      if (starts_ == 2) p.ExitAt(pid, s.time + absl::Seconds(2), ExitStatus::Killed(SIGKILL));
      if (starts_ == 1) p.ExitAt(pid, s.time + absl::Seconds(10), ExitStatus::Exited(0));
      if (starts_ >= 3) p.ExitAt(pid, s.time + absl::Seconds(5), ExitStatus::Exited(0));
    };
  }

  // The worker's STARTED event 100 ms after its start: it declares
  // in-place recovery or not.
  void Declare(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, bool in_place) {
    const int lr = s.spec.slot;
    const pid_t pid = s.pid;
    p.CallAt(s.time + absl::Milliseconds(100), [this, lr, pid, in_place] {
      agent::v1::WorkerEvent e;
      e.set_local_rank(lr);
      e.set_pid(pid);
      e.set_kind(agent::v1::WorkerEvent::STARTED);
      e.set_can_recover_in_place(in_place);
      ASSERT_TRUE(board_.RecordEvent(e).ok());
    });
  }

  std::map<std::string, EventValue> Last(const std::string& event) {
    std::map<std::string, EventValue> out;
    for (const auto& [name, fields] : events_.events()) {
      if (name == event) out = {fields.begin(), fields.end()};
    }
    return out;
  }

  RoundNotices notices_;
  int starts_ = 0;
};

TEST_F(InPlaceTest, TheSurvivorStaysAndOnlyTheLostRankStartsAgain) {
  SetUpWorkers(/*declare=*/true);
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(processes_.started().size(), 3u) << "local ranks 0 and 1, then local rank 1 again";
  EXPECT_EQ(processes_.started()[2].spec.slot, 1);
  EXPECT_EQ(Env(2, "CPPTORCHRUN_RDZV_ROUND"), "2");
  const pid_t survivor = processes_.started()[0].pid;
  for (auto [pid, sig] : processes_.signals_sent()) EXPECT_NE(pid, survivor) << "signal " << sig;
  // Its new round's environment, as a new worker's, error file its own.
  const RoundNotices::Update u = notices_.Current(0, survivor);
  EXPECT_EQ(u.state(), RoundNotices::Update::ASSIGNED);
  EXPECT_EQ(u.generation(), 2) << "CHANGING, then ASSIGNED";
  EXPECT_EQ(u.env().at("CPPTORCHRUN_RDZV_ROUND"), "2");
  EXPECT_EQ(u.env().at("RANK"), "0");
  EXPECT_EQ(u.env().at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(u.env().at("TORCHELASTIC_ERROR_FILE"), Env(0, "TORCHELASTIC_ERROR_FILE"));
  EXPECT_EQ(u.env().at("MASTER_PORT"), Env(2, "MASTER_PORT"));
  auto held = Last("survivors_held");
  ASSERT_FALSE(held.empty());
  EXPECT_EQ(std::get<std::vector<int64_t>>(held.at("ranks")), std::vector<int64_t>{0});
  auto restart = Last("restart");
  EXPECT_EQ(std::get<std::string>(restart.at("path")), "in_place");
  EXPECT_EQ(std::get<int64_t>(restart.at("counted")), 1);
  auto started = Last("workers_started");
  const std::vector<int64_t> pids = std::get<std::vector<int64_t>>(started.at("pids"));
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_EQ(pids[0], survivor);
  EXPECT_EQ(pids[1], processes_.started()[2].pid);
  EXPECT_TRUE(processes_.alive().empty());
}

// The replacement dies before the recovery is over (its first step never
// came): said so (recovery_interrupted), and recovered in place again.
TEST_F(InPlaceTest, AReplacementLostBeforeTheRecoveryIsOverIsSaidAndRecoveredAgain) {
  o_.max_restarts = 2;
  o_.in_place = true;
  o_.notices = &notices_;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    const pid_t pid = s.pid;
    Declare(p, s, /*in_place=*/true);
    ++starts_;
    if (starts_ == 2) p.ExitAt(pid, s.time + absl::Seconds(2), ExitStatus::Killed(SIGKILL));
    if (starts_ == 3) p.ExitAt(pid, s.time + absl::Milliseconds(500), ExitStatus::Killed(SIGKILL));
    if (starts_ == 1) p.ExitAt(pid, s.time + absl::Seconds(10), ExitStatus::Exited(0));
    if (starts_ >= 4) p.ExitAt(pid, s.time + absl::Seconds(5), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.restart_count, 2);
  ASSERT_EQ(processes_.started().size(), 4u);
  auto interrupted = Last("recovery_interrupted");
  ASSERT_FALSE(interrupted.empty());
  EXPECT_EQ(std::get<int64_t>(interrupted.at("round")), 2);
  EXPECT_EQ(std::get<int64_t>(interrupted.at("rank")), 1);
  EXPECT_EQ(std::get<std::string>(Last("restart").at("path")), "in_place");
  int interrupted_count = 0;
  for (const auto& [name, fields] : events_.events()) interrupted_count += name == "recovery_interrupted";
  EXPECT_EQ(interrupted_count, 1) << "the first failure interrupted nothing";
  for (auto [pid, sig] : processes_.signals_sent()) EXPECT_NE(pid, processes_.started()[0].pid) << sig;
}

TEST_F(InPlaceTest, WorkersThatDidNotDeclareItRestartAsAGangSayingWhy) {
  SetUpWorkers(/*declare=*/false);
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(processes_.started().size(), 4u);
  auto restart = Last("restart");
  EXPECT_EQ(std::get<std::string>(restart.at("path")), "gang");
  EXPECT_THAT(std::get<std::string>(restart.at("why_gang")), HasSubstr("did not declare in-place recovery"));
  EXPECT_TRUE(Last("survivors_held").empty());
}

TEST_F(InPlaceTest, SurvivorsHeldWhenTheRunEndsAreStopped) {
  SetUpWorkers(/*declare=*/true);
  o_.max_restarts = 0;  // the failure ends the run
  AgentResult r = Run();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(processes_.started().size(), 2u);
  const pid_t survivor = processes_.started()[0].pid;
  EXPECT_EQ(notices_.Current(0, survivor).state(), RoundNotices::Update::STOP);
  EXPECT_TRUE(processes_.alive().empty());
}

// A peer elsewhere is lost: nothing fails on this node, but its workers'
// collectives of the current round fail (RECOVERING for round 1). The node
// holds both workers and joins round 2 at once (a membership change: no
// restart spent), and nobody starts again. A RECOVERING naming an older
// round is a held worker's late report and changes nothing.
TEST_F(InPlaceTest, ACollectiveFailedWithNothingLostHereJoinsTheNextRoundAtOnce) {
  o_.max_restarts = 0;
  o_.in_place = true;
  o_.notices = &notices_;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    const int lr = s.spec.slot;
    const pid_t pid = s.pid;
    auto send = [this, lr, pid](agent::v1::WorkerEvent::Kind kind, int64_t round) {
      agent::v1::WorkerEvent e;
      e.set_local_rank(lr);
      e.set_pid(pid);
      e.set_rank(lr);
      e.set_kind(kind);
      e.set_can_recover_in_place(true);
      e.set_round(round);
      e.set_message("connection closed by peer");
      ASSERT_TRUE(board_.RecordEvent(e).ok());
    };
    p.CallAt(s.time + absl::Milliseconds(100), [send] { send(agent::v1::WorkerEvent::STARTED, 0); });
    p.CallAt(s.time + absl::Seconds(1), [send] { send(agent::v1::WorkerEvent::RECOVERING, 7); });
    p.CallAt(s.time + absl::Seconds(2), [send] { send(agent::v1::WorkerEvent::RECOVERING, 1); });
    p.ExitAt(pid, s.time + absl::Seconds(10), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.restart_count, 0) << "a peer's loss spends no restart of this node";
  ASSERT_EQ(processes_.started().size(), 2u) << "both workers stay";
  EXPECT_TRUE(processes_.signals_sent().empty());
  EXPECT_EQ(rdzv_.joins().size(), 2u);
  for (int lr = 0; lr < 2; ++lr) {
    const RoundNotices::Update u = notices_.Current(lr, processes_.started()[lr].pid);
    EXPECT_EQ(u.state(), RoundNotices::Update::ASSIGNED);
    EXPECT_EQ(u.env().at("CPPTORCHRUN_RDZV_ROUND"), "2");
  }
  auto ended = Last("round_ended");
  ASSERT_FALSE(ended.empty());
  EXPECT_THAT(std::get<std::string>(ended.at("reason")), HasSubstr("rank 0's collective failed"));
  EXPECT_THAT(std::get<std::string>(ended.at("reason")), HasSubstr("connection closed by peer"));
  EXPECT_EQ(std::get<std::string>(Last("restart").at("path")), "in_place");
  EXPECT_EQ(std::get<std::vector<int64_t>>(Last("survivors_held").at("ranks")), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(processes_.alive().empty());
}

// No spare is ready when local rank 1 dies (one will come): the node goes
// on at once with its survivor alone (LOCAL_RANK 0 of 1, a smaller world)
// and grows back to two workers when the spare is ready, the survivor
// still the same process.
TEST_F(InPlaceTest, WithNoSpareReadyTheNodeRunsShortAndGrowsBackWhenOneIs) {
  SetUpWorkers(/*declare=*/true);
  o_.max_restarts = 1;
  o_.fake_gpus = 2;
  processes_.spares_come = true;
  processes_.CallAt(clock_.Now() + absl::Seconds(3), [this] { processes_.MakeSpareReady(1); });
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.restart_count, 1) << "the growth spends no restart";
  EXPECT_EQ(processes_.spares_wanted(), std::vector<int>{1});
  ASSERT_EQ(processes_.started().size(), 3u);
  EXPECT_EQ(processes_.started()[2].spec.slot, 1);
  const absl::Time t0 = processes_.started()[0].time;
  EXPECT_GE(processes_.started()[2].time, t0 + absl::Seconds(3)) << "not before its spare is ready";
  EXPECT_LE(processes_.started()[2].time, t0 + absl::Seconds(3) + absl::Milliseconds(100))
      << "a node running short looks at its spares often";
  EXPECT_EQ(Env(2, "LOCAL_RANK"), "1");
  EXPECT_EQ(Env(2, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(Env(2, "CPPTORCHRUN_RDZV_ROUND"), "3");
  const std::vector<rdzv::v1::JoinRequest> joins = rdzv_.joins();
  ASSERT_EQ(joins.size(), 3u);
  EXPECT_EQ(joins[0].node().local_world_size(), 2);
  EXPECT_EQ(joins[1].node().local_world_size(), 1) << "short: the survivor alone";
  EXPECT_EQ(joins[2].node().local_world_size(), 2) << "grown back";
  const pid_t survivor = processes_.started()[0].pid;
  for (auto [pid, sig] : processes_.signals_sent()) EXPECT_NE(pid, survivor) << "signal " << sig;
  const RoundNotices::Update u = notices_.Current(0, survivor);
  EXPECT_EQ(u.generation(), 4) << "CHANGING, ASSIGNED (short), CHANGING, ASSIGNED (whole)";
  EXPECT_EQ(u.env().at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(u.env().at("CPPTORCHRUN_FAKE_GPU"), "0");
  std::vector<std::vector<int64_t>> vacant;
  std::vector<int64_t> local_world_sizes;
  for (const auto& [name, fields] : events_.events()) {
    std::map<std::string, EventValue> f(fields.begin(), fields.end());
    if (name == "survivors_held") vacant.push_back(std::get<std::vector<int64_t>>(f.at("vacant")));
    if (name == "workers_started") local_world_sizes.push_back(std::get<int64_t>(f.at("local_world_size")));
  }
  EXPECT_EQ(vacant, (std::vector<std::vector<int64_t>>{{1}, {}}));
  EXPECT_EQ(local_world_sizes, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_THAT(std::get<std::string>(Last("round_ended").at("reason")),
              HasSubstr("the spare of local rank 1 is ready"));
  EXPECT_TRUE(processes_.alive().empty());
}

// Slot 0 is lost and runs short: the survivor of slot 1 is LOCAL_RANK 0 of
// 1 meanwhile and keeps its device (fake GPU 1); grown back, LOCAL_RANK 1.
TEST_F(InPlaceTest, ASurvivorOfAHigherSlotKeepsItsDeviceWhileTheNodeRunsShort) {
  o_.max_restarts = 1;
  o_.in_place = true;
  o_.notices = &notices_;
  o_.fake_gpus = 2;
  processes_.spares_come = true;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    const int lr = s.spec.slot;
    const pid_t pid = s.pid;
    Declare(p, s, /*in_place=*/true);
    const bool first_of_slot_0 = lr == 0 && p.started().size() == 1;
    p.ExitAt(pid, s.time + (first_of_slot_0 ? absl::Seconds(2) : absl::Seconds(10)),
             first_of_slot_0 ? ExitStatus::Killed(SIGKILL) : ExitStatus::Exited(0));
  };
  RoundNotices::Update short_round;
  processes_.CallAt(clock_.Now() + absl::Seconds(3), [this, &short_round] {
    short_round = notices_.Current(1, processes_.started()[1].pid);
  });
  processes_.CallAt(clock_.Now() + absl::Seconds(4), [this] { processes_.MakeSpareReady(0); });
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(short_round.state(), RoundNotices::Update::ASSIGNED);
  ASSERT_EQ(short_round.env().count("LOCAL_RANK"), 1u);
  EXPECT_EQ(short_round.env().at("LOCAL_RANK"), "0");
  EXPECT_EQ(short_round.env().at("LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(short_round.env().at("RANK"), "0");
  EXPECT_EQ(short_round.env().at("CPPTORCHRUN_FAKE_GPU"), "1") << "its own device";
  ASSERT_EQ(processes_.started().size(), 3u);
  EXPECT_EQ(processes_.started()[2].spec.slot, 0);
  EXPECT_EQ(Env(2, "LOCAL_RANK"), "0");
  EXPECT_EQ(Env(2, "CPPTORCHRUN_FAKE_GPU"), "0");
  const RoundNotices::Update grown = notices_.Current(1, processes_.started()[1].pid);
  EXPECT_EQ(grown.env().at("LOCAL_RANK"), "1");
  EXPECT_EQ(grown.env().at("RANK"), "1");
  EXPECT_EQ(grown.env().at("CPPTORCHRUN_FAKE_GPU"), "1");
}

// The same report while a worker of this node has died: that death is the
// failure (a restart spent, the dead rank started again), not a peer's.
TEST_F(InPlaceTest, ALocalDeathIsAFailureEvenWhenItsPeerReportedFirst) {
  o_.max_restarts = 1;
  o_.in_place = true;
  o_.notices = &notices_;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    const pid_t pid = s.pid;
    ++starts_;
    Declare(p, s, /*in_place=*/true);
    if (starts_ == 2) {
      // Local rank 1 dies; local rank 0's report of it comes before the
      // launcher has reaped it.
      p.CallAt(s.time + absl::Seconds(2), [this, &p, pid] {
        p.ExitAt(pid, clock_.Now(), ExitStatus::Killed(SIGKILL));
        agent::v1::WorkerEvent e;
        e.set_local_rank(0);
        e.set_pid(processes_.started()[0].pid);
        e.set_kind(agent::v1::WorkerEvent::RECOVERING);
        e.set_round(1);
        ASSERT_TRUE(board_.RecordEvent(e).ok());
      });
    }
    if (starts_ != 2) p.ExitAt(pid, s.time + absl::Seconds(10), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.restart_count, 1);
  ASSERT_EQ(processes_.started().size(), 3u);
  EXPECT_EQ(processes_.started()[2].spec.slot, 1);
  EXPECT_EQ(std::get<std::string>(Last("restart").at("path")), "in_place");
  EXPECT_TRUE(Last("round_ended").empty());
}

TEST_F(AgentTest, FailureRestartsUntilOutOfRestartsThenExitsWithRootCause) {
  o_.max_restarts = 2;
  ExitAfterStart(absl::Seconds(1), ExitStatus::Exited(3), /*only=*/1);
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.restart_count, 2);
  ASSERT_EQ(processes_.started().size(), 6u);
  EXPECT_EQ(Env(0, "TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(Env(2, "TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(Env(4, "TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(Env(4, "TORCHELASTIC_ERROR_FILE"), log_root_ + "/attempt_2/0/error.json");
  // Each restart is a new round with a fresh MASTER_PORT.
  ASSERT_EQ(rdzv_.joins().size(), 3u);
  EXPECT_EQ(rdzv_.joins()[1].last_round(), 1);
  EXPECT_EQ(rdzv_.joins()[2].last_round(), 2);
  EXPECT_NE(Env(0, "MASTER_PORT"), Env(2, "MASTER_PORT"));
  EXPECT_EQ(Env(2, "CPPTORCHRUN_RDZV_ROUND"), "2");
  // The surviving worker of each group was stopped with SIGTERM.
  int sigterms = 0;
  for (auto [pid, sig] : processes_.signals_sent()) sigterms += sig == SIGTERM;
  EXPECT_GE(sigterms, 3);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  EXPECT_THAT(printed_, HasSubstr("train FAILED"));
  EXPECT_THAT(printed_, HasSubstr("exitcode  : 3"));
  EXPECT_EQ(rdzv_.closes().size(), 1u);
  EXPECT_EQ(rdzv_.leaves(), std::vector<std::string>{"failed"}) << "the closer leaves the run too";
  EXPECT_TRUE(processes_.alive().empty());
}

TEST_F(AgentTest, LaterExitsAfterTheFirstFailureAreNotFailures) {
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    if (lr == 0) p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Killed(SIGSEGV));
    if (lr == 1) p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(7));
  };
  AgentResult r = Run();
  // Local rank 1 failed first; local rank 0 was then stopped by us (SIGTERM)
  // before its own crash: one failure, the root cause.
  EXPECT_EQ(r.exit_code, 7);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
}

TEST_F(AgentTest, SimultaneousFailuresAreAllListed) {
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    p.ExitAt(s.pid, absl::FromUnixSeconds(1700000005),
             lr == 1 ? ExitStatus::Exited(9) : ExitStatus::Killed(SIGABRT));
  };
  AgentResult r = Run();
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_EQ(r.exit_code, 128 + SIGABRT);  // local rank 0 was scheduled (and reaped) first
  EXPECT_THAT(printed_, HasSubstr("Root Cause"));
  size_t root = printed_.find("Root Cause");
  EXPECT_THAT(printed_.substr(root), HasSubstr("SIGABRT"));
  EXPECT_THAT(printed_.substr(0, root), HasSubstr("exitcode  : 9"));
}

TEST_F(AgentTest, StopSignalStopsWorkersAndExits128PlusSignal) {
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(3), SIGTERM);
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(processes_.alive().empty());
  std::set<pid_t> termed;
  for (auto [pid, sig] : processes_.signals_sent()) {
    if (sig == SIGTERM) termed.insert(pid);
  }
  EXPECT_EQ(termed.size(), 2u);
  EXPECT_EQ(rdzv_.leaves().size(), 1u);
  EXPECT_TRUE(printed_.empty());
}

TEST_F(AgentTest, ASignalDuringAJoinLeavesAHelperThatIsJoinedOnceTheClientIsCancelled) {
  o_.blocking_call_grace = absl::ZeroDuration();
  rdzv_.block_joins = true;
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(1), SIGTERM);
  {
    ElasticAgent agent(o_);
    AgentResult r = agent.Run();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM);
    EXPECT_THAT(rdzv_.leaves(), ElementsAre("signal SIGTERM"));
    EXPECT_EQ(rdzv_.blocked_joins_returned(), 0) << "the Join is still blocked";
    rdzv_.Cancel();
  }  // the agent's destructor joins its helper
  EXPECT_EQ(rdzv_.blocked_joins_returned(), 1);
  EXPECT_TRUE(processes_.started().empty()) << "no round, no workers";
  auto events = events_.events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "finished") << "a signal ends the run through the restart policy too";
}

// scancel while the rendezvous cannot be reached: the launcher's leave
// would retry for a minute, past Slurm's SIGKILL. After a stop signal it
// gets what is left of the shutdown grace, and the launcher exits.
TEST_F(AgentTest, ALeaveAfterAStopSignalIsBoundedByTheShutdownGrace) {
  o_.blocking_call_grace = absl::ZeroDuration();
  o_.shutdown_timeout = absl::Milliseconds(300);
  rdzv_.block_joins = true;
  rdzv_.block_leaves = true;
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(1), SIGTERM);
  {
    ElasticAgent agent(o_);
    // The leave blocks until Cancel, which comes only after Run: that Run
    // returns at all shows the bound.
    AgentResult r = agent.Run();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM);
    EXPECT_THAT(rdzv_.leaves(), ElementsAre("signal SIGTERM")) << "the leave was tried";
    EXPECT_EQ(r.exit_by, absl::FromUnixSeconds(1700000000) + absl::Seconds(1) + absl::Milliseconds(300));
    rdzv_.Cancel();
  }
  EXPECT_THAT(events_.names(), Contains("exit_call_abandoned"));
}

TEST_F(AgentTest, OtherHandledSignalsAreOnlyForwarded) {
  ExitAfterStart(absl::Seconds(10), ExitStatus::Exited(0));
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(2), SIGUSR1);
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  int usr1 = 0;
  for (auto [pid, sig] : processes_.signals_sent()) usr1 += sig == SIGUSR1;
  EXPECT_EQ(usr1, 2);
}

// Inside a Slurm step, slurmstepd signals every process of the step (the
// workers too): the launcher does not send each worker a second copy. A
// SIGUSR1 from anyone else (a user's kill) is forwarded as before.
TEST_F(AgentTest, ASignalFromSlurmsStepDaemonIsNotForwardedAgain) {
  o_.inside_slurm_step = true;
  ExitAfterStart(absl::Seconds(10), ExitStatus::Exited(0));
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(2), SIGUSR1, "slurmstepd");
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(3), SIGUSR2, "bash");
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  int usr1 = 0, usr2 = 0;
  for (auto [pid, sig] : processes_.signals_sent()) {
    usr1 += sig == SIGUSR1;
    usr2 += sig == SIGUSR2;
  }
  EXPECT_EQ(usr1, 0);
  EXPECT_EQ(usr2, 2);
  int received = 0;
  for (const auto& [name, fields] : events_.events()) {
    if (name != "signal_received") continue;
    ++received;
    const std::string json = EventJson(0, name, fields);
    if (json.find("SIGUSR1") != std::string::npos) {
      EXPECT_NE(json.find("\"sender\": \"slurmstepd\""), std::string::npos) << json;
      EXPECT_NE(json.find("\"forwarded\": 0"), std::string::npos) << json;
    } else {
      EXPECT_NE(json.find("\"forwarded\": 1"), std::string::npos) << json;
    }
  }
  EXPECT_EQ(received, 2);
}

// scancel, a preemption: slurmstepd SIGTERMs every process of the step.
// The launcher sends its workers no second SIGTERM (they are checkpointing
// on the first); it waits for them within the grace, as for its own.
TEST_F(AgentTest, ASigtermFromSlurmIsNotSentToTheWorkersAgain) {
  o_.inside_slurm_step = true;
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    // As Slurm's SIGTERM makes them: out at t+2 s with 143.
    p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Exited(128 + SIGTERM));
  };
  processes_.SignalLauncherAt(clock_.Now() + absl::Seconds(1), SIGTERM, "slurmstepd");
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  int sent = 0;
  for (auto [pid, sig] : processes_.signals_sent()) sent += sig == SIGTERM;
  EXPECT_EQ(sent, 0);
  EXPECT_TRUE(processes_.alive().empty());
}

TEST(ForwardToWorkers, OnlySlurmsOwnDeliveryIsNotForwarded) {
  ProcessEvent e;
  e.kind = ProcessEvent::Kind::kSignal;
  e.signo = SIGUSR1;
  e.sender = "slurmstepd";
  EXPECT_FALSE(ForwardToWorkers(e, /*inside_slurm_step=*/true));
  EXPECT_TRUE(ForwardToWorkers(e, /*inside_slurm_step=*/false));
  e.sender = "kill";
  EXPECT_TRUE(ForwardToWorkers(e, true));
  e.sender = "";
  EXPECT_TRUE(ForwardToWorkers(e, true));
}

TEST_F(AgentTest, SigtermIgnoredMeansSigkillAfterShutdownTimeout) {
  o_.shutdown_timeout = absl::Seconds(7);
  const absl::Time t0 = clock_.Now();
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    if (lr == 0) p.IgnoreSigterm(s.pid);
    if (lr == 1) p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(2));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(processes_.alive().empty());
  // SIGTERM at t0+1s, then 7 s of grace, then SIGKILL.
  EXPECT_EQ(clock_.Now(), t0 + absl::Seconds(8));
  bool killed = false;
  for (auto [pid, sig] : processes_.signals_sent()) killed |= sig == SIGKILL;
  EXPECT_TRUE(killed);
}

TEST_F(AgentTest, SilentWorkerIsHungAndKilled) {
  o_.hang.fixed_silence = absl::Seconds(10);
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    if (lr != 1) return;
    p.CallAt(s.time + absl::Seconds(1), [this, pid = s.pid] {
      agent::v1::Heartbeat hb;
      hb.set_rank(1);
      hb.set_local_rank(1);
      hb.set_pid(pid);
      hb.set_step(42);
      board_.Heartbeat(hb);
    });
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(11));
  EXPECT_THAT(r.failures[0].message, HasSubstr("hung"));
  EXPECT_THAT(printed_, HasSubstr("hung"));
}

// Local rank 1 heartbeats every second for `beats` seconds; its step
// advances 30 a beat (a 33 ms step) for 20 s, then stops. Local rank 0
// sends nothing (a Python worker).
void StepThenStall(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, ProgressBoard& board,
                   int beats) {
  if (std::stoi(s.spec.env.at("LOCAL_RANK")) != 1) return;
  for (int i = 1; i <= beats; ++i) {
    p.CallAt(s.time + absl::Seconds(i), [&board, s, i] {
      agent::v1::Heartbeat hb;
      hb.set_rank(1);
      hb.set_local_rank(1);
      hb.set_pid(s.pid);
      hb.set_step(30 * std::min(i, 20));
      hb.set_total_steps(100000);
      board.Heartbeat(hb);
    });
  }
}

// The `index`th event called `event`.
std::map<std::string, EventValue> OnlyEventAt(const MemoryEventLog& log, const std::string& event, int index) {
  for (const auto& [name, list] : log.events()) {
    if (name == event && index-- == 0) return std::map<std::string, EventValue>(list.begin(), list.end());
  }
  ADD_FAILURE() << "no " << event;
  return {};
}

std::map<std::string, EventValue> OnlyEvent(const MemoryEventLog& log, const std::string& event) {
  std::map<std::string, EventValue> out;
  int seen = 0;
  for (const auto& [name, list] : log.events()) {
    if (name != event) continue;
    ++seen;
    out = std::map<std::string, EventValue>(list.begin(), list.end());
  }
  EXPECT_EQ(seen, 1) << event;
  return out;
}

// After a failure of its own workers the node tells the rendezvous (the
// Join's failure: the round, when, why), once; a Join the rendezvous answers
// "kept out" is said once, and the node waits on.
TEST_F(AgentTest, ARejoinAfterItsOwnFailureReportsItAndAQuarantineIsSaidOnce) {
  o_.max_restarts = 2;
  const absl::Time t0 = clock_.Now();
  int starts = 0;
  processes_.on_start = [&starts](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    if (std::stoi(s.spec.env.at("LOCAL_RANK")) == 0) ++starts;
    const bool fail = starts == 1 && std::stoi(s.spec.env.at("LOCAL_RANK")) == 1;
    p.ExitAt(s.pid, s.time + absl::Seconds(2), fail ? ExitStatus::Exited(3) : ExitStatus::Exited(0));
  };
  rdzv_.quarantined_answers = 3;
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(rdzv_.joins().size(), 2u);
  EXPECT_FALSE(rdzv_.joins()[0].has_failure());
  const rdzv::v1::NodeFailure f = rdzv_.joins()[1].failure();
  EXPECT_EQ(f.round(), 1);
  EXPECT_EQ(f.failed_at_unix_us(), absl::ToUnixMicros(t0 + absl::Seconds(2)));
  EXPECT_THAT(f.reason(), HasSubstr("rank 1 failed: exit code 3"));
  std::vector<std::string> names = events_.names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "quarantined"), 2) << "once per Join";
  EXPECT_EQ(std::get<std::string>(OnlyEventAt(events_, "quarantined", 0).at("detail")), rdzv_.quarantine_detail);
}

// A peer node stopped its workers for a new round before this launcher
// heard of it: this node's workers lose their connections and fail. The
// rendezvous says the round had ended: a membership change, so no restart
// is spent (max_restarts 0 would end the job) and no failure is reported.
TEST_F(AgentTest, WorkersFailingAfterTheirRoundEndedAreAMembershipChange) {
  o_.max_restarts = 0;
  int starts = 0;
  processes_.on_start = [this, &starts](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    const int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    if (lr == 0) ++starts;
    if (starts == 1 && lr == 1) {
      p.CallAt(s.time + absl::Seconds(2), [this] { rdzv_.EndRound("node 'node-b' re-joined"); });
      p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Exited(1));
      return;
    }
    if (starts > 1) p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(r.restart_count, 0);
  std::map<std::string, EventValue> restart = OnlyEvent(events_, "restart");
  EXPECT_EQ(std::get<std::string>(restart.at("cause")), "membership");
  EXPECT_EQ(std::get<int64_t>(restart.at("counted")), 0);
  ASSERT_EQ(rdzv_.joins().size(), 2u);
  EXPECT_FALSE(rdzv_.joins()[1].has_failure());
}

TEST_F(AgentTest, ByDefaultARankWhoseHeartbeatsStopIsTheCulpritAfterTheFloor) {
  o_.hang = HangOptions();  // --worker_timeout auto
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StepThenStall(p, s, board_, 20);  // stopped at 20 s: no more heartbeats either
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  // The last advance came at t0 + 20 s: hung 10 s (the floor) later.
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(30));
  EXPECT_THAT(r.failures[0].message, HasSubstr("step 600 has not advanced for 10s (deadline 10s"));
  EXPECT_THAT(r.failures[0].message, HasSubstr("its heartbeats stopped"));
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")), std::vector<int64_t>{1});
  EXPECT_EQ(std::get<std::vector<std::string>>(hang.at("culprit_hosts")).size(), 1u);
  EXPECT_TRUE(std::get<std::vector<int64_t>>(hang.at("waiting_ranks")).empty());
  EXPECT_EQ(std::get<int64_t>(hang.at("step")), 600);
  EXPECT_DOUBLE_EQ(std::get<double>(hang.at("waited_s")), 10.0);
  EXPECT_DOUBLE_EQ(std::get<double>(hang.at("deadline_s")), 10.0);
}

// Local rank 1's process is stopped (a fake /proc says T) `after` its start.
// The first group steps until 20 s and stalls, local rank 1 held by the
// kernel (uninterruptible sleep: no signal ends it); the next group
// finishes after 1 s. Counts the groups and says when the second started.
std::function<void(FakeProcessLauncher&, const FakeProcessLauncher::Started&)> StallInDStateThenFinish(
    ProgressBoard* board, int* starts, absl::Time* second_group) {
  return [board, starts, second_group](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    if (std::stoi(s.spec.env.at("LOCAL_RANK")) == 0) ++*starts;
    if (*starts == 1) {
      StepThenStall(p, s, *board, 20);
      if (std::stoi(s.spec.env.at("LOCAL_RANK")) == 1) {
        p.Unkillable(s.pid, "uninterruptible sleep (D) in nfs_wait_on_request");
      }
      return;
    }
    *second_group = s.time;
    p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(0));
  };
}

void StopRank1After(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, absl::Duration after) {
  if (std::stoi(s.spec.env.at("LOCAL_RANK")) != 1) return;
  FakeProcessLauncher* launcher = &p;
  p.CallAt(s.time + after, [launcher, pid = s.pid] { launcher->SetState(pid, "stopped (T)"); });
}

// A worker that sends no heartbeats (a Python script) is SIGSTOPped at 5 s:
// seen stopped at every look from then, it is hung at 7 s (the stopped
// floor) and named, with default settings.
TEST_F(AgentTest, AStoppedWorkerWithoutHeartbeatsIsHungAfterTheStoppedFloor) {
  o_.hang = HangOptions();
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StopRank1After(p, s, absl::Seconds(5));
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(7));
  EXPECT_THAT(r.failures[0].message, HasSubstr("its process has been stopped (T) for 2s without using CPU time"));
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")), std::vector<int64_t>{1});
  EXPECT_DOUBLE_EQ(std::get<double>(hang.at("deadline_s")), 2.0);
  EXPECT_DOUBLE_EQ(std::get<double>(hang.at("waited_s")), 2.0);
}

// The same for a Python worker: its faulthandler is turned on in its
// environment, and before it is killed it is continued and sent SIGABRT,
// writes its stack to stderr and dies; the stack is in its failure's
// traceback and a worker_stack event. Its peer (not hung) is not asked.
TEST_F(AgentTest, AHungPythonWorkerWritesItsStackBeforeItIsKilled) {
  o_.hang = HangOptions();
  o_.python_stacks = true;
  o_.program_argv = {"/usr/bin/python3", "-u", "/job/train.py"};
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StopRank1After(p, s, absl::Seconds(5));
  };
  processes_.on_signal = [this](FakeProcessLauncher&, pid_t pid, int signo) {
    if (signo != SIGABRT) return;
    for (const FakeProcessLauncher::Started& s : processes_.started()) {
      if (s.pid == pid) {
        s.spec.stderr_sink.tail->Append(
            "step 9\nFatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n"
            "  File \"/job/train.py\", line 12 in wait_here\n\nExtension modules: torch._C (total: 1)\n");
      }
    }
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  for (const FakeProcessLauncher::Started& s : processes_.started()) {
    EXPECT_EQ(s.spec.env.at("PYTHONFAULTHANDLER"), "1");
  }
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  const std::string stack =
      "Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n"
      "  File \"/job/train.py\", line 12 in wait_here";
  EXPECT_EQ(r.failures[0].traceback, stack);
  std::map<std::string, EventValue> taken = OnlyEvent(events_, "worker_stack");
  EXPECT_EQ(std::get<int64_t>(taken.at("rank")), 1);
  EXPECT_EQ(std::get<std::string>(taken.at("stack")), stack);
  // SIGABRT, then SIGCONT (a stopped process takes the pending SIGABRT as it
  // is continued, where it stopped), to rank 1's process alone, before its
  // group's SIGKILL.
  const pid_t hung = r.failures[0].pid;
  std::vector<int> to_hung;
  for (const auto& [pid, signo] : processes_.signals_sent()) {
    if (pid == hung) to_hung.push_back(signo);
    EXPECT_TRUE(pid == hung || signo != SIGABRT) << "pid " << pid << " was sent SIGABRT";
  }
  ASSERT_GE(to_hung.size(), 3u);
  EXPECT_EQ(std::vector<int>(to_hung.begin(), to_hung.begin() + 3), (std::vector<int>{SIGABRT, SIGCONT, SIGKILL}));
}

// A hung Python worker the kernel holds (uninterruptible sleep) never
// answers SIGABRT: the agent waits the stack's bound (2 s), kills it
// without its stack, and does not wedge: the next group finishes the job.
TEST_F(AgentTest, AHungPythonWorkerThatCannotAnswerIsKilledWithoutItsStack) {
  o_.hang = HangOptions();
  o_.max_restarts = 1;
  o_.python_stacks = true;
  o_.program_argv = {"/usr/bin/python3", "-u", "/job/train.py"};
  int starts = 0;
  absl::Time second_group;
  processes_.on_start = StallInDStateThenFinish(&board_, &starts, &second_group);
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(std::get<std::vector<int64_t>>(OnlyEvent(events_, "hang_detected").at("culprit_ranks")),
            std::vector<int64_t>{1});
  for (const auto& [name, fields] : events_.events()) EXPECT_NE(name, "worker_stack");
  EXPECT_EQ(std::get<int64_t>(OnlyEvent(events_, "worker_unkillable").at("rank")), 1);
  // Hung at 30 s; then at most the stack's bound (2 s), the shutdown grace
  // (30 s) and the kill wait (10 s) before the next group.
  EXPECT_GT(second_group, t0 + absl::Seconds(30));
  EXPECT_LE(second_group, t0 + absl::Seconds(30 + 2 + 30 + 10 + 1));
}

// A throttled worker without heartbeats (a CPU quota by SIGSTOP and
// SIGCONT): every look sees it stopped, but it used CPU time between looks,
// so it is never hung; it finishes at 30 s and the job succeeds.
TEST_F(AgentTest, AThrottledWorkerWithoutHeartbeatsIsNotHung) {
  o_.hang = HangOptions();
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    FakeProcessLauncher* launcher = &p;
    if (std::stoi(s.spec.env.at("LOCAL_RANK")) == 1) {
      launcher->SetState(s.pid, "stopped (T)");
      for (int i = 1; i <= 120; ++i) {  // its CPU time advances every 250 ms
        p.CallAt(s.time + i * absl::Milliseconds(250), [launcher, pid = s.pid, i] { launcher->SetCpuTicks(pid, i); });
      }
    }
    p.ExitAt(s.pid, s.time + absl::Seconds(30), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failures.empty());
  for (const auto& [name, fields] : events_.events()) EXPECT_NE(name, "hang_detected");
}

// A worker that heartbeats (the C++ train) is SIGSTOPped half a second after
// its last heartbeat (30 steps a second until then): hung 10 x its step
// plus two heartbeat periods after that heartbeat (the stopped floor, 2 s,
// is below it), not after the floor (10 s), and named.
TEST_F(AgentTest, AStoppedWorkerThatHeartbeatsIsHungWithinSeconds) {
  o_.hang = HangOptions();
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StepThenStall(p, s, board_, 20);
    StopRank1After(p, s, absl::Milliseconds(20500));
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(20) + absl::Seconds(10.0 / 30) + absl::Seconds(2));
  EXPECT_THAT(r.failures[0].message, HasSubstr("its process stopped (T) at every look"));
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")), std::vector<int64_t>{1});
  EXPECT_THAT(std::get<std::string>(hang.at("process_states")), HasSubstr("rank 1: stopped (T)"));
}

// The whole node is suspended for ten minutes at 10 s (Slurm's scontrol
// suspend stops the launcher with its workers; the fake clock jumps inside
// the agent's wait), then the workers step on and finish. The time the
// launcher did not run counts against nobody: no hang, the job succeeds.
TEST_F(AgentTest, TimeTheLauncherWasSuspendedWithItsWorkersIsNoHang) {
  o_.hang = HangOptions();
  const absl::Duration suspended = absl::Minutes(10);
  processes_.on_start = [this, suspended](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    const int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
    auto beat = [this, s, lr](int64_t step) {
      return [this, s, lr, step] {
        agent::v1::Heartbeat hb;
        hb.set_rank(lr);
        hb.set_local_rank(lr);
        hb.set_pid(s.pid);
        hb.set_step(step);
        hb.set_total_steps(100000);
        board_.Heartbeat(hb);
      };
    };
    for (int i = 1; i <= 10; ++i) p.CallAt(s.time + absl::Seconds(i), beat(30 * i));
    if (lr == 0) p.CallAt(s.time + absl::Seconds(10), [this, suspended] { clock_.Advance(suspended); });
    for (int i = 1; i <= 5; ++i) p.CallAt(s.time + suspended + absl::Seconds(10 + i), beat(300 + 30 * i));
    p.ExitAt(s.pid, s.time + suspended + absl::Seconds(16), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.failures.empty());
  for (const auto& [name, fields] : events_.events()) EXPECT_NE(name, "hang_detected");
}

// Both local ranks heartbeat every second for 60 s; their steps advance 30
// a beat (33 ms steps) for 20 s, then stop. From then on each one's flight
// recorder says `seq_after[local_rank]` (before: its step).
void StallWithCollectives(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, ProgressBoard& board,
                          std::vector<int64_t> seq_after) {
  const int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
  for (int i = 1; i <= 60; ++i) {
    p.CallAt(s.time + absl::Seconds(i), [&board, s, i, lr, seq_after] {
      agent::v1::Heartbeat hb;
      hb.set_rank(lr);
      hb.set_local_rank(lr);
      hb.set_pid(s.pid);
      hb.set_step(30 * std::min(i, 20));
      hb.set_total_steps(100000);
      hb.set_collective_seq(i <= 20 ? 30 * i : seq_after[lr]);
      board.Heartbeat(hb);
    });
  }
}

// Rank 1 never issued the collective rank 0 waits in (601): named the
// culprit at its deadline (10 s after the stall), not at twice that.
TEST_F(AgentTest, ARankThatNeverIssuedTheCollectiveItsPeerWaitsInIsTheCulprit) {
  o_.hang = HangOptions();
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StallWithCollectives(p, s, board_, {601, 600});
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(30));
  EXPECT_THAT(r.failures[0].message, HasSubstr("it never issued collective 601 that its peers wait in (its newest: 600)"));
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")), std::vector<int64_t>{1});
  EXPECT_TRUE(std::get<std::vector<int64_t>>(hang.at("waiting_ranks")).empty());
  EXPECT_EQ(std::get<int64_t>(hang.at("collective_seq")), 601);
}

// With two nodes the other node's ranks come from the rendezvous (their
// keep-alives): they are in collective 601, both of this node's ranks are
// at 600, so both are culprits, at their deadline.
TEST_F(AgentTest, ThisNodesRanksBehindAnotherNodesCollectiveAreTheCulprits) {
  o_.hang = HangOptions();
  FakeRendezvousClient two_nodes(/*group_rank=*/0, /*group_world_size=*/2);
  rdzv::v1::RunStatusResponse st;
  st.add_nodes()->add_progress()->set_collective_seq(601);
  two_nodes.SetRunStatusAnswers({st});
  o_.rdzv = &two_nodes;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StallWithCollectives(p, s, board_, {600, 600});
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(30));
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(std::get<int64_t>(hang.at("collective_seq")), 601);
  EXPECT_GE(two_nodes.run_status_calls(), 1);
}

TEST_F(AgentTest, ARankStillHeartbeatingIsWaitingAndGivenTwiceTheDeadline) {
  o_.hang = HangOptions();
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StepThenStall(p, s, board_, 60);  // heartbeats go on: waiting in a collective
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].time, t0 + absl::Seconds(40));
  EXPECT_THAT(r.failures[0].message, HasSubstr("x2 while it still heartbeats"));
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_TRUE(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")).empty());
  EXPECT_TRUE(std::get<std::vector<std::string>>(hang.at("culprit_hosts")).empty());
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("waiting_ranks")), std::vector<int64_t>{1});
}

// A worker the kernel holds in uninterruptible sleep (a fake /proc says D,
// with where): it is the hang's culprit, SIGKILL does not end it, and the
// agent does not wedge: after the grace and the kill wait it says so and
// starts the next group, which finishes the job.
TEST_F(AgentTest, AWorkerInUninterruptibleSleepDoesNotWedgeTheAgent) {
  o_.hang = HangOptions();
  o_.max_restarts = 1;
  int starts = 0;
  absl::Time second_group;
  processes_.on_start = StallInDStateThenFinish(&board_, &starts, &second_group);
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(starts, 2);
  std::map<std::string, EventValue> hang = OnlyEvent(events_, "hang_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(hang.at("culprit_ranks")), std::vector<int64_t>{1});
  EXPECT_THAT(std::get<std::string>(hang.at("process_states")),
              HasSubstr("rank 1: uninterruptible sleep (D) in nfs_wait_on_request"));
  std::map<std::string, EventValue> stuck = OnlyEvent(events_, "worker_unkillable");
  EXPECT_EQ(std::get<int64_t>(stuck.at("rank")), 1);
  EXPECT_EQ(std::get<std::string>(stuck.at("state")), "uninterruptible sleep (D) in nfs_wait_on_request");
  // Hung at 30 s (the floor after the last step at 20 s); then at most the
  // shutdown grace (30 s) and the kill wait (10 s) before the next group.
  EXPECT_GT(second_group, t0 + absl::Seconds(30));
  EXPECT_LE(second_group, t0 + absl::Seconds(30 + 30 + 10 + 1));
  EXPECT_EQ(processes_.alive().size(), 1u);  // only the one the kernel holds
}

TEST_F(AgentTest, FailuresThatNeverPassTheBestStepEndTheJobWithTheNoProgressCode) {
  o_.max_restarts = 10;
  o_.failures_without_progress = 2;
  // Every attempt: local rank 1 reports step 100, then exits 1.
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    if (std::stoi(s.spec.env.at("LOCAL_RANK")) != 1) return;
    p.CallAt(s.time + absl::Seconds(1), [this, s] {
      agent::v1::Heartbeat hb;
      hb.set_rank(1);
      hb.set_local_rank(1);
      hb.set_pid(s.pid);
      hb.set_step(100);
      hb.set_total_steps(1000);
      board_.Heartbeat(hb);
    });
    p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Exited(1));
  };
  AgentResult r = Run();
  // The first failure reached step 100 (progress); the next two did not pass it.
  EXPECT_EQ(r.exit_code, kNoProgressExitCode);
  EXPECT_EQ(r.restart_count, 2);
  std::map<std::string, EventValue> gave_up = OnlyEvent(events_, "no_progress");
  EXPECT_EQ(std::get<int64_t>(gave_up.at("failures_in_a_row")), 2);
  EXPECT_EQ(std::get<int64_t>(gave_up.at("best_step")), 100);
  std::map<std::string, EventValue> finished = OnlyEvent(events_, "finished");
  EXPECT_EQ(std::get<int64_t>(finished.at("exit_code")), 78);
  EXPECT_THAT(std::get<std::string>(finished.at("reason")),
              HasSubstr("no progress: 2 worker failures in a row, none past step 100"));
}

// The health check's process exits with `failing` for its first `fails`
// runs, then 0; the workers exit 0 a second after they start.
void FailingHealthCheck(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, int fails, int* runs) {
  if (s.spec.argv.at(0) != "/bin/sh") {
    p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(0));
    return;
  }
  ++*runs;
  p.ExitAt(s.pid, s.time + absl::Seconds(2), ExitStatus::Exited(*runs <= fails ? 3 : 0));
}

TEST_F(AgentTest, AFailingHealthCheckKeepsTheNodeOutUntilItPasses) {
  o_.health_check.command = "nvidia-smi -q | grep -q 'ECC Errors: 0'";
  int runs = 0;
  processes_.on_start = [&runs](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    FailingHealthCheck(p, s, 2, &runs);
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(runs, 3);
  const auto& started = processes_.started();
  ASSERT_GE(started.size(), 5u);
  EXPECT_THAT(started[0].spec.argv, ElementsAre("/bin/sh", "-c", o_.health_check.command));
  EXPECT_EQ(started[0].spec.stdout_sink.prefix, "[health_check]:");
  // Two failures 2 s long, each followed by 10 s out; the third passes at 26 s.
  EXPECT_EQ(started[2].time, t0 + absl::Seconds(24));
  EXPECT_EQ(started[3].time, t0 + absl::Seconds(26));  // the first worker, after the join
  int failed = 0;
  for (const auto& [name, list] : events_.events()) {
    if (name != "health_check_failed") continue;
    std::map<std::string, EventValue> f(list.begin(), list.end());
    EXPECT_EQ(std::get<std::string>(f.at("status")), "exit code 3");
    EXPECT_EQ(std::get<int64_t>(f.at("attempt")), ++failed);
  }
  EXPECT_EQ(failed, 2);
  std::map<std::string, EventValue> passed = OnlyEvent(events_, "health_check_passed");
  EXPECT_EQ(std::get<int64_t>(passed.at("attempt")), 3);
  EXPECT_EQ(events_.names().front(), "health_check_failed") << "no join before the check passed";
}

TEST_F(AgentTest, ANodeThatStaysUnhealthyGivesUpNamingTheReason) {
  o_.health_check.command = "false";
  o_.health_check.give_up_after = absl::Seconds(30);
  int runs = 0;
  processes_.on_start = [&runs](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    FailingHealthCheck(p, s, 1000, &runs);
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 1);
  // Out from the first failure at 2 s; tries end at 2, 14 and 26 s; a
  // fourth would end after 30 s out.
  EXPECT_EQ(runs, 3);
  std::map<std::string, EventValue> finished = OnlyEvent(events_, "finished");
  EXPECT_THAT(std::get<std::string>(finished.at("reason")), HasSubstr("health check failed for 24s"));
  EXPECT_THAT(std::get<std::string>(finished.at("reason")), HasSubstr("exit code 3"));
  EXPECT_TRUE(rdzv_.leaves().empty()) << "it never joined";
}

TEST_F(AgentTest, AHealthCheckPastItsTimeoutIsKilledAndFails) {
  o_.health_check.command = "sleep 1000";
  o_.health_check.timeout = absl::Seconds(5);
  o_.health_check.give_up_after = absl::Seconds(1);
  processes_.on_start = nullptr;  // the check never ends by itself; SIGKILL ends it
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 1);
  std::map<std::string, EventValue> failed = OnlyEvent(events_, "health_check_failed");
  EXPECT_EQ(std::get<std::string>(failed.at("status")), "timed out after 5s");
}

// Each local rank heartbeats every second for 30 s, stepping, computing
// `compute_s` per batch; it exits 0 at 31 s.
void StepComputing(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, ProgressBoard& board,
                   double compute_s) {
  const int lr = std::stoi(s.spec.env.at("LOCAL_RANK"));
  for (int i = 1; i <= 30; ++i) {
    p.CallAt(s.time + absl::Seconds(i), [&board, s, i, lr, compute_s] {
      agent::v1::Heartbeat hb;
      hb.set_rank(lr);
      hb.set_local_rank(lr);
      hb.set_pid(s.pid);
      hb.set_step(30 * i);
      hb.set_total_steps(100000);
      hb.set_compute_s(compute_s);
      board.Heartbeat(hb);
    });
  }
  p.ExitAt(s.pid, s.time + absl::Seconds(31), ExitStatus::Exited(0));
}

// Local rank 1 computes 30 ms per batch, local rank 0 10 ms.
void OneSlowRank(FakeProcessLauncher& p, const FakeProcessLauncher::Started& s, ProgressBoard& board) {
  StepComputing(p, s, board, std::stoi(s.spec.env.at("LOCAL_RANK")) == 1 ? 0.030 : 0.010);
}

TEST_F(AgentTest, AStragglerIsReportedOnceAndTheJobGoesOn) {
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    OneSlowRank(p, s, board_);
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  std::map<std::string, EventValue> found = OnlyEvent(events_, "straggler_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(found.at("ranks")), std::vector<int64_t>{1});
  EXPECT_DOUBLE_EQ(std::get<double>(found.at("slowdown")), 3.0);
  EXPECT_EQ(std::get<std::string>(found.at("policy")), "warn");
  EXPECT_THAT(printed_, Not(HasSubstr("straggler")));  // no failure summary: nothing failed
}

// Both local ranks compute 30 ms a batch; the other node's two ranks, as
// the rendezvous tells it, 10 ms: this node's ranks are both stragglers (a
// node whose every rank is slow), reported once with their slowdown.
TEST_F(AgentTest, ANodeWhoseEveryRankIsSlowerThanTheOtherNodesIsReported) {
  FakeRendezvousClient two_nodes(/*group_rank=*/0, /*group_world_size=*/2);
  rdzv::v1::RunStatusResponse st;
  rdzv::v1::NodeStatus* other = st.add_nodes();
  other->mutable_participant()->set_node_id("the-other-node");
  other->add_progress()->set_compute_median_s(0.010);
  other->add_progress()->set_compute_median_s(0.010);
  rdzv::v1::NodeStatus* me = st.add_nodes();
  me->mutable_participant()->set_node_id(o_.node.node_id());
  me->add_progress()->set_compute_median_s(0.030);  // this node's own: not a peer
  two_nodes.SetRunStatusAnswers({st});
  o_.rdzv = &two_nodes;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    StepComputing(p, s, board_, 0.030);
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  std::map<std::string, EventValue> found = OnlyEvent(events_, "straggler_detected");
  EXPECT_EQ(std::get<std::vector<int64_t>>(found.at("ranks")), (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ(std::get<double>(found.at("slowdown")), 3.0);
  EXPECT_GE(two_nodes.run_status_calls(), 1);
  ASSERT_TRUE(board_.Faults().has_value());
  EXPECT_EQ(board_.Faults()->last_straggler().ranks_size(), 2);
}

TEST_F(AgentTest, UnderReplaceAStragglerIsAFailedWorker) {
  o_.straggler_policy = StragglerPolicy::kReplace;
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    OneSlowRank(p, s, board_);
  };
  const absl::Time t0 = clock_.Now();
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);  // --max_restarts 0: the job ends with it
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].rank, 1);
  EXPECT_THAT(r.failures[0].message, HasSubstr("a straggler: computes 3.0x as long as its peers"));
  // Ten heartbeats make a window: judged at the first look after 10 s.
  EXPECT_LE(r.failures[0].time, t0 + absl::Seconds(10) + o_.monitor_interval);
}

TEST_F(AgentTest, HeartbeatsKeepAWorkerAlive) {
  o_.hang.fixed_silence = absl::Seconds(10);
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    for (int i = 1; i <= 5; ++i) {
      p.CallAt(s.time + absl::Seconds(8 * i), [this, s] {
        agent::v1::Heartbeat hb;
        hb.set_local_rank(std::stoi(s.spec.env.at("LOCAL_RANK")));
        hb.set_pid(s.pid);
        board_.Heartbeat(hb);
      });
    }
    p.ExitAt(s.pid, s.time + absl::Seconds(45), ExitStatus::Exited(0));
  };
  EXPECT_EQ(Run().exit_code, 0);
}

TEST_F(AgentTest, RoundEndRestartsWithoutConsumingRestarts) {
  o_.max_restarts = 0;
  int starts = 0;
  processes_.on_start = [this, &starts](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    ++starts;
    if (starts == 1) p.CallAt(s.time + absl::Seconds(1), [this] { monitor_.End("node b joined", false); });
    if (starts > 2) p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(0));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.restart_count, 0);
  ASSERT_EQ(processes_.started().size(), 4u);
  EXPECT_EQ(Env(2, "TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(monitor_.restart_counts(), (std::vector<int>{0, 0}));
  EXPECT_EQ(rdzv_.joins().size(), 2u);
}

TEST_F(AgentTest, RunClosedByAnotherNodeExits1) {
  processes_.on_start = [this](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    p.CallAt(s.time + absl::Seconds(1), [this] { monitor_.End("rank 3 failed", true); });
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(processes_.alive().empty());
  // Off the participant list, so a node serving the rendezvous need not
  // wait for it.
  EXPECT_EQ(rdzv_.leaves(), std::vector<std::string>{"the run was closed"});
}

TEST_F(AgentTest, JoinFailureExits1WithoutStartingAnything) {
  rdzv_.join_error = absl::DeadlineExceededError("join_timeout passed");
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(processes_.started().empty());
}

TEST_F(AgentTest, ExecFailureIsAFailure) {
  processes_.fail_starts = 1;
  ExitAfterStart(absl::Seconds(1), ExitStatus::Exited(0));
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(printed_, HasSubstr("cannot exec"));
  EXPECT_TRUE(processes_.alive().empty());
}

TEST_F(AgentTest, ErrorFileMessageIsInTheSummary) {
  processes_.on_start = [](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    if (s.spec.env.at("LOCAL_RANK") != "0") return;
    std::ofstream(s.spec.env.at("TORCHELASTIC_ERROR_FILE"))
        << R"json({"message": {"message": "RuntimeError: out of data", "extraInfo": {"py_callstack": "main()", "timestamp": "1700000001"}}})json";
    p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(1));
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(printed_, HasSubstr("RuntimeError: out of data"));
  EXPECT_THAT(printed_, HasSubstr(log_root_ + "/attempt_0/0/error.json"));
}

TEST_F(AgentTest, ExitBarrierWaitsForTheOtherNodes) {
  FakeRendezvousClient two(/*group_rank=*/1, /*group_world_size=*/2);
  o_.rdzv = &two;
  ExitAfterStart(absl::Seconds(1), ExitStatus::Exited(0));
  ASSERT_TRUE(two.store()->Set("cpptorchrun/exit_barrier/0", "1").ok());  // the other node is done
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(*two.store()->Get("cpptorchrun/exit_barrier/1", absl::ZeroDuration()), "1");
  EXPECT_EQ(Env(0, "RANK"), "2");
  EXPECT_EQ(Env(0, "GROUP_RANK"), "1");
  EXPECT_EQ(Env(0, "WORLD_SIZE"), "4");
  EXPECT_EQ(Env(0, "GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(Env(0, "MASTER_ADDR"), "10.9.9.9");
}

TEST_F(AgentTest, RoundEndDuringTheExitBarrierRejoins) {
  FakeRendezvousClient two(/*group_rank=*/0, /*group_world_size=*/2);
  o_.rdzv = &two;
  o_.blocking_call_grace = absl::ZeroDuration();
  o_.exit_barrier_timeout = absl::Seconds(30);
  int starts = 0;
  processes_.on_start = [this, &starts, &two](FakeProcessLauncher& p, const FakeProcessLauncher::Started& s) {
    p.ExitAt(s.pid, s.time + absl::Seconds(1), ExitStatus::Exited(0));
    // While the first group waits in the barrier, another node restarts.
    if (++starts == 2) p.CallAt(s.time + absl::Seconds(3), [this] { monitor_.End("node 1 rejoined", false); });
    // In the next round the other node (group rank 1) finishes too.
    if (starts == 3) {
      ASSERT_TRUE(two.store()->Set("cpptorchrun/exit_barrier/1", "1").ok());
    }
  };
  AgentResult r = Run();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.restart_count, 0);
  EXPECT_EQ(two.joins().size(), 2u);
}

TEST_F(AgentTest, LogFilesAndConsoleFilter) {
  o_.redirects.all = kStdErr;
  o_.tee.all = kStdOut;
  o_.local_ranks_filter = {1};
  o_.log_line_prefix_template = "${role_name}/${rank}/${local_rank}|";
  ExitAfterStart(absl::Seconds(1), ExitStatus::Exited(0));
  EXPECT_EQ(Run().exit_code, 0);
  const ProcessSpec s0 = processes_.started()[0].spec;
  const ProcessSpec s1 = processes_.started()[1].spec;
  EXPECT_EQ(s0.stdout_sink.file_path, log_root_ + "/attempt_0/0/stdout.log");
  EXPECT_EQ(s0.stderr_sink.file_path, log_root_ + "/attempt_0/0/stderr.log");
  EXPECT_EQ(s0.stdout_sink.console_fd, -1);  // filtered out
  EXPECT_EQ(s1.stdout_sink.console_fd, 1);   // tee: file and console
  EXPECT_EQ(s1.stderr_sink.console_fd, -1);  // redirected: file only
  EXPECT_EQ(s1.stdout_sink.prefix, "default/1/1|");
}

TEST(LinePrefix, Template) {
  EXPECT_EQ(ExpandLinePrefix("", "trainer", 5, 1), "[trainer1]:");
  EXPECT_EQ(ExpandLinePrefix("[$rank]", "r", 5, 1), "[5]");
}

}  // namespace
}  // namespace cpptorchrun::launcher
