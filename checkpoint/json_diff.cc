#include "checkpoint/json_diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace shardema {

using nlohmann::json;

namespace {

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// The elements of `arr` by their "name", when every element is an object with a unique string name.
bool NamedElements(const json& arr, std::map<std::string, const json*>* out) {
  if (!arr.is_array() || arr.empty()) return false;
  for (const json& e : arr) {
    if (!e.is_object()) return false;
    auto it = e.find("name");
    if (it == e.end() || !it->is_string()) return false;
    if (!out->emplace(it->get<std::string>(), &e).second) return false;
  }
  return true;
}

bool Ignored(const std::string& key, const JsonDiffOptions& o) {
  return std::find(o.ignore_keys.begin(), o.ignore_keys.end(), key) != o.ignore_keys.end();
}

bool ScalarsEqual(const json& a, const json& b, const JsonDiffOptions& o) {
  if (a == b) return true;
  if (o.abs_tolerance > 0 && a.is_number() && b.is_number()) {
    return std::fabs(a.get<double>() - b.get<double>()) <= o.abs_tolerance;
  }
  return false;
}

void Diff(const json& a, const json& b, const std::string& path, const JsonDiffOptions& o,
          std::vector<JsonDifference>* out) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (Ignored(it.key(), o)) continue;
      auto jt = b.find(it.key());
      if (jt == b.end()) {
        out->push_back({Join(path, it.key()), true, false, it.value(), nullptr});
      } else {
        Diff(it.value(), *jt, Join(path, it.key()), o, out);
      }
    }
    for (auto jt = b.begin(); jt != b.end(); ++jt) {
      if (!Ignored(jt.key(), o) && a.find(jt.key()) == a.end()) {
        out->push_back({Join(path, jt.key()), false, true, nullptr, jt.value()});
      }
    }
    return;
  }
  std::map<std::string, const json*> na, nb;
  if (NamedElements(a, &na) && NamedElements(b, &nb)) {
    for (const json& e : a) {
      const std::string name = e.at("name").get<std::string>();
      auto jt = nb.find(name);
      if (jt == nb.end()) {
        out->push_back({Join(path, name), true, false, e, nullptr});
      } else {
        Diff(e, *jt->second, Join(path, name), o, out);
      }
    }
    for (const json& e : b) {
      const std::string name = e.at("name").get<std::string>();
      if (na.find(name) == na.end()) out->push_back({Join(path, name), false, true, nullptr, e});
    }
    return;
  }
  if (a.is_array() && b.is_array()) {
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      if (i >= b.size()) {
        out->push_back({p, true, false, a[i], nullptr});
      } else if (i >= a.size()) {
        out->push_back({p, false, true, nullptr, b[i]});
      } else {
        Diff(a[i], b[i], p, o, out);
      }
    }
    return;
  }
  if (!ScalarsEqual(a, b, o)) out->push_back({path, true, true, a, b});
}

std::string Show(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::vector<JsonDifference> JsonDiff(const json& a, const json& b, const std::string& prefix,
                                     const JsonDiffOptions& options) {
  std::vector<JsonDifference> out;
  Diff(a, b, prefix, options, &out);
  return out;
}

std::string FormatDifference(const JsonDifference& d, const std::string& label_a,
                             const std::string& label_b) {
  return (d.path.empty() ? std::string("(root)") : d.path) + ": " +
         (d.in_a ? Show(d.a) : "missing") + " (" + label_a + ") vs " +
         (d.in_b ? Show(d.b) : "missing") + " (" + label_b + ")";
}

}  // namespace shardema
