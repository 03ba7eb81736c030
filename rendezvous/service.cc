// The rendezvous gRPC service (see service.h).
#include "rendezvous/service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/printable.h"
#include "rendezvous/request_checks.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::rdzv {

// A call the service answers later: the reactor, its record in the
// registry of held calls (HeldCall) and, for a read, in its run's store
// (StoreRead). It deletes itself when gRPC is done with it; every field
// below `service_` is guarded by the service's mu_.
class RendezvousService::Held final : public grpc::ServerUnaryReactor,
                                      public HeldCall,
                                      public StoreRead {
 public:
  enum class Kind { kJoin, kWatch, kRead };
  Held(RendezvousService* service, Kind kind, std::string run_id)
      : HeldCall(std::move(run_id)), service_(service), kind(kind) {}

  void OnCancel() override { service_->Cancelled(this); }
  void OnDone() override { delete this; }

  RendezvousService* const service_;
  const Kind kind;
  // kJoin
  std::string node_id;
  v1::JoinResponse* join = nullptr;
  // kWatch (node_id too)
  int64_t watch_round = 0;
  int64_t version = 0;
  v1::WatchResponse* watch = nullptr;
  // kRead (round, keys and waiting_on are StoreRead's)
  v1::GetResponse* get = nullptr;
  v1::MultiGetResponse* multi_get = nullptr;
};

namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Duration Millis(int32_t ms) { return absl::Milliseconds(std::max<int32_t>(ms, 0)); }

// A run's versions start from the clock, so that a run re-created after a
// server restart is unlikely to repeat a version its watchers hold.
int64_t FirstVersion(absl::Time now) { return absl::ToUnixMicros(now); }

absl::Status ShuttingDownError() {
  return absl::UnavailableError("rendezvous server shutting down");
}

absl::Status NotSetError(absl::string_view key) {
  return absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
}

absl::Status UnknownRunError(const std::string& run_id) {
  return absl::NotFoundError(absl::StrCat("run '", run_id, "' is unknown to this server"));
}

SigningKey ChooseSigningKey(const ServiceOptions& options) {
  if (options.signing_key.has_value()) return *options.signing_key;
  if (!options.token.empty()) return SigningKeyFromToken(options.token);
  return RandomSigningKey();
}

}  // namespace

RendezvousService::RendezvousService(const ServiceOptions& options)
    : options_(options), signer_(ChooseSigningKey(options)) {}

RendezvousService::~RendezvousService() { Shutdown(); }

void RendezvousService::StartTimer() {
  timer_ = std::thread([this] { TimerLoop(); });
}

void RendezvousService::TimerLoop() {
  for (;;) {
    Tick();
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&timer_stop_), options_.tick)) return;
  }
}

void RendezvousService::Shutdown() {
  Finishes finishes;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    timer_stop_ = true;
    while (HeldCall* call = held_.First()) {
      Held* held = static_cast<Held*>(call);
      Release(held);
      finishes.emplace_back(held, ToGrpc(ShuttingDownError()));
    }
  }
  FinishAll(&finishes);
  if (timer_.joinable()) timer_.join();
}

