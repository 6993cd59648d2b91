// UnitRunner at 1, 2 and 3 ranks (mpi_test): bit-identical to the hand-written protocol,
// prefetch / release / reduce-scatter order, tied units against an unsharded serial reference,
// recomputation, gradient accumulation, unit memory bounds (schedule errors, phase times, callback
// errors and ParamByName: unit_runner_api_test.cc).
//
// The test model is a chain of units, unit u = {"u{u}.weight" [D, D], "u{u}.bias" [D]}, each use
// computing y = tanh(x W^T + b) on its rows; the loss of a rank is the mean over its local rows of
// sum_k y[k] * c[k] (c a fixed vector). A unit used twice applies the same W and b again (tied
// weights).
#include "fsdp/unit_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "fsdp/unit_runner_test_util.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using ::shardema::testing::World;
using namespace unit_runner_test;  // NOLINT

float InputValue(int64_t micro, int64_t row, int64_t k) {
  return float(((micro * 11 + row * 7 + k * 3) % 13) - 6) * 0.15f;
}
float LossWeight(int64_t k) { return 0.5f + 0.25f * float(k); }

// The chain model as runner callbacks over `rows` rows starting at global row `row0`.
class Chain {
 public:
  Chain(size_t uses, int64_t rows, int64_t row0) : rows_(rows), row0_(row0) {
    in_.resize(uses + 1);
    out_.resize(uses);
  }
  void SetMicroBatch(int64_t micro) {
    in_[0].resize(size_t(rows_ * kDim));
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t k = 0; k < kDim; ++k)
        in_[0][size_t(r * kDim + k)] = InputValue(micro, row0_ + r, k);
    }
  }
  // loss normaliser: the rows the loss mean is over (local rows for the store contract).
  void set_norm(int64_t n) { norm_ = n; }
  double loss() const { return loss_; }

  UnitCallbacks Callbacks() {
    UnitCallbacks cb;
    cb.forward = [this](const UnitCall& c, const std::vector<TensorView>& p) {
      return Forward(c, p);
    };
    cb.backward = [this](const UnitCall& c, const std::vector<TensorView>& p,
                         const std::vector<TensorView>& g) { return Backward(c, p, g); };
    cb.loss = [this](int64_t) { return Loss(); };
    return cb;
  }

  Status Forward(const UnitCall& c, const std::vector<TensorView>& p) {
    const float* w = p[0].as<const float>();
    const float* b = p[1].as<const float>();
    std::vector<float> y(size_t(rows_ * kDim));
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t o = 0; o < kDim; ++o) {
        float z = b[o];
        for (int64_t k = 0; k < kDim; ++k) z += in_[c.use][size_t(r * kDim + k)] * w[o * kDim + k];
        y[size_t(r * kDim + o)] = std::tanh(z);
      }
    }
    if (c.mode == ForwardMode::kRecompute && in_[c.use + 1] != y) {
      return Internal("recomputed output of use ", c.use, " differs");
    }
    in_[c.use + 1] = y;
    // What the backward needs; dropped when the runner will recompute it.
    if (c.mode == ForwardMode::kForwardNoSave) {
      out_[c.use].clear();
    } else {
      out_[c.use] = y;
    }
    return Status::Ok();
  }

  Status Loss() {
    const std::vector<float>& y = in_.back();
    dy_.assign(y.size(), 0.f);
    loss_ = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t k = 0; k < kDim; ++k) {
        loss_ += double(y[size_t(r * kDim + k)] * LossWeight(k));
        dy_[size_t(r * kDim + k)] = LossWeight(k) / float(norm_);
      }
    }
    loss_ /= double(norm_);
    return Status::Ok();
  }

  Status Backward(const UnitCall& c, const std::vector<TensorView>& p,
                  const std::vector<TensorView>& g) {
    RETURN_IF_ERROR(BackwardInput(c, p));
    return BackwardParams(c, g);
  }

  // The split backward (UnitCallbacks::backward_input / backward_params): dz and dx from the
  // weights first, then the parameter gradients from dz and the input alone.
  UnitCallbacks SplitCallbacks() {
    UnitCallbacks cb = Callbacks();
    cb.backward = nullptr;
    cb.backward_input = [this](const UnitCall& c, const std::vector<TensorView>& p) {
      return BackwardInput(c, p);
    };
    cb.backward_params = [this](const UnitCall& c, const std::vector<TensorView>& g) {
      return BackwardParams(c, g);
    };
    return cb;
  }

  Status BackwardInput(const UnitCall& c, const std::vector<TensorView>& p) {
    if (out_[c.use].size() != size_t(rows_ * kDim)) {
      return Internal("backward of use ", c.use, " without saved activations");
    }
    const float* w = p[0].as<const float>();
    dz_.assign(dy_.size(), 0.f);
    std::vector<float> dx(dy_.size(), 0.f);
    for (size_t i = 0; i < dz_.size(); ++i) {
      dz_[i] = dy_[i] * (1.f - out_[c.use][i] * out_[c.use][i]);
    }
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t k = 0; k < kDim; ++k) {
        for (int64_t o = 0; o < kDim; ++o) {
          dx[size_t(r * kDim + k)] += dz_[size_t(r * kDim + o)] * w[o * kDim + k];
        }
      }
    }
    dy_ = dx;
    out_[c.use].clear();  // used: a stale activation must not survive into the next micro-batch
    return Status::Ok();
  }

  Status BackwardParams(const UnitCall& c, const std::vector<TensorView>& g) {
    float* gw = g[0].as<float>();
    float* gb = g[1].as<float>();
    for (int64_t o = 0; o < kDim; ++o) {
      float sb = 0;
      for (int64_t r = 0; r < rows_; ++r) sb += dz_[size_t(r * kDim + o)];
      gb[o] = c.accumulate ? gb[o] + sb : sb;
      for (int64_t k = 0; k < kDim; ++k) {
        float s = 0;
        for (int64_t r = 0; r < rows_; ++r) {
          s += dz_[size_t(r * kDim + o)] * in_[c.use][size_t(r * kDim + k)];
        }
        gw[o * kDim + k] = c.accumulate ? gw[o * kDim + k] + s : s;
      }
    }
    return Status::Ok();
  }

 private:
  int64_t rows_, row0_, norm_ = 1;
  std::vector<std::vector<float>> in_;   // in_[i]: input of use i; in_[uses]: the model output
  std::vector<std::vector<float>> out_;  // tanh outputs kept for the backward
  std::vector<float> dy_, dz_;
  double loss_ = 0;
};

