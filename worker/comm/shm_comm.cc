// The shared-memory communicator: the segment's layout, the bootstrap, the
// step protocol and the collectives over it.
//
// Segment: a header page (magic, world, slot size, the attach count, the
// abort word and its reason), then one cache line per rank (its step
// counter, which is also its futex word, the count of ranks asleep on it,
// its pid), then two slots per rank (double buffering), each `slot_bytes`.
//
// Steps: every collective is a fixed sequence of steps, the same on every
// rank (it depends only on the count and the dtype). A rank ends a step by
// raising its counter (Post) and starts the next once every peer's counter
// has reached its own (WaitAll). Chunk k of a collective uses buffer k % 2
// of each slot, numbered across collectives; a slot's buffer is written
// again only two chunks later, after a WaitAll that every peer passed only
// once done reading it.
//
// All-reduce, per chunk of up to slot_bytes: (1) each rank copies the
// shares of its chunk that the other ranks own into its slot; (2) each rank
// sums its own share over every rank (its own from its buffer, the others'
// from their slots, in rank order, so all ranks hold identical results),
// divides for an average, and writes the result into its slot and its
// buffer; (3) each rank copies the other shares from their owners' slots.
// Two steps a chunk.
#include "worker/comm/shm_comm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/comm_thread.h"
#include "worker/comm/float16.h"

