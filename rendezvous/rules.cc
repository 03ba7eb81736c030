// The rendezvous round rules (see rules.h).
#include "rendezvous/rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace cpptorchrun::rdzv {
namespace {

absl::StatusOr<absl::Duration> SecondsField(const char* name, double seconds,
                                            absl::Duration fallback) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("run option ", name, " must be a finite number of seconds >= 0, got ",
                     seconds));
  }
  if (seconds == 0) return fallback;
  return absl::Seconds(seconds);
}

void ReindexJoiners(RunState* state) {
  state->joiner_index.clear();
  for (size_t i = 0; i < state->joiners.size(); ++i) {
    state->joiner_index[state->joiners[i].node.node_id()] = i;
  }
}

void ReindexParticipants(RunState* state) {
  state->participant_index.clear();
  for (size_t i = 0; i < state->participants.size(); ++i) {
    state->participant_index[state->participants[i].participant.node_id()] = i;
  }
}

bool IsParticipant(const RunState& state, const std::string& node_id) {
  return state.participant_index.contains(node_id);
}

bool StandingRound(const RunState& state) {
  return !state.closed && state.active_round > 0 && !state.active_ended;
}

// Keeps min_reached_at in step with the number of joiners.
void UpdateMinReached(absl::Time now, RunState* state) {
  if (state->forming_round != 0 && !state->joiners.empty() &&
      static_cast<int>(state->joiners.size()) >= NodesNeeded(state->joiners, state->options)) {
    if (!state->min_reached_at.has_value()) state->min_reached_at = now;
  } else {
    state->min_reached_at.reset();
  }
}

void EnsureForming(RunState* state) {
  if (state->forming_round != 0) return;
  state->forming_round = std::max(state->highest_round, state->active_round) + 1;
  state->highest_round = state->forming_round;
  state->joiners.clear();
  state->joiner_index.clear();
  state->min_reached_at.reset();
}

// Whether a forming round with `living` joiners, needing `needed`, completes.
bool ShouldComplete(absl::Time now, int living, int needed,
                    const std::optional<absl::Time>& min_reached_at, const RoundOptions& options,
                    std::string* reason) {
  if (living == 0) return false;
  if (living >= options.max_nodes) {
    *reason = absl::StrCat("max_nodes (", options.max_nodes, ") joined");
    return true;
  }
  if (living >= needed && min_reached_at.has_value() &&
      now >= *min_reached_at + options.last_call_timeout) {
    *reason = absl::StrCat(living, " nodes joined (min_nodes ", options.min_nodes,
                           ") and the last call of ",
                           absl::FormatDuration(options.last_call_timeout), " passed");
    return true;
  }
  return false;
}

void RemoveJoiners(RunState* state, const std::vector<std::string>& node_ids) {
  if (node_ids.empty()) return;
  std::vector<Joiner> kept;
  kept.reserve(state->joiners.size());
  for (Joiner& j : state->joiners) {
    if (std::find(node_ids.begin(), node_ids.end(), j.node.node_id()) == node_ids.end()) {
      kept.push_back(std::move(j));
    }
  }
  state->joiners = std::move(kept);
  ReindexJoiners(state);
}

// The one liveness rule: a member is dead once it has been silent past the
// keep-alive deadline (a joiner or spare polling its join is heard by the
// poll, so it cannot be silent).
absl::Time SilentAt(absl::Time last_heard, const RoundOptions& options) {
  return last_heard + options.KeepAliveDeadline();
}
bool Silent(absl::Time now, absl::Time last_heard, const RoundOptions& options) {
  return now > SilentAt(last_heard, options);
}
bool Silent(absl::Time now, const Joiner& j, const RoundOptions& options) {
  return !j.polling && Silent(now, j.last_heard, options);
}

}  // namespace

