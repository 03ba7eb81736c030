// One run's scoped key-value store (see scoped_store.h).
#include "rendezvous/scoped_store.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::rdzv {

ScopedStore::ScopedStore(std::string run_id, const Limits* limits, int64_t* server_bytes)
    : run_id_(std::move(run_id)), limits_(limits), server_bytes_(server_bytes) {}

ScopedStore::~ScopedStore() { *server_bytes_ -= bytes_; }

absl::Status ScopedStore::CheckRound(int64_t round, int64_t active_round) const {
  if (round > 0 && active_round > 0 && round < active_round - 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("round ", round, " of run '", run_id_,
                     "' is over and its keys were dropped; the current round is ", active_round));
  }
  return absl::OkStatus();
}

ScopedStore::Scope* ScopedStore::ScopeOf(int64_t round) {
  auto it = scopes_.find(round);
  return it == scopes_.end() ? nullptr : &it->second;
}

const ScopedStore::Scope* ScopedStore::ScopeOf(int64_t round) const {
  auto it = scopes_.find(round);
  return it == scopes_.end() ? nullptr : &it->second;
}

const std::string* ScopedStore::Find(int64_t round, absl::string_view key) const {
  const Scope* scope = ScopeOf(round);
  if (scope == nullptr) return nullptr;
  auto it = scope->data.find(key);
  return it == scope->data.end() ? nullptr : &it->second;
}

void ScopedStore::DropIfEmpty(int64_t round) {
  auto it = scopes_.find(round);
  if (it != scopes_.end() && it->second.data.empty() && it->second.waiting.empty()) {
    scopes_.erase(it);
  }
}

absl::Status ScopedStore::Room(int64_t fresh, int64_t more_bytes) const {
  const Limits& l = *limits_;
  if (keys_ + fresh > l.max_keys_per_run) {
    return absl::ResourceExhaustedError(absl::StrCat("run '", run_id_, "' holds ", keys_,
                                                     " keys; the limit (max_keys_per_run) is ",
                                                     l.max_keys_per_run));
  }
  if (more_bytes > 0 && bytes_ + more_bytes > l.max_store_bytes_per_run) {
    return absl::ResourceExhaustedError(absl::StrCat("run '", run_id_, "' holds ", bytes_,
                                                     " bytes of keys and values; the limit "
                                                     "(max_store_bytes_per_run) is ",
                                                     l.max_store_bytes_per_run));
  }
  if (more_bytes > 0 && *server_bytes_ + more_bytes > l.max_store_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the server's store holds ", *server_bytes_,
                                                     " bytes; its budget (max_store_bytes) is ",
                                                     l.max_store_bytes));
  }
  return absl::OkStatus();
}

void ScopedStore::CountBytes(int64_t delta) {
  bytes_ += delta;
  *server_bytes_ += delta;
}

