// Tests of line splitting and of the multiplexer over real pipes: whole
// prefixed lines on the console, raw bytes in files, tails flushed at EOF.
#include "launcher/workers/log_mux.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(SplitLines, WholeLinesKeepTail) {
  std::string partial, out;
  SplitLines("a\nbb", "[p]:", 100, &partial, &out);
  EXPECT_EQ(out, "[p]:a\n");
  EXPECT_EQ(partial, "bb");
  out.clear();
  SplitLines("b\n\nc", "[p]:", 100, &partial, &out);
  EXPECT_EQ(out, "[p]:bbb\n[p]:\n");
  EXPECT_EQ(partial, "c");
}

TEST(SplitLines, OverlongLinesAreCut) {
  std::string partial, out;
  SplitLines(std::string(25, 'x'), ">", 10, &partial, &out);
  EXPECT_EQ(out, ">xxxxxxxxxx\n>xxxxxxxxxx\n");
  EXPECT_EQ(partial, "xxxxx");
  out.clear();
  SplitLines(std::string(10, 'y') + "\n", ">", 10, &partial, &out);
  EXPECT_EQ(out, ">xxxxxyyyyy\n>yyyyy\n");
  EXPECT_EQ(partial, "");
}

std::string Render(const std::vector<std::string>& reads, ConsoleLine* line) {
  std::string out;
  for (const std::string& r : reads) RenderConsole(r, "[p]:", 100, line, &out);
  return out;
}

TEST(RenderConsole, PlainLinesAsSplitLines) {
  ConsoleLine line;
  EXPECT_EQ(Render({"a\nbb", "b\n\nc"}, &line), "[p]:a\n[p]:bbb\n[p]:\n");
  EXPECT_EQ(line.text, "c");
  std::string out;
  FinishConsole("[p]:", &line, &out);
  EXPECT_EQ(out, "[p]:c\n");
}

TEST(RenderConsole, AProgressBarIsDrawnAsItGoesNotHeldUntilItsNewline) {
  // tqdm: each update starts with \r; the bar's line ends with \n.
  ConsoleLine line;
  EXPECT_EQ(Render({"\r 10%|#  |"}, &line), "\r[p]: 10%|#  |");
  EXPECT_EQ(Render({"\r 20%|## |", "\r 30%"}, &line), "\r[p]: 20%|## |\r[p]: 30%");
  EXPECT_EQ(Render({"|###|\n", "next\n"}, &line), "\r[p]: 30%|###|\n[p]:next\n");
  // Text before a carriage return is shown too ("Loading...\rDone").
  line = ConsoleLine{};
  EXPECT_EQ(Render({"Loading...\rDone      \n"}, &line), "[p]:Loading...\r[p]:Done      \n");
}

TEST(RenderConsole, CrlfIsALineEndEvenAcrossReads) {
  ConsoleLine line;
  EXPECT_EQ(Render({"dos\r\nline\r", "\nend\r", "\r"}, &line), "[p]:dos\n[p]:line\n[p]:end");
  EXPECT_TRUE(line.pending_cr);
  EXPECT_EQ(Render({"x\n"}, &line), "\r[p]:x\n");
}

