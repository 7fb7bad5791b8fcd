#include "guard/screen.h"

#include <algorithm>
#include <optional>

#include "common/crypto.h"
#include "common/strings.h"
#include "guard/recognizer.h"
#include "guard/text_fold.h"

namespace pillar::guard {

std::string RedactAll(std::string_view text) {
  // Addresses are kept: errors name the upstream endpoints that failed, and the access log
  // records each client's address on purpose (operations.md).
  RecognizerOptions options;
  options.enabled[size_t(EntityType::kIpAddress)] = false;
  std::vector<Finding> found = Recognize(text, options);
  // Read again with '_', ':', '+' and '/' between two digits as blanks, which the recognizers
  // take between a number's groups: a card number so joined in a path, a method or a token's kid
  // is one all the same (review helper-138: "4111_1111_1111_1111" reached the audit log). Again,
  // not instead: a key's '_' between its id and its secret is the key's own ("pk_..._6R0r..." read
  // as two words was not one). One byte for one, so what is found is where it was; what is kept
  // is the text as it came. Only here, for what pillar keeps of a client's text: the content
  // guard reads prompts as they are.
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::string read(text);
  for (size_t i = 1; i + 1 < read.size(); ++i) {
    const char c = read[i];
    if ((c == '_' || c == ':' || c == '+' || c == '/') && digit(read[i - 1]) &&
        digit(read[i + 1])) {
      read[i] = ' ';
    }
  }
  if (read != text) {
    std::vector<Finding> joined = Recognize(read, options);
    found.insert(found.end(), joined.begin(), joined.end());
    std::sort(found.begin(), found.end(),
              [](const Finding& a, const Finding& b) { return a.begin < b.begin; });
  }
  if (found.empty()) return std::string(text);
  // Findings that overlap are replaced as one, by the first one's tag.
  std::string out;
  size_t at = 0;
  for (size_t i = 0; i < found.size();) {
    const size_t begin = std::max(found[i].begin, at);
    size_t end = found[i].end;
    const EntityType type = found[i].type;
    for (++i; i < found.size() && found[i].begin < end; ++i) end = std::max(end, found[i].end);
    if (end <= at) continue;  // within one replaced already
    StrAppend(&out, text.substr(at, begin - at), "<", EntityName(type), ">");
    at = end;
  }
  out.append(text.substr(at));
  return out;
}

std::string PercentDecoded(std::string_view text, bool plus_is_space) {
  std::string decoded;
  decoded.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && HexDigitValue(text[i + 1]) >= 0 &&
        HexDigitValue(text[i + 2]) >= 0) {
      decoded.push_back(char(HexDigitValue(text[i + 1]) * 16 + HexDigitValue(text[i + 2])));
      i += 2;
    } else {
      decoded.push_back(plus_is_space && text[i] == '+' ? ' ' : text[i]);
    }
  }
  return decoded;
}

std::string RedactPath(std::string_view path) {
  const size_t query = path.find('?');
  if (path.find('%') == std::string_view::npos &&
      (query == std::string_view::npos || path.find('+', query) == std::string_view::npos)) {
    return RedactAll(path);
  }
  // The path's escapes decoded, and the query's as a form's ('+' a blank, as HTML forms and
  // Python's urlencode write it), round after round while anything changes, so that a value
  // escaped again is read too (reviews helper-127 and 128: "4111+1111+1111+1111", the same
  // escaped again as "4111%2B1111...", and "jo%2540example.org" were logged as they came).
  std::string head(path.substr(0, query));
  std::string tail(query == std::string_view::npos ? std::string_view() : path.substr(query));
  for (int round = 0;; ++round) {
    std::string next_head = PercentDecoded(head, false);
    std::string next_tail = PercentDecoded(tail, true);
    if (next_head == head && next_tail == tail) break;
    // Escaped more often than any client escapes: not read further, and not kept (review
    // helper-137: an email escaped 17 times was logged as escaped once).
    if (round == 16) return "<ESCAPED_TOO_DEEP>";
    head = std::move(next_head);
    tail = std::move(next_tail);
  }
  return RedactAll(head + tail);
}

