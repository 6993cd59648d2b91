// PhaseTimes: accumulation, the scoped timer (including a null sink and an early Stop), and the
// table's per-step figures and unaccounted rest.
#include "framework/phase_times.h"

#include <gtest/gtest.h>

#include <thread>

namespace shardema {
namespace {

TEST(PhaseTimesTest, AccumulatesAndFormats) {
  PhaseTimes t;
  t.Add(Phase::kForward, 30);
  t.Add(Phase::kForward, 10);
  t.Add(Phase::kOptimizer, 20);
  EXPECT_DOUBLE_EQ(t.ms(Phase::kForward), 40);
  const std::string table = t.Format(4, 100);
  // forward: 40 ms in all, 10 per step, 40% of 100 ms; "other" = 100 - 60.
  EXPECT_NE(table.find("forward                    40.0   10.000  40.0%"), std::string::npos)
      << table;
  EXPECT_NE(table.find("optimizer                  20.0    5.000  20.0%"), std::string::npos)
      << table;
  EXPECT_NE(table.find("other                      40.0   10.000  40.0%"), std::string::npos)
      << table;
}

TEST(PhaseTimesTest, ScopedPhaseAddsItsScopeOnce) {
  PhaseTimes t;
  {
    ScopedPhase p(&t, Phase::kSave);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const double ms = p.Stop();
    EXPECT_GE(ms, 2.0);
    EXPECT_DOUBLE_EQ(t.ms(Phase::kSave), ms);
    EXPECT_EQ(p.Stop(), 0.0);  // a second Stop (and the destructor) adds nothing
  }
  EXPECT_GE(t.ms(Phase::kSave), 2.0);
  const double before = t.ms(Phase::kSave);
  { ScopedPhase off(nullptr, Phase::kSave); }
  EXPECT_DOUBLE_EQ(t.ms(Phase::kSave), before);
  EXPECT_DOUBLE_EQ(t.ms(Phase::kEval), 0.0);
}

}  // namespace
}  // namespace shardema