absl::StatusOr<RoundOptions> RoundOptionsFromProto(const v1::RunOptions& proto,
                                                   int max_nodes_limit) {
  RoundOptions options;
  options.min_nodes = proto.min_nodes();
  options.max_nodes = proto.max_nodes() == 0 ? proto.min_nodes() : proto.max_nodes();
  if (options.min_nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("run option min_nodes must be >= 1, got ", proto.min_nodes()));
  }
  if (options.max_nodes < options.min_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("run option max_nodes (", proto.max_nodes(),
                                                   ") is below min_nodes (", proto.min_nodes(),
                                                   ")"));
  }
  if (options.max_nodes > max_nodes_limit) {
    return absl::InvalidArgumentError(absl::StrCat("run option max_nodes (", options.max_nodes,
                                                   ") exceeds the server's limit of ",
                                                   max_nodes_limit, " nodes per run"));
  }
  auto join = SecondsField("join_timeout_s", proto.join_timeout_s(), kDefaultJoinTimeout);
  if (!join.ok()) return join.status();
  // last_call_timeout 0 is meaningful (complete as soon as min have joined)
  // but indistinguishable on the wire from "unset"; negative means zero.
  absl::Duration last_call = kDefaultLastCallTimeout;
  if (!std::isfinite(proto.last_call_timeout_s())) {
    return absl::InvalidArgumentError("run option last_call_timeout_s must be finite");
  }
  if (proto.last_call_timeout_s() > 0) last_call = absl::Seconds(proto.last_call_timeout_s());
  if (proto.last_call_timeout_s() < 0) last_call = absl::ZeroDuration();
  auto close = SecondsField("close_timeout_s", proto.close_timeout_s(), kDefaultCloseTimeout);
  if (!close.ok()) return close.status();
  auto interval = SecondsField("keep_alive_interval_s", proto.keep_alive_interval_s(),
                               kDefaultKeepAliveInterval);
  if (!interval.ok()) return interval.status();
  if (proto.keep_alive_max_attempt() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run option keep_alive_max_attempt must be >= 0, got ", proto.keep_alive_max_attempt()));
  }
  options.join_timeout = *join;
  options.last_call_timeout = last_call;
  options.close_timeout = *close;
  options.keep_alive_interval = *interval;
  options.keep_alive_max_attempt = proto.keep_alive_max_attempt() == 0
                                       ? kDefaultKeepAliveMaxAttempt
                                       : proto.keep_alive_max_attempt();
  options.quarantine_after = proto.quarantine_after() == 0  ? kDefaultQuarantineAfter
                             : proto.quarantine_after() < 0 ? 0
                                                            : proto.quarantine_after();
  auto window = SecondsField("quarantine_window_s", proto.quarantine_window_s(), kDefaultQuarantineWindow);
  if (!window.ok()) return window.status();
  auto cooldown =
      SecondsField("quarantine_cooldown_s", proto.quarantine_cooldown_s(), kDefaultQuarantineCooldown);
  if (!cooldown.ok()) return cooldown.status();
  options.quarantine_window = *window;
  options.quarantine_cooldown = *cooldown;
  if (proto.job_max_restarts() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("run option job_max_restarts must be >= 0, got ", proto.job_max_restarts()));
  }
  options.job_max_restarts = proto.job_max_restarts();
  return options;
}

v1::RunOptions RoundOptionsToProto(const RoundOptions& options) {
  v1::RunOptions proto;
  proto.set_min_nodes(options.min_nodes);
  proto.set_max_nodes(options.max_nodes);
  proto.set_join_timeout_s(absl::ToDoubleSeconds(options.join_timeout));
  proto.set_last_call_timeout_s(absl::ToDoubleSeconds(options.last_call_timeout));
  proto.set_close_timeout_s(absl::ToDoubleSeconds(options.close_timeout));
  proto.set_keep_alive_interval_s(absl::ToDoubleSeconds(options.keep_alive_interval));
  proto.set_keep_alive_max_attempt(options.keep_alive_max_attempt);
  proto.set_quarantine_after(options.quarantine_after > 0 ? options.quarantine_after : -1);
  proto.set_quarantine_window_s(absl::ToDoubleSeconds(options.quarantine_window));
  proto.set_quarantine_cooldown_s(absl::ToDoubleSeconds(options.quarantine_cooldown));
  proto.set_job_max_restarts(options.job_max_restarts);
  return proto;
}

RunState NewRun(const std::string& run_id, const RoundOptions& options) {
  RunState state;
  state.run_id = run_id;
  state.options = options;
  return state;
}

absl::StatusOr<std::vector<v1::Participant>> AssignRanks(
    const std::vector<v1::NodeInfo>& nodes, const std::vector<ParticipantState>& previous) {
  const int size = static_cast<int>(nodes.size());
  std::vector<int> rank_of(size, -1);
  std::vector<bool> taken(size, false);
  for (int i = 0; i < size; ++i) {
    int wanted = nodes[i].static_node_rank();
    if (wanted < 0) continue;
    if (wanted >= size) {
      return absl::InvalidArgumentError(absl::StrCat("node '", nodes[i].node_id(),
                                                     "' asks for node rank ", wanted,
                                                     " but the round has ", size, " nodes"));
    }
    if (taken[wanted]) {
      return absl::InvalidArgumentError(
          absl::StrCat("node rank ", wanted, " is asked for by two nodes"));
    }
    taken[wanted] = true;
    rank_of[i] = wanted;
  }
  // Dynamic nodes in order: survivors by old group rank, then newcomers by id.
  absl::flat_hash_map<std::string, int> old_rank;
  for (const ParticipantState& p : previous) {
    old_rank[p.participant.node_id()] = p.participant.group_rank();
  }
  std::vector<int> dynamic;
  for (int i = 0; i < size; ++i) {
    if (rank_of[i] < 0) dynamic.push_back(i);
  }
  std::sort(dynamic.begin(), dynamic.end(), [&](int a, int b) {
    auto ia = old_rank.find(nodes[a].node_id());
    auto ib = old_rank.find(nodes[b].node_id());
    bool sa = ia != old_rank.end();
    bool sb = ib != old_rank.end();
    if (sa != sb) return sa;
    if (sa) return ia->second < ib->second;
    return nodes[a].node_id() < nodes[b].node_id();
  });
  int next_free = 0;
  for (int i : dynamic) {
    while (taken[next_free]) ++next_free;
    taken[next_free] = true;
    rank_of[i] = next_free;
  }
  std::vector<int> by_rank(size);
  for (int i = 0; i < size; ++i) by_rank[rank_of[i]] = i;
  std::vector<v1::Participant> out;
  out.reserve(size);
  int64_t offset = 0;
  for (int rank = 0; rank < size; ++rank) {
    const v1::NodeInfo& node = nodes[by_rank[rank]];
    if (offset + node.local_world_size() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the round's world size would exceed ", std::numeric_limits<int32_t>::max(), " ranks"));
    }
    v1::Participant p;
    p.set_node_id(node.node_id());
    p.set_host(node.host());
    p.set_group_rank(rank);
    p.set_local_world_size(node.local_world_size());
    p.set_rank_offset(static_cast<int32_t>(offset));
    offset += node.local_world_size();
    out.push_back(std::move(p));
  }
  return out;
}

