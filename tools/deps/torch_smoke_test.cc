// Smoke test: LibTorch computes a tensor op and a backward pass.
#include <torch/torch.h>

#include "gtest/gtest.h"

TEST(TorchSmoke, MatmulAndBackward) {
  torch::Tensor x = torch::tensor({1.0f, 2.0f, 3.0f}, torch::requires_grad());
  torch::Tensor w = torch::tensor({{1.0f, 0.0f, 2.0f}});
  torch::Tensor y = torch::matmul(w, x).sum() + (x * x).sum();  // 7 + 14
  EXPECT_FLOAT_EQ(y.item<float>(), 21.0f);
  y.backward();
  // d/dx = w + 2x
  torch::Tensor expected = torch::tensor({3.0f, 4.0f, 8.0f});
  EXPECT_TRUE(torch::allclose(x.grad(), expected));
}