Chain LocalChain(size_t uses) {
  const int w = World()->world_size(), r = World()->rank();
  Chain c(uses, kRows / w, r * (kRows / w));
  c.set_norm(kRows / w);
  return c;
}

std::vector<float> GradShard(const ShardedParameterStore& s) {
  const float* g = s.grad_shard();
  return std::vector<float>(g, g + s.layout().local_numel());
}

// The protocol as examples/mlp_model.cc hand-wrote it before the runner, for units 0..n-1.
Status HandWritten(ShardedParameterStore* s, Chain* chain) {
  const size_t n = s->num_units();
  ASSIGN_OR_RETURN(GatherHandle next, s->GatherAsync(0));
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(std::vector<TensorView> views, next.Wait());
    if (i + 1 < n) {
      ASSIGN_OR_RETURN(next, s->GatherAsync(i + 1));
    }
    UnitCall c;
    c.use = c.unit = i;
    RETURN_IF_ERROR(chain->Forward(c, views));
    if (i + 1 < n) RETURN_IF_ERROR(s->ReleaseAfterForward(i));
  }
  RETURN_IF_ERROR(chain->Loss());
  std::optional<ReduceScatterHandle> pending;
  for (size_t k = n; k-- > 0;) {
    ASSIGN_OR_RETURN(std::vector<TensorView> views, s->WaitGather(k));
    if (k > 0) RETURN_IF_ERROR(s->GatherAsync(k - 1).status());
    ASSIGN_OR_RETURN(std::vector<TensorView> grads, s->UnitGrads(k));
    UnitCall c;
    c.use = c.unit = k;
    RETURN_IF_ERROR(chain->Backward(c, views, grads));
    RETURN_IF_ERROR(s->Release(k));
    ASSIGN_OR_RETURN(ReduceScatterHandle rs, s->ReduceScatterGradsAsync(k));
    if (pending) RETURN_IF_ERROR(pending->Wait());
    pending = rs;
  }
  if (pending) RETURN_IF_ERROR(pending->Wait());
  return Status::Ok();
}

