// The rendezvous round rules: a run's state as plain values, and the
// decisions on it as functions of (now, state, options). Nothing here
// reads a clock, sleeps, locks or touches the network; the gRPC service
// (service.h) holds the state under its lock and applies these.
//
// A run moves through rounds. A round FORMS while nodes Join; it COMPLETES
// at once when max_nodes have joined, or last_call_timeout after min_nodes
// have (and every static node rank fits). A completed round is ACTIVE until
// it ENDS: a participant misses keep-alives for keep_alive_interval *
// keep_alive_max_attempt, leaves, re-joins, or a newcomer arrives while the
// round has fewer than max_nodes (the participants then re-join to admit
// it). A newcomer arriving while the active round is full is a SPARE,
// admitted when the round ends. A joiner that sees no completion within
// join_timeout of its first Join is told DEADLINE_EXCEEDED. Closing a run
// ends it for good.
#ifndef CPPTORCHRUN_RENDEZVOUS_RULES_H_
#define CPPTORCHRUN_RENDEZVOUS_RULES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/rendezvous.pb.h"

namespace cpptorchrun::rdzv {

// torchrun's --rdzv_conf defaults.
inline constexpr absl::Duration kDefaultJoinTimeout = absl::Seconds(600);
inline constexpr absl::Duration kDefaultLastCallTimeout = absl::Seconds(30);
inline constexpr absl::Duration kDefaultCloseTimeout = absl::Seconds(30);
inline constexpr absl::Duration kDefaultKeepAliveInterval = absl::Seconds(5);
inline constexpr int kDefaultKeepAliveMaxAttempt = 3;
// Quarantine (below): 3 round ends caused within 10 minutes keep a host out
// for 10 minutes.
inline constexpr int kDefaultQuarantineAfter = 3;
inline constexpr absl::Duration kDefaultQuarantineWindow = absl::Minutes(10);
inline constexpr absl::Duration kDefaultQuarantineCooldown = absl::Minutes(10);
// The rounds whose failure reports a run keeps (the oldest go first).
inline constexpr size_t kFailureHistory = 64;

// The highest round number a run may reach (a Join's last_round, an
// assignment's round): far beyond any job's life, and far enough below
// INT64_MAX that "+ 1" never wraps.
inline constexpr int64_t kMaxRound = int64_t{1} << 53;
// The largest last_round a Join may carry (agents report rounds the server
// numbered, which may pass kMaxRound by a few); a last_round raises the run's
// round counter only up to kMaxRound - 1, so no Join can push the numbering
// to where the agents' own re-Joins would be refused.
inline constexpr int64_t kMaxLastRound = int64_t{1} << 60;

// RunOptions with defaults filled in and durations typed.
struct RoundOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  absl::Duration join_timeout = kDefaultJoinTimeout;
  absl::Duration last_call_timeout = kDefaultLastCallTimeout;
  absl::Duration close_timeout = kDefaultCloseTimeout;
  absl::Duration keep_alive_interval = kDefaultKeepAliveInterval;
  int keep_alive_max_attempt = kDefaultKeepAliveMaxAttempt;
  int quarantine_after = kDefaultQuarantineAfter;  // 0: off
  absl::Duration quarantine_window = kDefaultQuarantineWindow;
  absl::Duration quarantine_cooldown = kDefaultQuarantineCooldown;
  int job_max_restarts = 0;  // 0: no job-wide bound

  // How long a node may stay silent before it counts as dead.
  absl::Duration KeepAliveDeadline() const { return keep_alive_interval * keep_alive_max_attempt; }
};

// Zero fields take the defaults. InvalidArgument names the bad field:
// min_nodes < 1, max_nodes < min_nodes, negative or non-finite durations,
// keep_alive_max_attempt < 0, more than `max_nodes_limit` nodes.
absl::StatusOr<RoundOptions> RoundOptionsFromProto(const v1::RunOptions& proto,
                                                   int max_nodes_limit);
v1::RunOptions RoundOptionsToProto(const RoundOptions& options);