int RendezvousService::HeldCalls() {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

ServiceSnapshot RendezvousService::MetricsSnapshot(const MetricsBounds& bounds) {
  ServiceSnapshot snapshot;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  snapshot.runs = static_cast<int>(runs_.size());
  snapshot.store_bytes = store_bytes_;
  snapshot.store_budget = options_.limits.max_store_bytes;
  snapshot.held_calls = held_.size();
  snapshot.node_joins = node_joins_;
  snapshot.node_losses = node_losses_;
  snapshot.round_ends = round_ends_;
  snapshot.round_duration = round_duration_.Data();
  std::vector<const Run*> runs;
  runs.reserve(runs_.size());
  for (const auto& [id, run] : runs_) runs.push_back(run.get());
  const size_t exported = std::min<size_t>(runs.size(), std::max(bounds.max_runs, 0));
  std::partial_sort(runs.begin(), runs.begin() + exported, runs.end(), [](const Run* a, const Run* b) {
    return a->last_activity != b->last_activity ? a->last_activity > b->last_activity
                                                : a->state.run_id < b->state.run_id;
  });
  runs.resize(exported);
  std::sort(runs.begin(), runs.end(), [](const Run* a, const Run* b) { return a->state.run_id < b->state.run_id; });
  for (const Run* run : runs) {
    const RunState& state = run->state;
    RunSample r;
    r.run_id = state.run_id;
    r.round = state.active_round;
    const bool standing = state.active_round > 0 && !state.active_ended;
    r.state = state.closed ? "closed" : standing ? "active" : "forming";
    r.world_size = standing ? state.world_size : 0;
    r.nodes = standing ? static_cast<int>(state.participants.size()) : 0;
    r.joining = static_cast<int>(state.joiners.size());
    r.spares = static_cast<int>(state.spares.size());
    r.round_age_s = standing && run->rounds_completed > 0 ? absl::ToDoubleSeconds(now - run->round_started) : 0;
    r.rounds_completed = run->rounds_completed;
    r.restarts = run->restarts;
    r.store_keys = run->store.keys();
    r.store_bytes = run->store.bytes();
    for (const ParticipantState& p : state.participants) {
      if (static_cast<int>(r.node_samples.size()) < bounds.max_ranks) {
        r.node_samples.push_back({p.participant.group_rank(), absl::ToDoubleSeconds(now - p.last_heard),
                                  p.restart_count});
      }
      for (const v1::RankProgress& k : p.progress) {
        if (static_cast<int>(r.ranks.size()) >= bounds.max_ranks) break;
        r.ranks.push_back({k.rank(), k.epoch(), k.step(), k.loss(), k.samples_per_s(),
                           k.heartbeat_age_ms() / 1000.0});
      }
    }
    snapshot.exported.push_back(std::move(r));
  }
  return snapshot;
}

void RendezvousService::CountRestart(Run* run, const std::string& node_id) {
  auto participant = run->state.participant_index.find(node_id);
  if (participant == run->state.participant_index.end()) return;
  const v1::RestartPhases& last = run->state.participants[participant->second].last_restart;
  if (last.cause().empty()) return;
  auto seen = run->restart_rounds.find(node_id);
  if (seen != run->restart_rounds.end() && seen->second == last.round()) return;
  if (seen == run->restart_rounds.end() &&
      run->restart_rounds.size() >= 3 * static_cast<size_t>(options_.limits.max_nodes_per_run)) {
    for (auto it = run->restart_rounds.begin(); it != run->restart_rounds.end();) {
      if (run->state.participant_index.contains(it->first)) {
        ++it;
      } else {
        run->restart_rounds.erase(it++);
      }
    }
  }
  run->restart_rounds[node_id] = last.round();
  ++run->restarts[RestartCause(last.cause())];
}

absl::Status RendezvousService::RunStatusOf(const std::string& run_id, v1::RunStatusResponse* response,
                                            ProgressHistory* history, size_t max_nodes) {
  v1::RunStatusRequest request;
  request.set_run_id(run_id);
  absl::MutexLock lock(&mu_);
  if (history != nullptr) {
    auto it = runs_.find(run_id);
    if (it != runs_.end()) *history = it->second->history;
  }
  return FillRunStatus(request, response, max_nodes);
}

bool RendezvousService::Authorized(grpc::CallbackServerContext* ctx) const {
  if (options_.token.empty()) return true;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return false;
  return BearerTokenMatches(absl::string_view(it->second.data(), it->second.size()), options_.token);
}

grpc::ServerUnaryReactor* RendezvousService::Answer(grpc::CallbackServerContext* ctx,
                                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

void RendezvousService::FinishAll(Finishes* finishes) {
  for (auto& [held, status] : *finishes) held->Finish(status);
  finishes->clear();
}

// --- runs and scopes -----------------------------------------------------------

absl::Status RendezvousService::ClosedRunError(const std::string& run_id) {
  auto it = closed_.find(run_id);
  return absl::FailedPreconditionError(absl::StrCat(
      "run '", run_id, "' is closed: ", it == closed_.end() ? std::string("closed") : it->second));
}

absl::StatusOr<RendezvousService::Run*> RendezvousService::FindOrCreateRun(
    const std::string& run_id) {
  auto it = runs_.find(run_id);
  if (it != runs_.end()) {
    it->second->last_activity = options_.clock->Now();
    return it->second.get();
  }
  if (closed_.contains(run_id)) return ClosedRunError(run_id);
  // Without a token anyone who reaches the port may create runs: one
  // client may not take more than its share (checked before anything of
  // anyone else's is evicted for it).
  const bool per_client = options_.token.empty() && options_.limits.max_runs_per_client > 0 && !caller_.empty();
  if (per_client) {
    auto mine = runs_by_client_.find(caller_);
    if (mine != runs_by_client_.end() && mine->second >= options_.limits.max_runs_per_client) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "client ", caller_, " created ", mine->second, " runs; without a token the limit per client "
          "(max_runs_per_client) is ", options_.limits.max_runs_per_client, "; run '", run_id,
          "' cannot be created"));
    }
  }
  if (static_cast<int>(runs_.size()) >= options_.limits.max_runs) {
    // Runs known only from store calls, holding no call (cheap to make:
    // a Set is enough) give way, the least recently used first, so they
    // cannot lock real jobs out for the idle timeout.
    Run* oldest = nullptr;
    for (auto& [id, run] : runs_) {
      if (!run->formed && held_.HeldFor(id) == 0 &&
          (oldest == nullptr || run->last_activity < oldest->last_activity)) {
        oldest = run.get();
      }
    }
    if (oldest != nullptr) {
      const std::string evicted = oldest->state.run_id;
      Finishes none;
      DeleteRun(evicted, grpc::Status(grpc::StatusCode::UNAVAILABLE, "run forgotten"), &none);
      spdlog::info("run '{}' (store calls only) forgotten to make room for run '{}'", evicted, run_id);
    }
  }
  if (static_cast<int>(runs_.size()) >= options_.limits.max_runs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds its limit of ", options_.limits.max_runs,
                     " runs (max_runs); run '", run_id, "' cannot be created"));
  }
  auto run = std::make_unique<Run>(run_id, &options_.limits, &store_bytes_);
  run->state.run_id = run_id;
  run->last_activity = options_.clock->Now();
  if (per_client) {
    run->creator = caller_;
    ++runs_by_client_[caller_];
  }
  Run* raw = run.get();
  runs_[run_id] = std::move(run);
  return raw;
}

