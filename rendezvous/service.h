// The rendezvous gRPC service: a thin adapter between the wire
// (proto/rendezvous.proto) and its parts, which know nothing of gRPC: the
// round rules (rules.h), each run's key-value store (scoped_store.h) and
// the registry of held calls (held_calls.h). The service keeps the runs
// (creating, evicting, forgetting them), checks the token and the node
// secrets, and converts requests and answers.
//
// It uses gRPC's callback API. Calls that wait (Join, Watch, Get, MultiGet)
// are held as reactors (registered in HeldCalls, and in the run's joins,
// watchers or store), holding no thread; whoever takes a reactor out under
// the lock answers it, after releasing the lock. A cancelled call is taken
// out and answered CANCELLED. One timer thread re-applies the rules'
// deadlines (last call, join timeout, dead nodes, close) and the long-poll
// bounds every `tick`.
#ifndef CPPTORCHRUN_RENDEZVOUS_SERVICE_H_
#define CPPTORCHRUN_RENDEZVOUS_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "base/clock.h"
#include "rendezvous/held_calls.h"
#include "rendezvous/limits.h"
#include "rendezvous/metrics.h"
#include "rendezvous/rules.h"
#include "rendezvous/scoped_store.h"
#include "rendezvous/signing.h"

namespace cpptorchrun::rdzv {

struct ServiceOptions {
  // Not owned; must outlive the service.
  base::Clock* clock = base::RealClock();
  Limits limits;
  // Expected as "authorization: Bearer <token>" on every call; empty: none.
  std::string token;
  // Signs the assignments it issues (signing.h). Unset: derived from
  // `token` when there is one, else random (not durable).
  std::optional<SigningKey> signing_key;
  // How often the timer re-applies deadlines.
  absl::Duration tick = absl::Milliseconds(20);
  // Closed run ids remembered (so later Joins fail naming them) beyond the
  // runs themselves; the oldest are forgotten first.
  int max_closed_runs_remembered = 10000;
  // The client's address (without port) for a call's gRPC peer string;
  // unset: what gRPC says ("ipv4:1.2.3.4:5" -> "1.2.3.4"). The server sets
  // it to its acceptor's (which knows the addresses gRPC does not).
  std::function<std::string(const std::string& peer)> peer_address;
  // A run that no call has touched for this long, and that holds no call,
  // is forgotten (its agents are gone without closing it).
  absl::Duration idle_run_timeout = absl::Hours(1);
};

class RendezvousService final : public v1::Rendezvous::CallbackService {
 public:
  explicit RendezvousService(const ServiceOptions& options);
  // Calls Shutdown(). The gRPC server must be shut down before this runs.
  ~RendezvousService() override;

  // Starts the timer thread. Call once, after construction.
  void StartTimer();
  // Answers every held call UNAVAILABLE, refuses to hold new ones, stops
  // the timer. Idempotent; call before shutting the gRPC server down.
  void Shutdown();
  // Applies every deadline that passed by the clock's now, at once (tests
  // with a fake clock call it; the timer calls it every tick).
  void Tick();

  // Counters for tests and the benchmark. Thread-safe.
  int HeldCalls();

  // What Prometheus and the job page read: values copied under the lock
  // (bounded by `bounds`: the most recently active runs first), to be
  // rendered by the caller without it. Thread-safe.
  ServiceSnapshot MetricsSnapshot(const MetricsBounds& bounds);
  // The run's status as RunStatus answers it but with at most `max_nodes`
  // nodes (the first by group rank) and as many waiting, and its ranks'
  // progress history (may be null); NotFound: unknown. Thread-safe.
  absl::Status RunStatusOf(const std::string& run_id, v1::RunStatusResponse* response,
                           ProgressHistory* history = nullptr, size_t max_nodes = SIZE_MAX);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* ctx,
                                      const v1::KeepAliveRequest* request,
                                      v1::KeepAliveResponse* response) override;
  grpc::ServerUnaryReactor* Watch(grpc::CallbackServerContext* ctx,
                                  const v1::WatchRequest* request,
                                  v1::WatchResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Close(grpc::CallbackServerContext* ctx,
                                  const v1::CloseRequest* request,
                                  v1::CloseResponse* response) override;
  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* ctx, const v1::SetRequest* request,
                                v1::SetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest* request,
                                v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* ctx, const v1::AddRequest* request,
                                v1::AddResponse* response) override;
  grpc::ServerUnaryReactor* CompareSet(grpc::CallbackServerContext* ctx,
                                       const v1::CompareSetRequest* request,
                                       v1::CompareSetResponse* response) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* ctx,
                                   const v1::DeleteRequest* request,
                                   v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* MultiGet(grpc::CallbackServerContext* ctx,
                                     const v1::MultiGetRequest* request,
                                     v1::MultiGetResponse* response) override;
  grpc::ServerUnaryReactor* MultiSet(grpc::CallbackServerContext* ctx,
                                     const v1::MultiSetRequest* request,
                                     v1::MultiSetResponse* response) override;
  grpc::ServerUnaryReactor* RunStatus(grpc::CallbackServerContext* ctx,
                                      const v1::RunStatusRequest* request,
                                      v1::RunStatusResponse* response) override;

