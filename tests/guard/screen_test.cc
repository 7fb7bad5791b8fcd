#include "guard/screen.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/strings.h"
#include "common/toml_parse.h"
#include "testing/temp_dir.h"

namespace pillar::guard {
namespace {

GuardConfig Parse(std::string_view toml, const std::string& base = "/") {
  absl::StatusOr<toml::table> table = ParseToml(toml, "test.toml");
  EXPECT_TRUE(table.ok()) << table.status();
  const toml::node* guard = table->get("guard");
  absl::StatusOr<GuardConfig> config =
      ParseGuardConfig(guard ? guard->as_table() : nullptr, "test.toml", base);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : GuardConfig();
}

TEST(ScreenTest, DefaultsRedactPersonalDataWithTagsAndBlockSecrets) {
  const GuardConfig config;
  ScreenResult r = Screen("mail maria@example.com or call +351 912 345 678", config);
  EXPECT_FALSE(r.blocked);
  EXPECT_EQ(r.text, "mail <EMAIL_ADDRESS> or call <PHONE_NUMBER>");
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].action, Action::kRedact);

  r = Screen("my key AKIAIOSFODNN7EXAMPLE", config);
  EXPECT_TRUE(r.blocked);
  EXPECT_EQ(r.block_reason, "SECRET at bytes 7-27");
  EXPECT_TRUE(r.text.empty());
}

TEST(ScreenTest, ABareNifIsRedactedByDefaultUnlessAWordMakesItSomethingElse) {
  const GuardConfig config;
  EXPECT_EQ(Screen("o valor 123456789 foi pago", config).text, "o valor <PT_NIF> foi pago");
  EXPECT_EQ(Screen("o valor 123 456 789 foi pago", config).text, "o valor <PT_NIF> foi pago");
  EXPECT_EQ(Screen("NIF: 123456789", config).text, "NIF: <PT_NIF>");
  // A word that makes the number something else, a failed check, and a raised threshold.
  EXPECT_EQ(Screen("fatura 123456789", config).text, "fatura 123456789");
  EXPECT_EQ(Screen("o valor 123456780 foi pago", config).text, "o valor 123456780 foi pago");
  const GuardConfig named = Parse("[guard.entities.PT_NIF]\nmin_score = 0.5\n");
  EXPECT_EQ(Screen("o valor 123456789 foi pago", named).text, "o valor 123456789 foi pago");
  EXPECT_EQ(Screen("NIF: 123456789", named).text, "NIF: <PT_NIF>");
  // A table-wide min_score is every type's.
  const GuardConfig table = Parse("[guard]\nmin_score = 0.5\n");
  EXPECT_EQ(Screen("o valor 123456789 foi pago", table).text, "o valor 123456789 foi pago");
}

// Found by a review (helper-30): an address glued to a key won over it and the key went out
// "redacted" as an address. Merged, the key's block applies.
TEST(ScreenTest, ASecretMergedWithAnotherFindingIsStillBlocked) {
  const GuardConfig config;
  const std::string key =
      "-----BEGIN RSA PRIVATE "
      "KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1P\n"
      "-----END RSA PRIVATE KEY-----";
  for (const std::string& text :
       std::vector<std::string>{key + ".x@ex.io email",
                                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.x@ex.io (email)",
                                "sk-ant-api03-" + std::string(95, 'a') + "@x.io"}) {
    ScreenResult r = Screen(text, config);
    EXPECT_TRUE(r.blocked) << text;
    EXPECT_TRUE(r.text.empty());
  }
  ScreenResult card = Screen("4111 1111 1111 1111.john@example.com", config);
  EXPECT_FALSE(card.blocked);
  EXPECT_EQ(card.text.find("4111"), std::string::npos) << card.text;
}

TEST(ScreenTest, MaskKeepsACardsLastFourAndHashIsKeyedAndStable) {
  EXPECT_EQ(Redacted("4111 1111 1111 1111", EntityType::kCreditCard, Redaction::kMask, ""),
            "**** **** **** 1111");
  EXPECT_EQ(Redacted("a.b@c.io", EntityType::kEmailAddress, Redaction::kMask, ""), "*.*@*.**");
  // A secret's punctuation is masked too: it would say which bytes are not letters.
  EXPECT_EQ(Redacted("sk-a_b+c/d=\ne", EntityType::kSecret, Redaction::kMask, ""),
            "***********\n*");
  const std::string h1 = Redacted("a@b.io", EntityType::kEmailAddress, Redaction::kHash, "key-1");
  EXPECT_EQ(h1, Redacted("a@b.io", EntityType::kEmailAddress, Redaction::kHash, "key-1"));
  EXPECT_NE(h1, Redacted("a@b.io", EntityType::kEmailAddress, Redaction::kHash, "key-2"));
  EXPECT_EQ(h1.rfind("<EMAIL_ADDRESS:", 0), 0u);
  EXPECT_EQ(h1.size(), std::string("<EMAIL_ADDRESS:>").size() + 16);
}

