// MpiCommunicator::Split: the shard and replica groups of hybrid sharding (rank = replica * S +
// shard) at 1, 4 and 6 ranks, with and without the world's progress thread: sizes and ranks, and
// collectives that stay inside each group.
#include <gtest/gtest.h>

#include <vector>

#include "framework/mpi/mpi_communicator.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using ::shardema::testing::MpiWorld;

TEST(MpiSplitTest, ShardAndReplicaGroups) {
  MpiCommunicator* world = MpiWorld();
  const int w = world->world_size(), r = world->rank();
  for (int s : {1, 2, 3, w}) {
    if (w % s != 0) continue;
    CommOptions o;
    o.progress_thread = world->options().progress_thread;
    auto shard = world->Split(r / s, r % s, o);    // ranks of one replica, by shard index
    auto replica = world->Split(r % s, r / s, o);  // ranks of one shard index, by replica
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_TRUE(replica.ok()) << replica.status();
    EXPECT_EQ((*shard)->world_size(), s);
    EXPECT_EQ((*shard)->rank(), r % s);
    EXPECT_EQ((*replica)->world_size(), w / s);
    EXPECT_EQ((*replica)->rank(), r / s);
    // Sums inside each group: the shard group adds its members' world ranks, the replica group
    // its members'.
    float mine = float(r), sum = 0;
    ASSERT_TRUE((*shard)->AllReduce(&mine, &sum, 1, DType::kF32).ok());
    const int base = (r / s) * s;
    EXPECT_EQ(sum, float(s * base + s * (s - 1) / 2)) << "S=" << s;
    ASSERT_TRUE((*replica)->AllReduce(&mine, &sum, 1, DType::kF32).ok());
    const int k = w / s;
    EXPECT_EQ(sum, float(k * (r % s) + s * k * (k - 1) / 2)) << "S=" << s;
    std::vector<float> got(size_t(s), -1.f);
    ASSERT_TRUE((*shard)->AllGather(&mine, got.data(), 1, DType::kF32).ok());
    for (int i = 0; i < s; ++i) EXPECT_EQ(got[size_t(i)], float(base + i));
    EXPECT_TRUE((*shard)->Shutdown().ok());
    EXPECT_TRUE((*replica)->Shutdown().ok());
  }
  EXPECT_EQ(world->Split(-1, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardema
