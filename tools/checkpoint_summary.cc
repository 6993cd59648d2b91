#include "tools/checkpoint_summary.h"

#include "checkpoint/slot_meta.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "checkpoint/posix_file.h"
#include "framework/byte_size.h"

namespace shardema::tools {
namespace {

using json = nlohmann::json;

std::string Compact(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ShapeText(const json& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + Compact(shape[i]);
  return s + "]";
}

// Thousands separators: 1234567 -> "1,234,567".
std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Truncated(std::string s, size_t max_chars) {
  if (s.size() > max_chars) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

}  // namespace

std::string FormatEmaConfig(const json& config) {
  if (config.is_null()) return "";
  if (!config.is_object()) return Compact(config);
  // Fields of EmaConfig::ToJson that only matter for some schedule kinds.
  static const std::set<std::string> kKindSpecific = {"decay",     "inv_gamma",         "power",
                                                      "min_decay", "update_after_step", "gamma",
                                                      "sigma_rel", "half_life_steps",   "rampup"};
  const std::string kind = config.contains("kind") && config.at("kind").is_string()
                               ? config.at("kind").get<std::string>()
                               : std::string();
  std::set<std::string> shown;
  if (kind == "constant" || kind == "warmup") shown = {"decay"};
  if (kind == "power_warmup")
    shown = {"decay", "inv_gamma", "power", "min_decay", "update_after_step"};
  if (kind == "power_function") shown = {"gamma", "sigma_rel"};
  if (kind == "half_life") shown = {"half_life_steps", "rampup"};
  const bool known_kind = !shown.empty();
  std::string out = kind;
  auto add = [&](const std::string& k, const json& v) {
    out += (out.empty() ? "" : " ") + k + "=" + Compact(v);
  };
  for (const char* k : {"decay", "inv_gamma", "power", "min_decay", "update_after_step", "gamma",
                        "sigma_rel", "half_life_steps", "rampup"}) {
    if (config.contains(k) && (!known_kind || shown.count(k))) add(k, config.at(k));
  }
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string& k = it.key();
    if (k == "kind" || kKindSpecific.count(k)) continue;
    if (k == "correct_interval" && it.value() == json(true)) continue;  // the default
    if (k == "buffer_rules" && it.value().is_array() && it.value().empty()) continue;
    add(k, it.value());
  }
  return out;
}

std::string FormatCounters(const json& counters) {
  if (counters.is_null()) return "";
  if (!counters.is_object()) return Compact(counters);
  std::string out;
  for (auto it = counters.begin(); it != counters.end(); ++it) {
    out += (out.empty() ? "" : " ") + it.key() + "=" + Compact(it.value());
  }
  return out;
}

StatusOr<json> SummarizeCheckpoint(const std::string& dir, const Manifest& m) {
  json s;
  s["dir"] = dir;
  s["step"] = m.step;
  s["world_size"] = m.world_size;
  s["format_version"] = m.format_version;
  s["chunk_bytes"] = m.chunk_bytes;
  s["num_parameters"] = m.layout.total_numel();
  s["units"] = json::array();
  s["tensors"] = json::array();
  for (const UnitLayout& u : m.layout.units()) {
    s["units"].push_back({{"name", u.name},
                          {"numel", u.numel},
                          {"padded_numel", u.padded_numel},
                          {"shard_numel", u.shard_numel}});
    for (const ParamLayout& p : u.params) {
      s["tensors"].push_back(
          {{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"unit", u.name}});
    }
  }
  s["slots"] = json::array();
  for (const SlotEntry& e : m.slots) {
    json j = {{"name", e.name},
              {"dtype", DTypeName(e.dtype)},
              {"bytes_per_rank", e.bytes_per_rank},
              {"bytes_total", e.bytes_per_rank * uint64_t(m.world_size)}};
    ASSIGN_OR_RETURN(
        const SlotMeta sm,
        FindSlotMeta(m.meta, e.name, "manifest '" + JoinPath(dir, kManifestName) + "'"));
    if (!sm.config.is_null()) j["ema"] = sm.config;
    if (!sm.progress.is_null()) j["counters"] = sm.progress;
    s["slots"].push_back(j);
  }
  s["buffers"] = json::array();
  for (const BufferEntry& b : m.buffers) {
    s["buffers"].push_back(
        {{"name", b.name}, {"shape", b.shape}, {"dtype", DTypeName(b.dtype)}, {"bytes", b.bytes}});
  }
  s["files"] = json::array();
  uint64_t total = 0;
  for (const FileEntry& f : m.files) {
    s["files"].push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}});
    total += f.bytes;
  }
  s["bytes_total"] = total;
  s["meta"] = m.meta;
  return s;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows,
                        const std::string& indent) {
  std::vector<size_t> widths;
  for (const auto& r : rows) {
    if (widths.size() < r.size()) widths.resize(r.size(), 0);
    for (size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line = indent;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(widths[c] - r[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string FormatSummary(const json& s) {
  std::ostringstream o;
  const int64_t world = s.at("world_size").get<int64_t>();
  o << FormatTable(
      {{"checkpoint", s.at("dir").get<std::string>()},
       {"step", Compact(s.at("step"))},
       {"world size", std::to_string(world) + (world == 1 ? " rank" : " ranks")},
       {"model", Grouped(s.at("num_parameters").get<int64_t>()) + " parameters in " +
                     std::to_string(s.at("tensors").size()) + " tensors, " +
                     std::to_string(s.at("units").size()) + " units"},
       {"size", FormatBytes(s.at("bytes_total").get<uint64_t>()) + " in " +
                    std::to_string(s.at("files").size()) + " rank files (checksum chunks of " +
                    FormatBytes(s.at("chunk_bytes").get<uint64_t>()) + ")"}},
      "");

  std::vector<std::vector<std::string>> rows = {{"name", "shape", "numel", "unit"}};
  for (const json& t : s.at("tensors")) {
    rows.push_back({t.at("name").get<std::string>(), ShapeText(t.at("shape")),
                    Grouped(t.at("numel").get<int64_t>()), t.at("unit").get<std::string>()});
  }
  o << "\ntensors\n" << FormatTable(rows);

  rows = {{"name", "dtype", "per rank", "total", "EMA hyperparameters", "counters"}};
  for (const json& sl : s.at("slots")) {
    rows.push_back({sl.at("name").get<std::string>(), sl.at("dtype").get<std::string>(),
                    FormatBytes(sl.at("bytes_per_rank").get<uint64_t>()),
                    FormatBytes(sl.at("bytes_total").get<uint64_t>()),
                    sl.contains("ema") ? FormatEmaConfig(sl.at("ema")) : "",
                    sl.contains("counters") ? FormatCounters(sl.at("counters")) : ""});
  }
  o << "\nslots\n" << FormatTable(rows);

  if (!s.at("buffers").empty()) {
    rows = {{"name", "shape", "dtype", "bytes"}};
    for (const json& b : s.at("buffers")) {
      rows.push_back({b.at("name").get<std::string>(), ShapeText(b.at("shape")),
                      b.at("dtype").get<std::string>(),
                      FormatBytes(b.at("bytes").get<uint64_t>())});
    }
    o << "\nreplicated buffers (in rank_00000.bin)\n" << FormatTable(rows);
  }

  rows = {};
  for (const json& f : s.at("files")) {
    rows.push_back({f.at("name").get<std::string>(), FormatBytes(f.at("bytes").get<uint64_t>())});
  }
  rows.push_back({"total", FormatBytes(s.at("bytes_total").get<uint64_t>())});
  o << "\nrank files\n" << FormatTable(rows);

  const json& meta = s.at("meta");
  if (meta.is_object() && !meta.empty()) {
    rows = {};
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (it.key() == "ema") continue;  // shown per slot above
      rows.push_back({it.key() + ":", Truncated(Compact(it.value()), 160)});
    }
    o << "\nmeta (ckpt inspect --json prints all of it)\n" << FormatTable(rows);
  }
  return o.str();
}

}  // namespace shardema::tools