TEST(ScreenTest, PerTypeRulesOverrideTheTablesDefaults) {
  const GuardConfig config = Parse(R"(
[guard]
action = "allow"
redaction = "mask"
[guard.entities.CREDIT_CARD]
action = "block"
[guard.entities.EMAIL_ADDRESS]
action = "redact"
min_score = 0.95
[guard.entities.PHONE_NUMBER]
action = "redact"
)");
  ScreenResult r = Screen("a@b.io +351 912 345 678 AKIAIOSFODNN7EXAMPLE", config);
  EXPECT_FALSE(r.blocked);  // SECRET follows the table's "allow"
  // The address (0.9) is under its own 0.95; the phone is masked.
  EXPECT_EQ(r.text, "a@b.io +*** *** *** *** AKIAIOSFODNN7EXAMPLE");
  r = Screen("pay with 4111111111111111", config);
  EXPECT_TRUE(r.blocked);
  EXPECT_EQ(r.block_reason, "CREDIT_CARD at bytes 9-25");
}

TEST(ScreenTest, ModelAndTenantTablesOverrideTheirParents) {
  const GuardConfig config = Parse(R"(
[guard]
hold_back_bytes = 40
[guard.entities.CREDIT_CARD]
action = "block"
[guard.models.open]
prompts = false
[guard.tenants.acme]
redaction = "mask"
)");
  EXPECT_EQ(config.hold_back_bytes, 40);
  EXPECT_FALSE(config.For("open", "acme").prompts);  // the model's table comes first
  EXPECT_TRUE(config.For("open", "acme").answers);
  // Each inherits its parent's rules: cards stay blocked.
  EXPECT_EQ(config.For("open", "").rule(EntityType::kCreditCard).action, Action::kBlock);
  EXPECT_EQ(config.For("other", "acme").rule(EntityType::kEmailAddress).redaction,
            Redaction::kMask);
  EXPECT_EQ(config.For("other", "acme").rule(EntityType::kCreditCard).action, Action::kBlock);
  EXPECT_EQ(&config.For("other", "globex"), &config);
}

TEST(ScreenTest, AStreamIsReleasedClearOfTheHoldBackAndOfAFindingReachingIntoIt) {
  const GuardConfig config;
  // Nothing found: all but the last 8 bytes go out.
  PrefixResult r = ScreenPrefix("hello there, friend", config, 8, false);
  EXPECT_EQ(r.released, "hello there");
  EXPECT_EQ(r.consumed, 11u);
  // A phone number that reaches into the window is held back whole.
  r = ScreenPrefix("call +1 415 555 2671", config, 4, false);
  EXPECT_EQ(r.released, "call ");
  r = ScreenPrefix("call +1 415 555 2671 now", config, 4, true);
  EXPECT_EQ(r.released, "call <PHONE_NUMBER> now");
  EXPECT_EQ(r.consumed, 24u);
  // A UTF-8 character is never cut in two ("é" is two bytes).
  r = ScreenPrefix("caf\xc3\xa9 ab", config, 4, false);
  EXPECT_EQ(r.released, "caf");
  // Nor a run of non-blanks still arriving: a token is recognized only whole.
  r = ScreenPrefix("key eyJhbGciOiJIUzI1NiJ9.eyJzdWIi", config, 2, false);
  EXPECT_EQ(r.released, "key ");
  // A secret blocks, naming where.
  r = ScreenPrefix("key AKIAIOSFODNN7EXAMPLE", config, 0, true);
  EXPECT_TRUE(r.blocked);
  EXPECT_EQ(r.block_reason, "SECRET at bytes 4-24");
  EXPECT_EQ(r.released, "");
}

// Found by a review (helper-39): padding of invisible characters or of blanks pushed a value's
// start out of the window before its end arrived.
TEST(ScreenTest, TheWindowIsCountedAsAReaderSeesTheText) {
  const GuardConfig config;
  std::string shy;
  for (int i = 0; i < 16; ++i) shy += "\u00ad";  // soft hyphens: 32 bytes that print as nothing
  PrefixResult r = ScreenPrefix("card 4111 1111 1111" + shy + " ", config, 32, false);
  EXPECT_EQ(r.released, "");
  r = ScreenPrefix("card 4111 1111 1111" + shy + " 1111 ok", config, 32, true);
  EXPECT_EQ(r.findings.size(), 1u);
  // A run of blanks counts for one: a deny phrase with forty spaces inside is still held.
  const GuardConfig denying = Parse(R"([guard]
deny = [{ name = "codenames", words = ["project nightingale"], action = "block" }]
)");
  r = ScreenPrefix("see project" + std::string(40, ' '), denying, 32, false);
  EXPECT_EQ(r.released, "");
  // But never more than the window and kMaxHeldRun: a deny rule's match that keeps growing is
  // taken as it stands past that bound (counted once), and the window alone says what is held.
  const GuardConfig flagging = Parse(R"([guard]
deny = [{ name = "tickets", patterns = ['ticket-[0-9]{4,}'], action = "flag" }]
)");
  const std::string run = "see ticket-" + std::string(kMaxHeldRun + 64, '7');
  r = ScreenPrefix(run, flagging, 32, false);
  EXPECT_EQ(r.consumed, run.size() - 32);
  ASSERT_EQ(r.denied.size(), 1u);
  EXPECT_EQ(r.denied[0].begin, 4u);
  EXPECT_FALSE(r.padded);  // a run without blanks past the bound is not padding
  // Padding past the bound (80 KB of soft hyphens) is said, for the caller to refuse.
  std::string padding;
  for (int i = 0; i < 40000; ++i) padding += "\u00ad";
  r = ScreenPrefix("card 4111 1111 1111" + padding, config, 32, false);
  EXPECT_TRUE(r.padded);
  // Form feeds are blanks, as RE2's \s reads them: forty of them count for one.
  r = ScreenPrefix("see project" + std::string(40, '\f'), denying, 32, false);
  EXPECT_EQ(r.released, "");
  r = ScreenPrefix(run.substr(0, 1000), flagging, 32, false);
  EXPECT_EQ(r.consumed, 4u);  // within the bound, held back from the match's start
  EXPECT_TRUE(r.denied.empty());
}

