// Words: credentials by their issuers' published prefixes and alphabets (AWS, Google, GitHub,
// Slack, Stripe, OpenAI, pillar), JWTs, IBANs (with or without spaces in groups of four), NIFs
// written as VAT numbers ("PT" and nine digits), and IPv6 addresses that start with a letter.
// A word is a run of letters, digits and '_'; '-' continues the token formats that use it.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "guard/checksums.h"
#include "guard/recognizer_internal.h"

namespace pillar::guard::internal {
namespace {

// The end of the run of bytes from `i` that satisfy `in`, reading at most `limit` of them:
// where what is longer than a limit is not what is looked for, the rest is not read.
template <typename Pred>
size_t RunEnd(std::string_view text, size_t i, Pred in, size_t limit = SIZE_MAX) {
  const size_t stop = text.size() - i > limit ? i + limit : text.size();
  while (i < stop && in(text[i])) ++i;
  return i;
}

// IBAN lengths by country (the SWIFT registry).
int IbanLength(std::string_view country) {
  struct Entry {
    char code[3];
    int length;
  };
  static constexpr Entry kLengths[] = {
      {"AD", 24}, {"AE", 23}, {"AL", 28}, {"AT", 20}, {"AZ", 28}, {"BA", 20}, {"BE", 16},
      {"BG", 22}, {"BH", 22}, {"BR", 29}, {"BY", 28}, {"CH", 21}, {"CR", 22}, {"CY", 28},
      {"CZ", 24}, {"DE", 22}, {"DK", 18}, {"DO", 28}, {"EE", 20}, {"EG", 29}, {"ES", 24},
      {"FI", 18}, {"FO", 18}, {"FR", 27}, {"GB", 22}, {"GE", 22}, {"GI", 23}, {"GL", 18},
      {"GR", 27}, {"GT", 28}, {"HR", 21}, {"HU", 28}, {"IE", 22}, {"IL", 23}, {"IQ", 23},
      {"IS", 26}, {"IT", 27}, {"JO", 30}, {"KW", 30}, {"KZ", 20}, {"LB", 28}, {"LC", 32},
      {"LI", 21}, {"LT", 20}, {"LU", 20}, {"LV", 21}, {"MC", 27}, {"MD", 24}, {"ME", 22},
      {"MK", 19}, {"MR", 27}, {"MT", 31}, {"MU", 30}, {"NL", 18}, {"NO", 15}, {"PK", 24},
      {"PL", 28}, {"PS", 29}, {"PT", 25}, {"QA", 29}, {"RO", 24}, {"RS", 22}, {"SA", 24},
      {"SC", 31}, {"SE", 24}, {"SI", 19}, {"SK", 24}, {"SM", 27}, {"ST", 25}, {"SV", 28},
      {"TL", 23}, {"TN", 24}, {"TR", 26}, {"UA", 29}, {"VA", 22}, {"VG", 24}, {"XK", 20}};
  for (const Entry& e : kLengths) {
    if (country == std::string_view(e.code, 2)) return e.length;
  }
  return 0;
}

bool IsUpperAlnum(char c) { return IsDigit(c) || (c >= 'A' && c <= 'Z'); }

// An IBAN at `i` (two capital letters, two check digits), compact or in groups of four separated
// by single spaces; returns its end, or `i`.
size_t IbanEnd(std::string_view text, size_t i) {
  const size_t n = text.size();
  if (i + 4 > n || !IsDigit(text[i + 2]) || !IsDigit(text[i + 3])) return i;
  const int length = IbanLength(text.substr(i, 2));
  if (length == 0) return i;
  char compact[34];
  size_t size = 0;
  size_t k = i, end = i;
  while (k < n && size < size_t(length)) {
    if (IsUpperAlnum(text[k])) {
      compact[size++] = text[k++];
      end = k;
    } else if (text[k] == ' ' && size % 4 == 0 && k + 1 < n && IsUpperAlnum(text[k + 1])) {
      ++k;  // a space between groups of four
    } else {
      break;
    }
  }
  if (size != size_t(length) || (end < n && IsWordByte(text[end]))) return i;
  return IbanChecksumValid(std::string_view(compact, size)) ? end : i;
}

// Where inside a word a prefix may begin a glued token: never (sk_live_, sk-proj-: "disk_live_",
// "task-proj-" are parts of words, found by review helper-53), anywhere, or after a byte its
// own alphabet does not have ("keyAKIA...", but not "SOUTHEASTASIA...").
enum class Glue { kNever, kAnywhere, kAfterOtherAlphabet };

struct TokenRule {
  std::string_view prefix;
  std::string_view kind;
  size_t min_rest, max_rest;  // bytes after the prefix
  bool (*alphabet)(char);
  double score;
  Glue glue;
};

bool AwsAlphabet(char c) { return (c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7'); }
bool AlnumAlphabet(char c) { return IsAlnum(c); }
bool UrlAlphabet(char c) { return IsBase64Url(c); }
bool SlackAlphabet(char c) { return IsAlnum(c) || c == '-'; }

constexpr size_t kUnbounded = 512;

// Credentials by their issuers' documented prefixes and alphabets.
constexpr TokenRule kTokenRules[] = {
    {"AKIA", "aws_access_key", 16, 16, AwsAlphabet, 0.95, Glue::kAfterOtherAlphabet},
    {"ASIA", "aws_access_key", 16, 16, AwsAlphabet, 0.95, Glue::kAfterOtherAlphabet},
    {"AIza", "google_api_key", 35, 35, UrlAlphabet, 0.9, Glue::kAnywhere},
    {"ghp_", "github_token", 36, 36, AlnumAlphabet, 0.95, Glue::kAnywhere},
    {"gho_", "github_token", 36, 36, AlnumAlphabet, 0.95, Glue::kAnywhere},
    {"ghu_", "github_token", 36, 36, AlnumAlphabet, 0.95, Glue::kAnywhere},
    {"ghs_", "github_token", 36, 36, AlnumAlphabet, 0.95, Glue::kAnywhere},
    {"ghr_", "github_token", 36, 36, AlnumAlphabet, 0.95, Glue::kAnywhere},
    {"github_pat_", "github_token", 82, 82, UrlAlphabet, 0.95, Glue::kAnywhere},
    {"xoxb-", "slack_token", 20, kUnbounded, SlackAlphabet, 0.9, Glue::kAnywhere},
    {"xoxp-", "slack_token", 20, kUnbounded, SlackAlphabet, 0.9, Glue::kAnywhere},
    {"xoxa-", "slack_token", 20, kUnbounded, SlackAlphabet, 0.9, Glue::kAnywhere},
    {"sk_live_", "stripe_key", 24, kUnbounded, AlnumAlphabet, 0.95, Glue::kNever},
    {"rk_live_", "stripe_key", 24, kUnbounded, AlnumAlphabet, 0.95, Glue::kNever},
    {"sk-proj-", "openai_key", 40, kUnbounded, UrlAlphabet, 0.9, Glue::kNever},
    {"sk-", "openai_key", 40, kUnbounded, UrlAlphabet, 0.7, Glue::kNever},
};

// The first two bytes of every format ScanToken tries (a JWT's "ey", a pillar key's "pk", the
// token rules' prefixes), as a mask of second bytes ('A' to 'z': bit 0 to 57) by first byte,
// for any word start and for the starts inside a word that a format's Glue allows.
struct PrefixPairs {
  std::array<uint64_t, 128> any{};
  std::array<uint64_t, 128> glued{};
};

constexpr bool InPairTable(std::string_view prefix) {
  return prefix.size() >= 2 && static_cast<unsigned char>(prefix[0]) < 128 && prefix[1] >= 'A' &&
         prefix[1] <= 'z';
}

constexpr PrefixPairs kPrefixPairs = [] {
  PrefixPairs pairs;
  const auto add = [&](std::string_view prefix, bool glued) {
    if (!InPairTable(prefix)) return;  // refused by the static_assert below
    const uint64_t bit = uint64_t{1} << (prefix[1] - 'A');
    pairs.any[size_t(prefix[0])] |= bit;
    if (glued) pairs.glued[size_t(prefix[0])] |= bit;
  };
  add("ey", true);
  add("pk", true);
  for (const TokenRule& rule : kTokenRules) add(rule.prefix, rule.glue != Glue::kNever);
  return pairs;
}();

static_assert(std::all_of(std::begin(kTokenRules), std::end(kTokenRules),
                          [](const TokenRule& rule) { return InPairTable(rule.prefix); }),
              "every prefix must have a place in kPrefixPairs");

// A JWT: three base64url segments joined by '.', the first two JSON objects ("eyJ" is how
// base64url spells '{"'); the signature may be empty (alg "none").
size_t JwtEnd(std::string_view text, size_t i, RunMemo& memo) {
  const size_t header = memo.End(text, i, IsBase64Url);
  if (header - i < 10 || header >= text.size() || text[header] != '.') return i;
  const size_t payload = memo.End(text, header + 1, IsBase64Url, /*lane=*/1);
  if (!text.substr(header + 1).starts_with("eyJ") || payload - header - 1 < 10) return i;
  if (payload >= text.size() || text[payload] != '.') return i;
  return memo.End(text, payload + 1, IsBase64Url, /*lane=*/2);
}

// pillar's API keys: "pk_", 12 lowercase hex characters, '_', 43 base64url characters.
size_t PillarKeyEnd(std::string_view text, size_t i, RunMemo& memo) {
  if (!text.substr(i).starts_with("pk_") || i + 3 + 12 + 1 + 43 > text.size()) return i;
  for (size_t k = i + 3; k < i + 15; ++k) {
    if (!IsDigit(text[k]) && !(text[k] >= 'a' && text[k] <= 'f')) return i;
  }
  if (text[i + 15] != '_') return i;
  const size_t end = memo.End(text, i + 16, IsBase64Url);
  return end - (i + 16) == 43 ? end : i;
}

void Add(std::vector<Finding>& out, EntityType type, size_t begin, size_t end, double score,
         std::string_view kind) {
  out.push_back({.type = type, .begin = begin, .end = end, .score = score, .kind = kind});
}

// A credential by its issuer's prefix (a JWT, a pillar key, kTokenRules) at `i`; its end, or `i`.
// `glued`: `i` is inside a word, where only the rules whose Glue allows it count.
size_t ScanToken(std::string_view text, size_t i, size_t word_end, std::vector<Finding>& out,
                 RunMemo& memo, bool glued) {
  const std::string_view rest = text.substr(i);
  const char c = text[i];
  // Each format is tried only when the first two bytes could begin it: most words are
  // ordinary and cost one or two comparisons here.
  const char second = word_end - i >= 2 ? text[i + 1] : '\0';
  if (c == 'e' && second == 'y' && rest.starts_with("eyJ")) {
    if (const size_t end = JwtEnd(text, i, memo); end > i) {
      Add(out, EntityType::kSecret, i, end, 0.95, "jwt");
      return end;
    }
  }
  if (c == 'p' && second == 'k') {
    if (const size_t end = PillarKeyEnd(text, i, memo); end > i) {
      Add(out, EntityType::kSecret, i, end, 0.99, "pillar_api_key");
      return end;
    }
  }
  if (c == 'A' || c == 'g' || c == 'x' || c == 's' || c == 'r') {
    for (const TokenRule& rule : kTokenRules) {
      if (rule.prefix[0] != c || rule.prefix[1] != second || !rest.starts_with(rule.prefix)) {
        continue;
      }
      if (glued && (rule.glue == Glue::kNever ||
                    (rule.glue == Glue::kAfterOtherAlphabet && rule.alphabet(text[i - 1])))) {
        continue;
      }
      const size_t body = i + rule.prefix.size();
      size_t end = memo.End(text, body, rule.alphabet);
      // A token may have a name's suffix after it, after a '-' or '_' ("AKIA..._prod",
      // "ghp_...-old", found by review helper-52; "xoxb-..._prod"): where its own alphabet ended
      // it, or, for a fixed length in an alphabet with both, right at that length ("AIza..._prod").
      if (rule.min_rest == rule.max_rest && end - body > rule.max_rest &&
          (text[body + rule.max_rest] == '-' || text[body + rule.max_rest] == '_')) {
        end = body + rule.max_rest;
      }
      const size_t length = end - body;
      const bool suffix = end < text.size() && (text[end] == '-' || text[end] == '_');
      if (length >= rule.min_rest && length <= rule.max_rest &&
          (end >= text.size() || !IsBase64Url(text[end]) || suffix)) {
        Add(out, EntityType::kSecret, i, end, rule.score, rule.kind);
        return end;
      }
    }
  }
  return i;
}

}  // namespace

bool MayBeginToken(char first, char second, bool glued) {
  const auto c = static_cast<unsigned char>(first);
  if (c >= 128 || second < 'A' || second > 'z') return false;
  const uint64_t bit = uint64_t{1} << (second - 'A');
  return ((glued ? kPrefixPairs.glued : kPrefixPairs.any)[c] & bit) != 0;
}

void ScanGluedTokens(std::string_view text, size_t begin, size_t end, std::vector<Finding>& out,
                     RunMemo& memo) {
  for (size_t i = begin; i + 1 < end; ++i) {
    if (!MayBeginToken(text[i], text[i + 1], /*glued=*/true)) continue;
    if (const size_t found = ScanToken(text, i, end, out, memo, /*glued=*/true); found > i) {
      i = found - 1;
    }
  }
}

size_t Ipv6End(std::string_view text, size_t i) {
  const size_t end = RunEnd(
      text, i, [](char c) { return IsHex(c) || c == ':' || c == '.'; }, 46);
  if (end - i < 3 || end - i > 45) return i;
  if (end < text.size() && IsWordByte(text[end])) return i;
  size_t colons = 0;
  for (size_t k = i; k < end; ++k) colons += text[k] == ':';
  if (colons < 2) return i;
  // A sentence may end right after the address.
  size_t last = end;
  while (last > i && text[last - 1] == '.') --last;
  char buf[46];
  std::memcpy(buf, text.data() + i, last - i);
  buf[last - i] = '\0';
  in6_addr addr;
  return inet_pton(AF_INET6, buf, &addr) == 1 ? last : i;
}

size_t ScanWord(std::string_view text, size_t i, std::vector<Finding>& out, RunMemo& memo) {
  const size_t word_end = WordEnd(text, i);
  const std::string_view rest = text.substr(i);
  const char c = text[i];
  if (c >= 'A' && c <= 'Z' && word_end - i >= 4) {
    if (const size_t end = IbanEnd(text, i); end > i) {
      Add(out, EntityType::kIbanCode, i, end, 0.95, {});
      return end;
    }
    if (c == 'P' && text[i + 1] == 'T' && word_end - i == 11 && NifValid(rest.substr(2, 9))) {
      Add(out, EntityType::kPtNif, i, word_end, 0.75, {});
      return word_end;
    }
  }
  if (const size_t end = ScanToken(text, i, word_end, out, memo, /*glued=*/false); end > i) {
    return end;
  }
  if (IsHex(c) && word_end < text.size() && text[word_end] == ':') {
    if (const size_t end = Ipv6End(text, i); end > i) {
      Add(out, EntityType::kIpAddress, i, end, 0.7, "ipv6");
      return end;
    }
  }
  return word_end;
}

size_t ScanEmail(std::string_view text, size_t at, std::vector<Finding>& out) {
  auto local_byte = [](char c) {
    return IsAlnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
  };
  size_t begin = at;
  while (begin > 0 && at - begin < 64 && local_byte(text[begin - 1])) --begin;
  while (begin < at && text[begin] == '.') ++begin;
  if (begin == at || text[at - 1] == '.') return at + 1;
  // The domain: labels of letters, digits and '-', joined by single dots, the last (the top
  // level) of letters only and at least two of them.
  size_t k = at + 1, end = at + 1, labels = 0;
  bool top_level_alpha = false;
  while (k < text.size() && k - at <= 253) {
    const size_t label = RunEnd(
        text, k, [](char c) { return IsAlnum(c) || c == '-'; }, 64);
    if (label == k || text[k] == '-' || text[label - 1] == '-' || label - k > 63) break;
    top_level_alpha = label - k >= 2;
    for (size_t m = k; m < label && top_level_alpha; ++m) top_level_alpha = IsAlpha(text[m]);
    ++labels;
    end = label;
    if (label + 1 < text.size() && text[label] == '.' && IsAlnum(text[label + 1])) {
      k = label + 1;
    } else {
      break;
    }
  }
  if (labels < 2 || !top_level_alpha || (end < text.size() && IsWordByte(text[end]))) {
    return at + 1;
  }
  Add(out, EntityType::kEmailAddress, begin, end, 0.9, {});
  return end;
}

bool PemByte(char c) {
  return IsAlnum(c) || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r' || c == ' ' ||
         c == ':' || c == ',' || c == '-';
}
bool Base64Line(char c) {
  return IsAlnum(c) || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r';
}

size_t ScanPrivateKey(std::string_view text, size_t i, std::vector<Finding>& out, RunMemo& memo) {
  constexpr std::string_view kBegin = "-----BEGIN ";
  const std::string_view rest = text.substr(i);
  if (!rest.starts_with(kBegin)) return i + 1;
  // "-----BEGIN RSA PRIVATE KEY-----", "... OPENSSH PRIVATE KEY-----", "... ENCRYPTED ...".
  const size_t label_end = rest.substr(0, 80).find("-----", kBegin.size());
  if (label_end == std::string_view::npos) return i + 1;
  const std::string_view label = rest.substr(kBegin.size(), label_end - kBegin.size());
  // "... PRIVATE KEY" and OpenPGP's "PGP PRIVATE KEY BLOCK".
  if (label.find("PRIVATE KEY") == std::string_view::npos) return i + 1;
  // The block runs to its END line's closing dashes when the END line follows within bytes a
  // block holds (base64, its headers, the END line); a block cut short is a leaked key all the
  // same, up to where its base64 lines stop. The run and the END line are found once for all
  // the blocks that start inside them (RunMemo), so no input makes this quadratic.
  const size_t body = i + label_end + 5;
  const size_t run = memo.End(text, body, PemByte);
  size_t end = RunEnd(text, body, Base64Line, 65536);
  if (const size_t at = memo.Next(text, body, "-----END ");
      at != std::string_view::npos && at < run) {
    const size_t close = text.substr(0, run).find("-----", at + 9);
    end = close == std::string_view::npos ? run : close + 5;
  }
  Add(out, EntityType::kSecret, i, end, 0.99, "private_key");
  return end;
}

}  // namespace pillar::guard::internal