absl::Status ScopedStore::Set(int64_t round, const Entries& entries, Answered* answered) {
  const Scope* existing = ScopeOf(round);
  auto held = [&](absl::string_view key) -> const std::string* {
    if (existing == nullptr) return nullptr;
    auto it = existing->data.find(key);
    return it == existing->data.end() ? nullptr : &it->second;
  };
  // The bytes and keys once every entry is applied (the last value of a key
  // wins; a new key counts once however often it is named).
  absl::flat_hash_map<absl::string_view, absl::string_view> last;
  for (const auto& [key, value] : entries) last[key] = value;
  int64_t fresh = 0;
  int64_t delta = 0;
  for (const auto& [key, value] : last) {
    const std::string* old = held(key);
    if (old == nullptr) ++fresh;
    delta += static_cast<int64_t>(value.size()) -
             (old == nullptr ? -static_cast<int64_t>(key.size()) : static_cast<int64_t>(old->size()));
  }
  if (absl::Status room = Room(fresh, delta); !room.ok()) return room;
  keys_ += fresh;
  CountBytes(delta);
  Scope* scope = &scopes_[round];
  for (const auto& [key, value] : entries) {
    std::string name(key);
    scope->data[name] = std::string(value);
    Wake(scope, name, answered);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ScopedStore::Add(int64_t round, const std::string& key, int64_t delta,
                                         Answered* answered) {
  int64_t value = 0;
  if (const std::string* old = Find(round, key); old != nullptr && !absl::SimpleAtoi(*old, &value)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Add: key '", key, "' holds a value that is not a decimal integer"));
  }
  if ((delta > 0 && value > std::numeric_limits<int64_t>::max() - delta) ||
      (delta < 0 && value < std::numeric_limits<int64_t>::min() - delta)) {
    return absl::OutOfRangeError(absl::StrCat("Add: key '", key, "' holds ", value, "; adding ",
                                              delta, " would overflow int64"));
  }
  value += delta;
  const std::string text = absl::StrCat(value);
  if (absl::Status set = Set(round, {{key, text}}, answered); !set.ok()) return set;
  return value;
}

absl::StatusOr<ScopedStore::Swap> ScopedStore::CompareSet(int64_t round, const std::string& key,
                                                          const std::optional<std::string>& expected,
                                                          const std::string& desired,
                                                          Answered* answered) {
  const std::string* current = Find(round, key);
  const bool match = expected.has_value() ? current != nullptr && *current == *expected
                                          : current == nullptr;
  if (!match) return Swap{false, current != nullptr, current != nullptr ? *current : std::string()};
  if (absl::Status set = Set(round, {{key, desired}}, answered); !set.ok()) return set;
  return Swap{true, true, desired};
}

bool ScopedStore::Delete(int64_t round, absl::string_view key) {
  Scope* scope = ScopeOf(round);
  if (scope == nullptr) return false;
  auto it = scope->data.find(key);
  if (it == scope->data.end()) return false;
  CountBytes(-static_cast<int64_t>(it->first.size() + it->second.size()));
  scope->data.erase(it);
  --keys_;
  DropIfEmpty(round);
  return true;
}

bool ScopedStore::TryAnswer(Scope* scope, StoreRead* read) {
  for (const std::string& key : read->keys) {
    if (!scope->data.contains(key)) {
      read->waiting_on = key;
      scope->waiting[key].push_back(read);
      return false;
    }
  }
  read->values.clear();
  for (const std::string& key : read->keys) read->values.push_back(scope->data.at(key));
  return true;
}

void ScopedStore::Wake(Scope* scope, const std::string& key, Answered* answered) {
  auto it = scope->waiting.find(key);
  if (it == scope->waiting.end()) return;
  std::vector<StoreRead*> readers = std::move(it->second);
  scope->waiting.erase(it);
  for (StoreRead* read : readers) {
    read->waiting_on.clear();
    if (TryAnswer(scope, read)) answered->push_back(read);
  }
}

bool ScopedStore::Read(StoreRead* read) {
  read->values.clear();
  if (read->keys.empty()) return true;
  return TryAnswer(&scopes_[read->round], read);
}

void ScopedStore::StopReading(StoreRead* read) {
  if (read->waiting_on.empty()) return;
  if (Scope* scope = ScopeOf(read->round); scope != nullptr) {
    auto list = scope->waiting.find(read->waiting_on);
    if (list != scope->waiting.end()) {
      std::vector<StoreRead*>& v = list->second;
      v.erase(std::remove(v.begin(), v.end(), read), v.end());
      if (v.empty()) scope->waiting.erase(list);
    }
  }
  read->waiting_on.clear();
  DropIfEmpty(read->round);
}

std::vector<StoreRead*> ScopedStore::DropRoundsBefore(int64_t keep_from) {
  std::vector<StoreRead*> readers;
  for (auto it = scopes_.begin(); it != scopes_.end();) {
    if (it->first == 0 || it->first >= keep_from) {
      ++it;
      continue;
    }
    for (auto& [key, list] : it->second.waiting) {
      for (StoreRead* read : list) {
        read->waiting_on.clear();
        readers.push_back(read);
      }
    }
    keys_ -= static_cast<int64_t>(it->second.data.size());
    for (const auto& [key, value] : it->second.data) {
      CountBytes(-static_cast<int64_t>(key.size() + value.size()));
    }
    it = scopes_.erase(it);
  }
  return readers;
}

}  // namespace cpptorchrun::rdzv