// A stream as guarded_events.cc feeds ScreenPrefix: chunk by chunk, what was not released kept
// and screened again with the next; returns what a client got, and whether the stream was
// blocked.
struct Streamed {
  std::string released;
  bool blocked = false;
};
Streamed StreamThrough(const std::vector<std::string>& chunks, const GuardConfig& config,
                       size_t hold_back) {
  Streamed out;
  std::string held;
  bool continues_line = false;
  for (size_t i = 0; i < chunks.size() && !out.blocked; ++i) {
    held += chunks[i];
    const PrefixResult r =
        ScreenPrefix(held, config, hold_back, i + 1 == chunks.size(), continues_line);
    if (r.blocked) {
      out.blocked = true;
      break;
    }
    out.released += r.released;
    if (r.consumed > 0) continues_line = held[r.consumed - 1] != '\n';
    held.erase(0, r.consumed);
  }
  return out;
}

// Found by review helper-67: the window was counted on the text as it is, each control a
// character, so padding a terminal or a model reads as nothing, or as one blank, pushed a value's
// start out before its end arrived.
TEST(ScreenTest, AStreamsWindowIsCountedAsATerminalAndAModelReadIt) {
  const GuardConfig config;
  // A hyperlink (OSC 8) whose hidden text holds blanks: a terminal shows the card whole.
  std::string link = "\x1b]8;;";
  for (int i = 0; i < 80; ++i) link += "a ";
  const Streamed linked =
      StreamThrough({"card 4111 1111 1111 ", link, "\x1b\\", "1111 end"}, config, 128);
  EXPECT_FALSE(linked.blocked);
  EXPECT_EQ(linked.released.find("4111"), std::string::npos) << linked.released;
  EXPECT_NE(linked.released.find("<CREDIT_CARD>"), std::string::npos) << linked.released;
  // A deny phrase padded with controls, which a model reads as one blank.
  const GuardConfig denying = Parse(R"([guard]
deny = [{ name = "codenames", words = ["project nightingale"], action = "block" }]
)");
  std::string controls;
  for (int i = 0; i < 100; ++i) controls += " \x01";
  const Streamed padded =
      StreamThrough({"see project", controls, " nightingale now"}, denying, 128);
  EXPECT_TRUE(padded.blocked);
  EXPECT_EQ(padded.released.find("project"), std::string::npos) << padded.released;
}