// The gradient shard of the hand-written protocol on `s` (micro-batch 0, from zero).
std::vector<float> HandWrittenGrads(ShardedParameterStore* s) {
  Chain a = LocalChain(kUnits);
  a.SetMicroBatch(0);
  EXPECT_TRUE(s->ZeroGrad().ok());
  EXPECT_TRUE(HandWritten(s, &a).ok());
  return GradShard(*s);
}

TEST(UnitRunnerTest, BitIdenticalToHandWrittenProtocol) {
  for (bool reshard : {true, false}) {
    auto s = MakeStore(reshard, World());
    ASSERT_NE(s, nullptr);
    Chain a = LocalChain(kUnits), b = LocalChain(kUnits);
    a.SetMicroBatch(0);
    b.SetMicroBatch(0);
    ASSERT_TRUE(s->ZeroGrad().ok());
    ASSERT_TRUE(HandWritten(s.get(), &a).ok());
    const std::vector<float> want = GradShard(*s);
    s->ReshardAll();
    UnitRunner runner = MakeRunner(s.get(), Sequential());
    ASSERT_TRUE(s->ZeroGrad().ok());
    ASSERT_TRUE(runner.ForwardBackward(b.Callbacks()).ok());
    EXPECT_EQ(a.loss(), b.loss());
    const std::vector<float> got = GradShard(*s);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "reshard_after_forward=" << reshard;
    bool any_nonzero = false;
    for (float v : got) any_nonzero |= v != 0.f;
    // Ranks whose shards hold real elements (not only alignment padding) see gradients.
    bool holds_elements = false;
    for (const UnitLayout& u : s->layout().units()) {
      holds_elements |= int64_t(s->rank()) * u.shard_numel < u.numel;
    }
    if (holds_elements) {
      EXPECT_TRUE(any_nonzero);
    }
    EXPECT_TRUE(s->CheckGradsReady().ok());
  }
}