namespace cpptorchrun::worker {
namespace {

constexpr uint64_t kMagic = 0x31306d6873707063;  // "cppshm01"
constexpr size_t kPage = 4096;
constexpr size_t kReasonBytes = 256;
constexpr size_t kMaxSlotBytes = size_t{32} << 20;
// Spinning before sleeping: long enough to catch a peer a step behind on
// an idle core, short enough not to steal a busy one's time.
constexpr auto kSpin = std::chrono::microseconds(5);

struct Header {
  std::atomic<uint64_t> magic;  // written last by rank 0
  uint32_t world;
  uint32_t unused;
  uint64_t slot_bytes;
  std::atomic<uint32_t> attached;     // ranks that have mapped it; a futex word
  std::atomic<uint32_t> abort_claim;  // rank + 1 of the first to abort
  std::atomic<uint32_t> abort_by;     // rank + 1, once abort_reason is written
  char abort_reason[kReasonBytes];
};

struct alignas(64) RankWord {
  std::atomic<uint32_t> seq;      // steps this rank has ended; a futex word
  std::atomic<uint32_t> waiters;  // ranks asleep (or about to be) on seq
  std::atomic<int32_t> pid;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t HeaderBytes(int world) {
  return RoundUp(RoundUp(sizeof(Header), 64) + world * sizeof(RankWord), kPage);
}

size_t SegmentBytes(int world, size_t slot_bytes) {
  return HeaderBytes(world) + size_t(world) * 2 * slot_bytes;
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// Sleeps while *word == value, at most `slice`. False when it timed out.
bool FutexWait(std::atomic<uint32_t>* word, uint32_t value, absl::Duration slice) {
  timespec ts = absl::ToTimespec(std::max(slice, absl::ZeroDuration()));
  if (Futex(word, FUTEX_WAIT, value, &ts) == 0) return true;
  return errno != ETIMEDOUT;
}

void FutexWakeAll(std::atomic<uint32_t>* word) { Futex(word, FUTEX_WAKE, INT_MAX, nullptr); }

// True once `pid` has exited: gone, or a zombie its parent has not reaped.
bool ProcessGone(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

std::string FreshSegmentName() {
  std::random_device random;
  const uint64_t nonce = (uint64_t{random()} << 32) ^ random();
  return absl::StrFormat("/cpptorchrun-shm-%d-%016x", ::getpid(), nonce);
}

// The sum over `world` sources of n elements, divided by the world for an
// average, written to `out` (which aliases none of them) and then to
// `copy` (which may alias a source), a cache-sized block at a time so that
// the second write reads from cache.
template <typename T>
void SumInto(char* out_bytes, char* copy, const char* const* src_bytes, int world, int64_t n,
             bool average) {
  constexpr int64_t kBlock = 4096;
  const T w = static_cast<T>(world);
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    T* out = reinterpret_cast<T*>(out_bytes) + begin;
    const T* a = reinterpret_cast<const T*>(src_bytes[0]) + begin;
    // The division rides on the last pass: one pass over the share at world 2.
    if (world == 1) {
      std::memcpy(out, a, len * sizeof(T));
    } else {
      const T* b = reinterpret_cast<const T*>(src_bytes[1]) + begin;
      if (average && world == 2) {
        for (int64_t i = 0; i < len; ++i) out[i] = (a[i] + b[i]) / w;
      } else {
        for (int64_t i = 0; i < len; ++i) out[i] = a[i] + b[i];
      }
      for (int p = 2; p < world; ++p) {
        const T* c = reinterpret_cast<const T*>(src_bytes[p]) + begin;
        if (average && p == world - 1) {
          for (int64_t i = 0; i < len; ++i) out[i] = (out[i] + c[i]) / w;
        } else {
          for (int64_t i = 0; i < len; ++i) out[i] += c[i];
        }
      }
    }
    std::memcpy(copy + begin * sizeof(T), out, len * sizeof(T));
  }
}

// SumInto for the 16-bit floats: each addition in float, rounded back once
// (float16.h), in rank order; an average divides on the last pass.
void SumSixteen(DType dtype, char* out_bytes, char* copy, const char* const* src_bytes, int world,
                int64_t n, bool average) {
  uint16_t* out = reinterpret_cast<uint16_t*>(out_bytes);
  std::memcpy(out, src_bytes[0], n * sizeof(uint16_t));
  for (int p = 1; p < world; ++p) {
    AddSixteen(dtype, out, out, reinterpret_cast<const uint16_t*>(src_bytes[p]), n);
  }
  if (average && world > 1) ScaleSixteen(dtype, out, n, 1.0 / world);
  std::memcpy(copy, out, n * sizeof(uint16_t));
}

void Reduce(DType dtype, char* out, char* copy, const char* const* srcs, int world, int64_t n,
            bool average) {
  switch (dtype) {
    case DType::kFloat32:
      return SumInto<float>(out, copy, srcs, world, n, average);
    case DType::kFloat64:
      return SumInto<double>(out, copy, srcs, world, n, average);
    case DType::kInt64:
      return SumInto<int64_t>(out, copy, srcs, world, n, false);
    case DType::kUint8:
      return SumInto<uint8_t>(out, copy, srcs, world, n, false);
    case DType::kFloat16:
    case DType::kBFloat16:
      return SumSixteen(dtype, out, copy, srcs, world, n, average);
  }
}

// A mapped segment: unmapped when destroyed.
struct Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
  }
};

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::unique_ptr<Mapping> mapping, int rank, int world, size_t slot_bytes,
                  const ShmOptions& options)
      : mapping_(std::move(mapping)),
        rank_(rank),
        world_(world),
        slot_bytes_(slot_bytes),
        timeout_(options.timeout),
        liveness_(options.liveness_interval),
        header_(static_cast<Header*>(mapping_->base)),
        words_(reinterpret_cast<RankWord*>(static_cast<char*>(mapping_->base) +
                                           RoundUp(sizeof(Header), 64))),
        slots_(static_cast<char*>(mapping_->base) + HeaderBytes(world)),
        step_(words_[rank].seq.load()) {}

  ~ShmCommunicator() override {
    // A collective in flight ends now rather than at its timeout; the peers
    // are not told (they end theirs by liveness or timeout).
    local_aborted_.store(true);
    WakeAll();
    thread_.reset();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "shm"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype,
                                       ReduceOp op) override {
    if (op == ReduceOp::kAverage && (dtype == DType::kInt64 || dtype == DType::kUint8)) {
      return CompletedWork(absl::InvalidArgumentError(
          absl::StrCat("average all-reduce of ", DTypeName(dtype), " is not supported")));
    }
    if (count < 0) return CompletedWork(absl::InvalidArgumentError("negative count"));
    return thread_->Submit([this, data, count, dtype, op] {
      return AllReduce(static_cast<char*>(data), count, dtype, op == ReduceOp::kAverage);
    });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype,
                                       int root) override {
    if (root < 0 || root >= world_) {
      return CompletedWork(absl::InvalidArgumentError(
          absl::StrCat("broadcast root ", root, " is outside [0, ", world_, ")")));
    }
    if (count < 0) return CompletedWork(absl::InvalidArgumentError("negative count"));
    return thread_->Submit([this, data, count, dtype, root] {
      return Broadcast(static_cast<char*>(data), count * DTypeSize(dtype), root);
    });
  }

