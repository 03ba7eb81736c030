// Smoke test: spdlog (with the system fmt) formats a line into a sink.
#include <memory>
#include <sstream>

#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

TEST(SpdlogSmoke, WritesFormattedLine) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("smoke", sink);
  logger.set_pattern("[%l] %v");
  logger.info("rank {} of {}", 1, 4);
  logger.debug("hidden at the default level");
  logger.flush();
  EXPECT_EQ(out.str(), "[info] rank 1 of 4\n");
}