absl::StatusOr<RendezvousService::Run*> RendezvousService::StoreRun(const v1::Scope& scope) {
  absl::StatusOr<Run*> run = FindOrCreateRun(scope.run_id());
  if (!run.ok()) return run.status();
  if (absl::Status dropped = (*run)->store.CheckRound(scope.round(), (*run)->state.active_round);
      !dropped.ok()) {
    return dropped;
  }
  return *run;
}

void RendezvousService::RememberClosed(const std::string& run_id, const std::string& reason) {
  if (!closed_.contains(run_id)) closed_order_.push_back(run_id);
  closed_[run_id] = reason;
  while (static_cast<int>(closed_order_.size()) > options_.max_closed_runs_remembered) {
    closed_.erase(closed_order_.front());
    closed_order_.erase(closed_order_.begin());
  }
}

void RendezvousService::DeleteRun(const std::string& run_id, const grpc::Status& status,
                                  Finishes* finishes) {
  for (HeldCall* call : held_.OfRun(run_id)) {
    Held* held = static_cast<Held*>(call);
    Release(held);
    finishes->emplace_back(held, status);
  }
  // The run's store gives its bytes back to store_bytes_ as it goes.
  if (auto it = runs_.find(run_id); it != runs_.end()) {
    if (!it->second->creator.empty() && --runs_by_client_[it->second->creator] <= 0) {
      runs_by_client_.erase(it->second->creator);
    }
  }
  runs_.erase(run_id);
  signer_.Forget(run_id);
}

void RendezvousService::DropOldRounds(Run* run, Finishes* finishes) {
  // The store hands its readers back no longer waiting in it, so Release
  // does not touch the scopes it has just dropped.
  for (StoreRead* read : run->store.DropRoundsBefore(run->state.active_round - 1)) {
    Held* held = static_cast<Held*>(read);
    Release(held);
    finishes->emplace_back(
        held, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                           absl::StrCat("round ", held->round, " of run '", held->run_id,
                                        "' is over and its keys were dropped")));
  }
}

// --- held calls ----------------------------------------------------------------

void RendezvousService::Hold(Held* held, absl::Time deadline) { held_.Hold(held, deadline); }

bool RendezvousService::Release(Held* held) {
  if (!held_.Release(held)) return false;
  auto run_it = runs_.find(held->run_id);
  if (run_it == runs_.end()) return true;
  Run* run = run_it->second.get();
  run->last_activity = options_.clock->Now();
  switch (held->kind) {
    case Held::Kind::kJoin: {
      auto it = run->joins.find(held->node_id);
      if (it != run->joins.end() && it->second == held) {
        run->joins.erase(it);
        SetPolling(options_.clock->Now(), &run->state, held->node_id, false);
      }
      break;
    }
    case Held::Kind::kWatch:
      run->watchers.erase(held);
      break;
    case Held::Kind::kRead:
      run->store.StopReading(held);
      break;
  }
  return true;
}

void RendezvousService::Cancelled(Held* held) {
  {
    absl::MutexLock lock(&mu_);
    if (!Release(held)) return;  // someone else is answering it
  }
  held->Finish(grpc::Status::CANCELLED);
}

void RendezvousService::AnswerJoin(Run* run, Held* held, Finishes* finishes) {
  Release(held);
  std::optional<v1::Assignment> assignment;
  if (!run->state.active_ended) {
    assignment = AssignmentFor(run->state, held->node_id,
                               options_.limits.max_participants_in_assignment);
  }
  if (assignment.has_value()) {
    held->join->set_outcome(v1::JoinResponse::COMPLETE);
    signer_.Sign(run->state.run_id, held->node_id, &*assignment);
    *held->join->mutable_assignment() = std::move(*assignment);
  } else {
    const bool spare = IsSpare(run->state, held->node_id);
    held->join->set_outcome(spare ? v1::JoinResponse::SPARE : v1::JoinResponse::PENDING);
    held->join->set_joined_nodes(static_cast<int32_t>(run->state.joiners.size()));
    held->join->set_detail(spare ? absl::StrCat("round ", run->state.active_round,
                                                " is full; waiting as a spare")
                                 : absl::StrCat("round ", run->state.forming_round, ": ",
                                                run->state.joiners.size(), " nodes joined"));
  }
  finishes->emplace_back(held, grpc::Status::OK);
}

void RendezvousService::AnswerWatch(Run* run, Held* held, Finishes* finishes) {
  Release(held);
  *held->watch->mutable_event() = EventFor(run->state, held->node_id, held->watch_round);
  finishes->emplace_back(held, grpc::Status::OK);
}

