#include "http/message.h"

#include "common/strings.h"

namespace pillar::http {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

bool PrefersRespondAsync(std::string_view prefer) {
  for (std::string_view preference : Split(prefer, ',')) {
    // The token ends at '=' (its value) or ';' (its parameters); spaces around it are allowed.
    const std::string_view token = Trim(preference.substr(0, preference.find_first_of("=;")));
    if (EqualsIgnoreCase(token, "respond-async")) return true;
  }
  return false;
}

}  // namespace pillar::http
