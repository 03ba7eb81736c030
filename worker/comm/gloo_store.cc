// GlooStore: forwards to rdzv::Store, turning statuses into Gloo's exceptions.
#include "worker/comm/gloo_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/common/error.h"

namespace cpptorchrun::worker {

GlooStore::GlooStore(rdzv::Store* store, std::string prefix, absl::Duration timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw ::gloo::IoException(absl::StrCat("rendezvous store set ", prefix_, key, ": ",
                                           status.ToString()));
  }
}

std::vector<char> GlooStore::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_->Get(prefix_ + key, timeout_);
  if (!value.ok()) {
    throw ::gloo::IoException(absl::StrCat("rendezvous store get ", prefix_, key, ": ",
                                           value.status().ToString()));
  }
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(prefix_ + key);
  absl::Status waited = WaitForKeys(*store_, full, absl::Milliseconds(timeout.count()));
  if (!waited.ok()) {
    throw ::gloo::IoException(absl::StrCat("rendezvous store wait for ", keys.size(),
                                           " keys under ", prefix_, ": ", waited.ToString()));
  }
}

absl::Status WaitForKeys(rdzv::Store& store, const std::vector<std::string>& keys,
                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value =
        store.Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!value.ok()) return value.status();
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::worker
