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

// On the CPU the averaging over the replicas is issued by ProgressCollectives as soon as each
// reduce-scatter completes (fsdp/replica_averager.h), so it runs during the backward: polling
// alone completes every unit's averaging before any WaitReduceScatter, and the result is the
// blocking path's, bit for bit.
TEST(StoreHybridTest, ProgressCollectivesAveragesOverTheReplicasBeforeTheWait) {
  MpiCommunicator* world = MpiWorld();
  const int w = world->world_size(), r = world->rank();
  if (w < 2) GTEST_SKIP() << "needs two replicas";
  const int s = w % 2 == 0 && w > 2 ? 2 : 1;
  auto shard = world->Split(r / s, r % s);
  auto replicas = world->Split(r % s, r / s);
  ASSERT_TRUE(shard.ok() && replicas.ok());
  StoreOptions o;
  o.replicas = replicas->get();
  const auto grad = [r](int micro, int, const std::string& n, int64_t i) {
    return Grad(micro, r, n, i);
  };
  auto blocking = ShardedParameterStore::Create(Units(), {}, shard->get(), o);
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  ASSERT_TRUE(FeedGradsAnyDevice(blocking->get(), grad, 1, /*overlap=*/false).ok());
  auto polled = ShardedParameterStore::Create(Units(), {}, shard->get(), o);
  ASSERT_TRUE(polled.ok()) << polled.status();
  ShardedParameterStore* p = polled->get();
  ASSERT_TRUE(p->ZeroGrad().ok());
  for (size_t u = p->num_units(); u-- > 0;) {
    auto views = p->UnitGrads(u);
    ASSERT_TRUE(views.ok()) << views.status();
    const UnitLayout& ul = p->layout().units()[u];
    for (size_t k = 0; k < ul.params.size(); ++k) {
      float* d = static_cast<float*>((*views)[k].data);
      for (int64_t i = 0; i < ul.params[k].numel; ++i) d[i] = grad(0, r, ul.params[k].name, i);
    }
    ASSERT_TRUE(p->ReduceScatterGradsAsync(u).ok());
  }
  const int64_t before = p->sent_bytes().across_groups;
  for (int i = 0; i < 200000 && p->ProgressCollectives() > 0; ++i) {}
  EXPECT_EQ(p->ProgressCollectives(), 0) << "the averaging did not complete by polling";
  // Every unit's averaging sent its bytes before any wait: as much as the blocking store's.
  EXPECT_EQ(p->sent_bytes().across_groups - before, (*blocking)->sent_bytes().across_groups);
  EXPECT_GT(p->sent_bytes().across_groups, 0);
  for (size_t u = p->num_units(); u-- > 0;) ASSERT_TRUE(p->WaitReduceScatter(u).ok());
  const size_t n = size_t(p->layout().local_numel());
  EXPECT_EQ(std::memcmp(p->grad_shard(), (*blocking)->grad_shard(), n * 4), 0)
      << "polled averaging differs from the blocking one";
  polled->reset();
  blocking->reset();
  ASSERT_TRUE((*shard)->Shutdown().ok());
  ASSERT_TRUE((*replicas)->Shutdown().ok());
}

}  // namespace
}  // namespace shardema