[[nodiscard]] absl::Status RedactAll(const absl::Status& status) {
  if (status.ok()) return status;
  const std::string_view text(status.message().data(), status.message().size());
  std::string message = RedactAll(text);
  if (message == text) return status;
  absl::Status out = absl::Status(status.code(), message);
  status.ForEachPayload(
      [&](absl::string_view key, const absl::Cord& value) { out.SetPayload(key, value); });
  return out;
}

std::string Redacted(std::string_view original, EntityType type, Redaction redaction,
                     std::string_view hash_key) {
  // As the recognizers read it: a value written with look-alikes hashes like its plain form, and
  // its fullwidth digits are masked like ASCII ones.
  // A value with controls inside is masked as a terminal shows it, its sequences dropped: the
  // digits and letters of "\x1b[0m" masked would leave "\x1b[**", a sequence that swallows the
  // text after it on a terminal (found by review helper-52).
  std::optional<FoldedText> folded(std::in_place, original);
  if (folded->has_controls()) folded.emplace(original, FoldedText::Controls::kDrop);
  const std::string_view value = folded->text();
  switch (redaction) {
    case Redaction::kTag:
      return StrCat("<", EntityName(type), ">");
    case Redaction::kHash:
      return StrCat("<", EntityName(type), ":",
                    HexEncode(HmacSha256(hash_key, value)).substr(0, 16), ">");
    case Redaction::kMask:
      break;
  }
  std::string masked(value);
  if (type == EntityType::kSecret) {
    // Every byte but line breaks and spaces: a key's punctuation (+/=-_.) would say which bytes
    // are not letters.
    for (char& c : masked) {
      if (c != '\n' && c != '\r' && c != ' ') c = '*';
    }
    return masked;
  }
  // A card keeps its last four digits, as receipts print them (PCI DSS allows it).
  size_t keep = type == EntityType::kCreditCard ? 4 : 0;
  for (size_t i = masked.size(); i-- > 0;) {
    const char c = masked[i];
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum) continue;
    if (keep > 0) {
      --keep;
      continue;
    }
    masked[i] = '*';
  }
  return masked;
}

std::string DenyReason(const DenyMatch& m) {
  return StrCat("deny rule '", m.rule->name, "' at bytes ", m.begin, "-", m.end);
}

ScreenResult Screen(std::string_view text, const GuardConfig& config) {
  RecognizerOptions options;
  options.min_score = config.LowestScore();
  ScreenResult result;
  size_t copied = 0;
  for (const Finding& f : Recognize(text, options)) {
    const EntityRule& rule = config.rule(f.type);
    if (f.score < rule.min_score) continue;
    // The strictest action of every type merged into the finding applies to all its bytes.
    Action action = rule.action;
    for (EntityType other : kAllEntityTypes) {
      if ((f.overlapped >> int(other) & 1) == 0) continue;
      action = std::max(action, config.rule(other).action);
    }
    result.findings.push_back({f, action});
    if (action == Action::kBlock && !result.blocked) {
      result.blocked = true;
      result.block_reason = StrCat(EntityName(f.type), " at bytes ", f.begin, "-", f.end);
    }
    if (action != Action::kRedact || result.blocked) continue;
    result.text.append(text.substr(copied, f.begin - copied));
    result.text.append(
        Redacted(text.substr(f.begin, f.end - f.begin), f.type, rule.redaction, config.hash_key));
    copied = f.end;
  }
  if (config.deny != nullptr) {
    result.denied = config.deny->Match(text);
    for (const DenyMatch& m : result.denied) {
      if (m.rule->action != DenyAction::kBlock || result.blocked) continue;
      result.blocked = true;
      result.block_reason = DenyReason(m);
    }
  }
  if (result.blocked) {
    result.text.clear();
  } else {
    result.text.append(text.substr(copied));
  }
  return result;
}