TEST(UnitRunnerTest, PrefetchReleaseAndReduceScatterOrder) {
  for (bool reshard : {true, false}) {
    auto s = MakeStore(reshard, World());
    ASSERT_NE(s, nullptr);
    Chain chain = LocalChain(kUnits);
    chain.SetMicroBatch(0);
    UnitRunner runner = MakeRunner(s.get(), Sequential());
    std::vector<std::string> trace;
    runner.set_trace(&trace);
    UnitCallbacks cb = chain.Callbacks();
    int checked = 0;
    const auto forward = cb.forward;
    cb.forward = [&](const UnitCall& c, const std::vector<TensorView>& p) {
      // While use i computes, unit i+1 is already gathered (prefetch); unit i-1 was released
      // (or cached at zero references without reshard_after_forward).
      if (c.use + 1 < kUnits) {
        EXPECT_TRUE(s->unit_buffer_live(c.use + 1)) << c.use;
      }
      if (c.use > 0) {
        EXPECT_EQ(s->gather_refs(c.use - 1), 0) << c.use;
        EXPECT_EQ(s->unit_buffer_live(c.use - 1), !reshard) << c.use;
      }
      ++checked;
      return forward(c, p);
    };
    const auto backward = cb.backward;
    cb.backward = [&](const UnitCall& c, const std::vector<TensorView>& p,
                      const std::vector<TensorView>& g) {
      if (c.use > 0) {
        EXPECT_GE(s->gather_refs(c.use - 1), 1) << c.use;  // prefetched
      }
      ++checked;
      return backward(c, p, g);
    };
    ASSERT_TRUE(s->ZeroGrad().ok());
    ASSERT_TRUE(runner.ForwardBackward(cb).ok());
    EXPECT_EQ(checked, 6);
    // Forward: unit u+1 is prefetched while u computes; the last unit stays gathered for the
    // backward, which re-gathers in reverse order and overlaps reduce-scatters.
    // clang-format off
    const std::vector<std::string> want = {
        "gather 0", "wait 0", "gather 1", "forward 0", "release_fwd 0",
        "wait 1", "gather 2", "forward 1", "release_fwd 1",
        "wait 2", "forward 2",
        "wait 2", "gather 1", "backward 2", "release 2", "rs 2",
        "wait 1", "gather 0", "backward 1", "release 1", "rs 1", "rs_wait 2",
        "wait 0", "backward 0", "release 0", "rs 0", "rs_wait 1", "rs_wait 0"};
    // clang-format on
    EXPECT_EQ(trace, want);
    for (size_t u = 0; u < kUnits; ++u) {
      EXPECT_EQ(s->gather_refs(u), 0);
      EXPECT_EQ(s->micro_batches(u), 1);
    }
    // Eval forward: everything released at the end.
    trace.clear();
    ASSERT_TRUE(runner.Forward(cb).ok());
    EXPECT_EQ(trace.back(), "release_fwd 2");
    for (size_t u = 0; u < kUnits; ++u) EXPECT_EQ(s->gather_refs(u), 0);
  }
}

// With the ring reduce-scatter (which moves only inside Test()/Wait()), the collectives in flight
// while a callback computes complete through UnitCall::progress alone, before the runner waits
// for them; the gradients are those of the hand-written protocol on the same communicator.
TEST(UnitRunnerTest, CollectivesInFlightCompleteThroughProgressCalls) {
  CommOptions co;
  co.reduce_scatter_algorithm = ReduceScatterAlgorithm::kRing;
  co.ring_chunk_bytes = 8;  // several chunks per unit
  StatusOr<std::unique_ptr<MpiCommunicator>> ring = MpiCommunicator::Create(co);
  ASSERT_TRUE(ring.ok()) << ring.status();
  auto s = MakeStore(true, ring->get());
  ASSERT_NE(s, nullptr);
  const std::vector<float> want = HandWrittenGrads(s.get());
  Chain b = LocalChain(kUnits);
  b.SetMicroBatch(0);
  UnitRunner runner = MakeRunner(s.get(), Sequential());
  UnitCallbacks cb = b.Callbacks();
  const auto backward = cb.backward;
  int drained = 0;
  cb.backward = [&](const UnitCall& c, const std::vector<TensorView>& p,
                    const std::vector<TensorView>& g) {
    // In flight here: the prefetch gather of use c.use-1 and the reduce-scatter of the unit
    // after it. Every rank computes the same way, so polling alone completes them.
    bool complete = false;
    for (int i = 0; i < 10000000 && !complete; ++i) {
      c.progress();
      complete = s->ProgressCollectives() == 0;
    }
    EXPECT_TRUE(complete) << "use " << c.use;
    drained += complete ? 1 : 0;
    return backward(c, p, g);
  };
  ASSERT_TRUE(s->ZeroGrad().ok());
  ASSERT_TRUE(runner.ForwardBackward(cb).ok());
  EXPECT_EQ(drained, int(kUnits));
  const std::vector<float> got = GradShard(*s);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  EXPECT_TRUE(s->CheckGradsReady().ok());
}