void RendezvousService::LogChanges(Run* run) {
  const RunState& state = run->state;
  if (state.closed) {
    if (!run->logged_closed) {
      spdlog::info("run '{}' closed: {}", state.run_id, base::Printable(state.closed_reason));
      run->logged_closed = true;
    }
    return;
  }
  bool standing = state.active_round > 0 && !state.active_ended;
  if (standing && state.active_round != run->logged_round) {
    ++run->rounds_completed;
    run->round_started = options_.clock->Now();
    spdlog::info("run '{}' round {} complete: {} nodes, world size {}", state.run_id,
                 state.active_round, state.participants.size(), state.world_size);
    run->logged_round = state.active_round;
    run->logged_ended = false;
  } else if (!standing && !run->logged_ended && state.active_round == run->logged_round) {
    spdlog::info("run '{}' round {} ended: {}", state.run_id, state.active_round,
                 base::Printable(state.end_reason));
    ++round_ends_[RoundEndCause(state.end_reason)];
    round_duration_.Observe(absl::ToDoubleSeconds(options_.clock->Now() - run->round_started));
    run->logged_ended = true;
  }
}

void RendezvousService::Settle(Run* run, const std::vector<std::string>& timed_out,
                               const std::string& reason, Finishes* finishes) {
  RunState& state = run->state;
  LogChanges(run);
  if (!timed_out.empty()) {
    spdlog::warn("run '{}': {} joining nodes timed out: {}", state.run_id, timed_out.size(),
                 reason);
  }
  for (const std::string& id : timed_out) {
    auto it = run->joins.find(id);
    if (it == run->joins.end()) continue;
    Held* held = it->second;
    Release(held);
    finishes->emplace_back(held, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                              absl::StrCat("run '", state.run_id, "': ", reason)));
  }
  if (state.closed) {
    std::vector<Held*> joins;
    for (auto& [id, held] : run->joins) joins.push_back(held);
    for (Held* held : joins) {
      Release(held);
      finishes->emplace_back(held, ToGrpc(ClosedRunError(state.run_id)));
    }
  } else if (state.active_round > 0 && !state.active_ended && !run->joins.empty()) {
    std::vector<Held*> done;
    for (auto& [id, held] : run->joins) {
      if (state.participant_index.contains(id)) done.push_back(held);
    }
    for (Held* held : done) AnswerJoin(run, held, finishes);
  }
  if (!run->watchers.empty()) {
    std::vector<Held*> woken;
    for (Held* held : run->watchers) {
      if (held->version != state.version || state.closed) woken.push_back(held);
    }
    for (Held* held : woken) AnswerWatch(run, held, finishes);
  }
  DropOldRounds(run, finishes);
}

void RendezvousService::Tick() {
  Finishes finishes;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = options_.clock->Now();
    std::vector<std::string> expired_runs;
    std::vector<std::string> idle_runs;
    for (auto& [id, run] : runs_) {
      if (held_.HeldFor(id) == 0 && now - run->last_activity >= options_.idle_run_timeout) {
        idle_runs.push_back(id);
        continue;
      }
      if (run->state.closed) {
        if (now >= run->state.closed_at + run->state.options.close_timeout) {
          expired_runs.push_back(id);
        }
        continue;
      }
      if (!run->formed) continue;
      const size_t participants = run->state.participants.size();
      TickResult result = ApplyTick(now, &run->state);
      if (result.round_ended && run->state.participants.size() < participants) {
        node_losses_ += participants - run->state.participants.size();
      }
      Settle(run.get(), result.timed_out, result.reason, &finishes);
    }
    for (const std::string& id : expired_runs) {
      DeleteRun(id, ToGrpc(ClosedRunError(id)), &finishes);
    }
    for (const std::string& id : idle_runs) {
      spdlog::info("run '{}' forgotten: no call for {}", id,
                   absl::FormatDuration(options_.idle_run_timeout));
      DeleteRun(id, grpc::Status(grpc::StatusCode::UNAVAILABLE, "run forgotten"), &finishes);
    }
    while (HeldCall* due = held_.Due(now)) {
      Held* held = static_cast<Held*>(due);
      Run* run = runs_.at(held->run_id).get();
      switch (held->kind) {
        case Held::Kind::kJoin:
          AnswerJoin(run, held, &finishes);
          break;
        case Held::Kind::kWatch:
          AnswerWatch(run, held, &finishes);
          break;
        case Held::Kind::kRead: {
          std::string missing = held->waiting_on;
          Release(held);
          finishes.emplace_back(held, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                   absl::StrCat("key '", missing,
                                                                "' was not set in time")));
          break;
        }
      }
    }
  }
  FinishAll(&finishes);
}

// --- answering a call ----------------------------------------------------------

grpc::ServerUnaryReactor* RendezvousService::Answer(grpc::CallbackServerContext* ctx,
                                                    const absl::StatusOr<Held*>& result) {
  if (result.ok() && *result != nullptr) return *result;
  return Answer(ctx, result.status());
}

template <typename Request, typename Body>
grpc::ServerUnaryReactor* RendezvousService::Serve(grpc::CallbackServerContext* ctx,
                                                   const Request& request, Body body) {
  if (!Authorized(ctx)) return Answer(ctx, absl::UnauthenticatedError("missing or wrong token"));
  if (absl::Status s = CheckRequest(request, options_.limits); !s.ok()) return Answer(ctx, s);
  Finishes finishes;
  const std::string peer = ctx->peer();
  std::string caller = options_.peer_address ? options_.peer_address(peer) : std::string();
  if (caller.empty()) caller = PeerHost(peer);
  auto result = [&] {
    absl::MutexLock lock(&mu_);
    caller_ = std::move(caller);
    return body(&finishes);
  }();
  FinishAll(&finishes);
  return Answer(ctx, result);
}