std::string RepeatedFinding(std::string_view value, const GuardConfig& config) {
  if (value.empty()) return std::string();
  // A client may show the value once, or joined with its repeats any number of times: each
  // count of copies whose join is up to kLongestValue bytes (a match needs its ends on a
  // boundary, which one more copy may take away), then repeated to 512 bytes (a match that spans
  // copies), a line each.
  constexpr size_t kLongestValue = 80;  // a card, an IBAN, a key, a phone number written out
  std::string repeated;
  for (size_t times = 1; times == 1 || (times - 1) * value.size() < kLongestValue; ++times) {
    for (size_t i = 0; i < times; ++i) repeated.append(value);
    repeated.push_back('\n');
  }
  const size_t start = repeated.size();
  while (repeated.size() - start < std::max<size_t>(2 * value.size(), 512)) repeated.append(value);
  const ScreenResult r = Screen(repeated, config);
  // What was found, not where: the offsets are the repeated text's.
  if (r.blocked) return r.block_reason.substr(0, r.block_reason.find(" at bytes"));
  for (const ScreenedFinding& f : r.findings) {
    if (f.action != Action::kAllow) return std::string(EntityName(f.finding.type));
  }
  return std::string();
}

namespace {

// Base64 as lenient decoders read it (Python's urllib and binascii for data: URLs, most MIME
// readers): bytes outside the alphabet (standard or URL-safe) skipped, a '=' ending a group but
// not the data.
std::string LenientBase64(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t bits = 0;
  int count = 0, pads = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+' || c == '-') {
      v = 62;
    } else if (c == '/' || c == '_') {
      v = 63;
    } else if (c == '=') {
      // As Python's binascii reads it: a '=' that does not complete its group is skipped, the
      // group going on; one that does ends the group, and decoding goes on with the next (where
      // Python stops: reading more than it does only screens more).
      if (count < 2 || count + ++pads < 4) continue;
      out.push_back(char(bits >> (6 * count - 8)));
      if (count == 3) out.push_back(char(bits >> 2));
      bits = 0;
      count = 0;
      pads = 0;
      continue;
    } else {
      continue;
    }
    pads = 0;
    bits = (bits << 6) | uint32_t(v);
    if (++count == 4) {
      out.push_back(char(bits >> 16));
      out.push_back(char(bits >> 8));
      out.push_back(char(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count >= 2) out.push_back(char(bits >> (6 * count - 8)));
  if (count == 3) out.push_back(char(bits >> 2));
  return out;
}

// Decoded bytes as a reader takes them: text (no more than one byte in fifty a control
// character) whole; anything else (a picture's, a sound's, a compressed file's bytes) as its runs
// of at least 12 printable ASCII characters, as `strings` shows them, which is where text hidden
// in such bytes, a metadata field or a text behind a format's signature, can be read. Reading
// the binary bytes whole would find an e-mail address in a random megabyte now and then.

// Printable ASCII and the blanks text holds (tab, line breaks, form feed, vertical tab, the file,
// group, record and unit separators).
bool Printable(unsigned char c) {
  return (c >= 0x20 && c < 0x7f) || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

// Whether decoded bytes read as text: at most one byte in fifty an ASCII control character.
bool ReadsAsText(std::string_view bytes) {
  size_t controls = 0;
  for (unsigned char c : bytes) controls += (c < 0x80 && !Printable(c)) ? 1 : 0;
  return controls * 50 <= bytes.size();
}

// UTF-32 text (a byte order mark, or three NULs in every four bytes of its start) as UTF-8; else
// nullopt.
std::optional<std::string> FromUtf32(const std::string& bytes) {
  if (bytes.size() < 8) return std::nullopt;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  bool little = b(0) == 0xff && b(1) == 0xfe && b(2) == 0 && b(3) == 0;
  bool big = b(0) == 0 && b(1) == 0 && b(2) == 0xfe && b(3) == 0xff;
  const size_t start = little || big ? 4 : 0;
  if (start == 0) {
    size_t le = 0, be = 0, units = 0;
    for (size_t i = 0; i + 3 < std::min<size_t>(bytes.size(), 512); i += 4, ++units) {
      le += b(i + 2) == 0 && b(i + 3) == 0;
      be += b(i) == 0 && b(i + 1) == 0;
    }
    little = le * 10 >= units * 9 && be * 10 < units * 9;
    big = be * 10 >= units * 9 && le * 10 < units * 9;
    if (!little && !big) return std::nullopt;
  }
  std::string out;
  for (size_t i = start; i + 3 < bytes.size(); i += 4) {
    const uint32_t c = little ? b(i) | b(i + 1) << 8 | b(i + 2) << 16 | uint32_t(b(i + 3)) << 24
                              : uint32_t(b(i)) << 24 | b(i + 1) << 16 | b(i + 2) << 8 | b(i + 3);
    if (c <= 0x10ffff) AppendUtf8(out, c);
  }
  return out;
}

// bytes[start...] as UTF-16 in the byte order given, as UTF-8.
std::string DecodeUtf16(std::string_view bytes, size_t start, bool little) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  std::string out;
  out.reserve(bytes.size() / 2);
  for (size_t i = start; i + 1 < bytes.size(); i += 2) {
    uint32_t unit = little ? (b(i) | (b(i + 1) << 8)) : ((b(i) << 8) | b(i + 1));
    if (unit >= 0xd800 && unit <= 0xdbff && i + 3 < bytes.size()) {  // a surrogate pair
      const uint32_t low = little ? (b(i + 2) | (b(i + 3) << 8)) : ((b(i + 2) << 8) | b(i + 3));
      if (low >= 0xdc00 && low <= 0xdfff) {
        unit = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
        i += 2;
      }
    }
    AppendUtf8(out, unit);
  }
  return out;
}

// UTF-16 text (a byte order mark, or a NUL in every other byte of its start) as UTF-8, and
// UTF-32 text as FromUtf32 says: readers take such a file as text. Anything else comes back as
// it is.
std::string FromUtf16(std::string bytes) {
  if (std::optional<std::string> wide = FromUtf32(bytes)) return *std::move(wide);
  if (bytes.size() < 4) return bytes;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  bool little = b(0) == 0xff && b(1) == 0xfe, big = b(0) == 0xfe && b(1) == 0xff;
  size_t start = little || big ? 2 : 0;
  if (start == 0) {
    size_t odd_nuls = 0, even_nuls = 0;
    const size_t sample = std::min<size_t>(bytes.size() & ~size_t(1), 512);
    for (size_t i = 0; i < sample; i += 2) {
      even_nuls += b(i) == 0;
      odd_nuls += b(i + 1) == 0;
    }
    little = odd_nuls * 10 >= sample / 2 * 9 && even_nuls * 10 < sample / 2;
    big = even_nuls * 10 >= sample / 2 * 9 && odd_nuls * 10 < sample / 2;
    if (!little && !big) return bytes;
  }
  return DecodeUtf16(bytes, start, little);
}

// The length of the UTF-8 character at bytes[i] (2 to 4), or 0 if none starts there.
size_t Utf8Length(std::string_view bytes, size_t i) {
  const unsigned char c = static_cast<unsigned char>(bytes[i]);
  const size_t n = c >= 0xc2 && c <= 0xdf   ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
  if (n == 0 || i + n > bytes.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(bytes[i + k]) & 0xc0) != 0x80) return 0;
  }
  return n;
}

