// Byte sizes on the command line and in reports: "5GB" -> 5000000000, "512MiB" -> 536870912, and
// back to "1.50 GiB".
//
// Pure functions; thread-safe.
#ifndef SHARDEMA_FRAMEWORK_BYTE_SIZE_H_
#define SHARDEMA_FRAMEWORK_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "framework/status.h"

namespace shardema {

// Parses "<number>[unit]": a non-negative decimal number (a fraction is allowed with a unit,
// e.g. "1.5GB") followed by an optional unit, case-insensitive: B, KB, MB, GB, TB (powers of
// 1000, like huggingface's max_shard_size) or KiB, MiB, GiB, TiB and the single letters K, M, G, T
// (powers of 1024, as nccl-tests' -b/-e). No unit means
// bytes. The result is rounded down to whole bytes. Errors: kInvalidArgument naming `what` (e.g.
// "--max-file-size"), the text and the accepted forms, for an empty or malformed text, an
// unknown unit, a negative value, a fraction of a byte count without unit, or an overflow.
StatusOr<uint64_t> ParseByteSize(const std::string& text, const std::string& what);

// "0 B", "912 B", "4.00 KiB", "1.50 GiB", "123.4 MiB": binary units, two decimals below 100, one
// above.
std::string FormatBytes(uint64_t bytes);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_BYTE_SIZE_H_
