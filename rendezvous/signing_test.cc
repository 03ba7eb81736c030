#include "rendezvous/signing.h"

#include <fstream>

#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

// Two nodes of 2 ranks each; the assignment as node `id` receives it.
v1::Assignment RoundOf(const std::string& id, int64_t round = 3) {
  v1::Assignment a;
  a.set_round(round);
  a.set_group_world_size(2);
  a.set_world_size(4);
  a.set_master_addr("198.18.0.1");
  a.set_master_port(40000);
  for (int r = 0; r < 2; ++r) {
    v1::Participant* p = a.add_participants();
    p->set_node_id(r == 0 ? "a" : "b");
    p->set_host(r == 0 ? "198.18.0.1" : "198.18.0.2");
    p->set_group_rank(r);
    p->set_local_world_size(2);
    p->set_rank_offset(2 * r);
  }
  a.set_group_rank(id == "a" ? 0 : 1);
  a.set_rank_offset(id == "a" ? 0 : 2);
  return a;
}

TEST(AssignmentSigner, WhatItIssuedVerifiesForItsNodeOnly) {
  AssignmentSigner signer(RandomSigningKey());
  v1::Assignment a = RoundOf("a");
  signer.Sign("job", "a", &a);
  EXPECT_EQ(a.signature().size(), 32u);
  EXPECT_TRUE(signer.Verify("job", "a", a));
  EXPECT_FALSE(signer.Verify("job", "b", a)) << "a's assignment does not speak for b";
  EXPECT_FALSE(signer.Verify("other-job", "a", a));
  v1::Assignment unsigned_copy = a;
  unsigned_copy.clear_signature();
  EXPECT_FALSE(signer.Verify("job", "a", unsigned_copy));
}

TEST(AssignmentSigner, ForgedFieldsDoNotVerifyOnARestartedServer) {
  // A restarted server keeps no digest: it checks every field.
  SigningKey key = SigningKeyFromToken("tok");
  AssignmentSigner issuer(key);
  v1::Assignment a = RoundOf("a");
  issuer.Sign("job", "a", &a);
  AssignmentSigner restarted(key);
  EXPECT_TRUE(restarted.Verify("job", "a", a)) << "a durable key survives a restart";
  for (int field = 0; field < 6; ++field) {
    v1::Assignment forged = a;
    switch (field) {
      case 0: forged.set_master_addr("6.6.6.6"); break;
      case 1: forged.set_master_port(1); break;
      case 2: forged.set_round(99); break;
      case 3: forged.mutable_participants(1)->set_host("6.6.6.6"); break;
      case 4: forged.set_group_rank(1); break;
      case 5: forged.set_world_size(5); break;
    }
    EXPECT_FALSE(AssignmentSigner(key).Verify("job", "a", forged)) << "field " << field;
  }
  EXPECT_FALSE(AssignmentSigner(SigningKeyFromToken("other")).Verify("job", "a", a));
  EXPECT_FALSE(AssignmentSigner(RandomSigningKey()).Verify("job", "a", a));
}

TEST(AssignmentSigner, KeysAndTheirDurability) {
  EXPECT_FALSE(RandomSigningKey().durable);
  EXPECT_NE(RandomSigningKey().bytes, RandomSigningKey().bytes);
  EXPECT_TRUE(SigningKeyFromToken("t").durable);
  EXPECT_EQ(SigningKeyFromToken("t").bytes, SigningKeyFromToken("t").bytes);
  EXPECT_NE(SigningKeyFromToken("t").bytes, "t") << "the token itself is not the key";
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/key") << "0123456789abcdef0123\n";
  auto key = ReadSigningKeyFile(dir + "/key");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(key->durable);
  EXPECT_EQ(key->bytes, "0123456789abcdef0123");
  std::ofstream(dir + "/short") << "short\n";
  auto short_key = ReadSigningKeyFile(dir + "/short");
  ASSERT_FALSE(short_key.ok());
  EXPECT_NE(short_key.status().message().find("at least 16"), std::string::npos);
  EXPECT_EQ(ReadSigningKeyFile(dir + "/none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
