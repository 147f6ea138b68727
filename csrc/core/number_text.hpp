// unipool core: numbers as text, written once for every layer.
//
// Without allocating: the host engine, the malloc face and the assertions
// format numbers where no heap may be used (inside the allocator, or after
// it failed).
#pragma once

#include <cstdint>
#include <string>

namespace unipool {

struct NumberText {
  char text[21];  // up to 20 decimal digits or "0x" and 16 hex digits, '\0'
};

// "0x" and lowercase digits, no leading zeros: to_hex(0).text is "0x0".
inline NumberText to_hex(uint64_t v) noexcept {
  NumberText t{};
  char digits[16];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 0xF];
    v >>= 4;
  } while (v != 0);
  t.text[0] = '0';
  t.text[1] = 'x';
  for (int i = 0; i < n; ++i) t.text[2 + i] = digits[n - 1 - i];
  t.text[2 + n] = '\0';
  return t;
}

// Decimal digits.
inline NumberText to_dec(uint64_t v) noexcept {
  NumberText t{};
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; ++i) t.text[i] = digits[n - 1 - i];
  t.text[n] = '\0';
  return t;
}

// to_hex as a std::string, for messages built where allocating is fine.
inline std::string hex_string(uint64_t v) { return to_hex(v).text; }

}  // namespace unipool