// The serial reference: full parameters, all kRows rows on one chain, gradient of the mean loss.
std::vector<std::vector<float>> SerialGrads(const UnitSchedule& sched, int64_t micro) {
  std::vector<std::vector<float>> params(2 * kUnits), grads(2 * kUnits);
  std::vector<UnitSpec> units = ChainUnits();
  for (size_t u = 0; u < kUnits; ++u) {
    for (size_t p = 0; p < 2; ++p) {
      const ParamSpec& ps = units[u].params[p];
      ParamLayout pl;
      pl.name = ps.name;
      pl.numel = NumElements(ps.shape);
      params[2 * u + p].resize(size_t(pl.numel));
      grads[2 * u + p].assign(size_t(pl.numel), 0.f);
      EXPECT_TRUE(FillInit(pl, params[2 * u + p].data()).ok());
    }
  }
  auto views = [&](std::vector<std::vector<float>>& v, size_t u) {
    std::vector<TensorView> out(2);
    out[0].data = v[2 * u].data();
    out[0].shape = {kDim, kDim};
    out[1].data = v[2 * u + 1].data();
    out[1].shape = {kDim};
    return out;
  };
  Chain chain(sched.units.size(), kRows, 0);
  chain.set_norm(kRows);
  chain.SetMicroBatch(micro);
  std::vector<bool> written(kUnits, false);
  for (size_t i = 0; i < sched.units.size(); ++i) {
    UnitCall c;
    c.use = i;
    c.unit = sched.units[i];
    EXPECT_TRUE(chain.Forward(c, views(params, c.unit)).ok());
  }
  EXPECT_TRUE(chain.Loss().ok());
  for (size_t i = sched.units.size(); i-- > 0;) {
    UnitCall c;
    c.use = i;
    c.unit = sched.units[i];
    c.accumulate = written[c.unit];
    written[c.unit] = true;
    EXPECT_TRUE(chain.Backward(c, views(params, c.unit), views(grads, c.unit)).ok());
  }
  return grads;
}

// Gathers the gradient shard to rank 0 and compares it with `want` (per parameter, in order).
void ExpectGradsNear(ShardedParameterStore* s, const std::vector<std::vector<float>>& want) {
  StatusOr<std::vector<FullTensor>> full = s->GatherSlotToRank(s->grad_shard(), 0);
  ASSERT_TRUE(full.ok()) << full.status();
  if (s->rank() != 0) return;
  ASSERT_EQ(full->size(), want.size());
  for (size_t p = 0; p < want.size(); ++p) {
    ASSERT_EQ((*full)[p].data.size(), want[p].size());
    for (size_t i = 0; i < want[p].size(); ++i) {
      EXPECT_NEAR((*full)[p].data[i], want[p][i], 2e-6f + 1e-5f * std::fabs(want[p][i]))
          << (*full)[p].name << "[" << i << "]";
    }
  }
}

TEST(UnitRunnerTest, TiedUnitAccumulatesBothUsesBeforeOneReduceScatter) {
  auto s = MakeStore(true, World());
  ASSERT_NE(s, nullptr);
  Chain chain = LocalChain(4);
  chain.SetMicroBatch(0);
  UnitRunner runner = MakeRunner(s.get(), Tied());
  std::vector<std::string> trace;
  runner.set_trace(&trace);
  ASSERT_TRUE(s->ZeroGrad().ok());
  ASSERT_TRUE(runner.ForwardBackward(chain.Callbacks()).ok());
  EXPECT_EQ(std::count(trace.begin(), trace.end(), "rs 0"), 1);
  EXPECT_EQ(std::count(trace.begin(), trace.end(), "gather 0"), 3);  // fwd, fwd again, bwd
  EXPECT_EQ(s->micro_batches(0), 1);
  EXPECT_TRUE(s->CheckGradsReady().ok());
  const std::vector<std::vector<float>> want = SerialGrads(Tied(), 0);
  ExpectGradsNear(s.get(), want);
}

