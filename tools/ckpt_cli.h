// The command line of the `ckpt` tool: parses argv with CLI11, runs the subcommand
// (ckpt_commands.h) and returns the process exit code. main() is a one-line call to RunCkptCli.
//
//   ckpt inspect DIR [--step S] [--json]
//   ckpt verify  DIR [--step S | --all]
//   ckpt export  DIR --slot NAME [--dtype f32|bf16|f16] -o OUT.safetensors [--max-file-size 5GB]
//                [--step S] [--no-buffers]
//   ckpt reshard DIR --world M -o DIR2 [--step S]
//   ckpt diff    DIR1 DIR2 [--json]
//
// Exit codes: 0 success (diff: identical), 1 diff: the checkpoints differ, or an error of no
// other class, 2 usage error or invalid argument, 3 not found, 4 data loss (corrupt or truncated
// files, checksum mismatch); ExitCodeFor (framework/status.h) for errors. `--help` (on the tool
// and every subcommand) prints the help and exits 0.
//
// Results go to `out`, error messages ("ckpt verify: data_loss: ...") to `err`; the progress bar
// goes to `err` when `progress` is true (main passes isatty(stderr)) unless --no-progress.
// Threading: one call at a time (the streams).
#ifndef SHARDEMA_TOOLS_CKPT_CLI_H_
#define SHARDEMA_TOOLS_CKPT_CLI_H_

#include <ostream>

namespace shardema::tools {

int RunCkptCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
               bool progress);

}  // namespace shardema::tools

#endif  // SHARDEMA_TOOLS_CKPT_CLI_H_
