// The version of the rendezvous server and protocol implementation.
#ifndef CPPTORCHRUN_RENDEZVOUS_VERSION_H_
#define CPPTORCHRUN_RENDEZVOUS_VERSION_H_

namespace cpptorchrun::rdzv {
inline constexpr char kVersion[] = "0.1.0";
}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_VERSION_H_
