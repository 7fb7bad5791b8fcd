// Numbers: payment cards, CPF, CNPJ, SSN, NIF, phone numbers and IPv4 addresses. A candidate is a
// run of digit groups joined by single separators (' ', '-', '.', '/', and ") " after a first
// group in parentheses), optionally after a '+'. Its shape ("3.3.3-2" for 123.456.789-09, "(2)
// 5-4" for (11) 98765-4321) says which forms it can be; the digits must then validate. When the
// whole run is none of them, the runs of its space-separated groups are tried, longest first, so
// that "em 2019 4111 1111 1111 1111" still yields the card.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "guard/checksums.h"
#include "guard/recognizer_internal.h"

namespace pillar::guard::internal {
namespace {

constexpr int kMaxGroups = 12;
constexpr size_t kMaxDigits = 24;

struct Run {
  size_t begin = 0;  // the '+' or '(' if there is one, else the first digit
  size_t end = 0;
  bool plus = false;
  bool paren = false;  // the first group is in parentheses
  int count = 0;
  std::array<size_t, kMaxGroups> group_begin{};
  std::array<size_t, kMaxGroups> group_end{};
  std::array<char, kMaxGroups> sep{};  // sep[k]: what comes before group k (k >= 1); ')' for ")"
  std::array<size_t, kMaxGroups + 1> digits_before{};  // digits in the groups before group k
};

// Group lengths as one character each ('1'..'9', then 'a' = 10 ... 'k' = 20 and beyond) and the
// separators between them, with '(' and ')' around a first group in parentheses and a leading
// '+': "3.3.3-2", "(2) 5-4", "+2 2 5 4", "g" (16 digits, no separator).
struct Shape {
  char text[3 * kMaxGroups + 4];
  size_t size = 0;
  std::string_view view() const { return {text, size}; }
};

struct Candidate {
  std::string_view digits;
  std::string_view shape;
  bool plus;
};

char LengthChar(size_t n) {
  return n <= 9 ? char('0' + n) : char('a' + std::min<size_t>(n, 20) - 10);
}

int Prefix(std::string_view digits, size_t n) {
  int v = 0;
  for (size_t i = 0; i < n && i < digits.size(); ++i) v = v * 10 + (digits[i] - '0');
  return v;
}

// Brands by their issuer prefixes (ISO/IEC 7812 IINs) and lengths.
bool KnownCardBrand(std::string_view d) {
  const size_t n = d.size();
  const int p1 = Prefix(d, 1), p2 = Prefix(d, 2), p3 = Prefix(d, 3), p4 = Prefix(d, 4),
            p6 = Prefix(d, 6);
  if (p1 == 4) return n == 13 || n == 16 || n == 19;                           // Visa
  if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720)) return n == 16;    // Mastercard
  if (p2 == 34 || p2 == 37) return n == 15;                                    // Amex
  if (p4 == 6011 || p2 == 65 || (p3 >= 644 && p3 <= 649)) return n >= 16;      // Discover
  if (p2 == 36 || p2 == 38 || (p3 >= 300 && p3 <= 305)) return n >= 14;        // Diners
  if (p4 >= 3528 && p4 <= 3589) return n >= 16;                                // JCB
  if (p2 == 62 || p2 == 50 || (p2 >= 56 && p2 <= 58) || p2 == 63 || p2 == 67)  // UnionPay, Maestro
    return n >= 16;
  if (p6 == 636368 || p6 == 438935 || p6 == 504175 || p6 == 451416 || p6 == 636297 || p4 == 5067 ||
      p4 == 4576 || p4 == 4011 || p6 == 606282)  // Elo, Hipercard (Brazil)
    return n == 16;
  return false;
}

// Groups of four (the last shorter), Amex's 4-6-5, Diners' 4-6-4, or no separator at all; one
// kind of separator, a space, a dash or a dot.
bool CardGrouping(std::string_view shape) {
  if (shape.size() == 1) return true;
  if (shape == "4 6 5" || shape == "4-6-5" || shape == "4 6 4" || shape == "4-6-4") return true;
  const char sep = shape.size() > 1 ? shape[1] : ' ';
  if (sep != ' ' && sep != '-' && sep != '.') return false;
  for (size_t i = 0; i < shape.size(); i += 2) {
    const bool last = i + 1 >= shape.size();
    if (!last && (shape[i] != '4' || shape[i + 1] != sep)) return false;
    if (last && (shape[i] < '1' || shape[i] > '4')) return false;
  }
  return true;
}