TEST(RenderConsole, OverlongSegmentsAreCut) {
  ConsoleLine line;
  std::string out;
  RenderConsole(std::string(25, 'x'), ">", 10, &line, &out);
  EXPECT_EQ(out, ">xxxxxxxxxx\n>xxxxxxxxxx\n");
  EXPECT_EQ(line.text, "xxxxx");
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(t ? t : "/tmp", "/logmux_XXXXXX");
  return mkdtemp(dir.data());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LogMux, TwoWritersNeverShareALine) {
  std::string dir = TempDir();
  std::string console = dir + "/console";
  int console_fd = open(console.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  ASSERT_GE(console_fd, 0);
  const int kLines = 2000;
  {
    LogMux mux;
    int a[2], b[2];
    ASSERT_EQ(pipe(a), 0);
    ASSERT_EQ(pipe(b), 0);
    ASSERT_TRUE(mux.Add(a[0], {"[r0]:", console_fd, dir + "/a.log"}).ok());
    ASSERT_TRUE(mux.Add(b[0], {"[r1]:", console_fd, ""}).ok());
    auto writer = [kLines](int fd, char c) {
      // Writes lines in odd-sized pieces, so lines straddle reads.
      std::string all;
      for (int i = 0; i < kLines; ++i) all += absl::StrCat(std::string(i % 97, c), "#", i, "\n");
      all += "tail-without-newline";
      for (size_t off = 0; off < all.size(); off += 333) {
        WriteAll(fd, absl::string_view(all).substr(off, 333));
      }
      close(fd);
    };
    std::thread t1(writer, a[1], 'a');
    std::thread t2(writer, b[1], 'b');
    t1.join();
    t2.join();
    EXPECT_TRUE(mux.WaitDrained(absl::Now() + absl::Seconds(30)));
  }
  close(console_fd);
  std::vector<std::string> lines = absl::StrSplit(ReadFile(console), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u * (kLines + 1));
  int seen_a = 0, seen_b = 0;
  for (const std::string& line : lines) {
    ASSERT_TRUE(line.rfind("[r0]:", 0) == 0 || line.rfind("[r1]:", 0) == 0) << line;
    char c = line[2] == '0' ? 'a' : 'b';
    std::string body = line.substr(5);
    if (body == "tail-without-newline") continue;
    // The body is c repeated, '#', the number: nothing of the other stream.
    size_t hash = body.find('#');
    ASSERT_NE(hash, std::string::npos) << line;
    EXPECT_EQ(body.find_first_not_of(c), hash) << line;
    (c == 'a' ? seen_a : seen_b)++;
  }
  EXPECT_EQ(seen_a, kLines);
  EXPECT_EQ(seen_b, kLines);
  // The file holds the raw, unprefixed bytes.
  std::string file = ReadFile(dir + "/a.log");
  EXPECT_EQ(file.rfind("#0\n", 0), 0u);
  EXPECT_NE(file.find("tail-without-newline"), std::string::npos);
  EXPECT_EQ(file.find("[r0]"), std::string::npos);
}

TEST(StreamTail, KeepsTheLastBytes) {
  StreamTail tail;
  tail.Append("abc");
  tail.Append(std::string(StreamTail::kMaxBytes - 2, 'x'));  // one byte too many
  EXPECT_EQ(tail.Text().size(), StreamTail::kMaxBytes);
  EXPECT_EQ(tail.Text().substr(0, 2), "bc");
  tail.Append(std::string(StreamTail::kMaxBytes + 5, 'y') + "z");
  EXPECT_EQ(tail.Text(), std::string(StreamTail::kMaxBytes - 1, 'y') + "z");
  EXPECT_FALSE(tail.WaitClosed(absl::Now()));
}

TEST(LogMux, ATailHoldsWhatTheStreamSaidAndClosesAtItsEnd) {
  std::string dir = TempDir();
  auto tail = std::make_shared<StreamTail>();
  LogMux mux;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  StreamSink sink{"[r0]:", -1, dir + "/err.log"};
  sink.tail = tail;
  ASSERT_TRUE(mux.Add(p[0], sink).ok());
  WriteAll(p[1], "Fatal Python error: Aborted\n\nCurrent thread");
  close(p[1]);
  ASSERT_TRUE(tail->WaitClosed(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(tail->Text(), "Fatal Python error: Aborted\n\nCurrent thread");
  EXPECT_EQ(ReadFile(dir + "/err.log"), tail->Text());
}

TEST(LogMux, ATailOfAStreamThatCannotBeLoggedIsClosed) {
  auto tail = std::make_shared<StreamTail>();
  LogMux mux;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  StreamSink sink{"[r0]:", -1, "/nonexistent-dir/err.log"};
  sink.tail = tail;
  EXPECT_FALSE(mux.Add(p[0], sink).ok());
  EXPECT_TRUE(tail->WaitClosed(absl::Now()));
  close(p[1]);
}

TEST(LogMux, DuplicateFiltersCopyMatchingLinesOfEveryRankToOneFile) {
  std::string dir = TempDir();
  {
    LogMux mux;
    int a[2], b[2];
    ASSERT_EQ(pipe(a), 0);
    ASSERT_EQ(pipe(b), 0);
    StreamSink sa{"[r0]:", -1, ""};
    sa.duplicate_filters = {"apple", "orange"};
    sa.duplicate_path = dir + "/filtered_stdout.log";
    StreamSink sb = sa;
    sb.prefix = "[r1]:";
    ASSERT_TRUE(mux.Add(a[0], sa).ok());
    ASSERT_TRUE(mux.Add(b[0], sb).ok());
    WriteAll(a[1], "an apple\nno fruit\nan or");
    WriteAll(a[1], "ange\n");
    WriteAll(b[1], "pear\nlast apple without newline");
    close(a[1]);
    close(b[1]);
    EXPECT_TRUE(mux.WaitDrained(absl::Now() + absl::Seconds(30)));
  }
  std::vector<std::string> lines = absl::StrSplit(ReadFile(dir + "/filtered_stdout.log"), '\n',
                                                  absl::SkipEmpty());
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[r0]:an apple", "[r0]:an orange",
                                             "[r1]:last apple without newline"}));
}

TEST(LogMux, UnwritableLogFileIsAnError) {
  LogMux mux;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  auto st = mux.Add(p[0], {"x", -1, "/nonexistent-dir/x/y.log"});
  EXPECT_FALSE(st.ok());
  close(p[1]);
  EXPECT_TRUE(mux.WaitDrained(absl::Now() + absl::Seconds(5)));
}

TEST(LogMux, DrainGivesUpOnAHeldPipe) {
  LogMux mux;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_TRUE(mux.Add(p[0], {"x", -1, ""}).ok());
  // Nobody closes p[1]: draining must end at the deadline.
  EXPECT_FALSE(mux.WaitDrained(absl::Now() + absl::Milliseconds(50)));
  close(p[1]);
}

}  // namespace
}  // namespace cpptorchrun::launcher
