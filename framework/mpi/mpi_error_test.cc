#include "framework/mpi/mpi_error.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace shardema {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

TEST(MpiStatusTest, SuccessIsOk) { EXPECT_TRUE(MpiStatus(MPI_SUCCESS, "all_gather", 0).ok()); }

TEST(MpiStatusTest, ErrorBecomesInternalWithOpRankAndMpiText) {
  Status s = MpiStatus(MPI_ERR_COUNT, "all_gather", 2);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  const std::string& m = s.message();
  EXPECT_EQ(m.rfind("all_gather: MPI error on rank 2: ", 0), 0u) << m;
  EXPECT_NE(Lower(m).find("count"), std::string::npos) << m;  // MPI's text for MPI_ERR_COUNT
  EXPECT_NE(m.find("(error class " + std::to_string(MPI_ERR_COUNT) + ")"), std::string::npos) << m;
}

TEST(MpiStatusTest, UnknownRankIsQuestionMark) {
  Status s = MpiStatus(MPI_ERR_OTHER, "MPI_Comm_dup", -1);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("MPI_Comm_dup: MPI error on rank ?: "), std::string::npos)
      << s.message();
}

TEST(MpiErrorStringTest, KnownCodesDifferAndAreNonEmpty) {
  const std::string a = MpiErrorString(MPI_ERR_COUNT);
  const std::string b = MpiErrorString(MPI_ERR_ROOT);
  EXPECT_FALSE(a.empty());
  EXPECT_FALSE(b.empty());
  EXPECT_NE(a, b);
  EXPECT_NE(Lower(b).find("root"), std::string::npos) << b;
}

}  // namespace
}  // namespace shardema
