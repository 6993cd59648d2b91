#include "checkpoint/test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>

#include "checkpoint/checksum.h"

namespace shardema {
namespace ckpt_test {

std::vector<UnitSpec> TestModel() {
  return {
      {"embed", {{"embed.weight", {37, 5}}}},
      {"layers.0", {{"layers.0.weight", {13, 7}}, {"layers.0.bias", {13}}, {"layers.0.scale", {}}}},
      {"empty", {}},
      {"layers.1", {{"layers.1.weight", {1, 1}}, {"layers.1.none", {0, 4}}}},
      {"head", {{"head.weight", {3, 11}}, {"head.bias", {3}}}},
  };
}

std::vector<UnitSpec> TestModelWithBig(int64_t big_numel) {
  std::vector<UnitSpec> m = TestModel();
  m.insert(m.begin() + 2, UnitSpec{"big", {{"big.weight", {big_numel}}}});
  return m;
}

StoreLayout MakeLayout(const std::vector<UnitSpec>& model, int world) {
  return StoreLayout::Build(model, world).value();
}

std::vector<SlotSpec> DefaultSlots() {
  return {{"params", DType::kF32},
          {"exp_avg", DType::kF32},
          {"ema_0.999", DType::kF32},
          {"ema_bf16", DType::kBF16}};
}

uint32_t SlotSalt(const std::string& name) { return uint32_t(Xxh3(name.data(), name.size())); }

uint32_t ElementBits(uint32_t salt, size_t unit, int64_t elem, int64_t step) {
  uint64_t key[4] = {salt, uint64_t(unit), uint64_t(elem), uint64_t(step)};
  uint32_t h = uint32_t(Xxh3(key, sizeof(key)));
  // Keep it a finite, non-zero float / bf16: clear the top exponent bit pattern that would make
  // Inf/NaN and force a non-zero low byte.
  return (h & 0xbf7fffffu) | 0x00010001u;
}

std::vector<char> ExpectedSlotBytes(const StoreLayout& layout, int rank, const SlotSpec& slot,
                                    int64_t step) {
  const size_t dsize = DTypeSize(slot.dtype);
  std::vector<char> out(size_t(layout.local_numel()) * dsize, 0);
  const uint32_t salt = SlotSalt(slot.name);
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const UnitLayout& ul = layout.units()[u];
    for (int64_t i = 0; i < ul.shard_numel; ++i) {
      const int64_t g = int64_t(rank) * ul.shard_numel + i;
      if (g >= ul.numel) break;
      uint32_t bits = ElementBits(salt, u, g, step);
      char* p = out.data() + size_t(layout.local_offset(u) + i) * dsize;
      if (dsize == 4) {
        std::memcpy(p, &bits, 4);
      } else {
        uint16_t b16 = uint16_t(bits >> 16);
        std::memcpy(p, &b16, 2);
      }
    }
  }
  return out;
}

std::vector<float> ExpectedBuffer(const std::string& name, int64_t step) {
  std::vector<float> v(5);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float(step) + 0.25f * float(i) + (name.find('/') != std::string::npos ? 100.f : 0.f);
  return v;
}

nlohmann::json TestMeta(double ema_decay) {
  return {{"optimizer",
           {{"config",
             {{"kind", "adamw"}, {"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"weight_decay", 0.01}}},
            {"progress", {{"step", 17}, {"skipped_steps", 0}}}}},
          {"ema",
           {{"config",
             {{"slots",
               {{{"name", "ema_0.999"},
                 {"kind", "constant"},
                 {"decay", ema_decay},
                 {"interval", 1}}}}}},
            {"progress",
             {{"slots",
               {{{"name", "ema_0.999"},
                 {"num_updates", 17},
                 {"last_update_step", 17},
                 {"started_at", 0}}}}}}}},
          {"rng", {{"seed", 1234}}},
          {"data", {{"position", 4096}}}};
}

void MarkEmaNotStarted(nlohmann::json& meta, const std::string& slot, int64_t start_step,
                       const std::string& storage) {
  nlohmann::json config = {
      {"name", slot}, {"kind", "constant"}, {"decay", 0.9}, {"start_step", start_step}};
  if (!storage.empty()) config["storage"] = storage;
  meta["ema"]["config"]["slots"].push_back(config);
  meta["ema"]["progress"]["slots"].push_back(
      {{"name", slot}, {"num_updates", 0}, {"last_update_step", -1}, {"started_at", -1}});
}

void RebindViews(OwnedState& o) {
  for (size_t i = 0; i < o.state.slots.size(); ++i) o.state.slots[i].data = o.slot_data[i].data();
  for (size_t i = 0; i < o.state.buffers.size(); ++i)
    o.state.buffers[i].data = o.buffer_data[i].data();
}

static void AddBuffers(OwnedState& o, int64_t step, bool fill) {
  for (const char* name : {"bn.running_mean", "ema_0.999/bn.running_mean"}) {
    o.buffer_data.push_back(fill ? ExpectedBuffer(name, step) : std::vector<float>(5, -7.f));
    o.state.buffers.push_back(BufferView{name, {5}, DType::kF32, nullptr});
  }
}

std::vector<OwnedState> MakeStates(const StoreLayout& layout, const std::vector<SlotSpec>& slots,
                                   int64_t step, bool with_buffers) {
  std::vector<OwnedState> out(size_t(layout.world_size()));
  for (int r = 0; r < layout.world_size(); ++r) {
    OwnedState& o = out[size_t(r)];
    o.state.step = step;
    o.state.rank = r;
    o.state.layout = layout;
    o.state.meta = TestMeta(0.999);
    for (const SlotSpec& s : slots) {
      o.slot_data.push_back(ExpectedSlotBytes(layout, r, s, step));
      o.state.slots.push_back(SlotView{s.name, s.dtype, nullptr});
    }
    if (with_buffers) AddBuffers(o, step, true);
    RebindViews(o);
  }
  return out;
}

std::vector<CheckpointState> StatesOf(const std::vector<OwnedState>& owned) {
  std::vector<CheckpointState> out;
  for (const OwnedState& o : owned) out.push_back(o.state);
  return out;
}

OwnedState MakeDest(const StoreLayout& layout, int rank, const std::vector<SlotSpec>& slots,
                    bool with_buffers) {
  OwnedState o;
  o.state.rank = rank;
  o.state.layout = layout;
  for (const SlotSpec& s : slots) {
    o.slot_data.emplace_back(size_t(layout.local_numel()) * DTypeSize(s.dtype), char(0xAB));
    o.state.slots.push_back(SlotView{s.name, s.dtype, nullptr});
  }
  if (with_buffers) AddBuffers(o, 0, false);
  RebindViews(o);
  return o;
}

std::string NewTempDir(const std::string& tag) {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/ckpt_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* d = mkdtemp(buf.data());
  return d ? std::string(d) : std::string();
}

}  // namespace ckpt_test
}  // namespace shardema
