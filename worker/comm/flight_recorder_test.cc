// The flight recorder numbers each collective in issue order, knows which
// have finished (a Work's first Wait), keeps only the newest records, and
// passes every call through to the communicator it wraps.
#include "worker/comm/flight_recorder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/recording_comm.h"

namespace cpptorchrun::worker {
namespace {

TEST(FlightRecorder, NumbersCollectivesInIssueOrderAndKnowsWhichFinished) {
  std::vector<std::string> calls;
  RecordingCommunicator inner([&calls](const std::string& c) { calls.push_back(c); });
  FlightRecorder recorder;
  std::unique_ptr<Communicator> comm = NewFlightRecordedCommunicator(&inner, &recorder);
  EXPECT_EQ(recorder.Progress().issued, 0);
  float grads[4] = {1, 2, 3, 4};
  std::shared_ptr<Work> first = comm->AllReduceAsync(grads, 4, DType::kFloat32, ReduceOp::kAverage);
  std::shared_ptr<Work> second = comm->BroadcastAsync(grads, 2, DType::kFloat32, 0);
  CollectiveProgress p = recorder.Progress();
  EXPECT_EQ(p.issued, 2);
  EXPECT_EQ(p.finished, 0);
  EXPECT_EQ(p.kind, "broadcast");
  ASSERT_TRUE(second->Wait().ok());
  ASSERT_TRUE(second->Wait().ok());  // a second Wait finishes nothing twice
  EXPECT_EQ(recorder.Progress().finished, 1);
  ASSERT_TRUE(first->Wait().ok());
  ASSERT_TRUE(comm->Barrier().ok());
  p = recorder.Progress();
  EXPECT_EQ(p.issued, 3);
  EXPECT_EQ(p.finished, 3);
  std::vector<CollectiveRecord> records = recorder.Records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].seq, 1);
  EXPECT_EQ(records[0].kind, "allreduce");
  EXPECT_EQ(records[0].bytes, 16);
  EXPECT_EQ(records[1].bytes, 8);
  EXPECT_EQ(records[2].kind, "barrier");
  for (const CollectiveRecord& r : records) EXPECT_GE(r.finished, r.issued) << r.seq;
  EXPECT_EQ(calls, (std::vector<std::string>{"allreduce 4", "broadcast 2", "barrier"}));
  EXPECT_EQ(comm->backend(), "recording");
}

TEST(FlightRecorder, KeepsOnlyTheNewestRecords) {
  FlightRecorder recorder(/*capacity=*/3);
  for (int i = 0; i < 10; ++i) recorder.Issue("allreduce", 4);
  recorder.Finish(1);  // long gone from the records: counted all the same
  std::vector<CollectiveRecord> records = recorder.Records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records.front().seq, 8);
  EXPECT_EQ(records.back().seq, 10);
  EXPECT_EQ(recorder.Progress().issued, 10);
  EXPECT_EQ(recorder.Progress().finished, 1);
}

}  // namespace
}  // namespace cpptorchrun::worker