TEST(UnitRunnerTest, RecomputationGivesIdenticalGradients) {
  for (const UnitSchedule& base : {Sequential(), Tied()}) {
    auto s = MakeStore(true, World());
    ASSERT_NE(s, nullptr);
    std::vector<std::vector<float>> results;
    for (int variant = 0; variant < 3; ++variant) {
      UnitSchedule sched = base;
      if (variant == 1) sched.recompute.assign(sched.units.size(), true);
      if (variant == 2) {  // every other use
        sched.recompute.assign(sched.units.size(), false);
        for (size_t i = 0; i < sched.units.size(); i += 2) sched.recompute[i] = true;
      }
      Chain chain = LocalChain(sched.units.size());
      chain.SetMicroBatch(1);
      UnitRunner runner = MakeRunner(s.get(), sched);
      std::vector<std::string> trace;
      runner.set_trace(&trace);
      ASSERT_TRUE(s->ZeroGrad().ok());
      ASSERT_TRUE(runner.ForwardBackward(chain.Callbacks()).ok());
      const long recomputes = std::count_if(trace.begin(), trace.end(), [](const std::string& t) {
        return t.rfind("recompute", 0) == 0;
      });
      EXPECT_EQ(recomputes, variant == 0   ? 0
                            : variant == 1 ? long(sched.units.size())
                                           : long((sched.units.size() + 1) / 2));
      results.push_back(GradShard(*s));
    }
    for (int v = 1; v < 3; ++v) {
      EXPECT_EQ(std::memcmp(results[v].data(), results[0].data(), results[0].size() * 4), 0) << v;
    }
  }
}

TEST(UnitRunnerTest, StepAccumulatesMicroBatches) {
  constexpr int64_t kMicro = 3;
  auto s = MakeStore(false, World());
  ASSERT_NE(s, nullptr);
  Chain chain = LocalChain(4);
  UnitRunner runner = MakeRunner(s.get(), Tied());
  std::vector<int64_t> prepared;
  ASSERT_TRUE(runner
                  .Step(
                      kMicro,
                      [&](int64_t m) {
                        prepared.push_back(m);
                        chain.SetMicroBatch(m);
                        return Status::Ok();
                      },
                      chain.Callbacks())
                  .ok());
  EXPECT_EQ(prepared, (std::vector<int64_t>{0, 1, 2}));
  for (size_t u = 0; u < kUnits; ++u) EXPECT_EQ(s->micro_batches(u), kMicro);
  // The mean of the micro-batches' full-batch gradients.
  std::vector<std::vector<float>> want = SerialGrads(Tied(), 0);
  for (int64_t m = 1; m < kMicro; ++m) {
    std::vector<std::vector<float>> g = SerialGrads(Tied(), m);
    for (size_t p = 0; p < want.size(); ++p) {
      for (size_t i = 0; i < want[p].size(); ++i) want[p][i] += g[p][i];
    }
  }
  for (auto& p : want) {
    for (float& v : p) v /= float(kMicro);
  }
  ExpectGradsNear(s.get(), want);
  // A second Step starts from zero (no stale accumulation).
  ASSERT_TRUE(runner
                  .Step(
                      1,
                      [&](int64_t) {
                        chain.SetMicroBatch(0);
                        return Status::Ok();
                      },
                      chain.Callbacks())
                  .ok());
  ExpectGradsNear(s.get(), SerialGrads(Tied(), 0));
  EXPECT_FALSE(runner.Step(0, nullptr, chain.Callbacks()).ok());
}