// A node waiting for the forming round (or as a spare).
struct Joiner {
  v1::NodeInfo node;
  // First Join for this round: its join_timeout counts from here.
  absl::Time joined_at;
  // Last Join call (or end of the last held call).
  absl::Time last_heard;
  // A Join call of this node is held by the server now (it is alive).
  bool polling = false;
};

struct ParticipantState {
  v1::Participant participant;
  v1::NodeInfo node;
  absl::Time last_heard;
  int32_t restart_count = 0;
  std::vector<v1::RankProgress> progress;
  v1::RestartPhases last_restart;  // from its keep-alives
  v1::NodeFaults faults;           // from its keep-alives
};

// The cause of a round's end by failure: of the nodes whose own workers
// failed in that round (JoinRequest.failure), the one that failed first.
struct RoundFailure {
  absl::Time failed_at;    // the reporting node's clock
  absl::Time reported_at;  // the rendezvous's clock, at the round's first report
  std::string host;
  std::string node_id;
  std::string reason;
};

struct RunState {
  std::string run_id;
  RoundOptions options;
  // Bumped on every change a watcher can see.
  int64_t version = 0;
  // Highest round number formed, completed or reported by an agent.
  int64_t highest_round = 0;

  // The latest completed round (0: none yet) and whether it still stands.
  int64_t active_round = 0;
  bool active_ended = true;
  std::string end_reason;
  // By group rank.
  std::vector<ParticipantState> participants;
  std::string master_addr;
  int32_t master_port = 0;
  // Sum of the participants' local_world_size.
  int32_t world_size = 0;

  // The round forming now (0: none).
  int64_t forming_round = 0;
  std::vector<Joiner> joiners;  // arrival order
  std::optional<absl::Time> min_reached_at;
  // Newcomers that found the active round full.
  std::vector<Joiner> spares;

  bool closed = false;
  std::string closed_reason;
  absl::Time closed_at;

  // By round: what ended it by failure (at most kFailureHistory rounds).
  std::map<int64_t, RoundFailure> round_failures;
  // Rounds ended by a worker failure over the run's life (job_max_restarts).
  int64_t failed_rounds = 0;

  // Indexes into `participants` and `joiners` by node id (kept by the
  // transitions below).
  absl::flat_hash_map<std::string, size_t> participant_index;
  absl::flat_hash_map<std::string, size_t> joiner_index;
};

// A new run. The first joiner's options become the run's.
RunState NewRun(const std::string& run_id, const RoundOptions& options);

// --- pure decisions ----------------------------------------------------------

// Group ranks for the nodes of a completing round. Nodes with a static rank
// take it; the others fill the free ranks in order: first the previous
// round's participants in their old group-rank order, then newcomers by
// node id. So the result depends only on who joined, not on arrival order.
// Rank offsets accumulate local_world_size in group-rank order.
// InvalidArgument when static ranks collide or do not fit the round.
absl::StatusOr<std::vector<v1::Participant>> AssignRanks(
    const std::vector<v1::NodeInfo>& nodes, const std::vector<ParticipantState>& previous);

// The number of joiners a round needs before it may complete: min_nodes, and
// enough to cover the highest static node rank among them.
int NodesNeeded(const std::vector<Joiner>& joiners, const RoundOptions& options);

// What the forming round should do now.
struct FormingDecision {
  // Joiners silent (no held Join) for longer than the keep-alive deadline.
  std::vector<std::string> dead;
  // Complete the round with the living joiners.
  bool complete = false;
  // Joiners whose join_timeout passed without completion.
  std::vector<std::string> timed_out;
  std::string reason;
};
FormingDecision DecideForming(absl::Time now, const RunState& state);

// Participants of the standing active round silent for longer than the
// keep-alive deadline, in group-rank order.
std::vector<std::string> FindDeadParticipants(absl::Time now, const RunState& state);

// Whether a new node's Join must end a standing active round (it has room
// for more nodes) rather than wait as a spare.
bool NewcomerEndsRound(const RunState& state);

// Whether `node_id` waits as a spare of the run.
bool IsSpare(const RunState& state, const std::string& node_id);