// --- round calls ---------------------------------------------------------------

absl::Status RendezvousService::SparesFull(const Run& run, const std::string& node_id) {
  const std::vector<Joiner>& spares = run.state.spares;
  if (static_cast<int>(spares.size()) < options_.limits.max_nodes_per_run) return absl::OkStatus();
  if (IsSpare(run.state, node_id)) return absl::OkStatus();  // already waiting
  return absl::ResourceExhaustedError(
      absl::StrCat("run '", run.state.run_id, "' has ", spares.size(),
                   " spare nodes waiting; the limit (max_nodes_per_run) is ",
                   options_.limits.max_nodes_per_run));
}

absl::Status RendezvousService::CheckNodeSecret(Run* run, const std::string& node_id,
                                                const std::string& secret) {
  auto known = run->node_secrets.find(node_id);
  if (known != run->node_secrets.end()) {
    if (ConstantTimeEquals(secret, known->second)) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "run '", run->state.run_id, "': node '", node_id,
        "' joined this run with another node_secret; a Join in its name must carry the same one"));
  }
  const RunState& state = run->state;
  const size_t bound = 3 * static_cast<size_t>(options_.limits.max_nodes_per_run);
  if (run->node_secrets.size() >= bound) {
    // Forget the ids no longer in the run (not a participant, joiner or spare).
    for (auto it = run->node_secrets.begin(); it != run->node_secrets.end();) {
      const std::string& id = it->first;
      const bool gone = !state.participant_index.contains(id) && !state.joiner_index.contains(id) &&
                        !IsSpare(state, id);
      if (gone) {
        run->node_secrets.erase(it++);
      } else {
        ++it;
      }
    }
  }
  if (run->node_secrets.size() >= bound) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "run '", state.run_id, "' holds ", run->node_secrets.size(),
        " node ids in it; the limit is 3 x max_nodes_per_run"));
  }
  run->node_secrets.emplace(node_id, secret);
  return absl::OkStatus();
}

void RendezvousService::Form(Run* run, const RoundOptions& round_options, absl::Time now) {
  if (run->formed) return;
  run->state = NewRun(run->state.run_id, round_options);
  run->state.version = FirstVersion(now);
  run->formed = true;
}

v1::RunEvent RendezvousService::ClosedEvent(const std::string& run_id) {
  v1::RunEvent event;
  event.set_run_closed(true);
  event.set_reason(std::string(ClosedRunError(run_id).message()));
  return event;
}

grpc::ServerUnaryReactor* RendezvousService::Join(grpc::CallbackServerContext* ctx,
                                                  const v1::JoinRequest* request,
                                                  v1::JoinResponse* response) {
  absl::StatusOr<RoundOptions> round_options =
      RoundOptionsFromProto(request->options(), options_.limits.max_nodes_per_run);
  return Serve(ctx, *request,
               [&](Finishes* finishes)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<Held*> {
    if (!round_options.ok()) return round_options.status();
    absl::Time now = options_.clock->Now();
    absl::StatusOr<Run*> found = FindOrCreateRun(request->run_id());
    if (shutting_down_) return ShuttingDownError();
    if (!found.ok()) return found.status();
    const std::string& node_id = request->node().node_id();
    if (absl::Status full = SparesFull(**found, node_id); !full.ok()) return full;
    Run* run = *found;
    if (absl::Status secret = CheckNodeSecret(run, node_id, request->node_secret()); !secret.ok()) {
      return secret;
    }
    Form(run, *round_options, now);
    auto previous = run->joins.find(node_id);
    if (previous != run->joins.end()) AnswerJoin(run, previous->second, finishes);
    const bool newcomer = !run->state.joiner_index.contains(node_id) && !IsSpare(run->state, node_id);
    absl::StatusOr<JoinResult> result =
        ApplyJoin(now, &run->state, request->node(), *round_options, request->last_round(),
                  request->failure());
    Held* held = nullptr;
    if (result.ok() && newcomer && result->outcome != JoinResult::Outcome::kQuarantined &&
        result->outcome != JoinResult::Outcome::kRunClosed) {
      ++node_joins_;
    }
    if (!result.ok()) {
      // Settled below all the same: a previous Join may have been answered.
    } else if (result->outcome == JoinResult::Outcome::kRunClosed) {
      result = absl::FailedPreconditionError(
          absl::StrCat("run '", request->run_id(), "' closed: ", result->closed_reason));
    } else if (result->outcome == JoinResult::Outcome::kQuarantined) {
      FillQuarantined(now, result->quarantine, run->state.options, response);  // answered at once
    } else if (result->outcome == JoinResult::Outcome::kComplete) {
      response->set_outcome(v1::JoinResponse::COMPLETE);
      *response->mutable_assignment() = result->assignment;
      if (response->assignment().participants_size() >
          options_.limits.max_participants_in_assignment) {
        response->mutable_assignment()->clear_participants();
      }
      signer_.Sign(run->state.run_id, node_id, response->mutable_assignment());
    } else {
      held = new Held(this, Held::Kind::kJoin, request->run_id());
      held->node_id = node_id;
      held->join = response;
      Hold(held, now + options_.limits.long_poll_bound);
      run->joins[node_id] = held;
      SetPolling(now, &run->state, node_id, true);
    }
    Settle(run, {}, "", finishes);
    if (!result.ok()) return result.status();
    return held;
  });
}

