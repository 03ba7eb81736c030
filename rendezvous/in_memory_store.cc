// The in-memory Store: a mutex-guarded map in this process, whose waiting
// reads (Get, MultiGet) block on the mutex's condition with a deadline.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"

namespace cpptorchrun::rdzv {
namespace {

class InMemoryStore final : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    data_[key] = value;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    absl::StatusOr<std::vector<std::string>> values = MultiGet({key}, timeout);
    if (!values.ok()) return values.status();
    return std::move((*values)[0]);
  }

  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    absl::MutexLock lock(&mu_);
    int64_t current = 0;
    auto it = data_.find(key);
    if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
      return absl::FailedPreconditionError(
          absl::StrCat("Add: key '", key, "' holds a value that is not a decimal integer"));
    }
    current += delta;
    data_[key] = absl::StrCat(current);
    return current;
  }

  absl::StatusOr<std::string> CompareSet(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired, bool* swapped) override {
    absl::MutexLock lock(&mu_);
    auto it = data_.find(key);
    bool match = expected.has_value() ? (it != data_.end() && it->second == *expected)
                                      : (it == data_.end());
    if (swapped != nullptr) *swapped = match;
    if (match) {
      data_[key] = desired;
      return desired;
    }
    return it == data_.end() ? std::string() : it->second;
  }

  absl::StatusOr<bool> Delete(const std::string& key) override {
    absl::MutexLock lock(&mu_);
    return data_.erase(key) > 0;
  }

  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto all_present = [this, &keys]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const std::string& key : keys) {
        if (data_.find(key) == data_.end()) return false;
      }
      return true;
    };
    if (!all_present()) {
      if (timeout <= absl::ZeroDuration()) {
        return absl::NotFoundError(absl::StrCat("key '", FirstMissing(keys), "' is not set"));
      }
      absl::Condition ready(&all_present);
      if (!mu_.AwaitWithTimeout(ready, timeout)) {
        return absl::DeadlineExceededError(absl::StrCat("key '", FirstMissing(keys),
                                                        "' was not set within ",
                                                        absl::FormatDuration(timeout)));
      }
    }
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (const std::string& key : keys) values.push_back(data_.at(key));
    return values;
  }

  absl::Status MultiSet(
      const std::vector<std::pair<std::string, std::string>>& entries) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, value] : entries) data_[key] = value;
    return absl::OkStatus();
  }

 private:
  std::string FirstMissing(const std::vector<std::string>& keys)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (data_.find(key) == data_.end()) return key;
    }
    return std::string();
  }

  absl::Mutex mu_;
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Store> NewInMemoryStore() { return std::make_unique<InMemoryStore>(); }

}  // namespace cpptorchrun::rdzv
