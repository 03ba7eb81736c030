// fp16 and bfloat16 conversions and sums.
#include "worker/comm/float16.h"

#include <cmath>
#include <cstring>

namespace cpptorchrun::worker {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa x 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  return FromBits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN kept quiet
    return sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u);
  }
  // 65520 and above round to infinity.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded
    // to nearest even by nearbyint (the default rounding mode). Scaling by
    // 2^24 is exact; 1024 is the smallest normal's encoding, as it should be.
    const float units = std::nearbyint(FromBits(magnitude) * 16777216.0f);
    return sign | static_cast<uint16_t>(units);
  }
  // Normal: drop 13 mantissa bits, rounding to nearest even, and rebias.
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded >> 13) - ((127u - 15u) << 10));
}

float BFloat16ToFloat(uint16_t b) { return FromBits(uint32_t{b} << 16); }

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

bool IsSixteenBitFloat(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

void AddSixteen(DType dtype, uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  if (dtype == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(b[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = FloatToBFloat16(BFloat16ToFloat(a[i]) + BFloat16ToFloat(b[i]));
    }
  }
}

void ScaleSixteen(DType dtype, uint16_t* data, int64_t n, double factor) {
  const float f = static_cast<float>(factor);
  if (dtype == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) data[i] = FloatToHalf(HalfToFloat(data[i]) * f);
  } else {
    for (int64_t i = 0; i < n; ++i) data[i] = FloatToBFloat16(BFloat16ToFloat(data[i]) * f);
  }
}

}  // namespace cpptorchrun::worker
