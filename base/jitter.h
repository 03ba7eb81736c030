// A random factor in [0.5, 1.5) for retry waits, so that clients that failed
// together do not retry together (every rendezvous client's backoff).
// Thread-safe.
#ifndef CPPTORCHRUN_BASE_JITTER_H_
#define CPPTORCHRUN_BASE_JITTER_H_

namespace cpptorchrun::base {

double Jitter();

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_JITTER_H_