TEST(UnitRunnerTest, OverwritingBackwardSkipsZeroingWithTheSameGradients) {
  for (const UnitSchedule& sched : {Sequential(), Tied()}) {
    auto s = MakeStore(true, World());
    ASSERT_NE(s, nullptr);
    Chain chain = LocalChain(sched.units.size());
    UnitRunner runner = MakeRunner(s.get(), sched);
    const auto prepare = [&](int64_t m) {
      chain.SetMicroBatch(m);
      return Status::Ok();
    };
    UnitCallbacks cb = chain.Callbacks();
    ASSERT_TRUE(runner.Step(2, prepare, cb).ok());
    const std::vector<float> want = GradShard(*s);  // padding included
    // The same step again: its unit gradient buffers are the first step's, reused unzeroed (the
    // chain assigns its first use's gradient, tied uses add), padding zeroed by the store.
    cb.backward_overwrites = true;
    ASSERT_TRUE(runner.Step(2, prepare, cb).ok());
    const std::vector<float> got = GradShard(*s);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << sched.units.size() << " uses";
  }
}

// Two optimizer steps of two micro-batches each (overwriting backward callbacks, split or not) on
// a fresh store with the given unit memory bound: the gradient shard, the unit buffers' peak and
// the runner's trace.
struct TwoSteps {
  std::vector<float> grads;
  int64_t unit_peak = 0;
  std::vector<std::string> trace;
};

TwoSteps RunTwoSteps(const UnitSchedule& sched, bool split, int64_t unit_memory_limit = 0) {
  TwoSteps out;
  auto s = MakeStore(true, World(), unit_memory_limit);
  if (s == nullptr) return out;
  Chain chain = LocalChain(sched.units.size());
  UnitRunner runner = MakeRunner(s.get(), sched);
  runner.set_trace(&out.trace);
  UnitCallbacks cb = split ? chain.SplitCallbacks() : chain.Callbacks();
  cb.backward_overwrites = true;
  const auto prepare = [&](int64_t m) {
    chain.SetMicroBatch(m);
    return Status::Ok();
  };
  for (int step = 0; step < 2; ++step) EXPECT_TRUE(runner.Step(2, prepare, cb).ok());
  out.grads = GradShard(*s);
  out.unit_peak = s->MemoryReport().back().bytes;  // "unit_peak"
  return out;
}

TEST(UnitRunnerTest, SplitBackwardGivesIdenticalGradientsWithTheParameterBufferReused) {
  for (const UnitSchedule& sched : {Sequential(), Tied()}) {
    std::vector<std::vector<float>> grads;
    std::vector<int64_t> peaks;
    for (bool split : {false, true}) {
      TwoSteps run = RunTwoSteps(sched, split);
      ASSERT_FALSE(run.grads.empty());
      grads.push_back(run.grads);
      peaks.push_back(run.unit_peak);
      const std::vector<std::string>& trace = run.trace;
      if (!split) continue;
      // The last use's input part, then its release, then its gradients.
      const size_t last = sched.units.size() - 1;
      const auto at = [&](const std::string& t) {
        return std::find(trace.begin(), trace.end(), t) - trace.begin();
      };
      EXPECT_LT(at("backward_input " + std::to_string(last)),
                at("release " + std::to_string(sched.units[last])));
      EXPECT_LT(at("release " + std::to_string(sched.units[last])),
                at("backward_params " + std::to_string(last)));
      EXPECT_EQ(std::count(trace.begin(), trace.end(), "backward 0"), 0);
      if (sched.units.size() != kUnits) continue;
      // The middle use: the previous reduce-scatter overlaps its input part and is waited
      // before the prefetch of use 0 takes memory, which overlaps its parameter part.
      const auto last_at = [&](const std::string& t) {
        return trace.rend() - std::find(trace.rbegin(), trace.rend(), t);  // in the last backward
      };
      EXPECT_LT(last_at("backward_input 1"), last_at("rs_wait 2"));
      EXPECT_LT(last_at("rs_wait 2"), last_at("gather 0"));
      EXPECT_LT(last_at("gather 0"), last_at("backward_params 1"));
      EXPECT_LT(last_at("backward_params 1"), last_at("rs 1"));
      // So the plain chain's units (all of one size) need two unit buffers at most: the
      // gathered and the prefetched unit in the forward; in the backward one unit's parameters
      // (then its gradient) and the previous unit's gradient, or the prefetched unit.
      const int64_t unit_bytes =
          MakeStore(true, World())->layout().units()[0].padded_numel * int64_t(sizeof(float));
      if (World()->world_size() > 1) {
        EXPECT_EQ(peaks.back(), 2 * unit_bytes);
      }
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)), 0)
        << sched.units.size() << " uses";
    // One rank gathers no buffers; with more the split needs at most the unsplit memory, and
    // less for the plain chain (each unit's gradient takes its parameter buffer).
    EXPECT_LE(peaks[1], peaks[0]);
    if (World()->world_size() > 1 && sched.units.size() == kUnits) {
      EXPECT_LT(peaks[1], peaks[0]);
    }
  }
}

