// The 16-bit float conversions: exact values, rounding to nearest even,
// subnormals, overflow, infinities and NaN; the sums and scaling.
#include "worker/comm/float16.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

TEST(Float16Test, HalfEncodesExactValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);            // the largest half
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  for (uint16_t h : {0x0000, 0x3c00, 0x3555, 0xc000, 0x7bff, 0x0400, 0x03ff, 0x0001, 0x8001}) {
    EXPECT_EQ(FloatToHalf(HalfToFloat(h)), h) << h;
  }
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(Float16Test, HalfRoundsToNearestEven) {
  // Between 1 and 1 + 2^-10: the halfway point goes to the even 1.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // Between 1 + 2^-10 (odd) and 1 + 2^-9: halfway goes up to the even one.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  // Subnormal halfway cases: 0.5 and 1.5 units of 2^-24.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);
}

TEST(Float16Test, HalfOverflowInfinityAndNan) {
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)));
}

TEST(Float16Test, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBFloat16(-2.5f), 0xc020);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even 1.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
}

TEST(Float16Test, AddRoundsEachSumOnceAndScaleInFloat) {
  std::vector<uint16_t> a = {FloatToHalf(2048.0f), FloatToHalf(1.5f)};
  std::vector<uint16_t> b = {FloatToHalf(1.0f), FloatToHalf(0.25f)};
  AddSixteen(DType::kFloat16, a.data(), a.data(), b.data(), 2);
  EXPECT_EQ(HalfToFloat(a[0]), 2048.0f);  // 2049 is a tie: to the even 2048
  EXPECT_EQ(HalfToFloat(a[1]), 1.75f);
  ScaleSixteen(DType::kFloat16, a.data(), 2, 0.5);
  EXPECT_EQ(HalfToFloat(a[1]), 0.875f);
  std::vector<uint16_t> c = {FloatToBFloat16(256.0f)};
  std::vector<uint16_t> d = {FloatToBFloat16(1.0f)};
  AddSixteen(DType::kBFloat16, c.data(), c.data(), d.data(), 1);
  EXPECT_EQ(BFloat16ToFloat(c[0]), 256.0f);  // 257 is a tie at bfloat16's 8 bits
  EXPECT_TRUE(IsSixteenBitFloat(DType::kBFloat16));
  EXPECT_FALSE(IsSixteenBitFloat(DType::kFloat32));
}

}  // namespace
}  // namespace cpptorchrun::worker
