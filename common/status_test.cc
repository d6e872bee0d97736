#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace rkv {
namespace {

TEST(StatusTest, OkAndErrorsReadAsGrpcCodes) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  const Status s = NotFound("key 'a' not found");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: key 'a' not found");
  EXPECT_EQ(s.WithContext("get").ToString(), "NOT_FOUND: get: key 'a' not found");
}

TEST(StatusTest, PosixErrorKeepsCallAndErrno) {
  const Status s = PosixError("open(/nonexistent)", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("open(/nonexistent)"), std::string::npos);
  EXPECT_NE(s.message().find("No such file"), std::string::npos);
  EXPECT_EQ(PosixError("connect", ECONNREFUSED).code(), StatusCode::kUnavailable);
  EXPECT_EQ(PosixError("write", ENOSPC).code(), StatusCode::kResourceExhausted);
}

TEST(StatusTest, StatusOrCarriesValueOrError) {
  StatusOr<int> v = 42;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  StatusOr<int> e = InvalidArgument("bad");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  // An OK status without a value is a programming error, reported as such.
  StatusOr<int> wrong = Status::Ok();
  EXPECT_EQ(wrong.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, WireCodesAreValidated) {
  EXPECT_TRUE(IsValidStatusCode(0));
  EXPECT_TRUE(IsValidStatusCode(16));
  EXPECT_FALSE(IsValidStatusCode(17));
  EXPECT_FALSE(IsValidStatusCode(-1));
}

Status FailsWhen(bool fail) {
  if (fail) return Internal("failed");
  return Status::Ok();
}

Status Chain(bool fail) {
  RKV_RETURN_IF_ERROR(FailsWhen(fail));
  return Status::Ok();
}

StatusOr<int> Doubled(StatusOr<int> in) {
  RKV_ASSIGN_OR_RETURN(int v, std::move(in));
  return v * 2;
}

TEST(StatusTest, Macros) {
  EXPECT_TRUE(Chain(false).ok());
  EXPECT_EQ(Chain(true).code(), StatusCode::kInternal);
  EXPECT_EQ(*Doubled(21), 42);
  EXPECT_EQ(Doubled(NotFound("x")).status().code(), StatusCode::kNotFound);
}


TEST(StatusTest, ReasonAndMapVersionTravelWithTheStatus) {
  const Status s(StatusCode::kFailedPrecondition, "refused", Reason::kNotPrimary, 42);
  EXPECT_EQ(s.reason(), Reason::kNotPrimary);
  EXPECT_EQ(s.map_version(), 42u);
  // Context, copies and a new message keep what code decides on.
  const Status named = s.WithContext("server s1");
  EXPECT_EQ(named.message(), "server s1: refused");
  EXPECT_EQ(named.reason(), Reason::kNotPrimary);
  EXPECT_EQ(named.map_version(), 42u);
  const Status copy = named;  // NOLINT: the copy is what is tested
  EXPECT_EQ(copy.reason(), Reason::kNotPrimary);
  const Status reworded = s.WithMessage("");
  EXPECT_EQ(reworded.message(), "");
  EXPECT_EQ(reworded.reason(), Reason::kNotPrimary);
  EXPECT_EQ(reworded.map_version(), 42u);
  EXPECT_EQ(reworded.ToString(), "FAILED_PRECONDITION");
  // Plain errors and OK carry none.
  EXPECT_EQ(NotFound("x").reason(), Reason::kNone);
  EXPECT_EQ(Status::Ok().reason(), Reason::kNone);
  EXPECT_EQ(Status::Ok().map_version(), 0u);
}

TEST(StatusTest, ReasonNamesAndWireValidation) {
  for (uint8_t raw = 0; raw <= kMaxReason; ++raw) {
    EXPECT_TRUE(IsValidReason(raw));
    EXPECT_NE(ReasonName(static_cast<Reason>(raw)), "UNKNOWN") << int{raw};
  }
  EXPECT_FALSE(IsValidReason(kMaxReason + 1));
  EXPECT_FALSE(IsValidReason(255));
  EXPECT_EQ(ReasonName(Reason::kOutcomeUnknown), "OUTCOME_UNKNOWN");
}

}  // namespace
}  // namespace rkv