TEST(UnitRunnerTest, AUnitMemoryBoundGathersAtTheUseWithIdenticalGradients) {
  // The plain chain's units are of one size: with a bound of one unit buffer no prefetch fits,
  // so every gather is issued at its use, after the previous unit's buffers went back (the
  // bound is then exceeded only by what a use itself needs).
  const int64_t unit_bytes =
      MakeStore(true, World())->layout().units()[0].padded_numel * int64_t(4);
  for (const UnitSchedule& sched : {Sequential(), Tied()}) {
    for (bool split : {false, true}) {
      std::vector<std::vector<float>> grads;
      std::vector<int64_t> peaks;
      std::vector<std::string> bounded_trace;
      for (int64_t limit : {int64_t(0), unit_bytes}) {
        TwoSteps run = RunTwoSteps(sched, split, limit);
        ASSERT_FALSE(run.grads.empty());
        grads.push_back(run.grads);
        peaks.push_back(run.unit_peak);
        if (limit > 0) bounded_trace = run.trace;
      }
      EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)), 0)
          << sched.units.size() << " uses, split " << split;
      if (World()->world_size() == 1) continue;  // one rank gathers nothing
      // What a use needs regardless of the bound: its parameters, then (split) or together with
      // them (unsplit) its gradient, plus the tied unit's gradient, which accumulates from the
      // last use to the first. Nothing beyond that: no prefetch on top.
      const bool tied = sched.units.size() != kUnits;
      const int64_t needed = ((split ? 1 : 2) + (tied ? 1 : 0)) * unit_bytes;
      EXPECT_EQ(peaks[1], needed) << sched.units.size() << " uses, split " << split;
      EXPECT_LT(peaks[1], peaks[0]) << sched.units.size() << " uses, split " << split;
      // Never two units gathered at once: each "gather u" follows the previous unit's release.
      int held = 0;
      for (const std::string& t : bounded_trace) {
        if (t.rfind("gather ", 0) == 0) ++held;
        if (t.rfind("release", 0) == 0) --held;
        EXPECT_LE(held, 1) << t;
      }
    }
  }
  // A bound below the largest unit buffer cannot work: refused at Create, naming the unit.
  StoreOptions o;
  o.unit_memory_limit_bytes = unit_bytes - 1;
  auto bad = ShardedParameterStore::Create(ChainUnits(), {}, World(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("below the largest unit buffer"), std::string::npos)
      << bad.status();
  o.unit_memory_limit_bytes = -2;
  EXPECT_EQ(ShardedParameterStore::Create(ChainUnits(), {}, World(), o).status().code(),
            StatusCode::kInvalidArgument);
  // kUnitMemoryLimitOneUnit is that one unit buffer, reported in bytes.
  o.unit_memory_limit_bytes = kUnitMemoryLimitOneUnit;
  auto one = ShardedParameterStore::Create(ChainUnits(), {}, World(), o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->options().unit_memory_limit_bytes, unit_bytes);
}

}  // namespace
}  // namespace shardema
