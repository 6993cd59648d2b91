#include "checkpoint/json_reader.h"

#include <set>

namespace shardema {

using nlohmann::json;

namespace {

// The deepest nesting of arrays/objects in `text` (strings skipped), stopping at the first
// position deeper than max_depth (returned in *where).
bool DepthWithin(const std::string& text, int max_depth, size_t* where) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        *where = i;
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

std::string IntExpectation(int64_t min, int64_t max) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (min == lo && max == hi) return "an integer";
  if (min == 0 && max == hi) return "a non-negative integer";
  if (max == hi) return "an integer >= " + std::to_string(min);
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

}  // namespace

StatusOr<json> ParseStrictJson(const std::string& text, const std::string& what, int max_depth) {
  size_t deep_at = 0;
  if (!DepthWithin(text, max_depth, &deep_at)) {
    return DataLoss(what, ": JSON nested deeper than ", max_depth, " levels (at byte ", deep_at,
                    ")");
  }
  std::vector<std::set<std::string>> keys;  // one per open object
  std::string duplicate;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == json::parse_event_t::key && !keys.empty() && duplicate.empty() &&
        parsed.is_string() && !keys.back().insert(parsed.get_ref<const std::string&>()).second) {
      duplicate = parsed.get_ref<const std::string&>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {
    return DataLoss(what, ": not valid UTF-8 JSON: ", e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate.size() > 60) duplicate = duplicate.substr(0, 57) + "...";
    return DataLoss(what, ": duplicate key '", duplicate,
                    "' in one object (refused: which one counts is undefined)");
  }
  return j;
}

std::string DescribeJsonValue(const json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return v.is_string() ? "string " + text : text;
}

std::string JsonField::Where() const {
  return path_.empty() ? what_ : what_ + ": key '" + path_ + "'";
}

Status JsonField::Mismatch(const std::string& expected) const {
  return DataLoss(Where(), ": expected ", expected, ", found ", DescribeJsonValue(*v_));
}

Status JsonField::Invalid(const std::string& message) const {
  return DataLoss(Where(), ": ", message);
}

std::string JsonField::ChildPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool JsonField::Has(const std::string& key) const { return v_->is_object() && v_->contains(key); }

StatusOr<JsonField> JsonField::Get(const std::string& key) const {
  if (!v_->is_object()) return Mismatch("an object with key '" + key + "'");
  auto it = v_->find(key);
  if (it == v_->end()) {
    return DataLoss(what_, ": key '", ChildPath(key), "' is missing");
  }
  return JsonField(*it, what_, ChildPath(key));
}

StatusOr<std::vector<JsonField>> JsonField::Elements() const {
  if (!v_->is_array()) return Mismatch("an array");
  std::vector<JsonField> out;
  out.reserve(v_->size());
  for (size_t i = 0; i < v_->size(); ++i) {
    out.push_back(JsonField((*v_)[i], what_, path_ + "[" + std::to_string(i) + "]"));
  }
  return out;
}

StatusOr<std::vector<std::pair<std::string, JsonField>>> JsonField::Members() const {
  if (!v_->is_object()) return Mismatch("an object");
  std::vector<std::pair<std::string, JsonField>> out;
  for (auto it = v_->begin(); it != v_->end(); ++it) {
    out.emplace_back(it.key(), JsonField(it.value(), what_, ChildPath(it.key())));
  }
  return out;
}

StatusOr<std::string> JsonField::String() const {
  if (!v_->is_string()) return Mismatch("a string");
  return v_->get<std::string>();
}

StatusOr<bool> JsonField::Bool() const {
  if (!v_->is_boolean()) return Mismatch("true or false");
  return v_->get<bool>();
}

StatusOr<double> JsonField::Number() const {
  if (!v_->is_number()) return Mismatch("a number");
  return v_->get<double>();
}

StatusOr<int64_t> JsonField::Int(int64_t min, int64_t max) const {
  const std::string expected = IntExpectation(min, max);
  if (v_->is_number_unsigned()) {
    const uint64_t u = v_->get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()) || int64_t(u) > max || int64_t(u) < min) {
      return Mismatch(expected);
    }
    return int64_t(u);
  }
  if (!v_->is_number_integer()) return Mismatch(expected);
  const int64_t i = v_->get<int64_t>();
  if (i < min || i > max) return Mismatch(expected);
  return i;
}

StatusOr<uint64_t> JsonField::Uint(uint64_t max) const {
  const std::string expected = max == std::numeric_limits<uint64_t>::max()
                                   ? "a non-negative integer"
                                   : "an integer in [0, " + std::to_string(max) + "]";
  uint64_t u = 0;
  if (v_->is_number_unsigned()) {
    u = v_->get<uint64_t>();
  } else if (v_->is_number_integer() && v_->get<int64_t>() >= 0) {
    u = uint64_t(v_->get<int64_t>());
  } else {
    return Mismatch(expected);
  }
  if (u > max) return Mismatch(expected);
  return u;
}

StatusOr<Shape> JsonField::ShapeValue() const {
  if (!v_->is_array()) return Mismatch("a shape (an array of non-negative integers)");
  Shape shape;
  ASSIGN_OR_RETURN(std::vector<JsonField> dims, Elements());
  for (const JsonField& d : dims) {
    ASSIGN_OR_RETURN(int64_t n, d.Int(0));
    shape.push_back(n);
  }
  if (NumElements(shape) < 0) {
    return Invalid("shape " + ShapeToString(shape) +
                   " overflows int64 (more than 2^63 - 1 elements)");
  }
  return shape;
}

StatusOr<std::string> JsonField::GetString(const std::string& key) const {
  ASSIGN_OR_RETURN(JsonField f, Get(key));
  return f.String();
}

StatusOr<int64_t> JsonField::GetInt(const std::string& key, int64_t min, int64_t max) const {
  ASSIGN_OR_RETURN(JsonField f, Get(key));
  return f.Int(min, max);
}

StatusOr<uint64_t> JsonField::GetUint(const std::string& key, uint64_t max) const {
  ASSIGN_OR_RETURN(JsonField f, Get(key));
  return f.Uint(max);
}

StatusOr<std::vector<JsonField>> JsonField::GetArray(const std::string& key) const {
  ASSIGN_OR_RETURN(JsonField f, Get(key));
  return f.Elements();
}

}  // namespace shardema