// Bytes as a reader takes them: whole when they read as text, else their runs of printable
// characters.
void AppendReading(std::string_view bytes, std::string& read) {
  read.push_back('\n');
  if (ReadsAsText(bytes)) {
    read.append(bytes);
    return;
  }
  // Runs of printable characters, ASCII or whole UTF-8 ones (a no-break space between a card's
  // groups), of at least 8 bytes: an SSN or a short address is 9 to 11.
  constexpr size_t kShortestRun = 8;
  for (size_t i = 0; i < bytes.size();) {
    size_t end = i;
    while (end < bytes.size()) {
      if (Printable(static_cast<unsigned char>(bytes[end]))) {
        ++end;
      } else if (const size_t n = Utf8Length(bytes, end); n > 0) {
        end += n;
      } else {
        break;
      }
    }
    if (end - i >= kShortestRun) {
      read.append(bytes.substr(i, end - i));
      read.push_back('\n');
    }
    i = end + 1;
  }
}

// Whether `bytes`, read as UTF-16 in the byte order given, holds a run of 4 ASCII characters (a
// NUL high byte, a printable low one): UTF-16 text that FromUtf16 did not take for it, its start
// in another script ("姓名: 4111 ..." with no NUL among its first 512 bytes), and the card or key
// in it. Four, not more: a card's groups parted by ideographic spaces and a short e-mail address
// among CJK characters have no longer run (8 missed them). Random bytes hold such a run at one
// position in 2 x 10^11 (95/65536 to the 4th), about once in 100 GB of binary for the four
// readings, each of which only costs a second reading; one or two ASCII characters here and there
// are no evidence either way ("一" is 00 4E in UTF-16LE, an 'N' read the other way).
bool HasUtf16AsciiRun(std::string_view bytes, bool little) {
  constexpr size_t kRun = 4;
  size_t run = 0;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const auto low = static_cast<unsigned char>(bytes[little ? i : i + 1]);
    const auto high = static_cast<unsigned char>(bytes[little ? i + 1 : i]);
    run = high == 0 && low != 0 && Printable(low) ? run + 1 : 0;
    if (run == kRun) return true;
  }
  return false;
}

