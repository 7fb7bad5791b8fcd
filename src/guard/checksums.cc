#include "guard/checksums.h"

#include <cstdint>

namespace pillar::guard {
namespace {

int Digit(char c) { return c - '0'; }

bool AllDigits(std::string_view s) {
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return !s.empty();
}

bool AllSame(std::string_view s) {
  for (char c : s) {
    if (c != s[0]) return false;
  }
  return true;
}

// The mod-11 check digit both Brazilian numbers use: the weighted sum of `digits` (weights given
// from the first digit), 0 when the remainder is below 2, else 11 minus it.
int BrazilCheckDigit(std::string_view digits, const int* weights) {
  int sum = 0;
  for (size_t i = 0; i < digits.size(); ++i) sum += Digit(digits[i]) * weights[i];
  const int r = sum % 11;
  return r < 2 ? 0 : 11 - r;
}

}  // namespace

bool LuhnValid(std::string_view digits) {
  if (digits.size() < 2 || !AllDigits(digits)) return false;
  int sum = 0;
  bool twice = false;
  for (size_t i = digits.size(); i-- > 0;) {
    int d = Digit(digits[i]);
    if (twice) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    twice = !twice;
  }
  return sum % 10 == 0;
}

bool IbanChecksumValid(std::string_view iban) {
  if (iban.size() < 5) return false;
  // Digits and letters of the rearranged number, fed into the remainder as they come: a letter
  // is two digits (A = 10 ... Z = 35).
  uint32_t remainder = 0;
  auto feed = [&](char c) {
    if (c >= '0' && c <= '9') {
      remainder = (remainder * 10 + uint32_t(c - '0')) % 97;
      return true;
    }
    if (c >= 'A' && c <= 'Z') {
      remainder = (remainder * 100 + uint32_t(c - 'A' + 10)) % 97;
      return true;
    }
    return false;
  };
  for (char c : iban.substr(4)) {
    if (!feed(c)) return false;
  }
  for (char c : iban.substr(0, 4)) {
    if (!feed(c)) return false;
  }
  return remainder == 1;
}

bool CpfValid(std::string_view digits) {
  if (digits.size() != 11 || !AllDigits(digits) || AllSame(digits)) return false;
  static constexpr int kFirst[] = {10, 9, 8, 7, 6, 5, 4, 3, 2};
  static constexpr int kSecond[] = {11, 10, 9, 8, 7, 6, 5, 4, 3, 2};
  return BrazilCheckDigit(digits.substr(0, 9), kFirst) == Digit(digits[9]) &&
         BrazilCheckDigit(digits.substr(0, 10), kSecond) == Digit(digits[10]);
}

bool CnpjValid(std::string_view digits) {
  if (digits.size() != 14 || !AllDigits(digits) || AllSame(digits)) return false;
  static constexpr int kFirst[] = {5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2};
  static constexpr int kSecond[] = {6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2};
  return BrazilCheckDigit(digits.substr(0, 12), kFirst) == Digit(digits[12]) &&
         BrazilCheckDigit(digits.substr(0, 13), kSecond) == Digit(digits[13]);
}

bool NifValid(std::string_view digits) {
  if (digits.size() != 9 || !AllDigits(digits)) return false;
  // Individuals 1-3, companies 5, public bodies 6, irregular and other entities 8, 9 and the
  // two-digit ranges 45 (non-residents) and 70-79 (estates, condominiums, ...).
  const int first = Digit(digits[0]);
  const int two = first * 10 + Digit(digits[1]);
  const bool assigned = (first >= 1 && first <= 3) || first == 5 || first == 6 || first == 8 ||
                        first == 9 || two == 45 || (two >= 70 && two <= 79);
  if (!assigned) return false;
  int sum = 0;
  for (int i = 0; i < 8; ++i) sum += Digit(digits[size_t(i)]) * (9 - i);
  const int r = sum % 11;
  const int check = r < 2 ? 0 : 11 - r;
  return check == Digit(digits[8]);
}

bool SsnStructureValid(std::string_view digits) {
  if (digits.size() != 9 || !AllDigits(digits)) return false;
  const std::string_view area = digits.substr(0, 3), group = digits.substr(3, 2),
                         serial = digits.substr(5, 4);
  if (area == "000" || area == "666" || area[0] == '9') return false;
  if (group == "00" || serial == "0000") return false;
  return true;
}

}  // namespace pillar::guard
