// Devices: GPU counting through dlopen (no CUDA link), CPU counting through
// the affinity mask, and fake GPUs.
#include "launcher/config/devices.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cpptorchrun::launcher {
namespace {

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// NVML's physical count, or -1 when NVML is absent or fails.
int NvmlCount() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return -1;
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned int*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(lib, "nvmlShutdown"));
  int result = -1;
  if (init != nullptr && count != nullptr && init() == 0) {
    unsigned int n = 0;
    if (count(&n) == 0) result = static_cast<int>(n);
    if (shutdown != nullptr) shutdown();
  }
  dlclose(lib);
  return result;
}

// The CUDA runtime's count (it applies CUDA_VISIBLE_DEVICES itself), or -1.
int CudartCount() {
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) continue;
    using CountFn = int (*)(int*);
    auto count = reinterpret_cast<CountFn>(dlsym(lib, "cudaGetDeviceCount"));
    int n = 0;
    int result = -1;
    if (count != nullptr) {
      int rc = count(&n);
      result = rc == 0 ? n : 0;  // "no device" and "no driver" both mean none
    }
    // The runtime is not unloaded: it may have started threads.
    return result;
  }
  return -1;
}

// `nvidia-smi -L` lines starting with "GPU ", or -1 when it cannot run.
int NvidiaSmiCount() {
  FILE* p = popen("nvidia-smi -L 2>/dev/null", "r");
  if (p == nullptr) return -1;
  int n = 0;
  char line[512];
  while (fgets(line, sizeof(line), p) != nullptr) {
    if (absl::StartsWith(line, "GPU ")) ++n;
  }
  int rc = pclose(p);
  if (rc != 0 && n == 0) return -1;
  return n;
}

// nvidia-smi's (index, uuid, bus id) rows; an error when it cannot run.
absl::StatusOr<std::vector<std::vector<std::string>>> NvidiaSmiBusIds() {
  FILE* p = popen("nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader 2>/dev/null", "r");
  if (p == nullptr) return absl::UnavailableError("cannot run nvidia-smi");
  std::vector<std::vector<std::string>> rows;
  char line[512];
  while (fgets(line, sizeof(line), p) != nullptr) {
    std::vector<std::string> fields;
    for (absl::string_view f : absl::StrSplit(line, ',')) fields.emplace_back(absl::StripAsciiWhitespace(f));
    if (fields.size() == 3) rows.push_back(std::move(fields));
  }
  if (pclose(p) != 0 && rows.empty()) {
    return absl::UnavailableError("nvidia-smi --query-gpu=pci.bus_id failed (is the NVIDIA driver there?)");
  }
  return rows;
}

class RealDevices final : public DeviceEnumerator {
 public:
  explicit RealDevices(std::optional<std::string> cvd) : cvd_(std::move(cvd)) {}
  absl::StatusOr<int> CountGpus() override {
    int physical = NvmlCount();
    if (physical < 0) {
      int n = CudartCount();
      if (n >= 0) return n;  // already narrowed by CUDA_VISIBLE_DEVICES
      physical = NvidiaSmiCount();
    }
    if (physical < 0) return 0;
    return cvd_.has_value() ? VisibleGpuCount(physical, *cvd_) : physical;
  }
  int CountCpus() override { return AffinityCpus(); }
  bool fake() const override { return false; }
  absl::StatusOr<std::vector<std::string>> GpuBusIds() override {
    auto rows = NvidiaSmiBusIds();
    if (!rows.ok()) return rows.status();
    return VisibleBusIds(*rows, cvd_);
  }

 private:
  std::optional<std::string> cvd_;
};

class FakeDevices final : public DeviceEnumerator {
 public:
  FakeDevices(int gpus, int cpus) : gpus_(gpus), cpus_(cpus) {}
  absl::StatusOr<int> CountGpus() override { return gpus_; }
  int CountCpus() override { return cpus_ > 0 ? cpus_ : AffinityCpus(); }
  bool fake() const override { return true; }
  absl::StatusOr<std::vector<std::string>> GpuBusIds() override { return std::vector<std::string>{}; }

 private:
  int gpus_;
  int cpus_;
};

}  // namespace

std::vector<std::string> VisibleBusIds(const std::vector<std::vector<std::string>>& gpus,
                                       const std::optional<std::string>& cuda_visible_devices) {
  std::vector<std::string> out;
  if (!cuda_visible_devices.has_value()) {
    for (const auto& g : gpus) out.push_back(g[2]);
    return out;
  }
  for (absl::string_view entry : absl::StrSplit(*cuda_visible_devices, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const std::vector<std::string>* found = nullptr;
    for (const auto& g : gpus) {
      if (entry == g[0] || (!entry.empty() && absl::StartsWith(g[1], entry))) found = &g;
    }
    if (found == nullptr) break;  // CUDA stops at the first invalid entry
    out.push_back((*found)[2]);
  }
  return out;
}

std::unique_ptr<DeviceEnumerator> NewRealDeviceEnumerator(std::optional<std::string> cvd) {
  return std::make_unique<RealDevices>(std::move(cvd));
}

std::unique_ptr<DeviceEnumerator> NewFakeDeviceEnumerator(int gpus, int cpus) {
  return std::make_unique<FakeDevices>(gpus, cpus);
}

int VisibleGpuCount(int physical, const std::string& cvd) {
  std::string text(absl::StripAsciiWhitespace(cvd));
  if (text.empty()) return 0;
  std::set<std::string> seen;
  int n = 0;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    std::string item(absl::StripAsciiWhitespace(raw));
    int index = 0;
    if (absl::StartsWith(item, "GPU-") || absl::StartsWith(item, "MIG-")) {
      if (!seen.insert(item).second) break;
    } else if (absl::SimpleAtoi(item, &index) && index >= 0 && index < physical) {
      if (!seen.insert(absl::StrCat(index)).second) break;
    } else {
      break;
    }
    ++n;
  }
  return n;
}

absl::StatusOr<int> ResolveNprocPerNode(const LaunchConfig& config, DeviceEnumerator& devices,
                                        bool* uses_gpus) {
  *uses_gpus = devices.fake();
  switch (config.nproc_kind) {
    case NprocKind::kCount:
      if (devices.fake()) {
        auto gpus = devices.CountGpus();
        if (!gpus.ok()) return gpus.status();
        if (config.nproc_per_node > *gpus) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--nproc_per_node: ", config.nproc_per_node, " workers need as many GPUs; --fake_gpus gives ",
              *gpus));
        }
      }
      return config.nproc_per_node;
    case NprocKind::kCpu:
      *uses_gpus = false;
      return devices.CountCpus();
    case NprocKind::kGpu: {
      auto gpus = devices.CountGpus();
      if (!gpus.ok()) return gpus.status();
      if (*gpus == 0) {
        return absl::InvalidArgumentError(
            "--nproc_per_node=gpu: no GPU found (NVML, CUDA runtime, nvidia-smi; CUDA_VISIBLE_DEVICES); "
            "use cpu, a number, or --fake_gpus N");
      }
      *uses_gpus = true;
      return *gpus;
    }
    case NprocKind::kAuto: {
      auto gpus = devices.CountGpus();
      if (!gpus.ok()) return gpus.status();
      if (*gpus > 0) {
        *uses_gpus = true;
        return *gpus;
      }
      *uses_gpus = false;
      return devices.CountCpus();
    }
  }
  return absl::InternalError("unreachable");
}

}  // namespace cpptorchrun::launcher
