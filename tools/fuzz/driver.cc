// The fuzz targets' main() for ordinary (gcc) builds and `bazel test`:
// runs LLVMFuzzerTestOneInput over the target's seed corpus, then over
// inputs mutated from it (bit flips, byte changes, inserts, deletes,
// duplicated and spliced ranges) with a fixed pseudo-random seed, within a
// bounded count and time. It is not coverage-guided: that is libFuzzer's
// job (tools/fuzz/run, clang), which runs the same targets for longer. A
// crash (a sanitizer report, an abort, a fault) writes the input that
// caused it to $TEST_UNDECLARED_OUTPUTS_DIR (or the working folder) as
// crash-input, so it can be replayed: `target FILE`.
//
//   target [--corpus DIR] [--runs N] [--seconds S] [--seed K] [FILE...]
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being tried, for the crash handler (read only there).
const std::string* g_current = nullptr;
char g_crash_path[4096] = "crash-input";

void OnCrash(int signo) {
  if (g_current != nullptr) {
    int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!write(fd, g_current->data(), g_current->size());
      close(fd);
    }
    const char msg[] = "fuzz driver: the input that crashed was written to ";
    (void)!write(2, msg, sizeof(msg) - 1);
    (void)!write(2, g_crash_path, strlen(g_crash_path));
    (void)!write(2, "\n", 1);
  }
  signal(signo, SIG_DFL);
  raise(signo);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> ReadCorpus(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str()); d != nullptr) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      out.push_back(ReadFile(dir + "/" + e->d_name));
    }
    closedir(d);
  }
  return out;
}

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : Next() % n; }
};

std::string Mutate(const std::vector<std::string>& corpus, Rng& rng) {
  std::string x = corpus.empty() ? std::string() : corpus[rng.Below(corpus.size())];
  const int edits = 1 + static_cast<int>(rng.Below(4));
  static const uint8_t kInteresting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '\n', '\r', ',', ':', '=', '[', ']', '"',
                                         '{', '}', '-', '\\'};
  for (int e = 0; e < edits; ++e) {
    switch (rng.Below(7)) {
      case 0:  // flip a bit
        if (!x.empty()) x[rng.Below(x.size())] ^= static_cast<char>(1 << rng.Below(8));
        break;
      case 1:  // set a byte
        if (!x.empty()) x[rng.Below(x.size())] = static_cast<char>(kInteresting[rng.Below(sizeof(kInteresting))]);
        break;
      case 2: {  // insert random bytes
        std::string ins(1 + rng.Below(8), '\0');
        for (char& c : ins) c = static_cast<char>(rng.Next());
        x.insert(rng.Below(x.size() + 1), ins);
        break;
      }
      case 3:  // delete a range
        if (!x.empty()) {
          size_t at = rng.Below(x.size());
          x.erase(at, 1 + rng.Below(std::min<size_t>(16, x.size() - at)));
        }
        break;
      case 4:  // duplicate a range
        if (!x.empty() && x.size() < (1 << 16)) {
          size_t at = rng.Below(x.size());
          size_t len = 1 + rng.Below(std::min<size_t>(64, x.size() - at));
          x.insert(rng.Below(x.size() + 1), x.substr(at, len));
        }
        break;
      case 5:  // splice another seed
        if (!corpus.empty()) {
          const std::string& other = corpus[rng.Below(corpus.size())];
          x = x.substr(0, rng.Below(x.size() + 1)) + other.substr(rng.Below(other.size() + 1));
        }
        break;
      case 6:  // truncate
        x.resize(rng.Below(x.size() + 1));
        break;
    }
  }
  return x;
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus_dir;
  long runs = 20000;
  double seconds = 3;
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fuzz driver: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--corpus") corpus_dir = next();
    else if (a == "--runs") runs = std::atol(next().c_str());
    else if (a == "--seconds") seconds = std::atof(next().c_str());
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 0);
    else files.push_back(a);
  }
  if (const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR"); out != nullptr) {
    std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-input", out);
  }
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(s, OnCrash);

  if (!files.empty()) {  // replay
    for (const std::string& f : files) Run(ReadFile(f));
    std::printf("fuzz driver: replayed %zu inputs\n", files.size());
    return 0;
  }
  std::vector<std::string> corpus = ReadCorpus(corpus_dir);
  for (const std::string& c : corpus) Run(c);
  Rng rng{seed};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long done = 0;
  for (; done < runs && std::chrono::steady_clock::now() < deadline; ++done) Run(Mutate(corpus, rng));
  std::printf("fuzz driver: %zu seeds, %ld mutated inputs, 0 crashes\n", corpus.size(), done);
  return 0;
}
