// ckpt: inspect, verify, export, reshard and compare shardema checkpoints. `ckpt --help` and
// `ckpt <subcommand> --help` describe everything; tools/ckpt_cli.h lists the exit codes.
#include <iostream>

#include "tools/ckpt_cli.h"
#include "tools/progress.h"

int main(int argc, char** argv) {
  return shardema::tools::RunCkptCli(argc, argv, std::cout, std::cerr,
                                     shardema::tools::StderrIsTerminal());
}
