#include "train/init_file.h"

#include <cmath>
#include <memory>

#include "framework/rng.h"

namespace shardema {
namespace {

bool FloatDType(const std::string& d) { return d == "F32" || d == "BF16" || d == "F16"; }

}  // namespace

Status CheckInitFile(const SafetensorsSet& f, const StoreLayout& layout, const InitFileRules& rules,
                     const std::string& model_flags) {
  std::string problems;
  const std::set<std::string>& optional = rules.optional;
  std::set<std::string> known = optional;
  known.insert(rules.ignored.begin(), rules.ignored.end());
  for (const UnitLayout& u : layout.units()) {
    for (const ParamLayout& p : u.params) {
      known.insert(p.name);
      const SafetensorsTensor* t = f.Find(p.name);
      const Shape want = rules.file_shape ? rules.file_shape(p) : p.shape;
      if (t == nullptr) {
        problems += "\n  tensor '" + p.name + "' is missing (expected " + ShapeToString(want) + ")";
      } else if (t->shape != want) {
        problems += "\n  tensor '" + p.name + "': expected shape " + ShapeToString(want) +
                    ", found " + ShapeToString(t->shape);
      } else if (!FloatDType(t->dtype)) {
        problems +=
            "\n  tensor '" + p.name + "': expected dtype F32, BF16 or F16, found " + t->dtype;
      }
    }
  }
  for (const SafetensorsTensor* t : f.tensors()) {
    if (!known.count(t->name)) {
      problems += "\n  tensor '" + t->name + "' is not a parameter of this model";
    } else if (optional.count(t->name) && !FloatDType(t->dtype)) {
      problems +=
          "\n  tensor '" + t->name + "': expected dtype F32, BF16 or F16, found " + t->dtype;
    }
  }
  if (!problems.empty()) {
    return InvalidArgument("--init '", f.path(), "' does not match the model (", model_flags,
                           "):", problems);
  }
  return Status::Ok();
}

void InitUniform(float* out, int64_t n, double bound, uint64_t seed, const std::string& name) {
  SeededRng rng(seed, name);
  for (int64_t i = 0; i < n; ++i) out[i] = rng.Uniform(-bound, bound);
}

void InitNormal(float* out, int64_t n, double std, uint64_t seed, const std::string& name) {
  SeededRng rng(seed, name);
  for (int64_t i = 0; i < n; ++i) out[i] = float(std * double(rng.Normal()));
}

double LinearInitBound(int64_t fan_in) { return 1.0 / std::sqrt(double(fan_in)); }

Status InitStoreFromFile(ShardedParameterStore* store, const std::string& path,
                         const std::set<std::string>& optional, const std::string& model_flags) {
  StatusOr<std::unique_ptr<SafetensorsSet>> opened = SafetensorsSet::Open(path);
  if (!opened.ok()) return opened.status().WithContext("--init");
  const SafetensorsSet& f = **opened;
  InitFileRules rules;
  rules.optional = optional;
  RETURN_IF_ERROR(CheckInitFile(f, store->layout(), rules, model_flags));
  return store->InitFromFunction([&f](const ParamLayout& p, float* out) {
    return f.ReadTensor(p.name, DType::kF32, out, p.numel);
  });
}

}  // namespace shardema