// The earliest future time at which a decision above can change without a
// call arriving; InfiniteFuture when none.
absl::Time NextDeadline(const RunState& state);

// What `node_id` (in `round`) is told by KeepAlive and Watch.
v1::RunEvent EventFor(const RunState& state, const std::string& node_id, int64_t round);

// The assignment of a participant of the active round, if it is one. The
// participant list is left out of rounds larger than `max_participants`
// (its size grows with the square of the round's).
std::optional<v1::Assignment> AssignmentFor(const RunState& state, const std::string& node_id,
                                            int max_participants = 1 << 30);

// Nodes waiting to get into a round: spares, and joiners that are not
// participants of the latest round (newcomers).
int WaitingNodes(const RunState& state);

// --- quarantine ---------------------------------------------------------------
//
// A node whose workers keep failing ends round after round: every other
// node stops and restarts for it, and it spends the job's time. The
// rendezvous keeps its host out for a cool-down once it has caused
// quarantine_after round ends within quarantine_window: its Joins are
// answered QUARANTINED until quarantine_cooldown after the last of them,
// and the others go on without it. A round's end is caused by the node that
// failed first among those that report a failure in it (a node whose
// workers died of a lost peer reports too, but later), so a healthy node
// is not blamed for its peer. Only runs that can go on without the host
// (min_nodes < max_nodes) keep one out: in a fixed-size job a quarantine
// would only stall the others (its restart budget and the no-progress exit
// bound it there).
struct Quarantine {
  std::string host;
  int failures = 0;  // within the window
  absl::Time until;
  std::string reason;
};

// Records `failure`, reported by `node`, as the cause of its round when it
// failed before any other report of that round. Reports of a round the run
// has not reached, or without a time, are ignored. True when it changed
// the state.
bool NoteFailure(absl::Time now, RunState* state, const v1::NodeInfo& node,
                 const v1::NodeFailure& failure);

// The reason to close the run when its failed rounds have passed
// job_max_restarts; nullopt while they have not (or there is no bound).
std::optional<std::string> JobRestartsExhausted(const RunState& state);

// Whether `host` is kept out at `now`, and until when.
std::optional<Quarantine> QuarantineOf(absl::Time now, const RunState& state, const std::string& host);

// Every host kept out at `now`, by host.
std::vector<Quarantine> Quarantined(absl::Time now, const RunState& state);

// What a node kept out is told: QUARANTINED, with the host, why and for how
// long in `detail`, and to ask again within a keep-alive interval (so that
// it learns of a closed run) or at the cool-down's end if sooner.
void FillQuarantined(absl::Time now, const Quarantine& q, const RoundOptions& options,
                     v1::JoinResponse* response);

// The run's status as RunStatus answers it, from the state alone: options,
// round, state, version, closed reason, the participants (heartbeat ages
// from `now`) and the waiting nodes, at most `max_nodes` of each. The
// caller adds what is not the run's (the server's store figures).
void FillRunStatus(absl::Time now, const RunState& state, size_t max_nodes,
                   v1::RunStatusResponse* response);

// --- transitions (deterministic; `now` is passed in) -------------------------

// Rebuilds the node-id indexes of a state whose lists were filled in
// directly (a state read back from etcd, rendezvous/etcd/run_record.h).
void Reindex(RunState* state);

struct JoinResult {
  enum class Outcome { kPending, kSpare, kComplete, kQuarantined, kRunClosed } outcome = Outcome::kPending;
  // For kRunClosed: this Join's failure spent the job's restart budget and
  // closed the run (the caller answers FailedPrecondition with it).
  std::string closed_reason;
  // For kQuarantined: why, and until when (the node is neither a joiner nor
  // a spare meanwhile).
  Quarantine quarantine;
  // For kComplete of the caller alone (its earlier answer was lost).
  v1::Assignment assignment;
  // The round completed during this call: every participant's held Join
  // should be answered.
  bool round_completed = false;
};

// Why a Join of `node` (asking for `options`, last in `last_round`) is
// refused before it changes anything; OK when it is not. The errors are
// ApplyJoin's, but for a taken static rank (which depends on the joiners).
absl::Status CheckJoin(const RunState& state, const v1::NodeInfo& node, const RoundOptions& options,
                       int64_t last_round);

