// Hybrid sharding in the store (StoreOptions::replicas) at 4 ranks (2 x 2) and 6 ranks (3 x 2 and
// 2 x 3; 1 x 6 and 6 x 1 too): the gradient shard, gathered, equals that of full sharding over
// all ranks within the reordering of the sums, and every replica holds the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "framework/mpi/mpi_communicator.h"
#include "fsdp/store.h"
#include "fsdp/store_test_util.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using ::shardema::testing::FeedGradsAnyDevice;
using ::shardema::testing::MpiWorld;

std::vector<UnitSpec> Units() {
  return {{"a", {{"a.weight", {7}}}},
          {"b", {{"b.weight", {3, 4}}, {"b.bias", {1}}}},
          {"big", {{"big.weight", {1001}}}},
          {"empty", {}}};
}

float Grad(int micro, int world_rank, const std::string& name, int64_t i) {
  return float(std::sin(0.37 * double(i) + 1.1 * micro + 0.71 * world_rank + double(name.size())));
}

std::vector<FullTensor> GatheredGrads(ShardedParameterStore* s) {
  auto g = s->GatherSlotToRank(s->grad_shard(), 0);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : std::vector<FullTensor>{};
}

TEST(StoreHybridTest, GradientsMatchFullShardingAndReplicasAgree) {
  MpiCommunicator* world = MpiWorld();
  const int w = world->world_size(), r = world->rank();
  auto full = ShardedParameterStore::Create(Units(), {}, world);
  ASSERT_TRUE(full.ok()) << full.status();
  const auto grad = [r](int micro, int, const std::string& n, int64_t i) {
    return Grad(micro, r, n, i);
  };
  ASSERT_TRUE(FeedGradsAnyDevice(full->get(), grad, 2).ok());
  const std::vector<FullTensor> want = GatheredGrads(full->get());
  for (int s : {1, 2, 3, w}) {
    if (w % s != 0) continue;
    auto shard = world->Split(r / s, r % s);
    auto replicas = world->Split(r % s, r / s);
    ASSERT_TRUE(shard.ok() && replicas.ok());
    StoreOptions o;
    o.replicas = replicas->get();
    auto hybrid = ShardedParameterStore::Create(Units(), {}, shard->get(), o);
    ASSERT_TRUE(hybrid.ok()) << hybrid.status();
    ASSERT_TRUE(FeedGradsAnyDevice(hybrid->get(), grad, 2).ok());
    // Replicas: the same bits (each rank compares its shard with replica 0's).
    const ShardedParameterStore& h = **hybrid;
    std::vector<float> mine(h.grad_shard(), h.grad_shard() + h.layout().local_numel());
    std::vector<float> first = mine;
    ASSERT_TRUE((*replicas)->Broadcast(first.data(), first.size(), DType::kF32).ok());
    EXPECT_EQ(std::memcmp(mine.data(), first.data(), mine.size() * 4), 0)
        << "S=" << s << ": replica " << r / s << " differs from replica 0";
    // Against full sharding, on world rank 0 (shard rank 0 of replica 0).
    const std::vector<FullTensor> got = GatheredGrads(hybrid->get());
    if (r == 0) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t t = 0; t < got.size(); ++t) {
        ASSERT_EQ(got[t].data.size(), want[t].data.size());
        for (size_t i = 0; i < got[t].data.size(); ++i) {
          ASSERT_NEAR(got[t].data[i], want[t].data[i], 1e-6f * (1 + std::fabs(want[t].data[i])))
              << "S=" << s << " " << got[t].name << "[" << i << "]";
        }
      }
    }
    hybrid->reset();
    ASSERT_TRUE((*shard)->Shutdown().ok());
    ASSERT_TRUE((*replicas)->Shutdown().ok());
  }
}

}  // namespace
}  // namespace shardema
