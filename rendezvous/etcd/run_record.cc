#include "rendezvous/etcd/run_record.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }
absl::Time FromMicros(int64_t us) { return absl::FromUnixMicros(us); }

void EncodeJoiners(const std::vector<Joiner>& from,
                   google::protobuf::RepeatedPtrField<record::StoredJoiner>* to) {
  for (const Joiner& j : from) {
    record::StoredJoiner* s = to->Add();
    *s->mutable_node() = j.node;
    s->set_joined_at_us(Micros(j.joined_at));
  }
}

std::vector<Joiner> DecodeJoiners(const google::protobuf::RepeatedPtrField<record::StoredJoiner>& from) {
  std::vector<Joiner> out;
  out.reserve(from.size());
  for (const record::StoredJoiner& s : from) {
    Joiner j;
    j.node = s.node();
    j.joined_at = FromMicros(s.joined_at_us());
    j.last_heard = absl::InfinitePast();
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

std::string EncodeRun(const RunState& state) {
  record::StoredRun r;
  r.set_format(kRunRecordFormat);
  r.set_run_id(state.run_id);
  *r.mutable_options() = RoundOptionsToProto(state.options);
  r.set_version(state.version);
  r.set_highest_round(state.highest_round);
  r.set_active_round(state.active_round);
  r.set_active_ended(state.active_ended);
  r.set_end_reason(state.end_reason);
  for (const ParticipantState& p : state.participants) {
    record::StoredParticipant* s = r.add_participants();
    *s->mutable_participant() = p.participant;
    *s->mutable_node() = p.node;
  }
  r.set_master_addr(state.master_addr);
  r.set_master_port(state.master_port);
  r.set_world_size(state.world_size);
  r.set_forming_round(state.forming_round);
  EncodeJoiners(state.joiners, r.mutable_joiners());
  if (state.min_reached_at.has_value()) {
    r.set_min_reached(true);
    r.set_min_reached_at_us(Micros(*state.min_reached_at));
  }
  EncodeJoiners(state.spares, r.mutable_spares());
  r.set_closed(state.closed);
  r.set_closed_reason(state.closed_reason);
  if (state.closed) r.set_closed_at_us(Micros(state.closed_at));
  r.set_failed_rounds(state.failed_rounds);
  for (const auto& [round, cause] : state.round_failures) {
    record::StoredRoundFailure* f = r.add_round_failures();
    f->set_round(round);
    f->set_failed_at_us(Micros(cause.failed_at));
    f->set_reported_at_us(Micros(cause.reported_at));
    f->set_host(cause.host);
    f->set_node_id(cause.node_id);
    f->set_reason(cause.reason);
  }
  std::string out;
  // Deterministic: equal states give equal bytes (no maps in the message).
  r.SerializeToString(&out);
  return out;
}

absl::StatusOr<RunState> DecodeRun(absl::string_view bytes, absl::string_view key) {
  record::StoredRun r;
  if (!r.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError(absl::StrCat("etcd key '", key, "' does not hold a cpptorchrun run state"));
  }
  if (r.format() != kRunRecordFormat) {
    return absl::DataLossError(absl::StrCat("etcd key '", key, "' holds a run state of format ", r.format(),
                                            "; this build reads format ", kRunRecordFormat));
  }
  absl::StatusOr<RoundOptions> options = RoundOptionsFromProto(r.options(), 1 << 20);
  if (!options.ok()) {
    return absl::DataLossError(absl::StrCat("etcd key '", key, "': ", options.status().message()));
  }
  RunState s = NewRun(r.run_id(), *options);
  s.version = r.version();
  s.highest_round = r.highest_round();
  s.active_round = r.active_round();
  s.active_ended = r.active_ended();
  s.end_reason = r.end_reason();
  for (const record::StoredParticipant& p : r.participants()) {
    ParticipantState ps;
    ps.participant = p.participant();
    ps.node = p.node();
    ps.last_heard = absl::InfinitePast();
    s.participants.push_back(std::move(ps));
  }
  s.master_addr = r.master_addr();
  s.master_port = r.master_port();
  s.world_size = r.world_size();
  s.forming_round = r.forming_round();
  s.joiners = DecodeJoiners(r.joiners());
  if (r.min_reached()) s.min_reached_at = FromMicros(r.min_reached_at_us());
  s.spares = DecodeJoiners(r.spares());
  s.closed = r.closed();
  s.closed_reason = r.closed_reason();
  if (s.closed) s.closed_at = FromMicros(r.closed_at_us());
  s.failed_rounds = r.failed_rounds();
  for (const record::StoredRoundFailure& f : r.round_failures()) {
    if (s.round_failures.size() >= kFailureHistory) break;
    s.round_failures[f.round()] = RoundFailure{FromMicros(f.failed_at_us()), FromMicros(f.reported_at_us()),
                                               f.host(), f.node_id(), f.reason()};
  }
  Reindex(&s);
  return s;
}

void ApplyLiveness(absl::Time now, const Liveness& live, RunState* state) {
  for (std::vector<Joiner>* waiting : {&state->joiners, &state->spares}) {
    for (Joiner& j : *waiting) {
      const bool alive = live.alive.contains(j.node.node_id());
      j.polling = alive;
      j.last_heard = alive ? now : absl::InfinitePast();
    }
  }
  for (ParticipantState& p : state->participants) {
    const std::string& id = p.participant.node_id();
    p.last_heard = live.alive.contains(id) ? now : absl::InfinitePast();
    if (auto it = live.reports.find(id); it != live.reports.end()) {
      p.restart_count = it->second.restart_count();
      p.progress.assign(it->second.progress().begin(), it->second.progress().end());
      p.last_restart = it->second.last_restart();
      p.faults = it->second.faults();
    }
  }
}

}  // namespace cpptorchrun::rdzv::etcd
