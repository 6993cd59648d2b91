// FormatDuration: a duration for people, as progress bars and training logs show an ETA.
//
// "42s", "3m05s", "2h07m": rounded to whole seconds; minutes and seconds below an hour, hours and
// minutes above. Negative values print as "0s". Pure function; thread-safe.
#ifndef SHARDEMA_FRAMEWORK_DURATION_H_
#define SHARDEMA_FRAMEWORK_DURATION_H_

#include <string>

namespace shardema {

std::string FormatDuration(double seconds);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_DURATION_H_