int NodesNeeded(const std::vector<Joiner>& joiners, const RoundOptions& options) {
  int needed = options.min_nodes;
  for (const Joiner& j : joiners) needed = std::max(needed, j.node.static_node_rank() + 1);
  return needed;
}

FormingDecision DecideForming(absl::Time now, const RunState& state) {
  FormingDecision decision;
  if (state.closed || state.forming_round == 0) return decision;
  const RoundOptions& options = state.options;
  // Runs every tick over every joiner: counts only, no copies.
  int living = 0;
  int needed = options.min_nodes;
  for (const Joiner& j : state.joiners) {
    if (Silent(now, j, options)) {
      decision.dead.push_back(j.node.node_id());
    } else {
      ++living;
      needed = std::max(needed, j.node.static_node_rank() + 1);
    }
  }
  std::optional<absl::Time> min_reached = state.min_reached_at;
  if (!decision.dead.empty() && living < needed) min_reached.reset();
  if (ShouldComplete(now, living, needed, min_reached, options, &decision.reason)) {
    decision.complete = true;
    return decision;
  }
  for (const Joiner& j : state.joiners) {
    const bool dead = Silent(now, j, options);
    if (!dead && now >= j.joined_at + options.join_timeout) {
      decision.timed_out.push_back(j.node.node_id());
    }
  }
  if (!decision.timed_out.empty()) {
    decision.reason = absl::StrCat("round ", state.forming_round, " did not complete within ",
                                   absl::FormatDuration(options.join_timeout), ": ", living,
                                   " of min_nodes ", options.min_nodes, " nodes joined");
  } else if (!decision.dead.empty()) {
    decision.reason = absl::StrCat(decision.dead.size(), " joining nodes went silent");
  }
  return decision;
}

std::vector<std::string> FindDeadParticipants(absl::Time now, const RunState& state) {
  std::vector<std::string> dead;
  if (!StandingRound(state)) return dead;
  for (const ParticipantState& p : state.participants) {
    if (Silent(now, p.last_heard, state.options)) {
      dead.push_back(p.participant.node_id());
    }
  }
  return dead;
}

bool IsSpare(const RunState& state, const std::string& node_id) {
  return std::any_of(state.spares.begin(), state.spares.end(),
                     [&](const Joiner& s) { return s.node.node_id() == node_id; });
}

bool NewcomerEndsRound(const RunState& state) {
  return StandingRound(state) &&
         static_cast<int>(state.participants.size()) < state.options.max_nodes;
}

absl::Time NextDeadline(const RunState& state) {
  absl::Time next = absl::InfiniteFuture();
  const RoundOptions& options = state.options;
  if (state.closed) return state.closed_at + options.close_timeout;
  if (StandingRound(state)) {
    for (const ParticipantState& p : state.participants) {
      next = std::min(next, SilentAt(p.last_heard, options));
    }
  }
  if (state.forming_round != 0) {
    if (state.min_reached_at.has_value()) {
      next = std::min(next, *state.min_reached_at + options.last_call_timeout);
    }
    for (const Joiner& j : state.joiners) {
      next = std::min(next, j.joined_at + options.join_timeout);
      if (!j.polling) next = std::min(next, SilentAt(j.last_heard, options));
    }
  }
  for (const Joiner& j : state.spares) {
    if (!j.polling) next = std::min(next, SilentAt(j.last_heard, options));
  }
  return next;
}

int WaitingNodes(const RunState& state) {
  int waiting = static_cast<int>(state.spares.size());
  for (const Joiner& j : state.joiners) {
    if (!state.participant_index.contains(j.node.node_id())) ++waiting;
  }
  return waiting;
}

v1::RunEvent EventFor(const RunState& state, const std::string& node_id, int64_t round) {
  v1::RunEvent event;
  event.set_version(state.version);
  event.set_current_round(state.active_round);
  event.set_round_current(StandingRound(state) && round == state.active_round &&
                          IsParticipant(state, node_id));
  event.set_waiting_nodes(WaitingNodes(state));
  event.set_run_closed(state.closed);
  if (state.closed) {
    event.set_reason(absl::StrCat("run '", state.run_id, "' closed: ", state.closed_reason));
  } else if (state.active_round > 0 && state.active_ended) {
    event.set_reason(state.end_reason);
  } else if (round != state.active_round) {
    event.set_reason(absl::StrCat("round ", round, " is over; the current round is ",
                                  state.active_round));
  } else if (!IsParticipant(state, node_id)) {
    event.set_reason(absl::StrCat("node '", node_id, "' is not in round ", state.active_round));
  } else if (event.waiting_nodes() > 0) {
    event.set_reason(absl::StrCat(event.waiting_nodes(), " nodes wait to join"));
  }
  return event;
}