void AppendAsRead(std::string_view raw, std::string& read) {
  const std::string text = FromUtf16(std::string(raw));
  AppendReading(text, read);
  if (text != raw) return;
  // Read in each byte order that holds such a run, and at both alignments: UTF-16 inside
  // another format need not start at an even offset.
  for (const size_t offset : {size_t(0), size_t(1)}) {
    if (raw.size() <= offset) break;
    const std::string_view bytes = raw.substr(offset);
    for (const bool little : {true, false}) {
      if (HasUtf16AsciiRun(bytes, little)) AppendReading(DecodeUtf16(bytes, 0, little), read);
    }
  }
}

// What a link's value holds, decoded: a data: URL's payload (its base64 decoded leniently,
// percent-decoded with '+' kept, as data: URL readers do: '+' is a base64 digit), or the whole
// value read as base64 when it is no data: URL (bytes given bare; of a link, that is noise).
std::string Payload(std::string_view url) {
  const std::string decoded = PercentDecoded(url, false);
  std::string_view value = decoded;
  // URL parsers strip leading blanks and controls.
  while (!value.empty() && static_cast<unsigned char>(value.front()) <= ' ') value.remove_prefix(1);
  const size_t comma = value.find(',');
  if (value.size() < 5 || !EqualsIgnoreCase(value.substr(0, 5), "data:") ||
      comma == std::string_view::npos) {
    return LenientBase64(value);
  }
  // The media type's parameters, blanks dropped and lower-cased: "image/png;base64".
  std::string head;
  for (char c : value.substr(5, comma - 5)) {
    if (static_cast<unsigned char>(c) > ' ')
      head.push_back(c >= 'A' && c <= 'Z' ? char(c + 32) : c);
  }
  const std::string_view payload = value.substr(comma + 1);
  return head.ends_with(";base64") ? LenientBase64(payload) : std::string(payload);
}

// A URL as the server it names reads it, and as a model reads a data: URL or a file's bytes:
// written, then percent-decoded ('+' a space, as in a query), then its Payload read as
// AppendAsRead says, whatever type it declares.
std::string UrlAsRead(std::string_view url) {
  std::string read(url);
  read.push_back('\n');
  read.append(PercentDecoded(url, true));
  AppendAsRead(Payload(url), read);
  return read;
}

}  // namespace

std::string AttachmentText(std::string_view value) {
  std::string_view trimmed = value;
  while (!trimmed.empty() && static_cast<unsigned char>(trimmed.front()) <= ' ') {
    trimmed.remove_prefix(1);
  }
  // A link the upstream fetches: what it holds is not known here.
  const bool data = trimmed.size() >= 5 && EqualsIgnoreCase(trimmed.substr(0, 5), "data:");
  if (!data && trimmed.find("://") != std::string_view::npos) return std::string();
  std::string payload = FromUtf16(Payload(value));
  if (!ReadsAsText(payload)) return std::string();
  return payload;
}

ScreenResult ScreenUrl(std::string_view url, const GuardConfig& config) {
  return Screen(UrlAsRead(url), config);
}

}  // namespace pillar::guard