// Calling codes by their first digits: one code is a prefix of no other, so the first that is
// known is the code. A subset: every code of one digit, and the two- and three-digit codes of
// the regions pillar's users are most likely to see.
size_t CallingCodeLength(std::string_view d) {
  if (d.empty()) return 0;
  if (d[0] == '1' || d[0] == '7') return 1;
  static constexpr std::string_view kTwo[] = {
      "20", "27", "30", "31", "32", "33", "34", "36", "39", "40", "41", "43", "44", "45", "46",
      "47", "48", "49", "51", "52", "53", "54", "55", "56", "57", "58", "60", "61", "62", "63",
      "64", "65", "66", "81", "82", "84", "86", "90", "91", "92", "93", "94", "95", "98"};
  for (std::string_view code : kTwo) {
    if (d.starts_with(code)) return 2;
  }
  if (d.size() >= 3 && (d[0] == '2' || d[0] == '3' || d[0] == '4' || d[0] == '5' || d[0] == '6' ||
                        d[0] == '8' || d[0] == '9')) {
    return 3;  // the three-digit codes fill the rest of these zones
  }
  return 0;
}

bool NanpValid(std::string_view ten) {  // area code and exchange start 2-9
  return ten.size() == 10 && ten[0] >= '2' && ten[3] >= '2';
}

bool BrazilNationalValid(std::string_view d) {  // DDD 11-99 without a 0, then 8 or 9 digits
  if (d.size() != 10 && d.size() != 11) return false;
  if (d[0] == '0' || d[1] == '0') return false;
  return d.size() == 10 ? (d[2] >= '2' && d[2] <= '5') : d[2] == '9';
}

bool PortugalNationalValid(std::string_view d) {  // mobiles 91, 92, 93, 96; fixed lines 2x
  if (d.size() != 9) return false;
  return (d[0] == '9' && (d[1] == '1' || d[1] == '2' || d[1] == '3' || d[1] == '6')) ||
         (d[0] == '2' && d[1] != '0');
}

double PhoneScore(const Candidate& c) {
  const std::string_view d = c.digits, s = c.shape;
  if (c.plus) {
    if (d.size() < 8 || d.size() > 15) return 0;
    const size_t code = CallingCodeLength(d);
    if (code == 0) return 0;
    const std::string_view national = d.substr(code);
    if (d[0] == '1') return NanpValid(national) ? 0.85 : 0;
    if (d.starts_with("55")) return BrazilNationalValid(national) ? 0.85 : 0;
    if (d.starts_with("351")) return PortugalNationalValid(national) ? 0.85 : 0;
    return 0.7;
  }
  // United States: (415) 555-2671, 415-555-2671 and the like, with or without the trunk 1.
  if ((s == "(3) 3-4" || s == "(3)3-4" || s == "3-3-4" || s == "3.3.4" || s == "3 3 4") &&
      NanpValid(d)) {
    return 0.6;
  }
  if ((s == "1-3-3-4" || s == "1 3 3 4" || s == "1.3.3.4") && NanpValid(d.substr(1))) return 0.6;
  // Brazil: (11) 98765-4321, (11) 3456-7890, 11 98765-4321, 98765-4321.
  if ((s == "(2) 5-4" || s == "(2)5-4" || s == "(2) 4-4" || s == "(2)4-4") &&
      BrazilNationalValid(d)) {
    return 0.7;
  }
  if ((s == "2 5-4" || s == "2 4-4") && BrazilNationalValid(d)) return 0.55;
  if (s == "5-4" && d[0] == '9') return 0.45;
  // Portugal: 912 345 678, 212 345 678.
  // Grouped in threes, nine digits are as often a count written with spaces for thousands
  // ("294 285 727 inhabitants"): a context word decides.
  if ((s == "3 3 3" || s == "3-3-3" || s == "3.3.3") && PortugalNationalValid(d)) return 0.45;
  if (s == "9" && PortugalNationalValid(d)) return 0.35;
  if (s == "a" && NanpValid(d)) return 0.25;  // ten bare digits: needs a context word
  if (s == "b" && BrazilNationalValid(d)) return 0.3;
  return 0;
}

double CardScore(const Candidate& c) {
  if (c.plus || c.digits.size() < 13 || c.digits.size() > 19) return 0;
  if (!CardGrouping(c.shape) || !LuhnValid(c.digits)) return 0;
  return KnownCardBrand(c.digits) ? 0.85 : 0.35;
}

