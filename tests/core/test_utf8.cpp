// The UTF-8 check of user text against RFC 3629's table of well-formed sequences.
#include <doctest/doctest.h>

#include <string>

#include "core/utf8.hpp"

using vinf::first_invalid_utf8;

TEST_CASE("first_invalid_utf8 accepts well-formed text and points at the first bad byte") {
  constexpr auto ok = std::string::npos;
  CHECK(first_invalid_utf8("") == ok);
  CHECK(first_invalid_utf8("a beagle, diving") == ok);
  CHECK(first_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x90\xB6") == ok);  // é € 🐶
  CHECK(first_invalid_utf8("\xED\x9F\xBF") == ok);                              // U+D7FF, below the surrogates
  CHECK(first_invalid_utf8("\xF4\x8F\xBF\xBF") == ok);                          // U+10FFFF
  CHECK(first_invalid_utf8("ab\xFF") == 2);                                     // never a UTF-8 byte
  CHECK(first_invalid_utf8("ab\xC3") == 2);                                     // cut short
  CHECK(first_invalid_utf8("a\xC3(") == 1);                                     // bad continuation
  CHECK(first_invalid_utf8("\xC0\xAF") == 0);                                   // overlong '/'
  CHECK(first_invalid_utf8("x\xE0\x9F\xBF") == 1);                              // overlong three-byte
  CHECK(first_invalid_utf8("\xED\xA0\x80") == 0);                               // a surrogate (U+D800)
  CHECK(first_invalid_utf8("\xF0\x8F\xBF\xBF") == 0);                           // overlong four-byte
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0);                           // above U+10FFFF
  CHECK(first_invalid_utf8("ok\x80") == 2);                                     // a lone continuation byte
  CHECK(first_invalid_utf8("\xE2\x82\xACz\xE2\x82") == 4);
}