std::optional<v1::Assignment> AssignmentFor(const RunState& state, const std::string& node_id,
                                            int max_participants) {
  auto it = state.participant_index.find(node_id);
  if (state.active_round == 0 || it == state.participant_index.end()) return std::nullopt;
  v1::Assignment a;
  a.set_round(state.active_round);
  const v1::Participant& me = state.participants[it->second].participant;
  a.set_group_rank(me.group_rank());
  a.set_group_world_size(static_cast<int32_t>(state.participants.size()));
  a.set_rank_offset(me.rank_offset());
  if (static_cast<int>(state.participants.size()) <= max_participants) {
    for (const ParticipantState& p : state.participants) *a.add_participants() = p.participant;
  }
  a.set_world_size(state.world_size);
  a.set_master_addr(state.master_addr);
  a.set_master_port(state.master_port);
  return a;
}

void FillRunStatus(absl::Time now, const RunState& state, size_t max_nodes,
                   v1::RunStatusResponse* response) {
  response->set_run_id(state.run_id);
  *response->mutable_options() = RoundOptionsToProto(state.options);
  response->set_round(state.active_round);
  response->set_version(state.version);
  response->set_closed_reason(state.closed_reason);
  response->set_state(state.closed                                      ? v1::RunStatusResponse::CLOSED
                      : (state.active_round > 0 && !state.active_ended) ? v1::RunStatusResponse::ACTIVE
                                                                        : v1::RunStatusResponse::FORMING);
  for (const ParticipantState& p : state.participants) {
    if (static_cast<size_t>(response->nodes_size()) >= max_nodes) break;
    v1::NodeStatus* node = response->add_nodes();
    *node->mutable_participant() = p.participant;
    node->set_heartbeat_age_ms(
        p.last_heard == absl::InfinitePast() ? -1 : absl::ToInt64Milliseconds(now - p.last_heard));
    node->set_restart_count(p.restart_count);
    for (const v1::RankProgress& r : p.progress) *node->add_progress() = r;
    if (!p.last_restart.cause().empty()) *node->mutable_last_restart() = p.last_restart;
    if (p.faults.ByteSizeLong() > 0) *node->mutable_faults() = p.faults;
  }
  for (const std::vector<Joiner>* waiting : {&state.joiners, &state.spares}) {
    for (const Joiner& j : *waiting) {
      if (static_cast<size_t>(response->waiting_size()) >= max_nodes) break;
      *response->add_waiting() = j.node;
    }
  }  for (const Quarantine& q : Quarantined(now, state)) {
    if (static_cast<size_t>(response->quarantined_size()) >= max_nodes) break;
    v1::QuarantinedHost* h = response->add_quarantined();
    h->set_host(q.host);
    h->set_failures(q.failures);
    h->set_remaining_ms(absl::ToInt64Milliseconds(q.until - now));
    h->set_reason(q.reason);
  }
}

bool NoteFailure(absl::Time now, RunState* state, const v1::NodeInfo& node,
                 const v1::NodeFailure& failure) {
  if (failure.round() <= 0 || failure.round() > state->highest_round || failure.failed_at_unix_us() <= 0) {
    return false;
  }
  const absl::Time failed_at = absl::FromUnixMicros(failure.failed_at_unix_us());
  auto [it, first] = state->round_failures.try_emplace(failure.round());
  RoundFailure& cause = it->second;
  if (!first && (failed_at >= cause.failed_at || cause.node_id == node.node_id())) return false;
  if (first) {
    cause.reported_at = now;
    ++state->failed_rounds;
  }
  cause.failed_at = failed_at;
  cause.host = node.host();
  cause.node_id = node.node_id();
  cause.reason = failure.reason().substr(0, 256);
  while (state->round_failures.size() > kFailureHistory) {
    state->round_failures.erase(state->round_failures.begin());
  }
  ++state->version;
  return true;
}

std::optional<std::string> JobRestartsExhausted(const RunState& state) {
  const int budget = state.options.job_max_restarts;
  if (budget <= 0 || state.failed_rounds <= budget) return std::nullopt;
  return absl::StrCat("the job's restart budget is spent: worker failures ended ", state.failed_rounds,
                      " rounds (job_max_restarts ", budget, ")");
}

std::optional<Quarantine> QuarantineOf(absl::Time now, const RunState& state, const std::string& host) {
  const RoundOptions& o = state.options;
  if (o.quarantine_after <= 0 || o.min_nodes >= o.max_nodes) return std::nullopt;
  std::vector<const RoundFailure*> caused;
  for (const auto& [round, cause] : state.round_failures) {
    if (cause.host == host) caused.push_back(&cause);
  }
  std::sort(caused.begin(), caused.end(),
            [](const RoundFailure* a, const RoundFailure* b) { return a->reported_at < b->reported_at; });
  // The latest failure that completes `quarantine_after` within the window
  // sets the end of the cool-down; an earlier one would end it sooner.
  const int n = o.quarantine_after;
  for (int last = static_cast<int>(caused.size()) - 1; last >= n - 1; --last) {
    const absl::Time at = caused[last]->reported_at;
    if (at - caused[last - n + 1]->reported_at > o.quarantine_window) continue;
    const absl::Time until = at + o.quarantine_cooldown;
    if (now >= until) return std::nullopt;
    Quarantine q;
    q.host = host;
    q.until = until;
    for (const RoundFailure* f : caused) q.failures += (f->reported_at > at - o.quarantine_window) ? 1 : 0;
    q.reason = absl::StrCat("its workers failed first in ", q.failures, " rounds within ",
                            absl::FormatDuration(o.quarantine_window), " (quarantine_after ", n,
                            "); the last: ", caused[last]->reason);
    return q;
  }
  return std::nullopt;
}

