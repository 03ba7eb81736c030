// 16-bit floats for the communicators, without LibTorch: IEEE binary16
// ("fp16", torch::kHalf) and bfloat16 (torch::kBFloat16) as raw bits,
// converted to and from float with round-to-nearest-even, and summed the
// way every backend sums them (each addition done in float and rounded back
// once), so that Gloo and shared memory produce the same bits.
#ifndef CPPTORCHRUN_WORKER_COMM_FLOAT16_H_
#define CPPTORCHRUN_WORKER_COMM_FLOAT16_H_

#include <cstdint>

#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// True for kFloat16 and kBFloat16.
bool IsSixteenBitFloat(DType dtype);

// out[i] = round(a[i] + b[i]) for n 16-bit floats of `dtype` (a 16-bit
// float type); out may alias a or b.
void AddSixteen(DType dtype, uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n);

// data[i] = round(data[i] * factor), in float.
void ScaleSixteen(DType dtype, uint16_t* data, int64_t n, double factor);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_FLOAT16_H_
