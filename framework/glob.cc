#include "framework/glob.h"

namespace shardema {

bool GlobMatch(const std::string& pattern, const std::string& name) {
  // Iterative matcher with one backtrack point (the last '*'): O(|pattern| * |name|) worst case.
  size_t p = 0, n = 0, star = std::string::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_n = n;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace shardema

namespace shardema {
namespace {

// "a, b, c, ... (N in all)": the first few names for an error message.
std::string FewNames(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s.empty() ? "none" : s;
}

}  // namespace

StatusOr<std::vector<bool>> SelectByGlobs(const std::vector<std::string>& names,
                                          const std::vector<std::string>& include,
                                          const std::vector<std::string>& exclude,
                                          const std::string& what) {
  std::vector<bool> in(names.size(), include.empty());
  std::vector<bool> out(names.size(), false);
  for (const auto* list : {&include, &exclude}) {
    const char* key = list == &include ? "include" : "exclude";
    std::vector<bool>& mark = list == &include ? in : out;
    for (const std::string& p : *list) {
      if (p.empty()) return InvalidArgument(what, ": an empty ", key, " pattern");
      bool any = false;
      for (size_t i = 0; i < names.size(); ++i) {
        if (!GlobMatch(p, names[i])) continue;
        mark[i] = true;
        any = true;
      }
      if (!any) {
        return InvalidArgument(what, ": ", key, " pattern '", p,
                               "' matches no parameter (parameters: ", FewNames(names), ")");
      }
    }
  }
  bool selected = false;
  for (size_t i = 0; i < names.size(); ++i) {
    in[i] = in[i] && !out[i];
    selected = selected || in[i];
  }
  if (!selected) {
    return InvalidArgument(what, ": the include/exclude patterns select no parameter (parameters: ",
                           FewNames(names), ")");
  }
  return in;
}

}  // namespace shardema