void FillQuarantined(absl::Time now, const Quarantine& q, const RoundOptions& options,
                     v1::JoinResponse* response) {
  response->set_outcome(v1::JoinResponse::QUARANTINED);
  response->set_detail(absl::StrCat("host ", q.host, " is kept out of the run for ",
                                    absl::FormatDuration(absl::Trunc(q.until - now, absl::Seconds(1))),
                                    " more: ", q.reason));
  const absl::Duration retry = std::max(absl::Milliseconds(1), std::min(q.until - now, options.keep_alive_interval));
  response->set_retry_after_ms(absl::ToInt64Milliseconds(retry));
}

std::vector<Quarantine> Quarantined(absl::Time now, const RunState& state) {
  std::vector<std::string> hosts;
  for (const auto& [round, cause] : state.round_failures) hosts.push_back(cause.host);
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  std::vector<Quarantine> out;
  for (const std::string& host : hosts) {
    if (std::optional<Quarantine> q = QuarantineOf(now, state, host)) out.push_back(*std::move(q));
  }
  return out;
}

void Reindex(RunState* state) {
  ReindexJoiners(state);
  ReindexParticipants(state);
}

void CompleteRound(absl::Time now, RunState* state) {
  // At most max_nodes nodes, and a world size that fits int32: the previous
  // round's participants first (survivors keep their place), then the
  // others in arrival order. The rest wait as spares for the next round.
  std::vector<Joiner> joiners = std::move(state->joiners);
  std::stable_partition(joiners.begin(), joiners.end(), [&](const Joiner& j) {
    return state->participant_index.contains(j.node.node_id());
  });
  std::vector<v1::NodeInfo> nodes;
  nodes.reserve(std::min<size_t>(joiners.size(), state->options.max_nodes));
  int64_t world = 0;
  std::vector<Joiner> left_out;
  for (Joiner& j : joiners) {
    if (static_cast<int>(nodes.size()) < state->options.max_nodes &&
        world + j.node.local_world_size() <= std::numeric_limits<int32_t>::max()) {
      world += j.node.local_world_size();
      nodes.push_back(j.node);
    } else {
      left_out.push_back(std::move(j));
    }
  }
  state->joiners.clear();
  state->joiner_index.clear();
  absl::StatusOr<std::vector<v1::Participant>> ranked = AssignRanks(nodes, state->participants);
  if (!ranked.ok()) {
    // Static ranks are checked as nodes join; should they still not fit,
    // dynamic ranks keep the run going rather than stranding every node.
    for (v1::NodeInfo& n : nodes) n.set_static_node_rank(-1);
    ranked = AssignRanks(nodes, state->participants);
  }
  absl::flat_hash_map<std::string, const v1::NodeInfo*> info;
  for (const v1::NodeInfo& n : nodes) info[n.node_id()] = &n;
  std::vector<ParticipantState> participants;
  participants.reserve(ranked->size());
  for (v1::Participant& p : *ranked) {
    ParticipantState ps;
    ps.node = *info[p.node_id()];
    ps.participant = std::move(p);
    ps.last_heard = now;
    participants.push_back(std::move(ps));
  }
  state->participants = std::move(participants);
  ReindexParticipants(state);
  state->world_size = 0;
  for (const ParticipantState& p : state->participants) {
    state->world_size += p.participant.local_world_size();
  }
  if (!state->participants.empty()) {
    state->master_addr = state->participants[0].node.host();
    state->master_port = state->participants[0].node.free_port();
  }
  state->active_round = state->forming_round;
  state->highest_round = std::max(state->highest_round, state->active_round);
  state->active_ended = false;
  state->end_reason.clear();
  state->forming_round = 0;
  state->joiners.clear();
  state->joiner_index.clear();
  state->min_reached_at.reset();
  for (Joiner& j : left_out) state->spares.push_back(std::move(j));
  ++state->version;
}

void EndRound(absl::Time now, RunState* state, const std::string& reason) {
  if (state->active_ended) return;
  state->active_ended = true;
  state->end_reason = reason;
  EnsureForming(state);
  // Spares fill only the places the surviving participants leave free (in
  // arrival order): a survivor that re-joins is never crowded out, and the
  // round never has more than max_nodes. The others stay spares.
  const int room = std::max(0, state->options.max_nodes - static_cast<int>(state->participants.size()) -
                                   static_cast<int>(state->joiners.size()));
  std::vector<Joiner> still_spare;
  int admitted = 0;
  for (Joiner& spare : state->spares) {
    if (state->joiner_index.contains(spare.node.node_id())) continue;
    if (admitted >= room) {
      still_spare.push_back(std::move(spare));
      continue;
    }
    ++admitted;
    spare.joined_at = now;
    state->joiner_index[spare.node.node_id()] = state->joiners.size();
    state->joiners.push_back(std::move(spare));
  }
  state->spares = std::move(still_spare);
  UpdateMinReached(now, state);
  ++state->version;
}