double Ipv4Score(const Candidate& c, std::string_view text, const Run& run, int first) {
  if (c.plus || c.shape.size() != 7) return 0;
  for (int k = 0; k < 4; ++k) {
    if (k > 0 && run.sep[size_t(first + k)] != '.') return 0;
    const size_t b = run.group_begin[size_t(first + k)], e = run.group_end[size_t(first + k)];
    if (e - b > 3 || (e - b > 1 && text[b] == '0')) return 0;
    if (Prefix(text.substr(b, e - b), 3) > 255) return 0;
  }
  return 0.6;
}

void Classify(std::string_view text, const Run& run, int first, int last, std::vector<Finding>& out,
              bool& found) {
  char digits[kMaxDigits];
  size_t nd = 0;
  Shape shape;
  const bool plus = run.plus && first == 0;
  const bool paren = run.paren && first == 0;
  if (plus) shape.text[shape.size++] = '+';
  for (int k = first; k < last; ++k) {
    const size_t b = run.group_begin[size_t(k)], e = run.group_end[size_t(k)];
    std::memcpy(digits + nd, text.data() + b, e - b);
    nd += e - b;
    if (k > first) {
      if (run.sep[size_t(k)] == ')') {
        shape.text[shape.size++] = ')';
        if (text[b - 1] == ' ') shape.text[shape.size++] = ' ';
      } else {
        shape.text[shape.size++] = run.sep[size_t(k)];
      }
    } else if (paren) {
      shape.text[shape.size++] = '(';
    }
    shape.text[shape.size++] = LengthChar(e - b);
  }
  Candidate c{std::string_view(digits, nd), shape.view(), plus};
  size_t begin = (plus || paren) ? run.begin : run.group_begin[size_t(first)];
  const size_t end = run.group_end[size_t(last - 1)];
  auto add = [&](EntityType type, double score, std::string_view kind = {}) {
    if (score <= 0) return;
    out.push_back({.type = type, .begin = begin, .end = end, .score = score, .kind = kind});
    found = true;
  };
  add(EntityType::kPhoneNumber, PhoneScore(c));
  if (plus || paren) {
    // Only a phone number is written after a '+' or with its first group in parentheses; what is
    // not one is read without them ("+4111111111111111" is a card with a sign before it).
    if (found || (paren && run.sep[size_t(first + 1)] == ')' && last > first + 1)) return;
    c.plus = false;
    c.shape.remove_prefix(1);
    begin = run.group_begin[size_t(first)];
  }
  const std::string_view s = c.shape, d = c.digits;
  add(EntityType::kCreditCard, CardScore(c));
  add(EntityType::kIpAddress, Ipv4Score(c, text, run, first), "ipv4");
  // Bare, eleven or fourteen digits pass both check digits one time in a hundred: found, at the
  // threshold, unless a word says they are something else.
  if (nd == 11 && CpfValid(d)) {
    add(EntityType::kBrCpf, s == "3.3.3-2" ? 0.9 : s == "9-2" ? 0.8 : s == "b" ? 0.5 : 0);
  }
  if (nd == 14 && CnpjValid(d)) {
    add(EntityType::kBrCnpj, s == "2.3.3/4-2" ? 0.95 : s == "e" ? 0.5 : 0);
  }
  if (nd == 9 && SsnStructureValid(d)) {
    add(EntityType::kUsSsn, s == "3-2-4" ? 0.6 : s == "3 2 4" ? 0.4 : s == "9" ? 0.15 : 0);
  }
  if (nd == 9 && NifValid(d)) add(EntityType::kPtNif, s == "9" ? 0.35 : s == "3 3 3" ? 0.3 : 0);
}

void Take(std::string_view text, const Run& run, int first, int last, int a, int b,
          const std::vector<Finding>& found, std::vector<Finding>& out);

// A finding this strong is taken at once; a weaker one only if no other span of its length is
// stronger ("1111 4111 1111 1111 1111": the first four groups pass Luhn for no known issuer,
// the last four are the card).
constexpr double kStrongFind = 0.5;

bool ClassifySpans(std::string_view text, const Run& run, int first, int last, bool any_separator,
                   std::vector<Finding>& out);

// Tries groups [first, last) whole, then its runs of space-separated groups, longest first;
// what is left on either side of a find is tried the same way. When none is anything, the runs
// that start or end at another separator are tried too: "4111 1111 1111 1111.5" and
// "4111-1111-1111-1111-5" hold a card.
void ClassifyRange(std::string_view text, const Run& run, int first, int last,
                   std::vector<Finding>& out) {
  if (ClassifySpans(text, run, first, last, false, out)) return;
  // Only a run with another separator inside has more spans to try.
  for (int k = first + 1; k < last; ++k) {
    if (run.sep[size_t(k)] != ' ' && run.sep[size_t(k)] != ')') {
      ClassifySpans(text, run, first, last, true, out);
      return;
    }
  }
}

