// What the recognizers' files share: byte classes, the context-word check, and each scanner's
// entry point. Not part of guard's interface (recognizer.h is).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "guard/entity.h"

namespace pillar::guard::internal {

enum ByteClass : uint8_t {
  kOther,  // spaces, punctuation
  kDigit,  // 0-9
  kUpper,  // A-Z
  kLower,  // a-z
  kUnder,  // '_'
  kHigh,   // a byte of a multi-byte UTF-8 character: a boundary, as spaces and punctuation are
};

inline constexpr std::array<uint8_t, 256> kByteClass = [] {
  std::array<uint8_t, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = kDigit;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = kUpper;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = kLower;
  t['_'] = kUnder;
  for (int c = 0x80; c < 0x100; ++c) t[c] = kHigh;
  return t;
}();

constexpr uint8_t ClassOf(char c) { return kByteClass[static_cast<unsigned char>(c)]; }
constexpr bool IsDigit(char c) { return ClassOf(c) == kDigit; }
constexpr bool IsAlpha(char c) { return ClassOf(c) == kUpper || ClassOf(c) == kLower; }
constexpr bool IsAlnum(char c) { return IsDigit(c) || IsAlpha(c); }
// Letters, digits and '_': what an entity may not be glued to. Non-ASCII characters are
// boundaries: a value after a no-break space, an ideographic colon or an accented letter is
// still found (a guard errs on the side of finding).
constexpr bool IsWordByte(char c) { return ClassOf(c) != kOther && ClassOf(c) != kHigh; }
constexpr bool IsHex(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
constexpr bool IsBase64Url(char c) { return IsAlnum(c) || c == '-' || c == '_'; }

// Word bytes among eight (the first in the lowest byte), each marked by its high bit: letters,
// digits and '_'. Each test "x in [lo, hi]" is two additions on seven-bit bytes, which cannot
// carry into the next byte; bytes of non-ASCII characters are then taken out.
inline uint64_t WordBytes(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = kOnes * 0x80;
  const uint64_t x = word & ~kHigh;
  const auto in = [&](uint64_t v, uint64_t lo, uint64_t hi) {
    return (v + kOnes * (0x80 - lo)) & ~(v + kOnes * (0x7f - hi));
  };
  return (in(x, '0', '9') | in(x | kOnes * 0x20, 'a', 'z') | in(x, '_', '_')) & ~word & kHigh;
}

// The end of the word at `i`, eight bytes at a time while eight are left.
inline size_t WordEnd(std::string_view text, size_t i) {
  static_assert(std::endian::native == std::endian::little, "WordEnd reads words in order");
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, sizeof word);
    if (const uint64_t other = ~WordBytes(word) & 0x8080808080808080ull; other != 0) {
      return i + size_t(std::countr_zero(other)) / 8;
    }
  }
  while (i < text.size() && IsWordByte(text[i])) ++i;
  return i;
}

// Whether a word that says what `type` is appears near [begin, end): in the 48 bytes before it
// or the 16 after, case-insensitively (ASCII), at the start of a word. Returns the adjustment to
// the score: positive for a word that names the type ("cpf", "telefone"); else, for numbers,
// negative for a word that names another number type or says a number is something else
// ("order", "invoice"); else 0.
double ContextAdjustment(std::string_view text, size_t begin, size_t end, EntityType type);

// The ends of the runs measured last, one per alphabet. Words joined by '-' are each a word
// start, so a scanner can start again and again inside one run of its alphabet ("sk-sk-sk-...",
// "eyJ-eyJ-..."); the run's end is then known without reading the run again, and no input makes
// scanning quadratic.
class RunMemo {
 public:
  using Alphabet = bool (*)(char);
  // The end of the run of bytes from `i` that are in `in`. `lane` gives one alphabet more than
  // one slot, for a scanner that measures runs of it at several places of one value (a JWT's
  // three segments): sharing one, each would evict the other's long run.
  size_t End(std::string_view text, size_t i, Alphabet in, int lane = 0) {
    // One slot per alphabet and lane (the scanners use fewer than twelve): starts mostly move
    // forward (the glued search reads a run ahead of the loop, then the loop reads it), so the
    // last run of each alphabet is the one a later start most likely falls in. A slot shared
    // by two alphabets would be evicted by short runs of the other, and the long run read again
    // from every start.
    Entry* slot = nullptr;
    for (Entry& e : entries_) {
      if (e.in == in && e.lane == lane) {
        if (e.begin <= i && i < e.end) return e.end;
        slot = &e;
        break;
      }
      if (e.in == nullptr) {
        slot = &e;
        break;
      }
    }
    size_t end = i;
    while (end < text.size() && in(text[end])) ++end;
    if (slot != nullptr) *slot = {in, lane, i, end};
    return end;
  }

  // Where `needle` next occurs at or after `i` (npos for nowhere), searched once for all the
  // starts that ask in turn (starts only move forward).
  size_t Next(std::string_view text, size_t i, std::string_view needle) {
    if (needle != needle_ || i < searched_from_ ||
        (found_ != std::string_view::npos && found_ < i)) {
      needle_ = needle;
      searched_from_ = i;
      found_ = text.find(needle, i);
    }
    return found_;
  }

 private:
  struct Entry {
    Alphabet in = nullptr;
    int lane = 0;
    size_t begin = 0, end = 0;
  };
  std::array<Entry, 12> entries_{};
  std::string_view needle_;
  size_t searched_from_ = 0;
  size_t found_ = 0;
};

// Each scanner starts at `i`, the first byte of what it may recognize (a word's first byte for
// ScanWord, a digit or the '+' or '(' before one for ScanNumber, ...), appends what it finds
// (unscored by context, unfiltered) and returns where scanning goes on: past what it consumed,
// always beyond `i`.
size_t ScanWord(std::string_view text, size_t i, std::vector<Finding>& out, RunMemo& memo);
size_t ScanNumber(std::string_view text, size_t i, std::vector<Finding>& out);
// Credentials glued to the word before them ("key%20AKIA...", "tokenghp_..."), whose prefix
// starts inside [begin, end), a run of words joined by '-' or '.': the token rules whose glue
// allows it (not sk_live_, sk-proj-, which end common words), JWTs and pillar keys, each with
// its own length and end as at a word's start.
void ScanGluedTokens(std::string_view text, size_t begin, size_t end, std::vector<Finding>& out,
                     RunMemo& memo);
// Whether a credential format ScanToken knows may begin with `first`, `second` (exact for the
// two bytes: what it says no to, ScanToken finds nothing at); `glued`: inside a word, where only
// the formats whose Glue allows it count.
bool MayBeginToken(char first, char second, bool glued);
size_t ScanEmail(std::string_view text, size_t at_sign, std::vector<Finding>& out);
size_t ScanPrivateKey(std::string_view text, size_t i, std::vector<Finding>& out, RunMemo& memo);
// An IPv6 address starting at `i` ("2001:db8::1", "::1"; a zone, "%eth0", is not part of it);
// returns its end, or `i` when there is none. Reads at most 46 bytes.
size_t Ipv6End(std::string_view text, size_t i);

}  // namespace pillar::guard::internal
