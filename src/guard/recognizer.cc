#include "guard/recognizer.h"

#include <algorithm>
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
  double adjustment = 0;
  for (const ContextWords& entry : kPositive) {
    if (entry.type != type) continue;
    for (std::string_view word : entry.words) {
      if (HasWord(window, word)) {
        adjustment += 0.4;
        break;
      }
    }
  }
  if (NumberType(type)) {
    for (std::string_view word : kNegative) {
      if (HasWord(window, word)) {
        adjustment -= 0.3;
        break;
      }
    }
  }
  return adjustment;
}

}  // namespace internal

namespace {

using namespace internal;

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
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    const bool word_start = i == 0 || !IsWordByte(text[i - 1]);
    if (IsWordByte(c) && (!word_start || ClassOf(c) == kHigh)) {
      // The rest of a word, or a word that starts with a non-ASCII character: no entity starts
      // inside a word.
      while (i < n && IsWordByte(text[i])) ++i;
      continue;
    }
    switch (ClassOf(c)) {
      case kDigit:
        i = ScanNumber(text, i, raw);
        break;
      case kUpper:
      case kLower:
      case kUnder:
        i = ScanWord(text, i, raw);
        break;
      default:
        if (c == '@') {
          i = ScanEmail(text, i, raw);
        } else if ((c == '+' || c == '(') && word_start && i + 1 < n && IsDigit(text[i + 1])) {
          i = ScanNumber(text, i, raw);
        } else if (c == '-') {
          i = ScanPrivateKey(text, i, raw);
        } else if (c == ':' && word_start && i + 1 < n && text[i + 1] == ':') {
          const size_t end = Ipv6End(text, i);
          if (end > i) {
            raw.push_back({.type = EntityType::kIpAddress,
                           .begin = i,
                           .end = end,
                           .score = 0.7,
                           .kind = "ipv6"});
          }
          i = std::max(end, i + 2);
        } else {
          ++i;
        }
    }
  }
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
