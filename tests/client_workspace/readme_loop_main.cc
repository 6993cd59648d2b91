// README's complete loop (readme_loop.h, extracted from README.md at build time) with the main
// README describes:  mpirun -np W readme_loop ROOT STEPS  (resumes from ROOT/latest when present).
#include <cstdlib>
#include <iostream>
#include <string>

#include "readme_loop.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: readme_loop ROOT STEPS\n";
    return 2;
  }
  const Status status = Train(argv[1], std::atoll(argv[2]));
  if (!status.ok()) std::cerr << "readme_loop: " << status << "\n";
  const Status finalized = MpiCommunicator::FinalizeMpi();
  if (!finalized.ok()) std::cerr << "readme_loop: " << finalized << "\n";
  return ExitCodeFor(status.ok() ? finalized : status);
}