 private:
  class Held;  // a held call (reactor); service.cc
  struct Run {
    Run(const std::string& run_id, const Limits* limits, int64_t* server_bytes)
        : store(run_id, limits, server_bytes) {}
    RunState state;
    // False until the first Join (or re-registration) gives the run options.
    bool formed = false;
    absl::flat_hash_map<std::string, Held*> joins;  // by node id
    absl::flat_hash_set<Held*> watchers;
    ScopedStore store;
    std::string creator;  // the client address that created it (for max_runs_per_client)
    // Last call that touched the run.
    absl::Time last_activity;
    // A round re-created from an assignment this server could not verify
    // (its key is not durable and it had no active round of the run): its
    // keep-alives are trusted unverified until the next round (0: none).
    int64_t unsigned_round = 0;
    // Each node id's JoinRequest.node_secret, from its first Join (bounded:
    // ids no longer in the run are forgotten when it is full).
    absl::flat_hash_map<std::string, std::string> node_secrets;
    // What was last logged about the rounds (logged on change only).
    int64_t logged_round = 0;
    bool logged_ended = true;
    bool logged_closed = false;
    // For metrics: rounds completed, when the standing one completed, and
    // the restarts the nodes reported (by cause; each node's last one seen).
    int64_t rounds_completed = 0;
    absl::Time round_started;
    std::map<std::string, int64_t> restarts;
    absl::flat_hash_map<std::string, int64_t> restart_rounds;  // node id -> round counted
    ProgressHistory history;  // ranks below kHistoryRanks, for the job page
  };
  using Finishes = std::vector<std::pair<Held*, grpc::Status>>;

  bool Authorized(grpc::CallbackServerContext* ctx) const;
  // Answers the call now with `status`.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const absl::Status& status);
  // A held call's reactor (it answers later); nullptr: answers OK now; an
  // error: answers it now.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                   const absl::StatusOr<Held*>& result);
  void FinishAll(Finishes* finishes);
  // Every RPC's frame: answers UNAUTHENTICATED without the token, or the
  // first error of the request's stateless checks; otherwise runs
  // `body(Finishes*)` under mu_ and answers what it returns (absl::Status,
  // or absl::StatusOr<Held*> as for Answer), after finishing the other calls
  // the body decided outside the lock.
  template <typename Request, typename Body>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, const Request& request,
                                  Body body);

  absl::StatusOr<Run*> FindOrCreateRun(const std::string& run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ClosedRunError(const std::string& run_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The run holding `scope` (created when unknown), whose round's keys are
  // not dropped.
  absl::StatusOr<Run*> StoreRun(const v1::Scope& scope) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a run that has none its options and first version (no-op when
  // it has them).
  void Form(Run* run, const RoundOptions& round_options, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The event telling a caller that a closed run is closed.
  v1::RunEvent ClosedEvent(const std::string& run_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Hold(Held* held, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `held` out of the registry, and out of its run's joins, watchers
  // or store; false when it was not held.
  bool Release(Held* held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Cancelled(Held* held);

  // Answers the held calls a state change has decided.
  void Settle(Run* run, const std::vector<std::string>& timed_out, const std::string& reason,
              Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnswerJoin(Run* run, Held* held, Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers a held Watch with the run's current event.
  void AnswerWatch(Run* run, Held* held, Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A read of `keys` in `scope`, not held yet (Get and MultiGet fill in
  // their response).
  Held* NewRead(const v1::Scope& scope, std::vector<std::string> keys);
  // Answers reads the store completed (their values are filled in).
  void AnswerReads(const ScopedStore::Answered& answered, Finishes* finishes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnswerRead(Held* held, Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `proof` is the assignment signature of `node_id`, a participant
  // of the run's current round.
  bool ProvesParticipant(const Run& run, const std::string& node_id, const std::string& proof)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When a read asking to wait `timeout_ms` is answered at the latest.
  absl::Time ReadDeadline(int32_t timeout_ms);
  // Drops the store rounds the run is two past, refusing their readers.
  void DropOldRounds(Run* run, Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogChanges(Run* run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteRun(const std::string& run_id, const grpc::Status& status, Finishes* finishes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberClosed(const std::string& run_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TimerLoop();
  // Counts the restart `node_id`'s keep-alive reported, once per node and round.
  void CountRestart(Run* run, const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Refuses a Join in `node_id`'s name with another secret than its first;
  // records the first.
  absl::Status CheckNodeSecret(Run* run, const std::string& node_id, const std::string& secret)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted when the run's spares are at max_nodes_per_run and
  // `node_id` is not one of them.
  absl::Status SparesFull(const Run& run, const std::string& node_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At most `max_nodes` nodes (and as many waiting) are copied.
  absl::Status FillRunStatus(const v1::RunStatusRequest& request, v1::RunStatusResponse* response,
                             size_t max_nodes = SIZE_MAX) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceOptions options_;
  AssignmentSigner signer_;
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool timer_stop_ ABSL_GUARDED_BY(mu_) = false;
  // Bytes of keys and values in every run's store (before runs_: their
  // stores give their bytes back as they go).
  int64_t store_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::unique_ptr<Run>> runs_ ABSL_GUARDED_BY(mu_);
  // Without a token: runs created per client address, and the address of
  // the call being served (set by Serve under mu_).
  absl::flat_hash_map<std::string, int> runs_by_client_ ABSL_GUARDED_BY(mu_);
  std::string caller_ ABSL_GUARDED_BY(mu_);
  // Closed runs forgotten after close_timeout: id -> reason, and their order.
  absl::flat_hash_map<std::string, std::string> closed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> closed_order_ ABSL_GUARDED_BY(mu_);
  // Every held call, by its long-poll deadline (qualified: HeldCalls() is
  // also a method's name).
  ::cpptorchrun::rdzv::HeldCalls held_ ABSL_GUARDED_BY(mu_);
  // Server-wide counters for metrics.
  int64_t node_joins_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t node_losses_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> round_ends_ ABSL_GUARDED_BY(mu_);
  base::prom::BucketCounts round_duration_{RoundDurationBuckets()};
  std::thread timer_;
};

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_SERVICE_H_