  absl::Status Barrier() override {
    return thread_
        ->Submit([this] {
          if (absl::Status s = Aborted(); !s.ok()) return s;
          Post();
          return WaitAll(absl::Now() + timeout_, "barrier");
        })
        ->Wait();
  }

  void Abort(const std::string& reason) override {
    const std::string why = reason.empty() ? "communicator aborted" : reason;
    {
      absl::MutexLock lock(&mu_);
      if (local_reason_.empty()) local_reason_ = why;
    }
    local_aborted_.store(true);
    thread_->Abort(why);
    Publish(why);
  }

 private:
  char* Slot(int rank, uint64_t buffer) const {
    return slots_ + (size_t(rank) * 2 + buffer) * slot_bytes_;
  }

  // The element range [first, second) of rank q's share of n elements.
  std::pair<int64_t, int64_t> Share(int64_t n, int q) const {
    return {n * q / world_, n * (q + 1) / world_};
  }

  absl::Status AllReduce(char* data, int64_t count, DType dtype, bool average) {
    // Checked before the first step only: once a rank has every share, a
    // peer that finished and aborted since must not fail it.
    if (absl::Status s = Aborted(); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + timeout_;
    const size_t esize = DTypeSize(dtype);
    const int64_t per_chunk = slot_bytes_ / esize;
    std::vector<const char*> srcs(world_);
    for (int64_t offset = 0; offset < count; offset += per_chunk) {
      const int64_t n = std::min(per_chunk, count - offset);
      char* mine = data + offset * esize;
      const uint64_t buffer = chunk_++ & 1;
      char* slot = Slot(rank_, buffer);
      for (int q = 0; q < world_; ++q) {
        if (q == rank_) continue;
        auto [lo, hi] = Share(n, q);
        std::memcpy(slot + lo * esize, mine + lo * esize, (hi - lo) * esize);
      }
      Post();
      if (absl::Status s = WaitAll(deadline, "all-reduce"); !s.ok()) return s;
      auto [lo, hi] = Share(n, rank_);
      for (int p = 0; p < world_; ++p) {
        srcs[p] = (p == rank_ ? mine : Slot(p, buffer)) + lo * esize;
      }
      Reduce(dtype, slot + lo * esize, mine + lo * esize, srcs.data(), world_, hi - lo, average);
      Post();
      if (absl::Status s = WaitAll(deadline, "all-reduce"); !s.ok()) return s;
      for (int q = 0; q < world_; ++q) {
        if (q == rank_) continue;  // written by the reduction
        auto [qlo, qhi] = Share(n, q);
        std::memcpy(mine + qlo * esize, Slot(q, buffer) + qlo * esize, (qhi - qlo) * esize);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(char* data, int64_t bytes, int root) {
    if (absl::Status s = Aborted(); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + timeout_;
    for (int64_t offset = 0; offset < bytes; offset += slot_bytes_) {
      const int64_t n = std::min<int64_t>(slot_bytes_, bytes - offset);
      const uint64_t buffer = chunk_++ & 1;
      if (rank_ == root) std::memcpy(Slot(root, buffer), data + offset, n);
      Post();
      if (absl::Status s = WaitAll(deadline, "broadcast"); !s.ok()) return s;
      if (rank_ != root) std::memcpy(data + offset, Slot(root, buffer), n);
    }
    return absl::OkStatus();
  }

  // Ends this rank's step: raises its counter and wakes whoever sleeps on it.
  void Post() {
    RankWord& me = words_[rank_];
    me.seq.store(++step_, std::memory_order_seq_cst);
    if (me.waiters.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&me.seq);
  }

  // Waits until every peer has ended the step this rank just ended.
  absl::Status WaitAll(absl::Time deadline, const char* what) {
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      if (absl::Status s = WaitFor(p, deadline, what); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status WaitFor(int p, absl::Time deadline, const char* what) {
    RankWord& peer = words_[p];
    const uint32_t target = step_;
    auto reached = [&] {
      return static_cast<int32_t>(peer.seq.load(std::memory_order_acquire) - target) >= 0;
    };
    if (reached()) return absl::OkStatus();
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    do {
      for (int i = 0; i < 32; ++i) {
        CpuRelax();
        if (reached()) return absl::OkStatus();
      }
    } while (std::chrono::steady_clock::now() < spin_until);
    while (true) {
      if (reached()) return absl::OkStatus();
      if (absl::Status s = Aborted(); !s.ok()) return s;
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        // The ranks' steps no longer line up: later collectives must fail
        // too, here and on the peers.
        Publish(absl::StrCat("rank ", rank_, " gave up waiting for rank ", p));
        return absl::DeadlineExceededError(absl::StrCat(
            "shm ", what, ": rank ", p, " did not arrive within ",
            absl::FormatDuration(timeout_), " (rank ", rank_, " waiting at step ", target, ")"));
      }
      peer.waiters.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = peer.seq.load(std::memory_order_seq_cst);
      bool woken = true;
      if (static_cast<int32_t>(seen - target) < 0) {
        woken = FutexWait(&peer.seq, seen, std::min(deadline - now, liveness_));
      }
      peer.waiters.fetch_sub(1, std::memory_order_seq_cst);
      if (!woken && !reached()) {
        const pid_t pid = peer.pid.load();
        if (ProcessGone(pid)) {
          const std::string why =
              absl::StrCat("rank ", p, " (pid ", pid, ") died during a collective");
          Publish(why);
          return absl::UnavailableError(absl::StrCat("shm ", what, ": ", why));
        }
      }
    }
  }

  // OK, or why collectives fail: this rank's Abort, or a peer's.
  absl::Status Aborted() {
    if (local_aborted_.load()) {
      absl::MutexLock lock(&mu_);
      return absl::AbortedError(local_reason_.empty() ? "communicator shut down" : local_reason_);
    }
    const uint32_t by = header_->abort_by.load(std::memory_order_acquire);
    if (by == 0) return absl::OkStatus();
    const char* reason = header_->abort_reason;
    return absl::AbortedError(absl::StrCat("shm: rank ", by - 1, " aborted the group: ",
                                           std::string(reason, strnlen(reason, kReasonBytes))));
  }

  // Tells every rank that the group is aborted (the first reason wins) and
  // wakes every sleeper.
  void Publish(const std::string& why) {
    uint32_t none = 0;
    if (header_->abort_claim.compare_exchange_strong(none, rank_ + 1)) {
      const size_t n = std::min(why.size(), kReasonBytes - 1);
      std::memcpy(header_->abort_reason, why.data(), n);
      header_->abort_reason[n] = '\0';
      header_->abort_by.store(rank_ + 1, std::memory_order_release);
    }
    WakeAll();
  }

  void WakeAll() {
    for (int p = 0; p < world_; ++p) FutexWakeAll(&words_[p].seq);
  }

  const std::unique_ptr<Mapping> mapping_;
  const int rank_;
  const int world_;
  const size_t slot_bytes_;
  const absl::Duration timeout_;
  const absl::Duration liveness_;
  Header* const header_;
  RankWord* const words_;
  char* const slots_;
  // Touched only on the comm thread.
  uint32_t step_;
  uint64_t chunk_ = 0;
  std::atomic<bool> local_aborted_{false};
  absl::Mutex mu_;
  std::string local_reason_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CommThread> thread_ = std::make_unique<CommThread>();
};

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Rank 0: creates, sizes, maps and initialises the segment.
absl::Status Create(const std::string& name, int world, size_t slot_bytes, Mapping& map) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm: cannot create ", name));
  map.bytes = SegmentBytes(world, slot_bytes);
  // Reserves the memory now: a full /dev/shm is an error here rather than
  // a SIGBUS at the first write.
  if (int err = ::posix_fallocate(fd, 0, map.bytes); err != 0) {
    errno = err;
    absl::Status s = Errno(absl::StrCat("shm: cannot reserve ", map.bytes, " bytes for ", name,
                                        " (is /dev/shm full or small?)"));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return s;
  }
  if (::ftruncate(fd, map.bytes) != 0) {
    absl::Status s = Errno(absl::StrCat("shm: cannot size ", name, " to ", map.bytes, " bytes"));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return s;
  }
  map.base = ::mmap(nullptr, map.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map.base == MAP_FAILED) {
    absl::Status s = Errno(absl::StrCat("shm: cannot map ", name));
    ::shm_unlink(name.c_str());
    return s;
  }
  Header* header = static_cast<Header*>(map.base);
  header->world = world;
  header->slot_bytes = slot_bytes;
  header->magic.store(kMagic, std::memory_order_release);
  return absl::OkStatus();
}

// The other ranks: maps it once it exists and rank 0 has initialised it.
// `retry`: keep trying until the deadline (a name not passed through the
// store may not exist yet).
absl::Status Attach(const std::string& name, int world, size_t slot_bytes, bool retry,
                    absl::Time deadline, Mapping& map) {
  const size_t bytes = SegmentBytes(world, slot_bytes);
  std::string last;
  while (true) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    struct stat st {};
    if (fd < 0) {
      last = absl::StrCat("cannot open ", name, ": ", std::strerror(errno));
    } else if (::fstat(fd, &st) != 0 || size_t(st.st_size) != bytes) {
      last = absl::StrCat(name, " has ", st.st_size, " bytes, not ", bytes,
                          " (a different world size or slot size?)");
      ::close(fd);
    } else {
      map.base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (map.base == MAP_FAILED) return Errno(absl::StrCat("shm: cannot map ", name));
      map.bytes = bytes;
      const Header* header = static_cast<const Header*>(map.base);
      if (header->magic.load(std::memory_order_acquire) == kMagic && header->world == world &&
          header->slot_bytes == slot_bytes) {
        return absl::OkStatus();
      }
      last = absl::StrCat(name, " is not (yet) a segment of world ", world);
      ::munmap(map.base, bytes);
      map.base = MAP_FAILED;
    }
    if (!retry || absl::Now() >= deadline) return absl::UnavailableError(absl::StrCat("shm: ", last));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewShmCommunicator(const ShmOptions& options) {
  const int rank = options.rank;
  const int world = options.world_size;
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("shm: rank ", rank, " of world size ", world));
  }
  if (options.store == nullptr && options.segment_name.empty()) {
    return absl::InvalidArgumentError("shm: no rendezvous store and no segment name");
  }
  if (options.slot_bytes < 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm: slot of ", options.slot_bytes, " bytes; at least 64"));
  }
  // All slots together stay within kMaxSlotBytes (a container's /dev/shm is
  // often 64 MiB); the same on every rank, as it depends only on the options.
  const size_t slot_bytes = std::max<size_t>(
      64, std::min<size_t>(RoundUp(options.slot_bytes, 64), kMaxSlotBytes / (2 * world) / 64 * 64));
  const absl::Time deadline = absl::Now() + options.timeout;
  std::string name = options.segment_name;
  auto mapping = std::make_unique<Mapping>();
  if (rank == 0) {
    if (name.empty()) name = FreshSegmentName();
    if (absl::Status s = Create(name, world, slot_bytes, *mapping); !s.ok()) return s;
    if (options.segment_name.empty()) {
      if (absl::Status s = options.store->Set(options.key, name); !s.ok()) {
        ::shm_unlink(name.c_str());
        return absl::UnavailableError(
            absl::StrCat("shm: cannot publish the segment's name: ", s.message()));
      }
    }
  } else {
    if (name.empty()) {
      absl::StatusOr<std::string> got = options.store->Get(options.key, options.timeout);
      if (!got.ok()) {
        return absl::Status(got.status().code(),
                            absl::StrCat("shm: rank ", rank, " got no segment name from rank 0: ",
                                         got.status().message()));
      }
      name = *got;
    }
    if (absl::Status s = Attach(name, world, slot_bytes, !options.segment_name.empty(), deadline,
                                *mapping);
        !s.ok()) {
      return s;
    }
  }
  Header* header = static_cast<Header*>(mapping->base);
  auto* words = reinterpret_cast<RankWord*>(static_cast<char*>(mapping->base) +
                                            RoundUp(sizeof(Header), 64));
  words[rank].pid.store(::getpid());
  if (header->attached.fetch_add(1) + 1 == uint32_t(world)) ::shm_unlink(name.c_str());
  FutexWakeAll(&header->attached);
  while (true) {
    const uint32_t attached = header->attached.load();
    if (attached >= uint32_t(world)) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      ::shm_unlink(name.c_str());
      return absl::DeadlineExceededError(absl::StrCat(
          "shm: rank ", rank, ": only ", attached, " of ", world, " ranks mapped ", name,
          " within ", absl::FormatDuration(options.timeout)));
    }
    FutexWait(&header->attached, attached, deadline - now);
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<ShmCommunicator>(std::move(mapping), rank, world, slot_bytes, options));
}

}  // namespace cpptorchrun::worker
