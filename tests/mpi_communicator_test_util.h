// Helpers shared by the MpiCommunicator tests over the test world (tests/test_world.h). Test-only.
#ifndef SHARDEMA_TESTS_MPI_COMMUNICATOR_TEST_UTIL_H_
#define SHARDEMA_TESTS_MPI_COMMUNICATOR_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "framework/communicator.h"
#include "tests/test_world.h"

namespace shardema {
namespace mpi_test {

inline Communicator* W() { return testing::World(); }
inline int Rank() { return W()->rank(); }
inline int Size() { return W()->world_size(); }

// The communicator must still work, and all ranks still be in step, after an error.
inline void ExpectStillInStep() {
  float mine = float(Rank() + 1), sum = 0;
  Status st = W()->AllReduce(&mine, &sum, 1, DType::kF32);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(sum, float(Size() * (Size() + 1) / 2));
}

inline bool Contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

}  // namespace mpi_test
}  // namespace shardema

#endif  // SHARDEMA_TESTS_MPI_COMMUNICATOR_TEST_UTIL_H_
