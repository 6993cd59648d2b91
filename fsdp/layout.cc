#include "fsdp/layout.h"

#include <algorithm>
#include <set>

namespace shardema {

StatusOr<StoreLayout> StoreLayout::Build(const std::vector<UnitSpec>& units, int world_size,
                                         int64_t shard_align) {
  if (world_size < 1) return InvalidArgument("world size must be >= 1, got ", world_size);
  if (shard_align < 1) return InvalidArgument("shard alignment must be >= 1, got ", shard_align);
  StoreLayout l;
  l.world_size_ = world_size;
  l.shard_align_ = shard_align;
  std::set<std::string> unit_names, param_names;
  for (const UnitSpec& us : units) {
    if (us.name.empty()) return InvalidArgument("unit name is empty");
    if (!unit_names.insert(us.name).second)
      return InvalidArgument("duplicate unit name '", us.name, "'");
    UnitLayout u;
    u.name = us.name;
    for (const ParamSpec& ps : us.params) {
      if (ps.name.empty()) return InvalidArgument("unit '", us.name, "': parameter name is empty");
      if (!param_names.insert(ps.name).second) {
        return InvalidArgument("duplicate parameter name '", ps.name, "'");
      }
      for (int64_t d : ps.shape) {
        if (d < 0)
          return InvalidArgument("parameter '", ps.name, "': negative dim in shape ",
                                 ShapeToString(ps.shape));
      }
      ParamLayout p{ps.name, ps.shape, u.numel, NumElements(ps.shape)};
      u.numel += p.numel;
      u.params.push_back(std::move(p));
    }
    u.shard_numel = ShardNumel(u.numel, world_size, shard_align);
    u.padded_numel = u.shard_numel * world_size;
    l.local_offsets_.push_back(l.local_numel_);
    l.local_numel_ += u.shard_numel;
    l.units_.push_back(std::move(u));
  }
  return l;
}

int64_t StoreLayout::ShardNumel(int64_t numel, int world_size, int64_t shard_align) {
  const int64_t shard = (numel + world_size - 1) / world_size;
  return (shard + shard_align - 1) / shard_align * shard_align;
}

int64_t StoreLayout::total_numel() const {
  int64_t n = 0;
  for (const UnitLayout& u : units_) n += u.numel;
  return n;
}

StatusOr<std::pair<size_t, size_t>> StoreLayout::Find(const std::string& name) const {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t p = 0; p < units_[u].params.size(); ++p) {
      if (units_[u].params[p].name == name) return std::make_pair(u, p);
    }
  }
  return NotFound("parameter '", name, "' is not in the store layout");
}

std::vector<ShardPiece> StoreLayout::ShardRange(size_t unit, int64_t begin, int64_t end) const {
  std::vector<ShardPiece> out;
  const UnitLayout& u = units_[unit];
  end = std::min(end, u.padded_numel);
  if (u.shard_numel == 0) return out;
  while (begin < end) {
    int r = int(begin / u.shard_numel);
    int64_t rank_end = std::min(end, (r + 1) * u.shard_numel);
    out.push_back(ShardPiece{r, begin, rank_end, local_offsets_[unit] + begin - r * u.shard_numel});
    begin = rank_end;
  }
  return out;
}

std::vector<LocalParamPiece> StoreLayout::LocalPieces(int rank) const {
  std::vector<LocalParamPiece> out;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitLayout& unit = units_[u];
    const int64_t lo = int64_t(rank) * unit.shard_numel, hi = lo + unit.shard_numel;
    for (size_t p = 0; p < unit.params.size(); ++p) {
      const ParamLayout& pl = unit.params[p];
      const int64_t b = std::max(lo, pl.offset), e = std::min(hi, pl.offset + pl.numel);
      if (b >= e) continue;
      out.push_back(LocalParamPiece{u, p, b - pl.offset, e - b, local_offsets_[u] + b - lo});
    }
  }
  return out;
}

StatusOr<StoreLayout> StoreLayout::WithWorldSize(int world_size) const {
  std::vector<UnitSpec> specs;
  for (const UnitLayout& u : units_) {
    UnitSpec s{u.name, {}};
    for (const ParamLayout& p : u.params) s.params.push_back(ParamSpec{p.name, p.shape});
    specs.push_back(std::move(s));
  }
  return Build(specs, world_size);
}

bool StoreLayout::SameModel(const StoreLayout& o) const {
  if (units_.size() != o.units_.size()) return false;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitLayout &a = units_[u], &b = o.units_[u];
    if (a.name != b.name || a.params.size() != b.params.size()) return false;
    for (size_t p = 0; p < a.params.size(); ++p) {
      if (a.params[p].name != b.params[p].name || a.params[p].shape != b.params[p].shape)
        return false;
    }
  }
  return true;
}

nlohmann::json StoreLayout::ToJson() const {
  nlohmann::json j;
  j["world_size"] = world_size_;
  j["shard_align"] = shard_align_;
  j["units"] = nlohmann::json::array();
  for (const UnitLayout& u : units_) {
    nlohmann::json ju = {{"name", u.name},
                         {"numel", u.numel},
                         {"padded_numel", u.padded_numel},
                         {"shard_numel", u.shard_numel},
                         {"params", nlohmann::json::array()}};
    for (const ParamLayout& p : u.params) {
      ju["params"].push_back(
          {{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}, {"numel", p.numel}});
    }
    j["units"].push_back(std::move(ju));
  }
  return j;
}

StatusOr<StoreLayout> StoreLayout::FromJson(const nlohmann::json& j) {
  std::vector<UnitSpec> specs;
  int world = 0;
  int64_t align = 1;  // layouts written before the shard alignment
  try {
    world = j.at("world_size").get<int>();
    if (j.contains("shard_align")) align = j.at("shard_align").get<int64_t>();
    for (const auto& ju : j.at("units")) {
      UnitSpec s{ju.at("name").get<std::string>(), {}};
      for (const auto& jp : ju.at("params")) {
        s.params.push_back(
            ParamSpec{jp.at("name").get<std::string>(), jp.at("shape").get<Shape>()});
      }
      specs.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLoss("store layout JSON is malformed: ", e.what());
  }
  StatusOr<StoreLayout> l = Build(specs, world, align);
  if (!l.ok()) return DataLoss("store layout JSON is inconsistent: ", l.status().message());
  // The stored offsets and sizes must agree with what the specs imply.
  try {
    for (size_t u = 0; u < specs.size(); ++u) {
      const auto& ju = j.at("units")[u];
      const UnitLayout& lu = l->units()[u];
      if (ju.at("numel").get<int64_t>() != lu.numel ||
          ju.at("padded_numel").get<int64_t>() != lu.padded_numel ||
          ju.at("shard_numel").get<int64_t>() != lu.shard_numel) {
        return DataLoss("store layout JSON: unit '", lu.name,
                        "' sizes do not match its parameters");
      }
      for (size_t p = 0; p < lu.params.size(); ++p) {
        if (ju.at("params")[p].at("offset").get<int64_t>() != lu.params[p].offset) {
          return DataLoss("store layout JSON: parameter '", lu.params[p].name, "' offset ",
                          ju.at("params")[p].at("offset").get<int64_t>(), " expected ",
                          lu.params[p].offset);
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLoss("store layout JSON is malformed: ", e.what());
  }
  return l;
}

}  // namespace shardema