// A Join of `node` who last took part in `last_round`, with the failure of
// its workers that it reports (empty: none; NoteFailure). A node whose host
// is quarantined is answered kQuarantined and leaves the waiting lists. A
// failure past job_max_restarts closes the run (kRunClosed, with why).
// Errors:
// FailedPrecondition when the run is closed, the node's nnodes disagree with
// the run's, or its static rank is taken; InvalidArgument for a static rank
// beyond max_nodes.
absl::StatusOr<JoinResult> ApplyJoin(absl::Time now, RunState* state, const v1::NodeInfo& node,
                                     const RoundOptions& options, int64_t last_round,
                                     const v1::NodeFailure& failure = v1::NodeFailure());

struct TickResult {
  bool round_completed = false;
  bool round_ended = false;
  std::vector<std::string> timed_out;  // joiners to answer DEADLINE_EXCEEDED
  std::vector<std::string> dropped;    // silent joiners/spares removed
  std::string reason;
};

// Applies every deadline that has passed by `now`.
TickResult ApplyTick(absl::Time now, RunState* state);

// Completes the forming round with its joiners (they must be >= needed).
void CompleteRound(absl::Time now, RunState* state);

// Ends the active round (no-op when it already ended); spares move into the
// forming round, which is created numbered above every round seen.
void EndRound(absl::Time now, RunState* state, const std::string& reason);

// A keep-alive of a participant: refreshes its liveness and progress. A node
// that is not a participant of the standing round, or a request that does
// not prove it speaks for its node (`trusted` false: its assignment is not
// one the server issued), only learns the event.
v1::RunEvent ApplyKeepAlive(absl::Time now, RunState* state, const v1::KeepAliveRequest& request,
                            bool trusted = true);

// Re-creates the active round from an agent's assignment after a server
// restart (the server lost the run, or knows only a forming round numbered
// from a Join). Every participant is treated as alive from `now`. Returns
// false (no change) when the state already knows this round or a later one.
bool ReRegister(absl::Time now, RunState* state, const v1::KeepAliveRequest& request);

// Whether a keep-alive carrying assignment `a` for `run_id` may re-create
// (ReRegister) its round, from what the server knows: `known`, the run's
// state (null: the run is unknown); `unsigned_round`, a round it re-created
// unverified earlier (0: none); `issued`, whether `a`'s signature verifies
// under the server's key; `durable_key`, whether that key outlives a
// restart. True: it may (an issued assignment, the unverified round again,
// or an unsigned one the server cannot check, for a run with no active
// round); false: it changes nothing, only liveness is at stake (no round
// carried, or an unsigned round not above the active one). PermissionDenied
// for an unsigned newer round the server could have checked (its key is
// durable, or it has an active round): rounds change only through Join.
absl::StatusOr<bool> MayReRegister(const std::string& run_id, const v1::Assignment& a,
                                   const RunState* known, int64_t unsigned_round, bool issued,
                                   bool durable_key);

// Whether `a` is a round the rules could have formed under `options`: 1 to
// max_nodes participants with distinct node ids, group ranks 0..n-1, rank
// offsets the running sum of local_world_size (each >= 1), world_size that
// sum (checked arithmetic), group_world_size n, the caller among them with
// its own group rank and offset, a master port in 0..65535 and a round >= 1.
// InvalidArgument naming the first field that is not.
absl::Status ValidateAssignment(const v1::Assignment& a, const std::string& node_id,
                                const RoundOptions& options);

// A graceful leave: a participant ends the standing round; a joiner or spare
// is removed. False when the node was unknown.
bool ApplyLeave(absl::Time now, RunState* state, const std::string& node_id,
                const std::string& reason);

// Closes the run: later Joins fail; joiners and spares are dropped.
void ApplyClose(absl::Time now, RunState* state, const std::string& reason);

// Marks a joiner's held Join as held or answered.
void SetPolling(absl::Time now, RunState* state, const std::string& node_id, bool polling);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_RULES_H_