absl::Status CheckJoin(const RunState& state, const v1::NodeInfo& node, const RoundOptions& options,
                       int64_t last_round) {
  if (state.closed) {
    return absl::FailedPreconditionError(
        absl::StrCat("run '", state.run_id, "' is closed: ", state.closed_reason));
  }
  if (options.min_nodes != state.options.min_nodes ||
      options.max_nodes != state.options.max_nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run '", state.run_id, "' has nnodes ", state.options.min_nodes, ":",
        state.options.max_nodes, " but node '", node.node_id(), "' asks for ", options.min_nodes,
        ":", options.max_nodes));
  }
  if (node.static_node_rank() >= state.options.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("node rank ", node.static_node_rank(),
                                                   " of node '", node.node_id(),
                                                   "' is not below max_nodes ",
                                                   state.options.max_nodes));
  }
  if (last_round < 0 || last_round > kMaxLastRound) {
    return absl::InvalidArgumentError(absl::StrCat("last_round ", last_round, " of node '", node.node_id(),
                                                   "' is outside 0..", kMaxLastRound));
  }
  return absl::OkStatus();
}

namespace {

// Places a node that is neither a joiner nor a spare: as a spare (true)
// when the standing round keeps running or the forming one is full, else
// as a joiner of the forming round (false). FailedPrecondition when its
// static rank is taken.
absl::StatusOr<bool> SeatNewcomer(absl::Time now, RunState* state, const v1::NodeInfo& node) {
  if (node.static_node_rank() >= 0) {
    for (const Joiner& j : state->joiners) {
      if (j.node.static_node_rank() == node.static_node_rank()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "node rank ", node.static_node_rank(), " is already taken by node '",
            j.node.node_id(), "' in run '", state->run_id, "'"));
      }
    }
  }
  bool spare = false;
  if (StandingRound(*state)) {
    if (NewcomerEndsRound(*state)) {
      EndRound(now, state,
               absl::StrCat("node '", node.node_id(), "' waits to join; round ",
                            state->active_round, " has ", state->participants.size(),
                            " of max_nodes ", state->options.max_nodes));
    } else {
      spare = true;
    }
  }
  if (!spare) {
    EnsureForming(state);
    spare = static_cast<int>(state->joiners.size()) >= state->options.max_nodes;
  }
  if (spare) {
    state->spares.push_back(Joiner{node, now, now, false});
  } else {
    state->joiner_index[node.node_id()] = state->joiners.size();
    state->joiners.push_back(Joiner{node, now, now, false});
  }
  ++state->version;
  return spare;
}

// Refreshes a node already waiting (joiner or spare) with its new details;
// false when it is not waiting.
bool RefreshWaiting(absl::Time now, RunState* state, const v1::NodeInfo& node, bool* spare) {
  const std::string& id = node.node_id();
  Joiner* found = nullptr;
  if (auto joiner = state->joiner_index.find(id); joiner != state->joiner_index.end()) {
    found = &state->joiners[joiner->second];
    *spare = false;
  } else {
    auto it = std::find_if(state->spares.begin(), state->spares.end(),
                           [&](const Joiner& s) { return s.node.node_id() == id; });
    if (it == state->spares.end()) return false;
    found = &*it;
    *spare = true;
  }
  found->last_heard = now;
  found->node = node;
  return true;
}

}  // namespace

absl::StatusOr<JoinResult> ApplyJoin(absl::Time now, RunState* state, const v1::NodeInfo& node,
                                     const RoundOptions& options, int64_t last_round,
                                     const v1::NodeFailure& failure) {
  if (absl::Status refused = CheckJoin(*state, node, options, last_round); !refused.ok()) {
    return refused;
  }
  state->highest_round = std::max(state->highest_round, std::min(last_round, kMaxRound - 1));
  const std::string& id = node.node_id();
  JoinResult result;

  if (StandingRound(*state) && IsParticipant(*state, id)) {
    if (last_round < state->active_round) {
      // This node has not seen its assignment yet (a lost answer): repeat it.
      result.outcome = JoinResult::Outcome::kComplete;
      result.assignment = *AssignmentFor(*state, id);
      return result;
    }
    EndRound(now, state, absl::StrCat("node '", id, "' re-joined"));
  }
  if (NoteFailure(now, state, node, failure)) {
    if (std::optional<std::string> spent = JobRestartsExhausted(*state)) {
      ApplyClose(now, state, *spent);
      result.outcome = JoinResult::Outcome::kRunClosed;
      result.closed_reason = *spent;
      return result;
    }
  }
  if (std::optional<Quarantine> q = QuarantineOf(now, *state, node.host())) {
    // Kept out: neither a joiner nor a spare while the cool-down lasts.
    bool changed = false;
    if (state->joiner_index.contains(id)) {
      RemoveJoiners(state, {id});
      UpdateMinReached(now, state);
      changed = true;
    }
    auto spare = std::find_if(state->spares.begin(), state->spares.end(),
                              [&](const Joiner& s) { return s.node.node_id() == id; });
    if (spare != state->spares.end()) {
      state->spares.erase(spare);
      changed = true;
    }
    if (changed) ++state->version;
    result.outcome = JoinResult::Outcome::kQuarantined;
    result.quarantine = *std::move(q);
    return result;
  }

  bool spare = false;
  if (!RefreshWaiting(now, state, node, &spare)) {
    absl::StatusOr<bool> seated = SeatNewcomer(now, state, node);
    if (!seated.ok()) return seated.status();
    spare = *seated;
  }
  if (spare) {
    result.outcome = JoinResult::Outcome::kSpare;
    return result;
  }
  UpdateMinReached(now, state);
  std::string reason;
  if (ShouldComplete(now, static_cast<int>(state->joiners.size()),
                     NodesNeeded(state->joiners, state->options), state->min_reached_at,
                     state->options, &reason)) {
    CompleteRound(now, state);
    result.round_completed = true;
    result.outcome = JoinResult::Outcome::kComplete;
    result.assignment = *AssignmentFor(*state, id);
  }
  return result;
}