// Found by review helper-68: the window counts a phrase's parting characters that are not blanks
// (dashes, underscores, combining marks, braille blanks, C1 controls) as bytes, so padding
// between a deny phrase's words longer than the window let its first word go out before its
// last came, and the rest matched nothing. A phrase the end may still complete is held whole.
TEST(ScreenTest, ADenyPhrasePaddedPastTheWindowIsHeldWholeAndBlocks) {
  const GuardConfig denying = Parse(R"([guard]
deny = [{ name = "codenames", words = ["project nightingale"], action = "block" }]
)");
  auto repeat = [](std::string_view piece, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += piece;
    return out;
  };
  const std::vector<std::string> pads = {repeat(" -", 80),      repeat(" _", 80),
                                         repeat(" \u2800", 50), " " + repeat("\u0301", 80),
                                         repeat("\u0081", 80),  repeat("-", 300)};
  for (const std::string& pad : pads) {
    const Streamed streamed =
        StreamThrough({"see project", pad, " ", "night", "ingale and more"}, denying, 128);
    EXPECT_TRUE(streamed.blocked) << pad;
    EXPECT_EQ(streamed.released.find("project"), std::string::npos) << streamed.released;
  }
  // A phrase longer than the window is seen whole too.
  const GuardConfig long_phrase = Parse(R"([guard]
deny = [{ name = "leak", words = ["the quarterly numbers for the northern region are not yet public"]}]
)");
  const Streamed long_streamed = StreamThrough(
      {"so: the quarterly numbers ", "for the northern region ", "are not yet public. ok"},
      long_phrase, 16);
  EXPECT_TRUE(long_streamed.blocked);
  EXPECT_EQ(long_streamed.released.find("quarterly"), std::string::npos);
  // A phrase's start is held only while the end may still complete it: once another word came,
  // the text goes out as the window says.
  PrefixResult r = ScreenPrefix(
      "see project" + repeat(" -", 80) + " alpha and more" + std::string(200, 'x') + " ", denying,
      32, false);
  EXPECT_FALSE(r.blocked);
  EXPECT_NE(r.released.find("project"), std::string::npos);
  r = ScreenPrefix("see project" + repeat(" -", 80) + " nigh", denying, 32, false);
  EXPECT_EQ(r.released, "see");
  // A long run without blanks after a first word is no padding: it goes out as the window says
  // (found by review helper-69: the stream ended as padded).
  r = ScreenPrefix("see project " + std::string(kMaxHeldRun + 1000, 'Q'), denying, 32, false);
  EXPECT_FALSE(r.padded);
  EXPECT_NE(r.released.find("project"), std::string::npos);
  // A word longer than the phrase's, then backspaces that cut it back to it (found by review
  // helper-70: a terminal showed the phrase whole).
  const GuardConfig fox = Parse(R"([guard]
deny = [{ name = "fox", words = ["red fox"], action = "block" }]
)");
  const Streamed cut_back = StreamThrough(
      {"red", repeat(" -", 100) + " foxQQQQQQQQ", std::string(8, '\b') + " is here."}, fox, 128);
  EXPECT_TRUE(cut_back.blocked);
  EXPECT_EQ(cut_back.released.find("red"), std::string::npos) << cut_back.released;
  // With no window too (found by review helper-69: hold_back_bytes = 0 let the first word out).
  r = ScreenPrefix("the project ", denying, 0, false);
  EXPECT_EQ(r.released, "the");
  // Past the bound, the padding is said (a stream ends), the start not let go.
  r = ScreenPrefix("see project" + repeat(" -", int(kMaxHeldRun)), denying, 32, false);
  EXPECT_TRUE(r.padded);
}

// Found by review helper-67: backspaces reaching back past the window made a terminal show a key
// whose start had gone out in an earlier chunk. An overwrite of text already sent on its line
// ends the stream; one within what is held, or after a line break, is screened as shown.
TEST(ScreenTest, AStreamThatOverwritesWhatItSentIsBlocked) {
  const GuardConfig config;
  std::string words;
  for (int i = 0; i < 100; ++i) words += "w ";
  // "key AKIAIOSF" goes out with the first chunk; the backspaces go back over the words to it,
  // and a terminal shows the key whole.
  const Streamed overwritten = StreamThrough(
      {"key AKIAIOSF " + words, std::string(201, '\b') + "ODNN7EXAMPLE" + std::string(200, ' ')},
      config, 128);
  EXPECT_TRUE(overwritten.blocked);
  EXPECT_NE(overwritten.released.find("AKIAIOSF"), std::string::npos);  // what went out first
  const Streamed returned = StreamThrough({"key AKIAIOSF " + words, "\rkey x"}, config, 128);
  EXPECT_TRUE(returned.blocked);
  // A line feed inside a terminal string (a hyperlink's) ends no line: the stream is not cut
  // there (found by review helper-68: the point after it made the overwrite look like a new
  // line's, and a terminal showed the key).
  const std::string kLinkOpen = "\x1b]8;;";  // OSC 8, a hyperlink; its text follows
  const std::string kStringEnd = "\x1b\\";   // ST, which ends it
  std::string marks;
  for (int i = 0; i < 70; ++i) marks += "\xcc\x81";  // combining acute accents
  std::string tail = "\rAKIAIOSF\n";
  for (int i = 0; i < 70; ++i) tail += "c ";
  const Streamed linked = StreamThrough(
      {"XXXXXXXXODNN7EXAMPLE", kLinkOpen + "y\n", kStringEnd + "-" + marks, tail}, config, 128);
  EXPECT_TRUE(linked.blocked) << linked.released;
  // A line begun by a form feed or a vertical tab is a line of its own, as a line feed's (found
  // by review helper-68: "\fabc\rxyz" was read as overwriting the line sent before).
  for (const char* br : {"\f", "\v", "\n"}) {
    const Streamed broken =
        StreamThrough({words + br + "abc", "\rxyz " + words + words}, config, 128);
    EXPECT_FALSE(broken.blocked) << int(br[0]);
  }
  // A carriage return that ends a line, and a new line's own corrections, are fine.
  const Streamed lines = StreamThrough(
      {std::string(200, 'x') + "\r", "\nsecond lin\bne and more words " + words}, config, 128);
  EXPECT_FALSE(lines.blocked);
  EXPECT_NE(lines.released.find("second lin\bne"), std::string::npos);
}

TEST(ScreenTest, BadConfigurationsAreRefusedWithTheirReason) {
  for (const char* bad :
       {"[guard]\naction = \"drop\"", "[guard]\nmin_score = 2",
        "[guard.entities.PASSPORT]\naction = \"block\"", "[guard]\nentities = 3",
        "[guard]\nmode = \"strict\"", "[guard.entities.EMAIL_ADDRESS]\nactoin = \"block\"",
        "[guard]\nhash_key_file = \"\""}) {
    absl::StatusOr<toml::table> table = ParseToml(bad, "t.toml");
    ASSERT_TRUE(table.ok());
    const toml::node* guard = table->get("guard");
    EXPECT_FALSE(ParseGuardConfig(guard->as_table(), "t.toml", "/").ok()) << bad;
  }
}

