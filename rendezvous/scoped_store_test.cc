// Tests of one run's scoped store alone: scopes per round, budgets, reads
// that wait and the writes that answer them, dropped rounds. No server, no
// clock, no thread.
#include "rendezvous/scoped_store.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

class ScopedStoreTest : public ::testing::Test {
 protected:
  Limits limits_;
  int64_t server_bytes_ = 0;
};

TEST_F(ScopedStoreTest, KeysAreScopedToTheirRound) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  ASSERT_TRUE(store.Set(1, {{"k", "one"}}, &answered).ok());
  ASSERT_TRUE(store.Set(2, {{"k", "two"}}, &answered).ok());
  EXPECT_EQ(*store.Find(1, "k"), "one");
  EXPECT_EQ(*store.Find(2, "k"), "two");
  EXPECT_EQ(store.Find(3, "k"), nullptr);
  EXPECT_EQ(store.keys(), 2);
  EXPECT_EQ(store.bytes(), 2 * 1 + 3 + 3);
  EXPECT_EQ(server_bytes_, store.bytes());
  EXPECT_TRUE(answered.empty());
}

TEST_F(ScopedStoreTest, ARepeatedNewKeyCountsOnceAndTheLastValueWins) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  ASSERT_TRUE(store.Set(0, {{"k", "a"}, {"k", "bcd"}}, &answered).ok());
  EXPECT_EQ(store.keys(), 1);
  EXPECT_EQ(store.bytes(), 1 + 3);
  EXPECT_EQ(*store.Find(0, "k"), "bcd");
}

TEST_F(ScopedStoreTest, OverABudgetNothingIsSetAndTheErrorNamesTheLimit) {
  limits_.max_keys_per_run = 2;
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  absl::Status full = store.Set(1, {{"a", "1"}, {"b", "2"}, {"c", "3"}}, &answered);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(full.message(), "max_keys_per_run")) << full;
  EXPECT_EQ(store.keys(), 0);
  EXPECT_EQ(store.scopes(), 0) << "a refused write leaves no scope behind";

  limits_.max_keys_per_run = 100;
  limits_.max_store_bytes_per_run = 10;
  EXPECT_TRUE(absl::StrContains(store.Set(1, {{"a", std::string(10, 'x')}}, &answered).message(),
                                "max_store_bytes_per_run"));
  limits_.max_store_bytes_per_run = 100;
  server_bytes_ = 1000;  // the other runs' bytes
  limits_.max_store_bytes = 1005;
  EXPECT_TRUE(absl::StrContains(store.Set(1, {{"a", "123456"}}, &answered).message(),
                                "max_store_bytes"));
  EXPECT_TRUE(store.Set(1, {{"a", "123"}}, &answered).ok());
  EXPECT_EQ(server_bytes_, 1004);
}

TEST_F(ScopedStoreTest, TheServerTallyLosesTheStoresBytesWhenItGoes) {
  server_bytes_ = 7;
  {
    ScopedStore store("run", &limits_, &server_bytes_);
    ScopedStore::Answered answered;
    ASSERT_TRUE(store.Set(0, {{"key", "value"}}, &answered).ok());
    EXPECT_EQ(server_bytes_, 7 + 8);
  }
  EXPECT_EQ(server_bytes_, 7);
}

TEST_F(ScopedStoreTest, AddCountsFromZeroAndRefusesTextAndOverflow) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  EXPECT_EQ(*store.Add(0, "n", 5, &answered), 5);
  EXPECT_EQ(*store.Add(0, "n", -7, &answered), -2);
  EXPECT_EQ(*store.Find(0, "n"), "-2");
  ASSERT_TRUE(store.Set(0, {{"t", "text"}}, &answered).ok());
  EXPECT_EQ(store.Add(0, "t", 1, &answered).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store.Set(0, {{"big", "9223372036854775807"}}, &answered).ok());
  EXPECT_EQ(store.Add(0, "big", 1, &answered).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*store.Find(0, "big"), "9223372036854775807");
}

TEST_F(ScopedStoreTest, CompareSetSwapsOnlyOnAMatch) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  auto absent = store.CompareSet(0, "k", std::string("x"), "y", &answered);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->swapped);
  EXPECT_FALSE(absent->present);
  EXPECT_EQ(store.scopes(), 0);
  auto first = store.CompareSet(0, "k", std::nullopt, "v1", &answered);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->swapped);
  EXPECT_TRUE(first->present);
  EXPECT_EQ(first->value, "v1");
  auto stale = store.CompareSet(0, "k", std::nullopt, "v2", &answered);
  EXPECT_FALSE(stale->swapped);
  EXPECT_TRUE(stale->present);
  EXPECT_EQ(stale->value, "v1");
  auto next = store.CompareSet(0, "k", std::string("v1"), "v2", &answered);
  EXPECT_TRUE(next->swapped);
  EXPECT_EQ(*store.Find(0, "k"), "v2");
}