TickResult ApplyTick(absl::Time now, RunState* state) {
  TickResult result;
  if (state->closed) return result;
  std::vector<std::string> dead = FindDeadParticipants(now, *state);
  if (!dead.empty()) {
    const ParticipantState& first = state->participants[state->participant_index[dead[0]]];
    result.reason = absl::StrCat(
        "node '", dead[0], "' (", first.node.host(), ") sent no keep-alive for ",
        absl::FormatDuration(now - first.last_heard),
        dead.size() > 1 ? absl::StrCat(" (and ", dead.size() - 1, " more nodes)") : "");
    // The dead are no longer participants: they cannot be waited for, and a
    // re-join brings them back as newcomers.
    std::vector<ParticipantState> living;
    for (ParticipantState& p : state->participants) {
      if (std::find(dead.begin(), dead.end(), p.participant.node_id()) == dead.end()) {
        living.push_back(std::move(p));
      }
    }
    state->participants = std::move(living);
    ReindexParticipants(state);
    EndRound(now, state, result.reason);
    result.round_ended = true;
  }
  size_t spares_before = state->spares.size();
  std::vector<Joiner> spares;
  for (Joiner& s : state->spares) {
    if (Silent(now, s, state->options)) {
      result.dropped.push_back(s.node.node_id());
    } else {
      spares.push_back(std::move(s));
    }
  }
  state->spares = std::move(spares);
  bool changed = spares_before != state->spares.size();

  FormingDecision decision = DecideForming(now, *state);
  if (!decision.dead.empty()) {
    RemoveJoiners(state, decision.dead);
    result.dropped.insert(result.dropped.end(), decision.dead.begin(), decision.dead.end());
    UpdateMinReached(now, state);
    changed = true;
  }
  if (decision.complete) {
    CompleteRound(now, state);
    result.round_completed = true;
    if (result.reason.empty()) result.reason = decision.reason;
  } else if (!decision.timed_out.empty()) {
    RemoveJoiners(state, decision.timed_out);
    result.timed_out = decision.timed_out;
    UpdateMinReached(now, state);
    if (result.reason.empty()) result.reason = decision.reason;
    changed = true;
  }
  if (changed) ++state->version;
  return result;
}

v1::RunEvent ApplyKeepAlive(absl::Time now, RunState* state, const v1::KeepAliveRequest& request,
                            bool trusted) {
  const std::string& id = request.node_id();
  if (!trusted) return EventFor(*state, id, request.assignment().round());
  auto it = state->participant_index.find(id);
  if (StandingRound(*state) && it != state->participant_index.end() &&
      request.assignment().round() == state->active_round) {
    ParticipantState& p = state->participants[it->second];
    p.last_heard = now;
    p.restart_count = request.restart_count();
    // One row per local rank at most: a node reports its own workers.
    const int rows = std::min(request.progress_size(), std::max(0, p.node.local_world_size()));
    p.progress.assign(request.progress().begin(), request.progress().begin() + rows);
    if (request.has_last_restart()) p.last_restart = request.last_restart();
    if (request.has_faults()) p.faults = request.faults();
  }
  auto joiner = state->joiner_index.find(id);
  if (joiner != state->joiner_index.end()) state->joiners[joiner->second].last_heard = now;
  return EventFor(*state, id, request.assignment().round());
}

bool ReRegister(absl::Time now, RunState* state, const v1::KeepAliveRequest& request) {
  const v1::Assignment& a = request.assignment();
  if (state->closed || a.round() <= 0 || a.participants_size() == 0) return false;
  if (a.round() <= state->active_round) return false;
  std::vector<ParticipantState> participants;
  for (const v1::Participant& p : a.participants()) {
    ParticipantState ps;
    ps.participant = p;
    ps.node.set_node_id(p.node_id());
    ps.node.set_host(p.host());
    ps.node.set_local_world_size(p.local_world_size());
    ps.node.set_static_node_rank(-1);
    ps.last_heard = now;
    participants.push_back(std::move(ps));
  }
  std::sort(participants.begin(), participants.end(),
            [](const ParticipantState& x, const ParticipantState& y) {
              return x.participant.group_rank() < y.participant.group_rank();
            });
  state->participants = std::move(participants);
  ReindexParticipants(state);
  state->world_size = a.world_size();
  state->master_addr = a.master_addr();
  state->master_port = a.master_port();
  state->active_round = a.round();
  state->highest_round = std::max(state->highest_round, a.round());
  state->active_ended = false;
  state->end_reason.clear();
  if (state->forming_round != 0) {
    // Nodes joined before this round was re-registered: the round cannot
    // stand, and the forming one must be numbered above it.
    if (state->forming_round <= a.round()) {
      state->forming_round = a.round() + 1;
      state->highest_round = std::max(state->highest_round, state->forming_round);
    }
    state->active_ended = true;
    state->end_reason = absl::StrCat("nodes joined while round ", a.round(),
                                     " was being re-registered after a server restart");
  }
  ++state->version;
  return true;
}