// One pass of ClassifyRange; whether it found anything.
bool ClassifySpans(std::string_view text, const Run& run, int first, int last, bool any_separator,
                   std::vector<Finding>& out) {
  auto edge = [&](int k) {
    return any_separator || run.sep[size_t(k)] == ' ' || run.sep[size_t(k)] == ')';
  };
  std::vector<Finding> found_here, weak;
  for (int length = last - first; length >= 1; --length) {
    int weak_at = -1;
    weak.clear();
    for (int a = first; a + length <= last; ++a) {
      const int b = a + length;
      // A span starts and ends at a space, or at the ')' that closes a first group: "(1) 4111
      // 1111 1111 1111" is a number in brackets, then a card.
      if ((a > first && !edge(a)) || (b < last && !edge(b))) continue;
      // Every entity has from 4 (an IPv4 address) to 19 digits (a card), and at most five
      // groups (a card of 19 digits, a CNPJ), or seven for an international number written in
      // pairs ("+49 30 12 34 56 78"): no other span is read.
      const size_t digits = run.digits_before[size_t(b)] - run.digits_before[size_t(a)];
      const int max_groups = a == 0 && run.plus ? 7 : 5;
      if (digits < 4 || digits > 19 || length > max_groups) continue;
      bool found = false;
      found_here.clear();
      Classify(text, run, a, b, found_here, found);
      if (!found) continue;
      double best = 0;
      for (const Finding& f : found_here) best = std::max(best, f.score);
      if (best >= kStrongFind) {
        Take(text, run, first, last, a, b, found_here, out);
        return true;
      }
      if (weak_at < 0) {
        weak_at = a;
        weak.swap(found_here);
      }
    }
    if (weak_at >= 0) {
      Take(text, run, first, last, weak_at, weak_at + length, weak, out);
      return true;
    }
  }
  return false;
}

// Takes the findings of groups [a, b) and tries what is left of [first, last) on either side.
void Take(std::string_view text, const Run& run, int first, int last, int a, int b,
          const std::vector<Finding>& found, std::vector<Finding>& out) {
  out.insert(out.end(), found.begin(), found.end());
  if (a > first) ClassifyRange(text, run, first, a, out);
  if (b < last) ClassifyRange(text, run, b, last, out);
}

bool IsSeparator(char c) { return c == ' ' || c == '-' || c == '.' || c == '/'; }

// The length of an invisible or no-break space at `i`, read as a space between groups: a value
// pasted from a document, or one that someone split to slip past a filter, is the same value.
size_t WideSpaceLength(std::string_view text, size_t i) {
  static constexpr std::string_view kSpaces[] = {
      "\xc2\xa0",      // no-break space
      "\xc2\xad",      // soft hyphen
      "\xe2\x80\xaf",  // narrow no-break space
      "\xe2\x80\x8b",  // zero-width space
      "\xe2\x80\x8c",  // zero-width non-joiner
      "\xe2\x80\x8d",  // zero-width joiner
      "\xe2\x81\xa0",  // word joiner
  };
  if (static_cast<unsigned char>(text[i]) < 0x80) return 0;
  for (std::string_view s : kSpaces) {
    if (text.substr(i, s.size()) == s) return s.size();
  }
  return 0;
}

// An IPv6 address whose first group starts with a digit at `i` ("2001:db8::1",
// "7ec4:1b80:..."): found, and its end returned; 0 if there is none.
size_t LeadingIpv6(std::string_view text, size_t i, std::vector<Finding>& out) {
  size_t hex = i;
  while (hex < text.size() && IsHex(text[hex])) ++hex;
  if (hex >= text.size() || text[hex] != ':') return 0;
  const size_t end = Ipv6End(text, i);
  if (end <= i) return 0;
  out.push_back(
      {.type = EntityType::kIpAddress, .begin = i, .end = end, .score = 0.7, .kind = "ipv6"});
  return end;
}

