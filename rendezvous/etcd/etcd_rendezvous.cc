#include "rendezvous/etcd/etcd_rendezvous.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/jitter.h"
#include "rendezvous/etcd/kv_store.h"
#include "rendezvous/etcd/run_record.h"
#include "rendezvous/limits.h"
#include "rendezvous/request_checks.h"
#include "rendezvous/rules.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

// Loops that wait in slices (Join, Watch) stop after this many slices even
// when their deadline has not passed.
constexpr int kMaxSlices = 1000000;
// Rounds' stores older than the one before the active round are deleted as
// rounds complete, at most this many rounds a write.
constexpr int64_t kMaxRoundsDroppedAtOnce = 8;

// What one read of a run shows, at one revision.
struct Snapshot {
  std::optional<RunState> state;
  int64_t state_revision = 0;  // the state key's mod_revision; 0: absent
  int64_t state_lease = 0;     // the lease the state key is on (a closed run's)
  int64_t revision = 0;        // the store's revision of the read (or the write)
  Liveness live;
};

std::string NodeKey(const std::string& run_id, const std::string& node_id) {
  return absl::StrCat(run_id.size(), ":", run_id, node_id);
}

// etcd grants whole seconds; a deadline below one second gets one.
absl::Duration LeaseTtl(absl::Duration deadline) {
  return std::max(absl::Seconds(1), absl::Ceil(deadline, absl::Seconds(1)));
}

// Between two tries of a transaction that lost to another writer.
void JitteredPause(int attempt) { absl::SleepFor(absl::Milliseconds(std::min(attempt, 20)) * base::Jitter()); }

// Between two tries while etcd cannot answer: 50 ms doubling to 1 s.
void Backoff(int failures) {
  absl::SleepFor(std::min(absl::Seconds(1), absl::Milliseconds(50) * (1 << std::min(failures, 5))) * base::Jitter());
}

class EtcdRendezvousClient final : public RendezvousClient {
 public:
  EtcdRendezvousClient(std::shared_ptr<Kv> kv, const EtcdRendezvousOptions& options)
      : kv_(std::move(kv)), options_(options) {}