TEST(ScreenTest, TheHashKeyFileMustBePrivate) {
  testing::TempDir dir;
  const std::string key = (dir.path() / "guard.key").string();
  std::ofstream(key) << "0123456789abcdef0123456789abcdef";
  ::chmod(key.c_str(), 0644);
  absl::StatusOr<toml::table> table =
      ParseToml("[guard]\nhash_key_file = \"guard.key\"\nredaction = \"hash\"", "t.toml");
  ASSERT_TRUE(table.ok());
  const toml::table* guard = table->get("guard")->as_table();
  EXPECT_FALSE(ParseGuardConfig(guard, "t.toml", dir.path().string()).ok());
  ::chmod(key.c_str(), 0600);
  absl::StatusOr<GuardConfig> config = ParseGuardConfig(guard, "t.toml", dir.path().string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hash_key, "0123456789abcdef0123456789abcdef");
}

}  // namespace
}  // namespace pillar::guard

namespace pillar::guard {
namespace {

// A URL is read as its server reads it, and a data: URL as a model does.
TEST(ScreenUrlTest, AUrlIsReadDecodedAndADataUrlsTextToo) {
  const GuardConfig config;
  auto types = [&](std::string_view url) {
    std::vector<std::string> found;
    for (const ScreenedFinding& f : ScreenUrl(url, config).findings) {
      // Each type once: the URL is read several ways, and a value may be found in more than one.
      const std::string_view type = EntityName(f.finding.type);
      if (std::find(found.begin(), found.end(), type) == found.end()) found.emplace_back(type);
    }
    return found;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(types("https://a.example/cat.png?size=2"), V{});
  EXPECT_EQ(types("https://a.example/?to=zq%40example.org"), (V{"EMAIL_ADDRESS"}));
  EXPECT_EQ(types("https://a.example/?c=4111+1111+1111+1111"), (V{"CREDIT_CARD"}));
  EXPECT_TRUE(ScreenUrl("https://a.example/?k=AKIA%49OSFODNN7EXAMPLE", config).blocked);
  // "card 4111 1111 1111 1111": text in a data: URL, bytes in a picture's.
  EXPECT_EQ(types("data:text/plain;base64,Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx"), (V{"CREDIT_CARD"}));
  EXPECT_EQ(types("DATA:application/json;BASE64,Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx"),
            (V{"CREDIT_CARD"}));
  // A picture that is text after all is read as text (found by review helper-47), behind a
  // PNG's signature too (helper-48); binary bytes are read as their printable runs, where a
  // value can hide, and not whole.
  EXPECT_EQ(types("data:image/png;base64,Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx"), (V{"CREDIT_CARD"}));
  EXPECT_EQ(types("data:image/png;base64,iVBORw0KGgogY2FyZCA0MTExIDExMTEgMTExMSAxMTEx"),
            (V{"CREDIT_CARD"}));
  EXPECT_EQ(
      types("data:image/png;base64,pU3KGCUwux1tEyze1iN7LtkeP3IfyxlxF0SU1kk8nVw0YL4xIB5p/"
            "tqg7ui5mX9cfCmZ/a/"
            "lkyU81lSvTfrXFCegrrP+6SMvivIhH57kkcWxC+y1Vjv8Hm+TQn7LyP4pVeXNjkbcjtS3wnZNKlpNdncG+"
            "F2GkAJK1r2jQBvpyMvMyTX2zR9hImrhUziuGjQATTO6DSRqIGNhcmQgNDExMSAxMTExIDExMTEgMTExMSDATIG"
            "xuvI+O/nu9fefK0k0r4f1UgtpuUsNmC6Fu1W2cqhyY3rNdGb8tg4Oj/"
            "GEY7DksropcDR08GSsaPcA9bArPcZm9FveqizK7c0rUVdBDk3uSvKzT0MKBzRH3mNsDoBslXumhNZDH7Xq10JN"
            "CeFdAkxYSPI9H6b3Nh1/YY0VMucOIOKmZo3n9H6EZ+VG1T7I4qEle9s="),
      (V{"CREDIT_CARD"}));
  EXPECT_EQ(
      types("data:image/png;base64,pU3KGCUwux1tEyze1iN7LtkeP3IfyxlxF0SU1kk8nVw0YL4xIB5p/"
            "tqg7ui5mX9cfCmZ/a/"
            "lkyU81lSvTfrXFCegrrP+6SMvivIhH57kkcWxC+y1Vjv8Hm+TQn7LyP4pVeXNjkbcjtS3wnZNKlpNdncG+"
            "F2GkAJK1r2jQBvpyMvMyTX2zR9hImrhUziuGjQATTO6DSRqY2FyZCA0MTEBMSAxMTExIDEBMTExIDExMTHATIG"
            "xuvI+O/nu9fefK0k0r4f1UgtpuUsNmC6Fu1W2cqhyY3rNdGb8tg4Oj/"
            "GEY7DksropcDR08GSsaPcA9bArPcZm9FveqizK7c0rUVdBDk3uSvKzT0MKBzRH3mNsDoBslXumhNZDH7Xq10JN"
            "CeFdAkxYSPI9H6b3Nh1/YY0VMucOIOKmZo3n9H6EZ+VG1T7I4qEle9s="),
      V{});
  // Found by review helper-50: UTF-32, a '=' that does not complete its group (skipped, as
  // Python's binascii does), a text file with form feeds.
  EXPECT_EQ(types("data:text/plain;base64,//"
                  "4AAGsAAABlAAAAeQAAACAAAABBAAAASwAAAEkAAABBAAAASQAAAE8AAABTAAAARgAAAE8AAABEAAAATg"
                  "AAAE4AAAA3AAAARQAAAFgAAABBAAAATQAAAFAAAABMAAAARQAAACAAAABjAAAAYQAAAHIAAABkAAAAIA"
                  "AAADQAAAAxAAAAMQAAADEAAAAgAAAAMQAAADEAAAAxAAAAMQAAACAAAAAxAAAAMQAAADEAAAAxAAAAIA"
                  "AAADEAAAAxAAAAMQAAADEAAAA="),
            (V{"SECRET", "CREDIT_CARD"}));
  EXPECT_EQ(types("AAAAYwAAAGEAAAByAAAAZAAAACAAAAA0AAAAMQAAADEAAAAxAAAAIAAAADEAAAAxAAAAMQAAADEAAAAg"
                  "AAAAMQAAADEAAAAxAAAAMQAAACAAAAAxAAAAMQAAADEAAAAxAAAAIAAAAGgAAABlAAAAcgAAAGU="),
            (V{"CREDIT_CARD"}));
  EXPECT_EQ(types("data:text/plain;base64,e=GtleSBBS0lBSU9TRk9ETk43RVhBTVBMRQ=="), (V{"SECRET"}));
  EXPECT_EQ(
      types("data:text/plain;base64,cmVwb3J0DHBhZ2UgdHdvDGNhcmQgNDExMQwxMTExDDExMTEMMTExMQw="),
      (V{"CREDIT_CARD"}));
  // Found by review helper-49: UTF-16 text, a '=' inside the data (Python's binascii goes on),
  // short values and values grouped by no-break spaces among binary bytes.
  EXPECT_EQ(types("data:text/plain;base64,//"
                  "5rAGUAeQAgAEEASwBJAEEASQBPAFMARgBPAEQATgBOADcARQBYAEEATQBQAEwARQAgAGMAYQByAGQAIA"
                  "A0ADEAMQAxACAAMQAxADEAMQAgADEAMQAxADEAIAAxADEAMQAxAA=="),
            (V{"SECRET", "CREDIT_CARD"}));
  EXPECT_EQ(
      types("AGMAYQByAGQAIAA0ADEAMQAxACAAMQAxADEAMQAgADEAMQAxADEAIAAxADEAMQAxACAAaABlAHIAZQ=="),
      (V{"CREDIT_CARD"}));
  EXPECT_EQ(types("data:text/plain;base64,aGVsbG8h=Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx"),
            (V{"CREDIT_CARD"}));
  EXPECT_EQ(types("data:image/png;base64,AAECAzA3OC0wNS0xMTIwAAECA3pxQGV4Lm9yZwAB"),
            (V{"US_SSN", "EMAIL_ADDRESS"}));
  EXPECT_EQ(types("data:image/png;base64,iVBORw0KGgoAAQIDY2FyZCA0MTExwqAxMTExwqAxMTExwqAxMTExAAEC"),
            (V{"CREDIT_CARD"}));
  EXPECT_EQ(types("data:text/plain,card%204111%201111%201111%201111"), (V{"CREDIT_CARD"}));
  // Found by review helper-50: UTF-16 without a byte order mark whose start is in another
  // script (no NUL byte among its first 512) was read as binary, and the card after it lost.
  for (const bool little : {true, false}) {
    std::string wide;
    for (int i = 0; i < 150; ++i) wide += little ? "\xd3\x59\x0d\x54" : "\x59\xd3\x54\x0d";
    const std::string cjk = wide;  // "姓名" 150 times
    for (char c : std::string(" card 4111 1111 1111 1111")) {
      wide += little ? std::string{c, '\0'} : std::string{'\0', c};
    }
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode(wide))), (V{"CREDIT_CARD"}))
        << little;
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode(cjk))), V{}) << little;
    // Found by review helper-51: characters such as "一" (00 4E in UTF-16LE) outnumbering the
    // ASCII ones flipped a vote on the byte order; a long text kept its ASCII under 1 %; and
    // UTF-16 inside another format may start at an odd offset.
    std::string tail;
    for (int i = 0; i < 30; ++i) tail += little ? "\x00\x4e\x2a\x4e" : "\x4e\x00\x4e\x2a";
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode(wide + tail))),
              (V{"CREDIT_CARD"}))
        << little;
    std::string longer;
    for (int i = 0; i < 20; ++i) longer += cjk;
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode(longer + wide))),
              (V{"CREDIT_CARD"}))
        << little;
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode("\x01" + wide))),
              (V{"CREDIT_CARD"}))
        << little;
    // Values whose ASCII runs are shorter than 8 characters: a card's groups parted by
    // ideographic spaces (U+3000), a short e-mail address between CJK characters.
    std::string parted = cjk;
    const auto unit = [&](uint16_t u) {
      const char lo = char(u & 0xff), hi = char(u >> 8);
      parted += little ? std::string{lo, hi} : std::string{hi, lo};
    };
    for (char c : std::string("4111 1111 1111 1111")) unit(c == ' ' ? 0x3000 : uint16_t(c));
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode(parted))), (V{"CREDIT_CARD"}))
        << little;
    parted = cjk;
    unit(0x90ae);  // 邮
    for (char c : std::string("a@b.io")) unit(uint16_t(c));
    unit(0x3002);  // 。
    EXPECT_EQ(types(StrCat("data:text/plain;base64,", Base64Encode(parted))), (V{"EMAIL_ADDRESS"}))
        << little;
  }
  // Not base64 after all: read as written.
  EXPECT_EQ(types("data:text/plain;base64,!!!"), V{});
  // Read as leniently as Python's urllib reads it (found by review helper-46): bytes outside
  // the alphabet skipped, a leading blank, "; base64", the URL-safe alphabet, a file's bare
  // base64.
  for (const char* url :
       {"data:text/plain;base64,Y2Fy ZCA0 MTEx IDEx MTEg MTEx MSAx MTEx",
        "data:text/plain;base64,Y2Fy*ZCA0*MTEx*IDEx*MTEg*MTEx*MSAx*MTEx",
        " \tdata:text/plain;base64,Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx",
        "data:text/plain; BASE64,Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx",
        "data:text/plain;base64,Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx==x",
        "Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx",
        // A '+' is a base64 digit, not a blank, in a payload (found by review helper-47):
        // "ok>>> card 4111 1111 1111 1111", and the same bare behind a scheme.
        "data:text/plain;base64,b2s+Pj4gY2FyZCA0MTExIDExMTEgMTExMSAxMTEx",
        "b2s+Pj4gY2FyZCA0MTExIDExMTEgMTExMSAxMTEx", "ab://Y2FyZCA0MTExIDExMTEgMTExMSAxMTEx",
        "data:text/plain,card%204111%201111%201111%201111"}) {
    EXPECT_EQ(types(url), (V{"CREDIT_CARD"})) << url;
  }
}