TEST_F(ScopedStoreTest, DeleteGivesBackTheKeyAndItsBytes) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  ASSERT_TRUE(store.Set(1, {{"k", "v"}}, &answered).ok());
  EXPECT_TRUE(store.Delete(1, "k"));
  EXPECT_FALSE(store.Delete(1, "k"));
  EXPECT_EQ(store.keys(), 0);
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_EQ(store.scopes(), 0);
}

TEST_F(ScopedStoreTest, AReadWaitsKeyByKeyUntilTheWritesCompleteIt) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  ASSERT_TRUE(store.Set(1, {{"a", "1"}}, &answered).ok());
  StoreRead read{.round = 1, .keys = {"a", "b", "c"}};
  EXPECT_FALSE(store.Read(&read));
  EXPECT_EQ(read.waiting_on, "b");
  ASSERT_TRUE(store.Set(1, {{"c", "3"}}, &answered).ok());
  EXPECT_TRUE(answered.empty());
  ASSERT_TRUE(store.Set(2, {{"b", "other round"}}, &answered).ok());
  EXPECT_TRUE(answered.empty());
  ASSERT_TRUE(store.Set(1, {{"b", "2"}}, &answered).ok());
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(answered[0], &read);
  EXPECT_EQ(read.values, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_TRUE(read.waiting_on.empty());
}

TEST_F(ScopedStoreTest, AReadOfPresentKeysIsAnsweredAtOnce) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  ASSERT_TRUE(store.Set(0, {{"a", "1"}}, &answered).ok());
  StoreRead read{.round = 0, .keys = {"a", "a"}};
  EXPECT_TRUE(store.Read(&read));
  EXPECT_EQ(read.values, (std::vector<std::string>{"1", "1"}));
}

TEST_F(ScopedStoreTest, AStoppedReadLeavesNoScopeBehind) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  StoreRead read{.round = 4, .keys = {"never"}};
  EXPECT_FALSE(store.Read(&read));
  EXPECT_EQ(store.scopes(), 1);
  store.StopReading(&read);
  EXPECT_TRUE(read.waiting_on.empty());
  EXPECT_EQ(store.scopes(), 0);
  store.StopReading(&read);  // no-op
  ASSERT_TRUE(store.Set(4, {{"never", "now"}}, &answered).ok());
  EXPECT_TRUE(answered.empty()) << "a stopped read is not answered";
}

TEST_F(ScopedStoreTest, DroppingOldRoundsHandsBackTheirReadersNoLongerWaiting) {
  ScopedStore store("run", &limits_, &server_bytes_);
  ScopedStore::Answered answered;
  ASSERT_TRUE(store.Set(0, {{"run", "kept"}}, &answered).ok());
  ASSERT_TRUE(store.Set(1, {{"old", "x"}}, &answered).ok());
  ASSERT_TRUE(store.Set(3, {{"new", "y"}}, &answered).ok());
  // A reader in a scope that holds no key (the case that once freed a
  // scope twice) and one in a scope with keys.
  StoreRead empty_scope{.round = 2, .keys = {"never"}};
  StoreRead full_scope{.round = 1, .keys = {"never"}};
  ASSERT_FALSE(store.Read(&empty_scope));
  ASSERT_FALSE(store.Read(&full_scope));
  std::vector<StoreRead*> dropped = store.DropRoundsBefore(3);
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_TRUE(empty_scope.waiting_on.empty());
  EXPECT_TRUE(full_scope.waiting_on.empty());
  store.StopReading(&empty_scope);  // what the service does next: a no-op
  EXPECT_EQ(store.Find(1, "old"), nullptr);
  EXPECT_EQ(*store.Find(0, "run"), "kept");
  EXPECT_EQ(*store.Find(3, "new"), "y");
  EXPECT_EQ(store.keys(), 2);
  EXPECT_EQ(store.bytes(), 3 + 4 + 3 + 1);
  EXPECT_EQ(store.scopes(), 2);
}

TEST_F(ScopedStoreTest, CheckRoundRefusesRoundsTwoBehind) {
  ScopedStore store("run", &limits_, &server_bytes_);
  EXPECT_TRUE(store.CheckRound(1, 0).ok());
  EXPECT_TRUE(store.CheckRound(0, 9).ok());
  EXPECT_TRUE(store.CheckRound(8, 9).ok());
  absl::Status over = store.CheckRound(7, 9);
  EXPECT_EQ(over.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(over.message(), "round 7 of run 'run' is over")) << over;
}

}  // namespace
}  // namespace cpptorchrun::rdzv
