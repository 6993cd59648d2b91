#include "framework/byte_size.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

uint64_t Parse(const std::string& s) {
  StatusOr<uint64_t> v = ParseByteSize(s, "--max-file-size");
  EXPECT_TRUE(v.ok()) << s << ": " << v.status();
  return v.ok() ? *v : 0;
}

TEST(ByteSizeTest, DecimalAndBinaryUnits) {
  EXPECT_EQ(Parse("0"), 0u);
  EXPECT_EQ(Parse("123"), 123u);
  EXPECT_EQ(Parse("123B"), 123u);
  EXPECT_EQ(Parse("64KB"), 64000u);
  EXPECT_EQ(Parse("5GB"), 5000000000u);
  EXPECT_EQ(Parse("5gb"), 5000000000u);
  EXPECT_EQ(Parse("2TB"), 2000000000000u);
  EXPECT_EQ(Parse("1KiB"), 1024u);
  EXPECT_EQ(Parse("512MiB"), 536870912u);
  EXPECT_EQ(Parse("2GiB"), 2147483648u);
  EXPECT_EQ(Parse("1tib"), 1099511627776u);
  EXPECT_EQ(Parse("1.5GB"), 1500000000u);
  EXPECT_EQ(Parse("0.5KiB"), 512u);
  EXPECT_EQ(Parse("18446744073709551615"), UINT64_MAX);
}

TEST(ByteSizeTest, MalformedIsInvalidArgumentNamingTheFlagAndText) {
  for (const char* bad : {"", "GB", "-5GB", "5 GB", "5XB", "1.5", "1.GB", ".5GB", "5GBx",
                          "18446744073709551616", "20000000000TB", "1e9"}) {
    StatusOr<uint64_t> v = ParseByteSize(bad, "--max-file-size");
    ASSERT_FALSE(v.ok()) << "'" << bad << "' parsed as " << *v;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("--max-file-size"), std::string::npos);
    EXPECT_NE(v.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << v.status();
  }
}

TEST(ByteSizeTest, Format) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(uint64_t(3) << 30), "3.00 GiB");
  EXPECT_EQ(FormatBytes(uint64_t(150) << 20), "150.0 MiB");
}

TEST(ByteSizeTest, SingleLetterUnitsArePowersOf1024) {
  EXPECT_EQ(*ParseByteSize("4K", "x"), 4096u);
  EXPECT_EQ(*ParseByteSize("64m", "x"), 64ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5G", "x"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("2T", "x"), 2ull << 40);
  EXPECT_FALSE(ParseByteSize("4X", "x").ok());
}

}  // namespace
}  // namespace shardema
