// Smoke test: zlib compresses and inflates a buffer (the IDX reader's gzip path).
#include <zlib.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

TEST(ZlibSmoke, RoundTrip) {
  std::string input(4096, 'x');
  for (size_t i = 0; i < input.size(); i += 7) input[i] = char('a' + i % 26);
  uLongf packed_len = compressBound(input.size());
  std::vector<Bytef> packed(packed_len);
  ASSERT_EQ(compress(packed.data(), &packed_len, reinterpret_cast<const Bytef*>(input.data()),
                     input.size()),
            Z_OK);
  EXPECT_LT(packed_len, input.size());
  std::string output(input.size(), '\0');
  uLongf out_len = output.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(output.data()), &out_len, packed.data(), packed_len),
            Z_OK);
  EXPECT_EQ(output, input);
}
