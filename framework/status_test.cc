#include "framework/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace shardema {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd value ", x);
  return x / 2;
}

Status Chain(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(*out, Half(h));
  RETURN_IF_ERROR(h > 100 ? OutOfRange("too big: ", h) : Status::Ok());
  return Status::Ok();
}

TEST(StatusTest, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "ok");
  Status e = NotFound("file '", "/x", "' missing");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), StatusCode::kNotFound);
  EXPECT_EQ(e.ToString(), "not_found: file '/x' missing");
  EXPECT_EQ(e.WithContext("load").message(), "load: file '/x' missing");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
  EXPECT_EQ(Status(StatusCode::kOk, "ignored"), Status::Ok());
}

TEST(StatusTest, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(Chain(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Chain(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd value 3");
  EXPECT_EQ(Chain(400, &out).code(), StatusCode::kOutOfRange);
}

TEST(StatusTest, ErrnoConversionAndExitCodes) {
  EXPECT_EQ(ErrnoToStatus(ENOENT, "open 'a'").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write 'a'").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EACCES, "mkdir 'a'").code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ErrnoToStatus(ENOENT, "open 'a'").message().find("open 'a': "), std::string::npos);
  EXPECT_EQ(ExitCodeFor(Status::Ok()), 0);
  EXPECT_EQ(ExitCodeFor(InvalidArgument("x")), 2);
  EXPECT_EQ(ExitCodeFor(DataLoss("x")), 4);
  EXPECT_EQ(ExitCodeFor(Internal("x")), 1);
}

// Reading the value of an error prints the status and aborts, also with -DNDEBUG (the
// status_ndebug_test target compiles this file with it).
TEST(StatusOrDeathTest, ValueOfAnErrorAbortsWithTheStatus) {
#ifdef NDEBUG
  SCOPED_TRACE("NDEBUG build");
#endif
  StatusOr<int> e = NotFound("no file 'x'");
  EXPECT_DEATH((void)e.value(), "StatusOr::value\\(\\) on an error: not_found: no file 'x'");
  EXPECT_DEATH((void)*e, "not_found: no file 'x'");
  const StatusOr<std::string> c = InvalidArgument("bad flag");
  EXPECT_DEATH((void)c->size(), "invalid_argument: bad flag");
  EXPECT_DEATH((void)*c, "invalid_argument: bad flag");
  StatusOr<std::string> m = DataLoss("torn");
  EXPECT_DEATH((void)std::move(m).value(), "data_loss: torn");
  StatusOr<int> ok = 7;
  EXPECT_EQ(*ok, 7);
  EXPECT_EQ(ok.value(), 7);
}

}  // namespace
}  // namespace shardema
