// KeepUntilExit keeps what it is given alive after every other owner let go (the destructor does
// not run), ignores null, and is safe from several threads.
#include "framework/keep_until_exit.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace shardema {
namespace {

struct Flagged {
  explicit Flagged(bool* d) : destroyed(d) {}
  ~Flagged() { *destroyed = true; }
  bool* destroyed;
};

TEST(KeepUntilExit, KeepsTheObjectAliveAfterItsOwnersAreGone) {
  bool destroyed = false;
  const size_t before = KeptUntilExitCount();
  {
    auto p = std::make_shared<Flagged>(&destroyed);
    std::weak_ptr<Flagged> weak = p;
    KeepUntilExit(std::move(p));
    EXPECT_FALSE(weak.expired());
  }
  EXPECT_FALSE(destroyed);
  EXPECT_EQ(KeptUntilExitCount(), before + 1);
  KeepUntilExit(nullptr);
  EXPECT_EQ(KeptUntilExitCount(), before + 1);
}

TEST(KeepUntilExit, KeepMovedTakesTheValueAndLeavesItEmpty) {
  const size_t before = KeptUntilExitCount();
  std::vector<float> v(16, 1.f);
  const float* data = v.data();
  KeepMovedUntilExit(std::move(v));
  EXPECT_TRUE(v.empty());  // moved-from
  EXPECT_EQ(KeptUntilExitCount(), before + 1);
  EXPECT_EQ(data[15], 1.f);  // still allocated
}

TEST(KeepUntilExit, SeveralThreads) {
  const size_t before = KeptUntilExitCount();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 100; ++i) KeepUntilExit(std::make_shared<std::vector<float>>(8));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(KeptUntilExitCount(), before + 400);
}

}  // namespace
}  // namespace shardema