// What a model reads of an attachment: a text file's text, nothing of a picture or a link.
TEST(AttachmentTextTest, ATextFileIsReadAndPicturesAndLinksAreNot) {
  EXPECT_EQ(AttachmentText("data:text/plain;base64,aGVsbG8gd29ybGQ="), "hello world");
  EXPECT_EQ(AttachmentText("aGVsbG8gd29ybGQ="), "hello world");
  EXPECT_EQ(AttachmentText("//5oAGUAbABsAG8AIAB3AG8AcgBsAGQA"), "hello world");
  EXPECT_EQ(AttachmentText("data:text/csv,a%2Cb%0A1%2C2"), "a,b\n1,2");
  EXPECT_EQ(AttachmentText("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB"), "");
  EXPECT_EQ(AttachmentText("https://files.example/notes.txt"), "");
}

TEST(RedactAllTest, EveryFindingBecomesItsTagWhateverAConfigAllows) {
  EXPECT_EQ(RedactAll("unknown input 'mail a.b@example.org, card 4111 1111 1111 1111'"),
            "unknown input 'mail <EMAIL_ADDRESS>, card <CREDIT_CARD>'");
  EXPECT_EQ(RedactAll("nothing here"), "nothing here");
  absl::Status status = absl::InvalidArgumentError("name 'AKIAZQSEEDED7F3A2XYZ'");
  status.SetPayload("retry", absl::Cord("2"));
  const absl::Status redacted = RedactAll(status);
  EXPECT_EQ(redacted.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(redacted.message(), "name '<SECRET>'");
  EXPECT_TRUE(redacted.GetPayload("retry").has_value());
  // A path is decoded first: an encoded value is seen as what it names.
  EXPECT_EQ(RedactPath("/v2/models/AKIA%5AQSEEDED7F3A2XYZ/infer"), "/v2/models/<SECRET>/infer");
  EXPECT_EQ(RedactPath("/v2/models/digits/infer"), "/v2/models/digits/infer");
  EXPECT_EQ(RedactPath("/a%2"), "/a%2");
  // A query is read as a form ('+' a blank), and a value escaped twice is read too (review
  // helper-127); a '+' in the path stays one.
  EXPECT_EQ(RedactPath("/v2/models/d/ready?k=4111+1111+1111+1111"),
            "/v2/models/d/ready?k=<CREDIT_CARD>");
  EXPECT_EQ(RedactPath("/v2/models/d/ready?e=jo%2540example.org"),
            "/v2/models/d/ready?e=<EMAIL_ADDRESS>");
  EXPECT_EQ(RedactPath("/v2/a+b/ready?q=x+y"), "/v2/a+b/ready?q=x y");
  // A form's value escaped again, or many times over (review helper-128).
  EXPECT_EQ(RedactPath("/v2/models/d/ready?k=4111%2B1111%2B1111%2B1111"),
            "/v2/models/d/ready?k=<CREDIT_CARD>");
  EXPECT_EQ(RedactPath("/v2/models/d/ready?e=jo%25252540example.org"),
            "/v2/models/d/ready?e=<EMAIL_ADDRESS>");
  // Digits joined by '_', ':', '+' or '/' are read as joined by blanks (review helper-138), and
  // the text kept is the text as it came.
  for (const char* card : {"4111_1111_1111_1111", "4111:1111:1111:1111", "4111+1111+1111+1111",
                           "4111/1111/1111/1111"}) {
    EXPECT_EQ(RedactAll(StrCat("kid '", card, "' x_1")), "kid '<CREDIT_CARD>' x_1") << card;
  }
  EXPECT_EQ(RedactPath("/v2/models/4111+1111+1111+1111/ready"), "/v2/models/<CREDIT_CARD>/ready");
  EXPECT_EQ(RedactAll("v1_2 at 12:30 on 2024/01/15"), "v1_2 at 12:30 on 2024/01/15");
  // Read again, not instead: a key whose id ends and whose secret begins with a digit is still
  // one (the suite found a random key so made logged whole).
  EXPECT_EQ(RedactPath("/v2/models/digits/infer?api_key=pk_9427cb163499_6R0rstAR4f9ZT4T5gHavvpR43Y"
                       "HnRjLzX2N23beV8-o&email=jo@example.org"),
            "/v2/models/digits/infer?api_key=<SECRET>&email=<EMAIL_ADDRESS>");
  // Escaped past sixteen rounds: not kept at all (review helper-137: an email escaped 17 times
  // was logged escaped once). Sixteen are still read.
  std::string escaped = "%40";
  for (int i = 0; i < 16; ++i) escaped = "%25" + escaped.substr(1);
  EXPECT_EQ(RedactPath("/nope/carol" + escaped + "example.com"), "<ESCAPED_TOO_DEEP>");
  escaped = "%40";
  for (int i = 0; i < 15; ++i) escaped = "%25" + escaped.substr(1);
  EXPECT_EQ(RedactPath("/nope/carol" + escaped + "example.com"), "/nope/<EMAIL_ADDRESS>");
}

}  // namespace
}  // namespace pillar::guard

