#include "guard/recognizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "guard/recognizer_internal.h"
#include "guard/text_fold.h"

namespace pillar::guard {
namespace internal {
namespace {

// Words that say what a nearby value is, in English and Portuguese (with and without accents).
struct ContextWords {
  EntityType type;
  std::initializer_list<std::string_view> words;
};

const ContextWords kPositive[] = {
    {EntityType::kEmailAddress, {"email", "mail", "correio"}},
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
    {EntityType::kSecret,
     {"aws", "key", "secret", "token", "credential", "credentials", "access", "chave", "segredo",
      "credencial", "credenciais", "acesso"}},
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

// Whether an identifier of `type` can have `digits` digits: the label penalty below counts only
// for a label the value could have been.
bool DigitsFit(EntityType type, size_t digits) {
  switch (type) {
    case EntityType::kPhoneNumber:
      return digits >= 7 && digits <= 15;
    case EntityType::kCreditCard:
      return digits >= 13 && digits <= 19;
    case EntityType::kUsSsn:
    case EntityType::kPtNif:
      return digits == 9;
    case EntityType::kBrCpf:
      return digits == 11;
    case EntityType::kBrCnpj:
      return digits == 14;
    default:
      return false;
  }
}

// What each context word says: the types it names (a bit per EntityType) and whether it makes a
// number something else. Two-word entries ("social security") are looked up as word pairs.
struct WordMeaning {
  uint32_t names = 0;
  bool other = false;
  bool starts_pair = false;  // the first word of a two-word entry
};

const absl::flat_hash_map<std::string_view, WordMeaning>& ContextTable() {
  static const auto* table = [] {
    auto* t = new absl::flat_hash_map<std::string_view, WordMeaning>;
    for (const ContextWords& entry : kPositive) {
      for (std::string_view word : entry.words) {
        (*t)[word].names |= 1u << int(entry.type);
        if (const size_t space = word.find(' '); space != std::string_view::npos) {
          (*t)[word.substr(0, space)].starts_pair = true;
        }
      }
    }
    for (std::string_view word : kNegative) (*t)[word].other = true;
    return t;
  }();
  return *table;
}

// Letters of a word: ASCII letters and the bytes of non-ASCII characters ("telemóvel").
bool ContextLetter(char c) { return IsAlpha(c) || static_cast<unsigned char>(c) >= 0x80; }

// Whether `label` (a bit per type) names another number type than `type` that `value` could
// have been, by its count of digits.
bool LabelledAsAnother(uint32_t label, EntityType type, std::string_view value) {
  size_t digits = 0;
  for (char c : value) digits += IsDigit(c) ? 1 : 0;
  for (EntityType t : kAllEntityTypes) {
    if ((label & (1u << int(t))) && NumberType(t) && t != type && t != EntityType::kIpAddress &&
        DigitsFit(t, digits)) {
      return true;
    }
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
  const size_t before = size;
  lowered[size++] = ' ';
  copy(end, std::min(to, end + kAfter - 1));  // kBefore + kAfter bytes at most, with the space
  const std::string_view window(lowered, size);
  // The window's words, each looked up once, and each pair of neighbours.
  const auto& table = ContextTable();
  WordMeaning said;
  uint32_t label = 0;  // what the last word before the value names ("CNPJ: 38419862000120")
  std::string_view previous;
  char pair[kBefore + kAfter + 1];
  for (size_t k = 0; k < window.size();) {
    if (!ContextLetter(window[k])) {
      ++k;
      continue;
    }
    const size_t start = k;
    while (k < window.size() && ContextLetter(window[k])) ++k;
    const std::string_view word = window.substr(start, k - start);
    const auto it = table.find(word);
    if (it != table.end()) {
      said.names |= it->second.names;
      said.other = said.other || it->second.other;
    }
    if (k <= before) label = it != table.end() ? it->second.names : 0;
    if (!previous.empty() && previous.size() + 1 + word.size() <= sizeof pair) {
      std::memcpy(pair, previous.data(), previous.size());
      pair[previous.size()] = ' ';
      std::memcpy(pair + previous.size() + 1, word.data(), word.size());
      if (auto it = table.find(std::string_view(pair, previous.size() + 1 + word.size()));
          it != table.end()) {
        said.names |= it->second.names;
      }
    }
    previous = it != table.end() && it->second.starts_pair ? word : std::string_view();
  }
  if (said.names & (1u << int(type))) return 0.4;
  // Only where nothing names the type: "NIF 123456789 na fatura" is a NIF on an invoice. A
  // number labelled as another identifier ("CNPJ: 38419862000120", which failed the CNPJ's
  // check) is that identifier written wrong, not this one; the label is the word right before
  // the value, so that "paid with 4111 1111 1111 1111 from my phone" is still a card. A label
  // whose identifier never has this many digits says nothing: "ssn 4111111111111111" is a card
  // with a misleading word before it, not a social security number written wrong.
  if (!NumberType(type)) return 0;
  if (LabelledAsAnother(label, type, text.substr(begin, end - begin))) return -0.4;
  return said.other ? -0.3 : 0;
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
    if (IsWordByte(char(c))) t[size_t(c)] = kPlainWord;
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

// The shortest run of words joined by '-' or '.' a glued credential makes (an AWS key is 20 bytes,
// and needs one before it to be glued): shorter words, most of them, are not searched inside.
constexpr size_t kMinGluedRun = 21;

// Searches each run of word bytes joined by '-' or '.' once for credentials glued inside it
// (the words after a '-' are word starts too, of the run already searched), from the run's
// first word start or from where a scanner stopped inside a word.
class GluedSearch {
 public:
  // At `i`, a word byte the scanning loop is at; returns the end of its word (WordEnd), which
  // the loop needs too.
  size_t At(std::string_view text, size_t i, std::vector<Finding>& raw, RunMemo& memo) {
    const size_t word_end = WordEnd(text, i);
    if (i < searched_until_) return word_end;
    const bool word_start = i == 0 || !IsWordByte(text[i - 1]);
    size_t end = word_end;
    while (end + 1 < text.size() && (text[end] == '-' || text[end] == '.') &&
           IsWordByte(text[end + 1])) {
      end = WordEnd(text, end + 1);
    }
    searched_until_ = end;
    // At a word's start, a glued credential needs a byte before it; inside one, where a scanner
    // stopped ("+1 1tokenAKIA...": the number took "+1 1"), it may start at once.
    if (word_start && end - i >= kMinGluedRun) ScanGluedTokens(text, i + 1, end, raw, memo);
    if (!word_start && end - i >= kMinGluedRun - 1) ScanGluedTokens(text, i, end, raw, memo);
    return word_end;
  }
  // Over (from, to], what a number scanner consumed: the words it began, which the loop skips
  // ("12 1AKIA...": the number took the "1" and the word with it).
  void Across(std::string_view text, size_t from, size_t to, std::vector<Finding>& raw,
              RunMemo& memo) {
    for (size_t p = from + 1; p < to && p < text.size(); ++p) {
      if (!IsWordByte(text[p - 1]) && IsWordByte(text[p])) (void)At(text, p, raw, memo);
    }
  }

 private:
  size_t searched_until_ = 0;
};

// Past a word no format begins with, at its start `i` (it ends at `end`); but an IPv6 address
// may begin with any hex letter, known by the ':' after its first group ("fe80::1").
size_t SkipWord(std::string_view text, size_t i, size_t end, std::vector<Finding>& raw,
                RunMemo& memo) {
  return end < text.size() && text[end] == ':' && IsHex(text[i]) ? ScanWord(text, i, raw, memo)
                                                                 : end;
}

// One pass over `text`, every scanner at the bytes it may begin at; appends what they find.
// No entity starts inside a word, so a word is either handed to a scanner or skipped whole.
void ScanAll(std::string_view text, std::vector<Finding>& raw) {
  const size_t n = text.size();
  RunMemo memo;
  size_t i = 0;
  GluedSearch glued;
  while (i < n) {
    const char c = text[i];
    const uint8_t act = kAct[static_cast<unsigned char>(c)];
    if (act == kPass) {
      do {
        ++i;
      } while (i < n && kAct[static_cast<unsigned char>(text[i])] == kPass);
      continue;
    }
    const bool word_start = i == 0 || !IsWordByte(text[i - 1]);
    const size_t word_end = act == kPlainWord || act == kFormatWord || act == kNumber
                                ? glued.At(text, i, raw, memo)
                                : i;
    switch (act) {
      case kPlainWord:
        i = word_start ? SkipWord(text, i, word_end, raw, memo) : word_end;
        break;
      case kFormatWord:
        if (!word_start) {
          i = word_end;
        } else if (c >= 'a' && !MayBeginToken(c, i + 1 < n ? text[i + 1] : '\0', false)) {
          // "pedido", "server": a lowercase letter begins nothing but credentials.
          i = SkipWord(text, i, word_end, raw, memo);
        } else {
          i = ScanWord(text, i, raw, memo);
        }
        break;
      case kNumber:
        if (word_start) {
          const size_t start = i;
          i = ScanNumber(text, i, raw);
          glued.Across(text, start, i, raw, memo);
        } else {
          i = word_end;
        }
        break;
      case kAtSign:
        i = ScanEmail(text, i, raw);
        break;
      case kNumberOpen:
        if (word_start && i + 1 < n && IsDigit(text[i + 1])) {
          const size_t start = i;
          i = ScanNumber(text, i, raw);
          glued.Across(text, start, i, raw, memo);
        } else {
          ++i;
        }
        break;
      case kDash:
        i = ScanPrivateKey(text, i, raw, memo);
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

// Findings in text order, none overlapping: where two claim the same bytes they become one over
// both spans, of the type scored higher (then the longer), the other's type kept in
// `overlapped`.
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
      const size_t begin = std::min(last.begin, f.begin), end = std::max(last.end, f.end);
      const uint32_t types =
          last.overlapped | f.overlapped | (1u << int(last.type)) | (1u << int(f.type));
      if (better) last = f;
      last.begin = begin;
      last.end = end;
      last.overlapped = types & ~(1u << int(last.type));
      continue;
    }
    kept.push_back(f);
  }
  return kept;
}

}  // namespace

std::vector<Finding> Recognize(std::string_view original, const RecognizerOptions& options) {
  // The recognizers read the text as a reader sees it (text_fold.h), and where it has controls,
  // as each of its two readers does; findings are where they were in the original.
  std::vector<Finding> raw;
  std::vector<Finding> scored;
  const auto read = [&](const FoldedText& folded) {
    const std::string_view text = folded.text();
    raw.clear();
    ScanAll(text, raw);
    for (Finding f : raw) {
      // A context word adds at most 0.4: below that, the finding cannot reach the threshold.
      if (!options.enabled[size_t(f.type)] || f.score + 0.4 < options.min_score) continue;
      f.score = std::clamp(f.score + ContextAdjustment(text, f.begin, f.end, f.type), 0.0, 1.0);
      if (f.score < options.min_score) continue;
      if (folded.changed()) std::tie(f.begin, f.end) = folded.Span(f.begin, f.end);
      scored.push_back(f);
    }
  };
  if (const FoldedText kept(original, FoldedText::Controls::kKeep); !kept.has_controls()) {
    read(kept);
  } else {
    read(FoldedText(original, FoldedText::Controls::kPart));
    read(FoldedText(original, FoldedText::Controls::kDrop));
  }
  return Resolve(std::move(scored));
}

}  // namespace pillar::guard
