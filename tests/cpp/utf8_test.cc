#include "core/utf8.h"

#include <gtest/gtest.h>

namespace kaiwu {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  for (const char* s : {"", "obs", "caf\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x8e\xae",
                        "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"})
    EXPECT_TRUE(IsValidUtf8(s)) << s;
}

TEST(Utf8, RefusesMalformedText) {
  for (const char* s : {"\xff", "caf\xe9", "\xc3", "\xc0\xaf" /* overlong */,
                        "\xe0\x80\xaf" /* overlong */, "\xed\xa0\x80" /* surrogate */,
                        "\xf4\x90\x80\x80" /* past U+10FFFF */, "\xf0\x9f\x8e" /* cut */})
    EXPECT_FALSE(IsValidUtf8(s)) << EscapeInvalidUtf8(s);
}

TEST(Utf8, EscapesOnlyTheBadBytes) {
  EXPECT_EQ(EscapeInvalidUtf8("caf\xe9 \xc3\xa9"), "caf\\xe9 \xc3\xa9");
  EXPECT_EQ(EscapeInvalidUtf8("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(EscapeInvalidUtf8("plain"), "plain");
}

}  // namespace
}  // namespace kaiwu