namespace pillar::guard {
namespace {

// The ids upstreams put in a stream's structural members (OpenAI's, vLLM's, llama.cpp's,
// Ollama's shapes), alone or joined with their repeats, must not read as personal data: a
// finding there blocks the whole answer. None may be found in 18000 generated ids. (A bare
// number of a card's length that passes Luhn is found, rightly: no upstream here sends one.)
TEST(RepeatedFindingTest, TheIdsUpstreamsSendAreClean) {
  const GuardConfig config;
  std::mt19937_64 random(20261203);
  auto draw = [&](std::string_view alphabet, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out.push_back(alphabet[random() % alphabet.size()]);
    return out;
  };
  const std::string alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const std::string hex = "0123456789abcdef";
  const std::string digits = "0123456789";
  for (int i = 0; i < 2000; ++i) {
    const std::string uuid = StrCat(draw(hex, 8), "-", draw(hex, 4), "-4", draw(hex, 3), "-a",
                                    draw(hex, 3), "-", draw(hex, 12));
    for (const std::string& id :
         {StrCat("chatcmpl-", draw(alnum, 29)), StrCat("call_", draw(alnum, 24)),
          StrCat("chatcmpl-", draw(hex, 32)), StrCat("cmpl-", uuid),
          StrCat("chatcmpl-tool-", draw(hex, 32)), StrCat("chatcmpl-", draw(digits, 3)),
          StrCat("call_", draw(digits, 9)), std::string("assistant"), std::string("function")}) {
      EXPECT_EQ(RepeatedFinding(id, config), "") << id;
    }
  }
}

TEST(RepeatedFindingTest, AValueOrWhatItsRepeatsJoinIntoIsFound) {
  const GuardConfig config;
  EXPECT_EQ(RepeatedFinding("call_zq.1@example.org", config), "EMAIL_ADDRESS");
  EXPECT_EQ(RepeatedFinding("AKIAZQSEEDED7F3A2XYZ", config), "SECRET");
  EXPECT_EQ(RepeatedFinding("", config), "");
  // Found by a review (helper-40): four copies of "4242" join into a card, and so do four of
  // "4242 ".
  EXPECT_EQ(RepeatedFinding("4242", config), "CREDIT_CARD");
  EXPECT_EQ(RepeatedFinding("4242 ", config), "CREDIT_CARD");
  // A deny rule blocks by its name, with no offsets into the repeated text.
  const GuardConfig denying = Parse(R"([guard]
deny = [{ name = "codenames", words = ["nightingale"], action = "block" }]
)");
  EXPECT_EQ(RepeatedFinding("call-nightingale", denying), "deny rule 'codenames'");
}

}  // namespace
}  // namespace pillar::guard