// What may join the group that ends at `i` to the next: one separator, or a closing
// parenthesis (and a space) after a first group opened by one. Where the next group would
// begin, with `sep` set to the separator (')' for ") "); `sep` stays 0 when nothing joins.
size_t NextGroup(std::string_view text, size_t i, const Run& run, char& sep) {
  if (run.paren && run.count == 1 && text[i] == ')') {
    sep = ')';
    return i + 1 + (i + 1 < text.size() && text[i + 1] == ' ' ? 1 : 0);
  }
  if (IsSeparator(text[i])) {
    sep = text[i];
    return i + 1;
  }
  // A blank other than a space, read as one: a tab, a line break (one, or CRLF), a form feed, a
  // vertical tab, the ASCII file, group, record and unit separators. A reader sees the groups
  // apart as with a space ("4111\t1111\t1111\t1111" is a card to a model).
  if (const char c = text[i];
      c == '\t' || c == '\n' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1f')) {
    sep = ' ';
    return i + 1;
  }
  if (text[i] == '\r') {
    sep = ' ';
    return i + 1 + (i + 1 < text.size() && text[i + 1] == '\n' ? 1 : 0);
  }
  if (const size_t wide = WideSpaceLength(text, i); wide > 0) {
    sep = ' ';
    return i + wide;
  }
  return i;
}

// Where to scan again when a run grows past any entity at a group of `digits` digits that
// begins at `next`: the earliest of the run's last four groups that can begin an entity with
// it (at most 19 digits in all), never the first group; else `next`.
size_t RestartAt(const Run& run, size_t next, size_t digits) {
  for (int k = std::max(1, run.count - 4); k < run.count; ++k) {
    if (run.digits_before[size_t(run.count)] - run.digits_before[size_t(k)] + digits <= 19) {
      return run.group_begin[size_t(k)];
    }
  }
  return next;
}

}  // namespace

size_t ScanNumber(std::string_view text, size_t i, std::vector<Finding>& out) {
  const size_t n = text.size();
  Run run;
  run.begin = i;
  if (text[i] == '+') {
    run.plus = true;
    ++i;
  } else if (text[i] == '(') {
    run.paren = true;
    ++i;
  }
  if (!run.plus && !run.paren) {
    if (const size_t end = LeadingIpv6(text, i, out); end > 0) return end;
  }
  size_t digits = 0;
  bool too_long = false;
  size_t restart = 0;  // > 0: where to scan again, the run being longer than any entity
  while (true) {
    const size_t b = i;
    while (i < n && IsDigit(text[i])) ++i;
    digits += i - b;
    if (run.count > 0 && (run.count == kMaxGroups || digits > kMaxDigits)) {
      // More groups or digits than any entity has: the groups so far are read, and the scan
      // starts again at the earliest of the last four groups (an entity has at most five) that
      // can still begin one with this group (at most 19 digits), so that a card after ten single
      // digits, and an SSN after a card ("4111111111111111-078-05-1120"), are still seen. Each
      // group is read a bounded number of times: the restart is never the run's first group.
      restart = RestartAt(run, b, i - b);
      i = run.group_end[size_t(run.count - 1)];
      break;
    }
    if (digits > kMaxDigits) {
      too_long = true;
    } else {
      run.group_begin[size_t(run.count)] = b;
      run.group_end[size_t(run.count)] = i;
      run.digits_before[size_t(run.count) + 1] = run.digits_before[size_t(run.count)] + (i - b);
      ++run.count;
    }
    if (i >= n) break;
    char sep = 0;
    const size_t next = NextGroup(text, i, run, sep);
    if (sep == 0 || next >= n || !IsDigit(text[next])) break;
    if (run.count < kMaxGroups) run.sep[size_t(run.count)] = sep;
    i = next;
  }
  run.end = i;
  // A '(' that no ')' closes right after the first group only opens a bracket around the
  // number: "(4111 1111 1111 1111)", "(078-05-1120)" are read without it.
  if (run.paren && (run.count == 1 || run.sep[1] != ')')) {
    run.paren = false;
    run.begin = run.group_begin[0];
  }
  if (restart > 0) {
    ClassifyRange(text, run, 0, run.count, out);
    return restart;
  }
  // Glued to a word ("12kg", "3rd"), the local part of an address, or longer than any entity:
  // none of these is a number this scanner knows.
  if (too_long) return i;
  if (i < n && (IsWordByte(text[i]) || text[i] == '@')) {
    // Only the last group is glued: the groups before it are still read ("4111 1111 1111 1111
    // 1st"), a finding ending before the glued group.
    if (run.count > 1) ClassifyRange(text, run, 0, run.count - 1, out);
    while (i < n && IsWordByte(text[i])) ++i;
    return i;
  }
  ClassifyRange(text, run, 0, run.count, out);
  return i;
}

}  // namespace pillar::guard::internal