  using RendezvousClient::Join;
  absl::StatusOr<v1::Assignment> Join(const v1::JoinRequest& request, const JoinHooks& hooks) override {
    if (absl::Status bad = CheckRequest(request, limits_); !bad.ok()) return bad;
    absl::StatusOr<RoundOptions> options =
        RoundOptionsFromProto(request.options(), options_.max_nodes_per_run);
    if (!options.ok()) return options.status();
    const RunKeys keys(options_.prefix, request.run_id());
    const std::string& me = request.node().node_id();
    const absl::Time started = options_.clock->Now();
    std::optional<absl::Time> spare_since;
    // Since when etcd has failed every call in a row (members down, no quorum).
    std::optional<absl::Time> failing_since;
    int failures = 0;
    auto transient = [&](const absl::Status& s, int /*slice*/) {
      if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s) && !absl::IsAborted(s)) return false;
      const absl::Time now = absl::Now();
      if (!failing_since.has_value()) failing_since = now;
      if (now >= *failing_since + options_.retry_budget) return false;
      Backoff(failures++);
      return true;
    };
    bool seated = false;
    for (int slice = 0; slice < kMaxSlices; ++slice) {
      if (absl::Status alive = KeepNodeAlive(keys, request.run_id(), me, *options); !alive.ok()) {
        if (transient(alive, slice)) continue;
        return alive;
      }
      JoinResult result;
      bool timed_out = false;
      absl::StatusOr<Snapshot> snap = JoinSlice(keys, request, *options, started, seated, &result, &timed_out);
      if (!snap.ok()) {
        if (transient(snap.status(), slice)) continue;
        return snap.status();
      }
      failing_since.reset();
      failures = 0;
      if (timed_out) {
        return absl::DeadlineExceededError(absl::StrCat(
            "run '", request.run_id(), "': no round completed within join_timeout (",
            absl::FormatDuration(snap->state->options.join_timeout), ") of node '", me, "' joining"));
      }
      if (result.outcome == JoinResult::Outcome::kComplete) return result.assignment;
      if (result.outcome == JoinResult::Outcome::kRunClosed) {
        return absl::FailedPreconditionError(
            absl::StrCat("run '", request.run_id(), "' closed: ", result.closed_reason));
      }
      const absl::Time now = options_.clock->Now();
      if (result.outcome == JoinResult::Outcome::kQuarantined) {
        // Kept out, not waiting in the round: no join_timeout runs.
        v1::JoinResponse told;
        FillQuarantined(now, result.quarantine, snap->state->options, &told);
        if (hooks.on_quarantined) hooks.on_quarantined(told.detail());
        seated = false;
        // Until the run changes (it may close) or it is time to ask again.
        absl::StatusOr<WatchResult> w = kv_->Watch(keys.Live(), true, snap->revision + 1,
                                                   absl::Milliseconds(told.retry_after_ms()));
        if (!w.ok() && absl::IsCancelled(w.status())) return w.status();
        continue;
      }
      seated = true;
      if (result.outcome == JoinResult::Outcome::kSpare) {
        if (!spare_since.has_value()) spare_since = now;
        if (now >= *spare_since + options_.max_spare_wait) {
          return absl::DeadlineExceededError(absl::StrCat("run '", request.run_id(), "': node '", me,
                                                          "' waited ", absl::FormatDuration(options_.max_spare_wait),
                                                          " as a spare without being admitted"));
        }
      } else {
        spare_since.reset();
      }
      // Until something under live/ changes, the rules' next deadline, or
      // the lease's next renewal.
      const absl::Time wake = std::min(NextDeadline(*snap->state), now + options->keep_alive_interval);
      absl::StatusOr<WatchResult> w =
          kv_->Watch(keys.Live(), true, snap->revision + 1, std::max(absl::ZeroDuration(), wake - now));
      if (!w.ok() && !absl::IsOutOfRange(w.status()) && !absl::IsUnavailable(w.status()) &&
          !absl::IsDeadlineExceeded(w.status())) {
        return w.status();
      }
    }
    return absl::DeadlineExceededError(absl::StrCat("run '", request.run_id(), "': Join gave up after ",
                                                    kMaxSlices, " waits"));
  }

  // One slice of a Join: the rules applied to the run's state in one
  // transaction (a new run when there is none). *timed_out: the node's
  // join_timeout passed, by the rules' tick or, for a node `seated` before
  // and now neither waiting nor a participant, since `started`; else
  // *result is ApplyJoin's.
  absl::StatusOr<Snapshot> JoinSlice(const RunKeys& keys, const v1::JoinRequest& request, const RoundOptions& options,
                                     absl::Time started, bool seated, JoinResult* result, bool* timed_out) {
    const std::string& me = request.node().node_id();
    return Update(keys, [&](absl::Time now, Snapshot& s, const TickResult& tick, std::vector<Op>&) -> absl::Status {
      if (!s.state.has_value()) {
        s.state = NewRun(request.run_id(), options);
        s.state->version = absl::ToUnixMicros(now);
      }
      const bool waiting = s.state->joiner_index.contains(me) || IsSpare(*s.state, me);
      const bool dropped = seated && !waiting && !s.state->participant_index.contains(me) &&
                           now >= started + s.state->options.join_timeout;
      if (std::find(tick.timed_out.begin(), tick.timed_out.end(), me) != tick.timed_out.end() || dropped) {
        *timed_out = true;
        return absl::OkStatus();
      }
      absl::StatusOr<JoinResult> applied =
          ApplyJoin(now, &*s.state, request.node(), options, request.last_round(), request.failure());
      if (!applied.ok()) return applied.status();
      *result = *std::move(applied);
      return absl::OkStatus();
    });
  }

  absl::StatusOr<v1::RunEvent> KeepAlive(const v1::KeepAliveRequest& request) override {
    if (absl::Status bad = CheckRequest(request, limits_); !bad.ok()) return bad;
    const RunKeys keys(options_.prefix, request.run_id());
    absl::StatusOr<Snapshot> before = Read(keys);
    if (!before.ok()) return before.status();
    if (!before->state.has_value()) return UnknownRun(keys, request.run_id());
    const std::string& me = request.node_id();
    const RunState& state = *before->state;
    if (!state.closed && state.participant_index.contains(me)) {
      if (absl::Status alive = KeepNodeAlive(keys, request.run_id(), me, state.options); !alive.ok()) {
        return alive;
      }
      record::StoredProgress report;
      report.set_sent_at_us(absl::ToUnixMicros(options_.clock->Now()));
      report.set_restart_count(request.restart_count());
      const auto& p = state.participants[state.participant_index.at(me)];
      const int rows = std::min(request.progress_size(), std::max(0, p.node.local_world_size()));
      report.mutable_progress()->Add(request.progress().begin(), request.progress().begin() + rows);
      if (request.has_last_restart()) *report.mutable_last_restart() = request.last_restart();
      if (request.has_faults()) *report.mutable_faults() = request.faults();
      absl::StatusOr<int64_t> put =
          kv_->Put(keys.Progress(me), report.SerializeAsString(), LeaseOf(request.run_id(), me));
      if (!put.ok()) return put.status();
    }
    return EventNow(keys, request.run_id(), me, request.assignment().round());
  }

  absl::StatusOr<v1::RunEvent> Watch(const std::string& run_id, const std::string& node_id, int64_t round,
                                     int64_t version, absl::Duration timeout) override {
    const RunKeys keys(options_.prefix, run_id);
    const absl::Time deadline = absl::Now() + std::max(absl::ZeroDuration(), timeout);
    absl::StatusOr<v1::RunEvent> event;
    for (int slice = 0; slice < kMaxSlices; ++slice) {
      absl::StatusOr<Snapshot> snap = Update(keys, NoChange());
      if (!snap.ok()) return snap.status();
      if (!snap->state.has_value()) return UnknownRun(keys, run_id);
      event = EventFor(*snap->state, node_id, round);
      if (event->version() != version || (round > 0 && !event->round_current()) || event->run_closed()) {
        return event;
      }
      const absl::Time now = absl::Now();
      if (now >= deadline) return event;
      absl::Duration wait = deadline - now;
      const absl::Time next = NextDeadline(*snap->state);
      const absl::Time clock_now = options_.clock->Now();
      if (next != absl::InfiniteFuture()) wait = std::min(wait, std::max(absl::ZeroDuration(), next - clock_now));
      if (absl::Status renewed = RenewIfHeld(run_id, node_id, snap->state->options); !renewed.ok()) {
        return renewed;
      }
      wait = std::min(wait, snap->state->options.keep_alive_interval);
      absl::StatusOr<WatchResult> w = kv_->Watch(keys.Live(), true, snap->revision + 1, wait);
      if (!w.ok() && !absl::IsOutOfRange(w.status()) && !absl::IsUnavailable(w.status()) &&
          !absl::IsDeadlineExceeded(w.status())) {
        return w.status();
      }
    }
    return event;
  }

  absl::Status Leave(const std::string& run_id, const std::string& node_id, const std::string& reason,
                     const std::string& /*proof: etcd's access control stands in for it*/) override {
    const RunKeys keys(options_.prefix, run_id);
    bool known = false;
    absl::StatusOr<Snapshot> snap =
        Update(keys, [&](absl::Time now, Snapshot& s, const TickResult&, std::vector<Op>&) {
          if (s.state.has_value()) known = ApplyLeave(now, &*s.state, node_id, reason);
          return absl::OkStatus();
        });
    if (!snap.ok()) return snap.status();
    DropLease(run_id, node_id);
    if (!snap->state.has_value()) return UnknownRun(keys, run_id);
    (void)known;
    return absl::OkStatus();
  }

  absl::Status Close(const std::string& run_id, const std::string& reason, const std::string& node_id,
                     const std::string& /*proof*/) override {
    const RunKeys keys(options_.prefix, run_id);
    absl::StatusOr<Snapshot> before = Read(keys);
    if (!before.ok()) return before.status();
    if (!before->state.has_value()) return UnknownRun(keys, run_id);
    // The closed state outlives the run by close_timeout (later Joins are
    // told it closed), then goes with its lease, as the service forgets it.
    absl::StatusOr<int64_t> lease = kv_->LeaseGrant(LeaseTtl(before->state->options.close_timeout));
    if (!lease.ok()) return lease.status();
    absl::StatusOr<Snapshot> snap = Update(
        keys,
        [&](absl::Time now, Snapshot& s, const TickResult&, std::vector<Op>& ops) {
          if (!s.state.has_value()) return UnknownRun(keys, run_id);
          if (!s.state->closed) {
            ApplyClose(now, &*s.state, reason);
            ops.push_back(Op::DeletePrefix(keys.Rounds()));
          }
          return absl::OkStatus();
        },
        *lease);
    if (!snap.ok()) return snap.status();
    if (!node_id.empty()) DropLease(run_id, node_id);
    return absl::OkStatus();
  }

  absl::StatusOr<v1::RunStatusResponse> RunStatus(const std::string& run_id) override {
    const RunKeys keys(options_.prefix, run_id);
    absl::StatusOr<Snapshot> snap = Read(keys);
    if (!snap.ok()) return snap.status();
    if (!snap->state.has_value()) return UnknownRun(keys, run_id);
    const absl::Time now = options_.clock->Now();
    ApplyLiveness(now, snap->live, &*snap->state);
    v1::RunStatusResponse response;
    FillRunStatus(now, *snap->state, SIZE_MAX, &response);
    for (v1::NodeStatus& n : *response.mutable_nodes()) {
      const std::string& id = n.participant().node_id();
      auto report = snap->live.reports.find(id);
      if (!snap->live.alive.contains(id)) {
        n.set_heartbeat_age_ms(-1);
      } else if (report != snap->live.reports.end()) {
        n.set_heartbeat_age_ms(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(now - absl::FromUnixMicros(report->second.sent_at_us()))));
      }
    }
    return response;
  }

  std::unique_ptr<Store> OpenStore(const std::string& run_id, int64_t round) override {
    return NewKvStore(kv_.get(), RunKeys(options_.prefix, run_id).Store(round));
  }

  void Cancel() override { kv_->Cancel(); }

 private:
  struct Lease {
    int64_t id = 0;
    absl::Duration ttl;
    absl::Time renewed;
  };
  using Change = std::function<absl::Status(absl::Time now, Snapshot& snap, const TickResult& tick,
                                            std::vector<Op>& ops)>;

  static Change NoChange() {
    return [](absl::Time, Snapshot&, const TickResult&, std::vector<Op>&) { return absl::OkStatus(); };
  }

  absl::Status UnknownRun(const RunKeys& keys, const std::string& run_id) const {
    return absl::NotFoundError(absl::StrCat("run '", run_id, "' is unknown to etcd (no key ", keys.State(), ")"));
  }

  // The state, the alive keys and the reports, in one transaction (one revision).
  absl::StatusOr<Snapshot> Read(const RunKeys& keys) {
    absl::StatusOr<TxnResult> t = kv_->Txn(
        {}, {Op::Get(keys.State()), Op::GetPrefix(keys.AlivePrefix()), Op::GetPrefix(keys.ProgressPrefix())}, {});
    if (!t.ok()) return t.status();
    if (t->reads.size() != 3) return absl::InternalError("etcd answered a read with the wrong number of parts");
    Snapshot s;
    s.revision = t->revision;
    if (!t->reads[0].kvs.empty()) {
      const KeyValue& kv = t->reads[0].kvs[0];
      absl::StatusOr<RunState> state = DecodeRun(kv.value, kv.key);
      if (!state.ok()) return state.status();
      s.state = *std::move(state);
      s.state_revision = kv.mod_revision;
      s.state_lease = kv.lease;
    }
    const std::string alive_prefix = keys.AlivePrefix();
    for (const KeyValue& kv : t->reads[1].kvs) {
      absl::StatusOr<std::string> id = UnescapeKeyPart(absl::string_view(kv.key).substr(alive_prefix.size()));
      if (id.ok()) s.live.alive.insert(*id);
    }
    const std::string progress_prefix = keys.ProgressPrefix();
    for (const KeyValue& kv : t->reads[2].kvs) {
      absl::StatusOr<std::string> id = UnescapeKeyPart(absl::string_view(kv.key).substr(progress_prefix.size()));
      record::StoredProgress report;
      if (id.ok() && report.ParseFromString(kv.value)) s.live.reports[*id] = std::move(report);
    }
    return s;
  }

  // Reads the run, applies etcd's liveness and the rules' deadlines, then
  // `change`; writes the state (and the ops `change` added) when it
  // differs, on the revision it read, and starts over when another writer
  // came first. The snapshot returned holds the state as written.
  absl::StatusOr<Snapshot> Update(const RunKeys& keys, const Change& change, int64_t state_lease = 0) {
    int unanswered = 0;
    for (int attempt = 0; attempt < options_.max_conflicts; ++attempt) {
      absl::StatusOr<Snapshot> snap = Read(keys);
      if (!snap.ok()) return snap.status();
      const absl::Time now = options_.clock->Now();
      const std::string before = snap->state.has_value() ? EncodeRun(*snap->state) : "";
      const int64_t active_before = snap->state.has_value() ? snap->state->active_round : 0;
      TickResult tick;
      if (snap->state.has_value()) {
        ApplyLiveness(now, snap->live, &*snap->state);
        tick = ApplyTick(now, &*snap->state);
      }
      std::vector<Op> ops;
      if (absl::Status changed = change(now, *snap, tick, ops); !changed.ok()) return changed;
      const std::string after = snap->state.has_value() ? EncodeRun(*snap->state) : "";
      if (after == before && ops.empty()) return snap;
      if (after != before) {
        ops.push_back(Op::Put(keys.State(), after, state_lease != 0 ? state_lease : snap->state_lease));
        const int64_t active = snap->state->active_round;
        for (int64_t r = std::max<int64_t>({1, active_before - 1, active - 1 - kMaxRoundsDroppedAtOnce});
             r < active - 1; ++r) {
          ops.push_back(Op::DeletePrefix(keys.Store(r)));
        }
      }
      absl::StatusOr<TxnResult> t =
          kv_->Txn({Compare::ModRevisionIs(keys.State(), snap->state_revision)}, ops, {});
      if (!t.ok()) {
        // A write that may or may not have landed: read again.
        if (WriteUnanswered(t.status()) && ++unanswered < kMaxUnansweredWrites) {
          JitteredPause(attempt + 1);
          continue;
        }
        return t.status();
      }
      if (t->succeeded) {
        snap->revision = t->revision;
        return snap;
      }
      JitteredPause(attempt);
    }
    return absl::AbortedError(absl::StrCat("run state ", keys.State(), " changed under ", options_.max_conflicts,
                                           " attempts in a row to update it"));
  }

  absl::StatusOr<v1::RunEvent> EventNow(const RunKeys& keys, const std::string& run_id, const std::string& node_id,
                                        int64_t round) {
    absl::StatusOr<Snapshot> snap = Update(keys, NoChange());
    if (!snap.ok()) return snap.status();
    if (!snap->state.has_value()) return UnknownRun(keys, run_id);
    return EventFor(*snap->state, node_id, round);
  }

  int64_t LeaseOf(const std::string& run_id, const std::string& node_id) {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(NodeKey(run_id, node_id));
    return it == leases_.end() ? 0 : it->second.id;
  }

  // The node's lease exists (granted, or renewed when due) and its alive
  // key is on it.
  absl::Status KeepNodeAlive(const RunKeys& keys, const std::string& run_id, const std::string& node_id,
                             const RoundOptions& options) {
    const absl::Duration ttl = LeaseTtl(options.KeepAliveDeadline());
    std::optional<Lease> lease;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = leases_.find(NodeKey(run_id, node_id)); it != leases_.end()) lease = it->second;
    }
    const absl::Time now = options_.clock->Now();
    if (lease.has_value() && now < lease->renewed + options.keep_alive_interval) return absl::OkStatus();
    bool fresh = !lease.has_value();
    if (lease.has_value()) {
      absl::StatusOr<absl::Duration> renewed = kv_->LeaseKeepAlive(lease->id);
      if (absl::IsNotFound(renewed.status())) {
        fresh = true;  // it expired: this node counts as dead; it comes back as a newcomer
      } else if (!renewed.ok()) {
        return renewed.status();
      } else {
        lease->renewed = now;
      }
    }
    if (fresh) {
      absl::StatusOr<int64_t> id = kv_->LeaseGrant(ttl);
      if (!id.ok()) return id.status();
      lease = Lease{*id, ttl, now};
    }
    if (fresh) {
      absl::StatusOr<int64_t> put = kv_->Put(keys.Alive(node_id), "", lease->id);
      if (!put.ok()) return put.status();
    }
    absl::MutexLock lock(&mu_);
    leases_[NodeKey(run_id, node_id)] = *lease;
    return absl::OkStatus();
  }

  // Renews the lease of a node this client holds one for (Watch waits on
  // behalf of its node too); nothing for one it does not.
  absl::Status RenewIfHeld(const std::string& run_id, const std::string& node_id, const RoundOptions& options) {
    if (LeaseOf(run_id, node_id) == 0) return absl::OkStatus();
    return KeepNodeAlive(RunKeys(options_.prefix, run_id), run_id, node_id, options);
  }

  void DropLease(const std::string& run_id, const std::string& node_id) {
    int64_t id = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = leases_.find(NodeKey(run_id, node_id));
      if (it == leases_.end()) return;
      id = it->second.id;
      leases_.erase(it);
    }
    (void)kv_->LeaseRevoke(id);  // its keys go with it; an expired one is gone already
  }

  const std::shared_ptr<Kv> kv_;
  const EtcdRendezvousOptions options_;
  const Limits limits_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<RendezvousClient> NewEtcdRendezvousClient(std::shared_ptr<Kv> kv,
                                                          const EtcdRendezvousOptions& options) {
  return std::make_unique<EtcdRendezvousClient>(std::move(kv), options);
}

}  // namespace cpptorchrun::rdzv::etcd
