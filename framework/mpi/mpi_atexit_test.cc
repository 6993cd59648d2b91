// A program that creates an MpiCommunicator and returns from main without FinalizeMpi(): the
// std::atexit hook registered by Create() must finalize MPI, or mpirun reports that the ranks
// "exited without calling finalize" and fails the run. Exit code 1 when the collective is wrong.
#include <cstdio>
#include <memory>

#include "framework/mpi/mpi_communicator.h"

int main() {
  auto created = shardema::MpiCommunicator::Create();
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  // Kept alive past main on purpose (the hook shuts it down first).
  static std::unique_ptr<shardema::MpiCommunicator> comm = std::move(created).value();
  float mine = float(comm->rank() + 1), sum = 0;
  shardema::Status st = comm->AllReduce(&mine, &sum, 1, shardema::DType::kF32);
  const int n = comm->world_size();
  if (!st.ok() || sum != float(n * (n + 1) / 2)) {
    std::fprintf(stderr, "rank %d: all_reduce gave %g (%s)\n", comm->rank(), sum,
                 st.ToString().c_str());
    return 1;
  }
  return 0;
}
