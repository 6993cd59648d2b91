#include "examples/trainer_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "examples/test_files.h"
#include "framework/self_communicator.h"

namespace shardema::examples {

StatusOr<TrainRun> RunTrainer(const TrainConfig& config, const MakeModel& make,
                              Communicator* comm) {
  TrainRun r;
  ASSIGN_OR_RETURN(r.trainer, Trainer::Create(config, make(), comm));
  ASSIGN_OR_RETURN(r.summary, r.trainer->Run());
  return r;
}

std::vector<std::vector<FullTensor>> GatherState(const Trainer& t) {
  std::vector<std::vector<FullTensor>> out;
  auto m = t.store()->GatherSlotToRank(t.store()->master(), 0);
  EXPECT_TRUE(m.ok()) << m.status();
  out.push_back(m.ok() ? *m : std::vector<FullTensor>{});
  for (size_t i = 0; t.emas() != nullptr && i < t.emas()->size(); ++i) {
    auto e = t.emas()->CopyTo(t.emas()->config(i).name, 0);
    EXPECT_TRUE(e.ok()) << e.status();
    out.push_back(e.ok() ? *e : std::vector<FullTensor>{});
  }
  return out;
}

StatusOr<WorldAndSerial> RunWorldAndSerial(const TrainConfig& config, const MakeModel& make,
                                           Communicator* world) {
  WorldAndSerial r;
  ASSIGN_OR_RETURN(r.world, RunTrainer(config, make, world));
  r.world_state = GatherState(*r.world.trainer);
  if (world->rank() != 0) return r;
  SelfCommunicator self;
  ASSIGN_OR_RETURN(r.serial, RunTrainer(config, make, &self));
  r.serial_state = GatherState(*r.serial.trainer);
  return r;
}

double RelErr(double got, double want, double floor) {
  return std::fabs(got - want) / std::max(std::fabs(want), floor);
}

double MaxRelDiff(const std::vector<std::vector<FullTensor>>& a,
                  const std::vector<std::vector<FullTensor>>& b, const SkipElement& skip) {
  double err = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    EXPECT_EQ(a[s].size(), b[s].size());
    for (size_t t = 0; t < std::min(a[s].size(), b[s].size()); ++t) {
      EXPECT_EQ(a[s][t].name, b[s][t].name);
      EXPECT_EQ(a[s][t].data.size(), b[s][t].data.size());
      for (size_t i = 0; i < std::min(a[s][t].data.size(), b[s][t].data.size()); ++i) {
        if (skip && skip(a[s][t].name, i)) continue;
        err = std::max(err, RelErr(a[s][t].data[i], b[s][t].data[i]));
      }
    }
  }
  return err;
}

bool BitEqual(const std::vector<std::vector<FullTensor>>& a,
              const std::vector<std::vector<FullTensor>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t s = 0; s < a.size(); ++s) {
    if (a[s].size() != b[s].size()) return false;
    for (size_t t = 0; t < a[s].size(); ++t) {
      const std::vector<float>& x = a[s][t].data;
      const std::vector<float>& y = b[s][t].data;
      if (a[s][t].name != b[s][t].name || x.size() != y.size() ||
          std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

std::vector<float> ReadF32(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsTensor* t = f.Find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(NumElements(t->shape)));
  Status st = f.ReadTensor(name, DType::kF32, v.data(), int64_t(v.size()));
  EXPECT_TRUE(st.ok()) << st;
  return v;
}

std::vector<std::string> RawEmaShards(const Trainer& t) {
  std::vector<std::string> out;
  const EmaSlots& e = *t.emas();
  for (size_t i = 0; i < e.size(); ++i) {
    const int64_t n = e.subset(i) ? e.subset(i)->numel() : t.store()->layout().local_numel();
    out.emplace_back(static_cast<const char*>(e.raw_shard(i)),
                     size_t(n) * DTypeSize(EmaStorageDType(e.storage(i))));
  }
  return out;
}

void ExpectReshardBitExact(const TrainFn& train, Communicator* world, const std::string& dir,
                           bool world_first, size_t states) {
  SelfCommunicator self;
  Communicator* from = world_first ? world : static_cast<Communicator*>(&self);
  Communicator* to = world_first ? static_cast<Communicator*>(&self) : world;
  std::vector<std::vector<FullTensor>> saved, resumed;
  if (world_first || world->rank() == 0) {
    StatusOr<TrainRun> r = train("--steps 5 --ckpt-dir " + dir, from);
    ASSERT_TRUE(r.ok()) << r.status();
    saved = GatherState(*r->trainer);
  }
  ASSERT_TRUE(world->Barrier().ok());
  if (!world_first || world->rank() == 0) {
    StatusOr<TrainRun> r = train("--steps 5 --resume --ckpt-dir " + dir, to);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->summary.start_step, 5);
    EXPECT_EQ(r->summary.resume.resharded, world->world_size() != 1);
    resumed = GatherState(*r->trainer);
  }
  ASSERT_TRUE(world->Barrier().ok());
  if (world->rank() != 0) return;
  ASSERT_EQ(saved.size(), states);
  EXPECT_TRUE(BitEqual(resumed, saved)) << (world_first ? "W -> 1" : "1 -> W");
}

std::vector<Status> ResumeWithChangedFlag(const TrainFn& train, Communicator* world,
                                          const std::string& dir, std::string args,
                                          const std::string& from, const std::string& to,
                                          const std::vector<std::string>& extras) {
  EXPECT_TRUE(train("--steps 2 --ckpt-dir " + dir, world).ok());
  const size_t at = args.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in " << args;
  if (at != std::string::npos) args.replace(at, from.size(), to);
  args += " --steps 4 --resume --ckpt-dir " + dir;
  std::vector<Status> out;
  for (const std::string& extra : extras) {
    out.push_back(CreateTrainer(ParseTestConfig(args + extra), world).status());
  }
  return out;
}

StraightAndHalves ExpectHalvesResumeBitExactly(const TrainFn& train, Communicator* world,
                                               const std::string& straight_dir,
                                               const std::string& halves_dir) {
  StraightAndHalves r;
  r.straight = train("--steps 8 --ckpt-dir " + straight_dir, world);
  EXPECT_TRUE(r.straight.ok()) << r.straight.status();
  EXPECT_TRUE(train("--steps 4 --save-every 2 --ckpt-dir " + halves_dir, world).ok());
  r.second = train("--steps 8 --resume --ckpt-dir " + halves_dir, world);
  EXPECT_TRUE(r.second.ok()) << r.second.status();
  if (!r.straight.ok() || !r.second.ok()) return r;
  EXPECT_EQ(r.second->summary.start_step, 4);
  EXPECT_EQ(RawEmaShards(*r.second->trainer), RawEmaShards(*r.straight->trainer));
  return r;
}

}  // namespace shardema::examples
