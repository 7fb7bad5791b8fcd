#include "guard/recognizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "guard/recognizer_internal.h"

namespace pillar::guard {
namespace internal {
namespace {

// Words that say what a nearby value is, in English and Portuguese (with and without accents).
struct ContextWords {
  EntityType type;
  std::initializer_list<std::string_view> words;
};

const ContextWords kPositive[] = {
    {EntityType::kEmailAddress, {"email", "e-mail", "mail", "correio"}},
    {EntityType::kPhoneNumber,
     {"phone", "tel", "telephone", "telefone", "telemovel", "telem\xc3\xb3vel", "celular", "mobile",
      "cell", "call", "ligue", "liga", "contacto", "contato", "whatsapp", "fax", "sms"}},
    {EntityType::kCreditCard,
     {"card", "cartao", "cart\xc3\xa3o", "credit", "credito",
      "cr\xc3\xa9"
      "dito",
      "debit", "debito", "visa", "mastercard", "amex"}},
    {EntityType::kIbanCode, {"iban", "account", "conta", "transfer", "transferencia"}},
    {EntityType::kIpAddress,
     {"ip", "address", "host", "server", "servidor", "endereco", "endere\xc3\xa7o", "client"}},
    {EntityType::kUsSsn, {"ssn", "social security", "seguro social"}},
    {EntityType::kBrCpf, {"cpf"}},
    {EntityType::kBrCnpj, {"cnpj"}},
    {EntityType::kPtNif, {"nif", "contribuinte", "fiscal", "nipc", "vat"}},
};

// Words that say a number is something else: an order, an invoice, a version.
constexpr std::string_view kNegative[] = {
    "order",     "invoice",       "pedido",   "encomenda", "fatura",   "factura", "ref",
    "reference", "referencia",    "protocol", "protocolo", "tracking", "isbn",    "version",
    "versao",    "vers\xc3\xa3o", "serial",   "sku",       "ticket"};

bool NumberType(EntityType type) {
  return type != EntityType::kEmailAddress && type != EntityType::kSecret &&
         type != EntityType::kIbanCode;
}

// Whether `word` occurs in `window` (lower case) as a whole word.
bool HasWord(std::string_view window, std::string_view word) {
  for (size_t at = window.find(word); at != std::string_view::npos;
       at = window.find(word, at + 1)) {
    const bool starts = at == 0 || !IsAlpha(window[at - 1]);
    const size_t end = at + word.size();
    const bool ends = end == window.size() || !IsAlpha(window[end]);
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

double ContextAdjustment(std::string_view text, size_t begin, size_t end, EntityType type) {
  constexpr size_t kBefore = 48, kAfter = 16;
  // Within the value's own line and sentence: a word of the sentence before says nothing of it.
  size_t from = begin > kBefore ? begin - kBefore : 0;
  for (size_t k = begin; k > from; --k) {
    if (text[k - 1] == '\n' || (text[k - 1] == ' ' && k >= 2 && text[k - 2] == '.')) {
      from = k;
      break;
    }
  }
  size_t to = std::min(text.size(), end + kAfter);
  for (size_t k = end; k < to; ++k) {
    if (text[k] == '\n' || (text[k] == '.' && (k + 1 == text.size() || text[k + 1] == ' '))) {
      to = k;
      break;
    }
  }
  char lowered[kBefore + kAfter];
  size_t size = 0;
  // The bytes before the value and after it, with the value itself left out (a space in its
  // place), lower-cased.
  auto copy = [&](size_t a, size_t b) {
    for (size_t k = a; k < b; ++k) {
      const char c = text[k];
      lowered[size++] = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    }
  };
  copy(from, begin);
  lowered[size++] = ' ';
  copy(end, std::min(to, end + kAfter - 1));  // kBefore + kAfter bytes at most, with the space
  const std::string_view window(lowered, size);
  bool names_other = false;
  for (const ContextWords& entry : kPositive) {
    for (std::string_view word : entry.words) {
      if (!HasWord(window, word)) continue;
      if (entry.type == type) return 0.4;
      names_other = names_other || NumberType(entry.type);
      break;
    }
  }
  // Only where nothing names the type: "NIF 123456789 na fatura" is a NIF on an invoice. A
  // number that another number type's word introduces ("CNPJ: 38419862000120", which failed
  // the CNPJ's check) is that type written wrong, not this one.
  if (NumberType(type)) {
    if (names_other) return -0.4;
    for (std::string_view word : kNegative) {
      if (HasWord(window, word)) return -0.3;
    }
  }
  return 0;
}

}  // namespace internal

namespace {

using namespace internal;

// What the scanning loop does at a byte, from one table lookup.
enum Act : uint8_t {
  kPass,        // spaces and punctuation that begin nothing
  kPlainWord,   // a word byte no format begins with: a word starting here is skipped whole
  kFormatWord,  // capitals (IBAN, AWS and Google keys, "PT" NIFs) and the first letters of the
                // token formats (eyJ..., pk_, ghp_, github_pat_, xox?-, sk_/sk-, rk_)
  kNumber,      // a digit
  kAtSign,      // an e-mail address around it
  kNumberOpen,  // '+' or '(' before a phone number
  kDash,        // "-----BEGIN ... PRIVATE KEY-----"
  kColon,       // "::1"
};

constexpr std::array<uint8_t, 256> kAct = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if (internal::kByteClass[size_t(c)] != kOther) t[size_t(c)] = kPlainWord;
  }
  for (int c = 'A'; c <= 'Z'; ++c) t[size_t(c)] = kFormatWord;
  for (char c : {'e', 'p', 'g', 'x', 's', 'r'}) t[static_cast<unsigned char>(c)] = kFormatWord;
  for (int c = '0'; c <= '9'; ++c) t[size_t(c)] = kNumber;
  t['@'] = kAtSign;
  t['+'] = kNumberOpen;
  t['('] = kNumberOpen;
  t['-'] = kDash;
  t[':'] = kColon;
  return t;
}();

// Word bytes among eight (the first in the lowest byte), each marked by its high bit: letters,
// digits, '_' and bytes of non-ASCII characters. Each test "x in [lo, hi]" is two additions on
// seven-bit bytes, which cannot carry into the next byte.
uint64_t WordBytes(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = kOnes * 0x80;
  const uint64_t x = word & ~kHigh;
  const auto in = [&](uint64_t v, uint64_t lo, uint64_t hi) {
    return (v + kOnes * (0x80 - lo)) & ~(v + kOnes * (0x7f - hi));
  };
  return ((word & kHigh) | in(x, '0', '9') | in(x | kOnes * 0x20, 'a', 'z') | in(x, '_', '_')) &
         kHigh;
}

// The end of the word at `i`, eight bytes at a time while eight are left.
size_t WordEnd(std::string_view text, size_t i) {
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

// One pass over `text`, every scanner at the bytes it may begin at; appends what they find.
// No entity starts inside a word, so a word is either handed to a scanner or skipped whole.
void ScanAll(std::string_view text, std::vector<Finding>& raw) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    const uint8_t act = kAct[static_cast<unsigned char>(c)];
    if (act == kPass) {
      ++i;
      continue;
    }
    const bool word_start = i == 0 || !IsWordByte(text[i - 1]);
    switch (act) {
      case kPlainWord: {
        const size_t start = i;
        i = WordEnd(text, i);
        // An IPv6 address may begin with any hex letter: known by the ':' after its first group.
        if (word_start && i < n && text[i] == ':' && IsHex(c)) i = ScanWord(text, start, raw);
        break;
      }
      case kFormatWord:
        i = word_start ? ScanWord(text, i, raw) : WordEnd(text, i);
        break;
      case kNumber:
        i = word_start ? ScanNumber(text, i, raw) : WordEnd(text, i);
        break;
      case kAtSign:
        i = ScanEmail(text, i, raw);
        break;
      case kNumberOpen:
        i = word_start && i + 1 < n && IsDigit(text[i + 1]) ? ScanNumber(text, i, raw) : i + 1;
        break;
      case kDash:
        i = ScanPrivateKey(text, i, raw);
        break;
      default: {  // kColon
        const size_t end = word_start && i + 1 < n && text[i + 1] == ':' ? Ipv6End(text, i) : i;
        if (end > i) {
          raw.push_back({.type = EntityType::kIpAddress,
                         .begin = i,
                         .end = end,
                         .score = 0.7,
                         .kind = "ipv6"});
        }
        i = std::max(end, i + 1);
      }
    }
  }
}

// Findings in text order, none overlapping: where two claim the same bytes, the higher score
// stays (then the longer).
std::vector<Finding> Resolve(std::vector<Finding> found) {
  std::stable_sort(found.begin(), found.end(),
                   [](const Finding& a, const Finding& b) { return a.begin < b.begin; });
  std::vector<Finding> kept;
  kept.reserve(found.size());
  for (const Finding& f : found) {
    if (!kept.empty() && f.begin < kept.back().end) {
      Finding& last = kept.back();
      const bool better = f.score > last.score ||
                          (f.score == last.score && f.end - f.begin > last.end - last.begin);
      if (better) last = f;
      continue;
    }
    kept.push_back(f);
  }
  return kept;
}

}  // namespace

std::vector<Finding> Recognize(std::string_view text, const RecognizerOptions& options) {
  std::vector<Finding> raw;
  ScanAll(text, raw);
  std::vector<Finding> scored;
  scored.reserve(raw.size());
  for (Finding f : raw) {
    if (!options.enabled[size_t(f.type)]) continue;
    f.score = std::clamp(f.score + ContextAdjustment(text, f.begin, f.end, f.type), 0.0, 1.0);
    if (f.score >= options.min_score) scored.push_back(f);
  }
  return Resolve(std::move(scored));
}

}  // namespace pillar::guard
