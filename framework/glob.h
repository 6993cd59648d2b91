// Shell-style glob matching of names: '*' matches any run of characters (including none and
// '.'), '?' exactly one character, everything else itself. Used by the optimizer's parameter
// groups and the EMA buffer rules. Pure function; thread-safe.
#ifndef SHARDEMA_FRAMEWORK_GLOB_H_
#define SHARDEMA_FRAMEWORK_GLOB_H_

#include <string>

namespace shardema {

// True when `name` matches `pattern` in full. O(|pattern| * |name|) worst case.
bool GlobMatch(const std::string& pattern, const std::string& name);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_GLOB_H_
