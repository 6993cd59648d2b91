// Reading JSON documents from disk that may be hostile (manifest.json, safetensors headers):
// strict parsing and checked field access. Nothing here throws.
//
// ParseStrictJson refuses, with kDataLoss naming `what` (e.g. "manifest 'DIR/manifest.json'"):
// invalid JSON; nesting deeper than max_depth (counted by a scan of the text before parsing, so
// a 10^6-deep document cannot exhaust the stack in the parser or in later recursive walks); an
// object with the same key twice (the JSON RFC leaves it undefined; we never guess which wins).
//
// JsonField is a value inside a parsed document together with its key path ("layout.units[3]").
// Its accessors check type and range and return kDataLoss in one shape:
//   manifest 'run/step_00000010/manifest.json': key 'layout.units[3].numel': expected a
//   non-negative integer, found string "12"
// Numbers must be JSON integers where an integer is expected (1.0 and 1e3 are refused: the
// writers never produce them). A JsonField refers into the document: keep the document alive.
//
// Threading: pure functions; a JsonField is a read-only view.
#ifndef SHARDEMA_CHECKPOINT_JSON_READER_H_
#define SHARDEMA_CHECKPOINT_JSON_READER_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/status.h"
#include "framework/tensor.h"

namespace shardema {

inline constexpr int kMaxJsonDepth = 64;

StatusOr<nlohmann::json> ParseStrictJson(const std::string& text, const std::string& what,
                                         int max_depth = kMaxJsonDepth);

class JsonField {
 public:
  // The document root (key path "").
  JsonField(const nlohmann::json& root, std::string what) : v_(&root), what_(std::move(what)) {}
  // A value reached some other way, shown as `path` (e.g. "meta" for a manifest's meta).
  JsonField(const nlohmann::json& value, std::string what, std::string path)
      : v_(&value), what_(std::move(what)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *v_; }
  const std::string& path() const { return path_; }
  // "<what>: key '<path>'" (just <what> at the root): the prefix of this field's errors.
  std::string Where() const;

  // kDataLoss "<what>: key '<path>': expected <expected>, found <this value, abbreviated>".
  Status Mismatch(const std::string& expected) const;
  // kDataLoss "<what>: key '<path>': <message>".
  Status Invalid(const std::string& message) const;

  bool IsObject() const { return v_->is_object(); }
  bool IsArray() const { return v_->is_array(); }
  // An object holding `key` (false for anything else).
  bool Has(const std::string& key) const;
  // The value of a required key of an object (kDataLoss when this is not an object or lacks it).
  StatusOr<JsonField> Get(const std::string& key) const;
  // The elements of an array / the values of an object (keys in the document's order for
  // nlohmann's sorted object: alphabetical), with their paths.
  StatusOr<std::vector<JsonField>> Elements() const;
  StatusOr<std::vector<std::pair<std::string, JsonField>>> Members() const;

  StatusOr<std::string> String() const;
  StatusOr<bool> Bool() const;
  StatusOr<double> Number() const;  // any JSON number
  StatusOr<int64_t> Int(int64_t min = std::numeric_limits<int64_t>::min(),
                        int64_t max = std::numeric_limits<int64_t>::max()) const;
  StatusOr<uint64_t> Uint(uint64_t max = std::numeric_limits<uint64_t>::max()) const;
  // An array of non-negative integers whose product (CheckedNumElements) fits in int64.
  StatusOr<Shape> ShapeValue() const;

  // Get(key) then the typed read.
  StatusOr<std::string> GetString(const std::string& key) const;
  StatusOr<int64_t> GetInt(const std::string& key,
                           int64_t min = std::numeric_limits<int64_t>::min(),
                           int64_t max = std::numeric_limits<int64_t>::max()) const;
  StatusOr<uint64_t> GetUint(const std::string& key,
                             uint64_t max = std::numeric_limits<uint64_t>::max()) const;
  StatusOr<std::vector<JsonField>> GetArray(const std::string& key) const;

 private:
  std::string ChildPath(const std::string& key) const;
  const nlohmann::json* v_;
  std::string what_;
  std::string path_;
};

// "string \"abc\"", "-1", "object", ...: a value as an error message shows it (at most ~40 chars).
std::string DescribeJsonValue(const nlohmann::json& v);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_JSON_READER_H_
