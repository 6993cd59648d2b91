// Shell-style glob matching of names: '*' matches any run of characters (including none and
// '.'), '?' exactly one character, everything else itself; a pattern matches a name in full
// (anchored at both ends: "layers.1.*" does not match "x.layers.1.w"). Used by the optimizer's
// parameter groups, the EMA buffer rules and the EMA slots' parameter subsets (SelectByGlobs).
// Pure functions; thread-safe.
#ifndef SHARDEMA_FRAMEWORK_GLOB_H_
#define SHARDEMA_FRAMEWORK_GLOB_H_

#include <string>
#include <vector>

#include "framework/status.h"

namespace shardema {

// True when `name` matches `pattern` in full. O(|pattern| * |name|) worst case.
bool GlobMatch(const std::string& pattern, const std::string& name);

// The names a pair of include / exclude pattern lists selects, as a mask over `names`: a name is
// selected when it matches some include pattern (every name when `include` is empty) and no
// exclude pattern. O(|names| * |patterns|) matches.
// Errors (kInvalidArgument, every message starting with `what`, e.g. "EMA slot 'ema_h'"):
// an empty pattern; a pattern that matches no name at all (naming the list, the pattern and the
// first few names); a selection of no name.
StatusOr<std::vector<bool>> SelectByGlobs(const std::vector<std::string>& names,
                                          const std::vector<std::string>& include,
                                          const std::vector<std::string>& exclude,
                                          const std::string& what);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_GLOB_H_
