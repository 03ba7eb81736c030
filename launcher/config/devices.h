// Devices: how many workers --nproc_per_node=gpu|cpu|auto means on this
// node, behind the DeviceEnumerator interface (real GPUs found without
// linking CUDA, or N fake GPUs from --fake_gpus).
#ifndef CPPTORCHRUN_LAUNCHER_DEVICES_H_
#define CPPTORCHRUN_LAUNCHER_DEVICES_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/config/cli.h"

namespace cpptorchrun::launcher {

// Thread-compatible.
class DeviceEnumerator {
 public:
  virtual ~DeviceEnumerator() = default;
  // GPUs this process may use (after CUDA_VISIBLE_DEVICES); 0 when there are
  // none or no driver. Errors only for a broken driver that answered.
  virtual absl::StatusOr<int> CountGpus() = 0;
  // CPU cores this process may run on (its affinity mask).
  virtual int CountCpus() = 0;
  // True for fake GPUs: workers get CPPTORCHRUN_FAKE_GPU(S).
  virtual bool fake() const = 0;
  // The PCI bus ids of the GPUs this process may use, in CUDA's order
  // (after CUDA_VISIBLE_DEVICES), for --numa_binding. Errors name what could
  // not be asked; fake GPUs have none (an empty list).
  virtual absl::StatusOr<std::vector<std::string>> GpuBusIds() = 0;
};

// The bus ids of the GPUs CUDA_VISIBLE_DEVICES selects from `gpus` (each
// "index,uuid,bus id", as `nvidia-smi --query-gpu=index,uuid,pci.bus_id`
// prints them), by index or UUID prefix, up to the first entry that names
// none. Pure.
std::vector<std::string> VisibleBusIds(const std::vector<std::vector<std::string>>& gpus,
                                       const std::optional<std::string>& cuda_visible_devices);

// Real devices: NVML (dlopen libnvidia-ml.so.1), else the CUDA runtime
// (dlopen libcudart.so*), else `nvidia-smi -L`; the physical count is then
// narrowed by `cuda_visible_devices` (nullopt: unset).
std::unique_ptr<DeviceEnumerator> NewRealDeviceEnumerator(
    std::optional<std::string> cuda_visible_devices);

// `gpus` fake GPUs (>= 1) and `cpus` cores (0: the real count).
std::unique_ptr<DeviceEnumerator> NewFakeDeviceEnumerator(int gpus, int cpus = 0);

// How many GPUs CUDA_VISIBLE_DEVICES leaves of `physical`: CUDA's rule, the
// entries up to the first invalid one (an index out of range, a repeat, or
// garbage); UUID entries (GPU-..., MIG-...) count as valid. Pure.
int VisibleGpuCount(int physical, const std::string& cuda_visible_devices);

// The number of workers on this node for `config`: the count, or the GPUs
// (gpu; an error when there are none), the cores (cpu), GPUs if any else
// cores (auto). `*uses_gpus` says whether workers map to GPUs.
absl::StatusOr<int> ResolveNprocPerNode(const LaunchConfig& config, DeviceEnumerator& devices,
                                        bool* uses_gpus);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_DEVICES_H_