absl::StatusOr<bool> MayReRegister(const std::string& run_id, const v1::Assignment& a,
                                   const RunState* known, int64_t unsigned_round, bool issued,
                                   bool durable_key) {
  if (a.round() <= 0 || a.participants_size() == 0) return false;
  if (issued) return true;
  if (known != nullptr && unsigned_round != 0 && a.round() == unsigned_round) return true;
  if (known != nullptr && a.round() <= known->active_round) return false;
  if (durable_key || (known != nullptr && known->active_round != 0)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "run '", run_id, "': the keep-alive's assignment for round ", a.round(),
        " was not issued by this server (its signature does not verify); rounds change only "
        "through Join"));
  }
  return true;
}

absl::Status ValidateAssignment(const v1::Assignment& a, const std::string& node_id,
                                const RoundOptions& options) {
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("assignment: ", why));
  };
  const int n = a.participants_size();
  if (a.round() < 1 || a.round() > kMaxRound) {
    return bad(absl::StrCat("round ", a.round(), " is outside 1..", kMaxRound));
  }
  if (n < 1 || n > options.max_nodes) {
    return bad(absl::StrCat(n, " participants; the run allows 1..", options.max_nodes));
  }
  if (a.group_world_size() != n) {
    return bad(absl::StrCat("group_world_size ", a.group_world_size(), " is not the ", n, " participants"));
  }
  if (a.master_port() < 0 || a.master_port() > 65535) {
    return bad(absl::StrCat("master_port ", a.master_port(), " is not in 0..65535"));
  }
  std::vector<const v1::Participant*> by_rank(n, nullptr);
  absl::flat_hash_map<std::string, int> ids;
  for (const v1::Participant& p : a.participants()) {
    if (p.group_rank() < 0 || p.group_rank() >= n || by_rank[p.group_rank()] != nullptr) {
      return bad(absl::StrCat("group rank ", p.group_rank(), " is repeated or outside 0..", n - 1));
    }
    if (!ids.emplace(p.node_id(), p.group_rank()).second) return bad("a node id is repeated");
    if (p.local_world_size() < 1) {
      return bad(absl::StrCat("local_world_size ", p.local_world_size(), " is not >= 1"));
    }
    by_rank[p.group_rank()] = &p;
  }
  int64_t offset = 0;
  for (const v1::Participant* p : by_rank) {
    if (p->rank_offset() != offset) {
      return bad(absl::StrCat("rank_offset ", p->rank_offset(), " of group rank ", p->group_rank(),
                              " is not ", offset));
    }
    offset += p->local_world_size();
    if (offset > std::numeric_limits<int32_t>::max()) return bad("the world size overflows");
  }
  if (a.world_size() != offset) {
    return bad(absl::StrCat("world_size ", a.world_size(), " is not the participants' ", offset));
  }
  auto self = ids.find(node_id);
  if (self == ids.end()) return bad("the caller is not among the participants");
  const v1::Participant* me = by_rank[self->second];
  if (a.group_rank() != me->group_rank() || a.rank_offset() != me->rank_offset()) {
    return bad("the caller's group_rank or rank_offset disagrees with the participant list");
  }
  return absl::OkStatus();
}

bool ApplyLeave(absl::Time now, RunState* state, const std::string& node_id,
                const std::string& reason) {
  bool known = false;
  auto it = state->participant_index.find(node_id);
  if (it != state->participant_index.end()) {
    known = true;
    bool standing = StandingRound(*state);
    state->participants.erase(state->participants.begin() + it->second);
    ReindexParticipants(state);
    if (standing) {
      EndRound(now, state, absl::StrCat("node '", node_id, "' left: ", reason));
    }
  }
  if (state->joiner_index.contains(node_id)) {
    known = true;
    RemoveJoiners(state, {node_id});
    UpdateMinReached(now, state);
  }
  auto spare = std::find_if(state->spares.begin(), state->spares.end(),
                            [&](const Joiner& s) { return s.node.node_id() == node_id; });
  if (spare != state->spares.end()) {
    known = true;
    state->spares.erase(spare);
  }
  if (known) ++state->version;
  return known;
}

void ApplyClose(absl::Time now, RunState* state, const std::string& reason) {
  if (state->closed) return;
  state->closed = true;
  state->closed_reason = reason.empty() ? "closed by a client" : reason;
  state->closed_at = now;
  state->active_ended = true;
  state->end_reason = absl::StrCat("run closed: ", state->closed_reason);
  state->forming_round = 0;
  state->joiners.clear();
  state->joiner_index.clear();
  state->spares.clear();
  state->min_reached_at.reset();
  ++state->version;
}

void SetPolling(absl::Time now, RunState* state, const std::string& node_id, bool polling) {
  auto it = state->joiner_index.find(node_id);
  if (it != state->joiner_index.end()) {
    state->joiners[it->second].polling = polling;
    state->joiners[it->second].last_heard = now;
  }
  for (Joiner& s : state->spares) {
    if (s.node.node_id() == node_id) {
      s.polling = polling;
      s.last_heard = now;
    }
  }
}

}  // namespace cpptorchrun::rdzv