grpc::ServerUnaryReactor* RendezvousService::KeepAlive(grpc::CallbackServerContext* ctx,
                                                       const v1::KeepAliveRequest* request,
                                                       v1::KeepAliveResponse* response) {
  return Serve(ctx, *request, [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Time now = options_.clock->Now();
    const v1::Assignment& assignment = request->assignment();
    auto existing = runs_.find(request->run_id());
    Run* known = existing == runs_.end() ? nullptr : existing->second.get();
    const bool carries_round = assignment.round() > 0 && assignment.participants_size() > 0;
    if (known == nullptr && closed_.contains(request->run_id())) {
      *response->mutable_event() = ClosedEvent(request->run_id());
      return absl::OkStatus();
    }
    if (known == nullptr && !carries_round) {
      return absl::NotFoundError(absl::StrCat(
          "run '", request->run_id(),
          "' is unknown to this server (restarted?) and the keep-alive carries no assignment"));
    }
    // Only an assignment this server issued may change a round (a forged
    // one would hand a live job other ranks or another MASTER_ADDR).
    const bool issued = signer_.Verify(request->run_id(), request->node_id(), assignment);
    absl::StatusOr<bool> may_register =
        MayReRegister(request->run_id(), assignment, known == nullptr ? nullptr : &known->state,
                      known == nullptr ? 0 : known->unsigned_round, issued, signer_.durable());
    if (!may_register.ok()) return may_register.status();
    const bool can_register = *may_register;
    // Without a verifiable signature (a restarted server with a key that is
    // not durable), the round it would re-create must still be one the
    // rules could have formed.
    v1::RunOptions proto = request->options();
    if (proto.min_nodes() == 0) {
      proto.set_min_nodes(assignment.group_world_size());
      proto.set_max_nodes(assignment.group_world_size());
    }
    std::optional<RoundOptions> request_options;
    if (known == nullptr || !known->formed) {
      absl::StatusOr<RoundOptions> o = RoundOptionsFromProto(proto, options_.limits.max_nodes_per_run);
      if (!o.ok()) return o.status();
      request_options = *o;
    }
    if (can_register && !issued) {
      const RoundOptions& bound = known != nullptr && known->formed ? known->state.options : *request_options;
      if (absl::Status valid = ValidateAssignment(assignment, request->node_id(), bound); !valid.ok()) {
        return valid;
      }
    }
    absl::StatusOr<Run*> found = FindOrCreateRun(request->run_id());
    if (!found.ok()) return found.status();
    Run* run = *found;
    if (!run->formed) Form(run, *request_options, now);
    if (can_register && ReRegister(now, &run->state, *request)) {
      run->unsigned_round = issued ? 0 : assignment.round();
    }
    const bool trusted = issued || (run->unsigned_round != 0 && assignment.round() == run->unsigned_round);
    *response->mutable_event() = ApplyKeepAlive(now, &run->state, *request, trusted);
    CountRestart(run, request->node_id());
    for (const v1::RankProgress& p : request->progress()) {
      if (p.rank() < 0 || p.rank() >= kHistoryRanks || p.step() <= 0) continue;
      AddProgressPoint({p.step(), p.loss(), p.samples_per_s()}, &run->history[p.rank()]);
    }
    Settle(run, {}, "", finishes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RendezvousService::Watch(grpc::CallbackServerContext* ctx,
                                                   const v1::WatchRequest* request,
                                                   v1::WatchResponse* response) {
  return Serve(ctx, *request,
               [&](Finishes*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<Held*> {
    auto it = runs_.find(request->run_id());
    if (it == runs_.end()) {
      if (!closed_.contains(request->run_id())) return UnknownRunError(request->run_id());
      *response->mutable_event() = ClosedEvent(request->run_id());
      return nullptr;
    }
    if (shutting_down_) return ShuttingDownError();
    Run* run = it->second.get();
    if (!run->formed) {
      // Known only from store calls (workers reached a restarted server
      // before their agent's keep-alive): it has no round yet, and "round
      // over" would restart every node. The agent's next keep-alive
      // re-registers the round.
      return UnknownRunError(request->run_id());
    }
    run->last_activity = options_.clock->Now();
    v1::RunEvent event = EventFor(run->state, request->node_id(), request->round());
    // Any other version answers at once: a newer one is a change, an
    // older or larger one means the server restarted since the caller's.
    if (run->state.version != request->version() || run->state.closed ||
        request->timeout_ms() <= 0 || (request->round() > 0 && !event.round_current())) {
      *response->mutable_event() = std::move(event);
      return nullptr;
    }
    Held* held = new Held(this, Held::Kind::kWatch, request->run_id());
    held->node_id = request->node_id();
    held->watch_round = request->round();
    held->version = request->version();
    held->watch = response;
    absl::Duration wait = std::min(Millis(request->timeout_ms()), options_.limits.long_poll_bound);
    Hold(held, options_.clock->Now() + wait);
    run->watchers.insert(held);
    return held;
  });
}

grpc::ServerUnaryReactor* RendezvousService::Leave(grpc::CallbackServerContext* ctx,
                                                   const v1::LeaveRequest* request,
                                                   v1::LeaveResponse* response) {
  return Serve(ctx, *request, [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = runs_.find(request->run_id());
    if (it == runs_.end()) return UnknownRunError(request->run_id());
    Run* run = it->second.get();
    run->last_activity = options_.clock->Now();
    auto join = run->joins.find(request->node_id());
    if (join != run->joins.end()) {
      Held* held = join->second;
      Release(held);
      finishes->emplace_back(
          held, grpc::Status(grpc::StatusCode::ABORTED, "the node left the run while joining"));
    }
    // Leaving a standing round ends it for everyone: only the participant
    // itself may, with its assignment's signature (a round re-created
    // unverified after a restart, whose signatures this server cannot
    // check, excepted).
    const RunState& state = run->state;
    if (!state.active_ended && state.participant_index.contains(request->node_id()) &&
        run->unsigned_round != state.active_round &&
        !ProvesParticipant(*run, request->node_id(), request->proof())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "run '", state.run_id, "': a Leave for node '", request->node_id(),
          "' of the standing round must carry that node's assignment signature"));
    }
    ApplyLeave(options_.clock->Now(), &run->state, request->node_id(),
               request->reason().empty() ? "left" : request->reason());
    Settle(run, {}, "", finishes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RendezvousService::Close(grpc::CallbackServerContext* ctx,
                                                   const v1::CloseRequest* request,
                                                   v1::CloseResponse* response) {
  return Serve(ctx, *request, [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string reason = request->reason().empty() ? "closed by a client" : request->reason();
    auto it = runs_.find(request->run_id());
    if (it == runs_.end()) {
      // Nothing to close; and a run id closed in advance would refuse the
      // job that comes to use it.
      if (closed_.contains(request->run_id())) return absl::OkStatus();
      return UnknownRunError(request->run_id());
    }
    Run* run = it->second.get();
    const RunState& state = run->state;
    if (!state.closed && !state.active_ended && run->unsigned_round != state.active_round &&
        !ProvesParticipant(*run, request->node_id(), request->proof())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "run '", state.run_id, "': closing a run whose round stands takes one of its participants' "
          "node id and assignment signature"));
    }
    RememberClosed(request->run_id(), reason);
    ApplyClose(options_.clock->Now(), &run->state, reason);
    Settle(run, {}, "", finishes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RendezvousService::RunStatus(grpc::CallbackServerContext* ctx,
                                                       const v1::RunStatusRequest* request,
                                                       v1::RunStatusResponse* response) {
  return Serve(ctx, *request, [&](Finishes*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return FillRunStatus(*request, response);
  });
}

absl::Status RendezvousService::FillRunStatus(const v1::RunStatusRequest& request,
                                              v1::RunStatusResponse* response, size_t max_nodes) {
  response->set_run_id(request.run_id());
  auto it = runs_.find(request.run_id());
  if (it == runs_.end()) {
    auto closed = closed_.find(request.run_id());
    if (closed == closed_.end()) return UnknownRunError(request.run_id());
    response->set_state(v1::RunStatusResponse::CLOSED);
    response->set_closed_reason(closed->second);
    return absl::OkStatus();
  }
  ::cpptorchrun::rdzv::FillRunStatus(options_.clock->Now(), it->second->state, max_nodes, response);
  response->set_server_store_bytes(store_bytes_);
  response->set_server_store_budget(options_.limits.max_store_bytes);
  return absl::OkStatus();
}

// --- store ---------------------------------------------------------------------

RendezvousService::Held* RendezvousService::NewRead(const v1::Scope& scope,
                                                    std::vector<std::string> keys) {
  Held* held = new Held(this, Held::Kind::kRead, scope.run_id());
  held->round = scope.round();
  held->keys = std::move(keys);
  return held;
}

void RendezvousService::AnswerReads(const ScopedStore::Answered& answered, Finishes* finishes) {
  for (StoreRead* read : answered) AnswerRead(static_cast<Held*>(read), finishes);
}

void RendezvousService::AnswerRead(Held* held, Finishes* finishes) {
  if (held->held) Release(held);
  if (held->get != nullptr) {
    held->get->set_value(held->values[0]);
  } else {
    for (const std::string& value : held->values) held->multi_get->add_values(value);
  }
  finishes->emplace_back(held, grpc::Status::OK);
}

bool RendezvousService::ProvesParticipant(const Run& run, const std::string& node_id, const std::string& proof) {
  if (!run.state.participant_index.contains(node_id)) return false;
  std::optional<v1::Assignment> mine =
      AssignmentFor(run.state, node_id, options_.limits.max_participants_in_assignment);
  if (!mine.has_value()) return false;
  mine->set_signature(proof);
  return signer_.Verify(run.state.run_id, node_id, *mine);
}

absl::Time RendezvousService::ReadDeadline(int32_t timeout_ms) {
  return options_.clock->Now() + std::min(Millis(timeout_ms), options_.limits.store_wait_bound);
}

grpc::ServerUnaryReactor* RendezvousService::Set(grpc::CallbackServerContext* ctx,
                                                 const v1::SetRequest* request,
                                                 v1::SetResponse* response) {
  v1::MultiSetRequest multi;
  *multi.mutable_scope() = request->scope();
  v1::KeyValue* entry = multi.add_entries();
  entry->set_key(request->key());
  entry->set_value(request->value());
  v1::MultiSetResponse ignored;
  return MultiSet(ctx, &multi, &ignored);
}

grpc::ServerUnaryReactor* RendezvousService::MultiSet(grpc::CallbackServerContext* ctx,
                                                      const v1::MultiSetRequest* request,
                                                      v1::MultiSetResponse* response) {
  return Serve(ctx, *request, [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Run*> run = StoreRun(request->scope());
    if (!run.ok()) return run.status();
    ScopedStore::Entries entries;
    entries.reserve(request->entries_size());
    for (const v1::KeyValue& kv : request->entries()) entries.emplace_back(kv.key(), kv.value());
    ScopedStore::Answered answered;
    absl::Status set = (*run)->store.Set(request->scope().round(), entries, &answered);
    AnswerReads(answered, finishes);
    return set;
  });
}

grpc::ServerUnaryReactor* RendezvousService::Get(grpc::CallbackServerContext* ctx,
                                                 const v1::GetRequest* request,
                                                 v1::GetResponse* response) {
  return Serve(ctx, *request,
               [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<Held*> {
    // A read that will not wait creates nothing (no run, no scope).
    const bool waits = request->timeout_ms() > 0;
    if (!waits && !runs_.contains(request->scope().run_id())) {
      return NotSetError(request->key());
    }
    absl::StatusOr<Run*> run = StoreRun(request->scope());
    if (!run.ok()) return run.status();
    if (const std::string* value = (*run)->store.Find(request->scope().round(), request->key())) {
      response->set_value(*value);
      return nullptr;
    }
    if (!waits) return NotSetError(request->key());
    if (shutting_down_) return ShuttingDownError();
    Held* held = NewRead(request->scope(), {request->key()});
    held->get = response;
    Hold(held, ReadDeadline(request->timeout_ms()));
    if ((*run)->store.Read(held)) AnswerRead(held, finishes);
    return held;
  });
}

grpc::ServerUnaryReactor* RendezvousService::MultiGet(grpc::CallbackServerContext* ctx,
                                                      const v1::MultiGetRequest* request,
                                                      v1::MultiGetResponse* response) {
  return Serve(ctx, *request,
               [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<Held*> {
    if (request->keys_size() == 0) return nullptr;
    if (request->timeout_ms() <= 0 && !runs_.contains(request->scope().run_id())) {
      return NotSetError(request->keys(0));
    }
    absl::StatusOr<Run*> run = StoreRun(request->scope());
    if (!run.ok()) return run.status();
    if (shutting_down_) return ShuttingDownError();
    Held* held = NewRead(request->scope(), {request->keys().begin(), request->keys().end()});
    held->multi_get = response;
    if ((*run)->store.Read(held)) {
      AnswerRead(held, finishes);
      return held;
    }
    if (request->timeout_ms() <= 0) {
      absl::Status missing = NotSetError(held->waiting_on);
      (*run)->store.StopReading(held);
      delete held;
      return missing;
    }
    Hold(held, ReadDeadline(request->timeout_ms()));
    return held;
  });
}

grpc::ServerUnaryReactor* RendezvousService::Add(grpc::CallbackServerContext* ctx,
                                                 const v1::AddRequest* request,
                                                 v1::AddResponse* response) {
  return Serve(ctx, *request, [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Run*> run = StoreRun(request->scope());
    if (!run.ok()) return run.status();
    ScopedStore::Answered answered;
    absl::StatusOr<int64_t> value =
        (*run)->store.Add(request->scope().round(), request->key(), request->delta(), &answered);
    AnswerReads(answered, finishes);
    if (!value.ok()) return value.status();
    response->set_value(*value);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RendezvousService::CompareSet(grpc::CallbackServerContext* ctx,
                                                        const v1::CompareSetRequest* request,
                                                        v1::CompareSetResponse* response) {
  return Serve(ctx, *request, [&](Finishes* finishes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Run*> run = StoreRun(request->scope());
    if (!run.ok()) return run.status();
    std::optional<std::string> expected;
    if (!request->expect_absent()) expected = request->expected();
    ScopedStore::Answered answered;
    absl::StatusOr<ScopedStore::Swap> swap = (*run)->store.CompareSet(
        request->scope().round(), request->key(), expected, request->desired(), &answered);
    AnswerReads(answered, finishes);
    if (!swap.ok()) return swap.status();
    response->set_swapped(swap->swapped);
    if (swap->present) response->set_value(swap->value);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RendezvousService::Delete(grpc::CallbackServerContext* ctx,
                                                    const v1::DeleteRequest* request,
                                                    v1::DeleteResponse* response) {
  return Serve(ctx, *request, [&](Finishes*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Run*> run = StoreRun(request->scope());
    if (!run.ok()) return run.status();
    response->set_deleted((*run)->store.Delete(request->scope().round(), request->key()));
    return absl::OkStatus();
  });
}

}  // namespace cpptorchrun::rdzv
