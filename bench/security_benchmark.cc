// The security chain's cost per request, embedded: authenticate (10,000 API keys in the
// table) + authorize (a 1,000-rule policy with ABAC conditions) + admit (three limits: a rate
// per key, a daily quota per tenant, a concurrency cap per model). Goal: under 2 us together.
// JWT verification per algorithm is measured alongside; bench/pyjwt_peer.py times PyJWT on the
// same tokens for the side-by-side figure (bench/run_security.sh runs both).
//
//   build/bench/security_benchmark --benchmark_filter=Chain
#include <benchmark/benchmark.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "common/crypto.h"
#include "common/strings.h"
#include "identity/api_key.h"
#include "identity/api_key_table.h"
#include "identity/jwt_verifier.h"
#include "limits/local_limiter.h"
#include "limits/redis_limiter.h"
#include "pipeline/exchange.h"
#include "policy/policy.h"
#include "stages/admit_stage.h"
#include "state/state_store.h"

namespace pillar {
namespace {

constexpr int kKeys = 10'000;
constexpr int kRules = 1'000;
constexpr int kTenants = 100;
constexpr int kRoles = 200;

std::string PolicyText() {
  std::string text = "version = 1\n";
  for (int i = 0; i < kRules; ++i) {
    StrAppend(&text, "[[rule]]\nname = \"rule ", i, "\"\nroles = [\"role", i % kRoles,
              "\"]\nactions = [\"infer\", \"read_metadata\"]\nresources = [\"model:m", i % 50,
              "/*\"]\nwhen = [\"principal.tenant == model.tenant\", "
              "\"model.classification in principal.clearances\"]\n");
  }
  text +=
      "[[limit]]\nname = \"key-rate\"\nper = \"key\"\nrate = 1e9\nburst = 1000000000\n"
      "[[limit]]\nname = \"tenant-daily\"\nper = \"tenant\"\nquota = 1000000000000\nperiod = "
      "\"day\"\n"
      "[[limit]]\nname = \"model-slots\"\nper = \"model\"\nconcurrency = 1000000\n";
  return text;
}

struct World {
  std::string dir;
  std::unique_ptr<state::StateStore> store;
  std::unique_ptr<identity::ApiKeyTable> keys;
  std::vector<std::string> key_texts;
  std::shared_ptr<const policy::Policy> policy;
  identity::Attributes model_attributes = {
      {"tenant", {"t7"}}, {"classification", {"public"}}, {"name", {"m7"}}, {"version", {"1"}}};
  std::unique_ptr<limits::LocalLimiter> limiter;

  World() {
    // tmpfs when there is one: building 10,000 keys should not measure the disk.
    dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    dir += "/pillar-security-bench-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    store = std::move(*state::OpenSqliteStateStore(dir + "/state.db"));
    for (int i = 0; i < kKeys; ++i) {
      identity::NewApiKey key = identity::GenerateApiKey();
      state::ApiKeyRecord r;
      r.id = key.id;
      r.name = StrCat("key ", i);
      r.secret_hash = key.secret_hash;
      r.tenant = StrCat("t", i % kTenants);
      // Three roles each; the one that matters for model m7 is role7 (rules 7, 207, 407 ...).
      r.roles = {StrCat("role", i % kRoles), StrCat("role", (i + 1) % kRoles), "role7"};
      r.attributes = {{"clearances", {"public", "internal"}}};
      (void)store->PutKey(r);
      if (r.tenant == "t7") key_texts.push_back("Bearer " + key.text);
    }
    keys = std::make_unique<identity::ApiKeyTable>(
        *store, identity::ApiKeyTableOptions{.refresh_interval = absl::ZeroDuration()});
    if (!keys->Refresh().ok() || keys->size() != kKeys) std::abort();
    policy = *policy::Policy::Parse(PolicyText(), "bench.toml");
    limiter = std::make_unique<limits::LocalLimiter>(limits::LocalLimiterOptions{});
  }
  ~World() { std::filesystem::remove_all(dir); }
};

World& TheWorld() {
  static World* world = new World;
  return *world;
}

std::shared_ptr<const identity::Principal> Authenticate(World& w, size_t i) {
  constexpr std::string_view kBearer = "Bearer ";
  auto who =
      w.keys->Verify(std::string_view(w.key_texts[i % w.key_texts.size()]).substr(kBearer.size()),
                     1'800'000'000'000'000);
  if (!who.ok()) std::abort();
  return *who;
}

void BM_Authenticate(benchmark::State& state) {
  World& w = TheWorld();
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(Authenticate(w, i++));
}
BENCHMARK(BM_Authenticate);

void BM_Authorize(benchmark::State& state) {
  World& w = TheWorld();
  auto who = Authenticate(w, 0);
  for (auto _ : state) {
    auto d = w.policy->Evaluate(*who, policy::Plane::kData, "infer",
                                {"model:m7/1", &w.model_attributes});
    if (!d.allowed) std::abort();
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_Authorize);

// An infer request on model m7 by the first key, as the admit stage sees it.
void PrepareExchange(World& w, pipeline::Exchange& ex) {
  ex.principal = Authenticate(w, 0);
  ex.policy = w.policy;
  ex.action = "infer";
  ex.resource = "model:m7/1";
  ex.request_id = "r";
}

void BM_Admit(benchmark::State& state) {
  World& w = TheWorld();
  pipeline::Exchange ex;
  PrepareExchange(w, ex);
  stages::AdmitStage::Charges charges;
  for (auto _ : state) {
    stages::AdmitStage::CollectCharges(ex, charges);
    auto v = w.limiter->AdmitNow(charges, ex.request_id);
    if (!v.ok() || !v->allowed) std::abort();
    w.limiter->Release(charges, ex.request_id);
  }
}
BENCHMARK(BM_Admit);

// Admission through a real Redis (bench/run_security.sh starts one and sets PILLAR_REDIS_PORT):
// one synchronous round trip per request, the latency a lone client sees.
void BM_AdmitRedis(benchmark::State& state) {
  const char* port = std::getenv("PILLAR_REDIS_PORT");
  if (port == nullptr) {
    state.SkipWithError("PILLAR_REDIS_PORT not set");
    return;
  }
  World& w = TheWorld();
  limits::RedisLimiterOptions options;
  options.port = std::atoi(port);
  limits::RedisLimiter redis(options);
  for (int i = 0; i < 500 && !redis.up(); ++i) absl::SleepFor(absl::Milliseconds(10));
  pipeline::Exchange ex;
  PrepareExchange(w, ex);
  stages::AdmitStage::Charges charges;
  for (auto _ : state) {
    stages::AdmitStage::CollectCharges(ex, charges);
    auto v = redis.AdmitNow(charges, ex.request_id);
    if (!v.ok() || !v->allowed) std::abort();
    redis.Release(charges, ex.request_id);
  }
}
BENCHMARK(BM_AdmitRedis)->UseRealTime();

// The three together, as the chain runs them for one model request: the route stage evaluates
// the policy once for the chosen version and the authorize stage reuses that decision.
void BM_Chain(benchmark::State& state) {
  World& w = TheWorld();
  stages::AdmitStage::Charges charges;
  size_t i = 0;
  for (auto _ : state) {
    pipeline::Exchange ex;
    ex.principal = Authenticate(w, i++);
    ex.policy = w.policy;
    ex.action = "infer";
    ex.resource = "model:m7/1";
    ex.request_id = "r";
    auto d = w.policy->Evaluate(*ex.principal, policy::Plane::kData, ex.action,
                                {ex.resource, &w.model_attributes});
    if (!d.allowed) std::abort();
    stages::AdmitStage::CollectCharges(ex, charges);
    auto v = w.limiter->AdmitNow(charges, ex.request_id);
    if (!v.ok() || !v->allowed) std::abort();
    w.limiter->Release(charges, ex.request_id);
  }
}
BENCHMARK(BM_Chain)->Threads(1)->Threads(2)->UseRealTime();

// JWT verification per algorithm. Tokens and the JWKS are written to $PILLAR_JWT_DIR (when set)
// so that the PyJWT peer verifies exactly the same bytes.
struct JwtWorld {
  std::vector<std::pair<std::string, std::string>> tokens;  // alg -> token
  std::unique_ptr<identity::JwtVerifier> verifier;          // with the verified-token cache
  std::unique_ptr<identity::JwtVerifier> uncached;          // every call checks the signature
  JwtWorld() {
    std::string jwks = "{\"keys\":[";
    const char* dir = std::getenv("PILLAR_JWT_DIR");
    std::string claims =
        R"({"iss":"https://idp.bench","aud":"pillar","sub":"alice","roles":["user"],"exp":4000000000})";
    struct Alg {
      const char* name;
      EVP_PKEY* key;
    };
    std::vector<Alg> algs = {
        {"RS256", EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t(2048))},
        {"ES256", EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256")},
        {"EdDSA", EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")},
    };
    for (size_t k = 0; k < algs.size(); ++k) {
      const Alg& a = algs[k];
      std::string header = StrCat(R"({"alg":")", a.name, R"(","kid":")", a.name, R"("})");
      std::string input = Base64UrlEncode(header) + "." + Base64UrlEncode(claims);
      EVP_MD_CTX* ctx = EVP_MD_CTX_new();
      const EVP_MD* md = std::string_view(a.name) == "EdDSA" ? nullptr : EVP_sha256();
      size_t len = 0;
      EVP_DigestSignInit(ctx, nullptr, md, nullptr, a.key);
      EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                     input.size());
      std::string sig(len, '\0');
      EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size());
      sig.resize(len);
      EVP_MD_CTX_free(ctx);
      if (std::string_view(a.name) == "ES256") {
        const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
        ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, long(sig.size()));
        std::string raw(64, '\0');
        BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), 32);
        BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
        ECDSA_SIG_free(es);
        sig = raw;
      }
      tokens.emplace_back(a.name, input + "." + Base64UrlEncode(sig));
      // The public key as a JWK: PEM is simpler to export here, so write it for the peer, and
      // build the JWK from the raw parameters.
      std::string jwk;
      if (std::string_view(a.name) == "RS256") {
        BIGNUM *n = nullptr, *e = nullptr;
        EVP_PKEY_get_bn_param(a.key, "n", &n);
        EVP_PKEY_get_bn_param(a.key, "e", &e);
        std::string nb(size_t(BN_num_bytes(n)), '\0'), eb(size_t(BN_num_bytes(e)), '\0');
        BN_bn2bin(n, reinterpret_cast<unsigned char*>(nb.data()));
        BN_bn2bin(e, reinterpret_cast<unsigned char*>(eb.data()));
        BN_free(n);
        BN_free(e);
        jwk = StrCat(R"({"kty":"RSA","kid":"RS256","n":")", Base64UrlEncode(nb), R"(","e":")",
                     Base64UrlEncode(eb), "\"}");
      } else if (std::string_view(a.name) == "ES256") {
        unsigned char pt[65];
        size_t pl = 0;
        EVP_PKEY_get_octet_string_param(a.key, "pub", pt, sizeof pt, &pl);
        std::string raw(reinterpret_cast<char*>(pt), pl);
        jwk = StrCat(R"({"kty":"EC","crv":"P-256","kid":"ES256","x":")",
                     Base64UrlEncode(raw.substr(1, 32)), R"(","y":")",
                     Base64UrlEncode(raw.substr(33, 32)), "\"}");
      } else {
        unsigned char raw[32];
        size_t rl = 32;
        EVP_PKEY_get_raw_public_key(a.key, raw, &rl);
        jwk = StrCat(R"({"kty":"OKP","crv":"Ed25519","kid":"EdDSA","x":")",
                     Base64UrlEncode(std::string_view(reinterpret_cast<char*>(raw), rl)), "\"}");
      }
      StrAppend(&jwks, k ? "," : "", jwk);
    }
    jwks += "]}";
    if (dir != nullptr) {
      std::ofstream(std::string(dir) + "/jwks.json") << jwks;
      std::ofstream out(std::string(dir) + "/tokens.txt");
      for (const auto& [alg, token] : tokens) out << alg << " " << token << "\n";
    }
    identity::JwtOptions options;
    options.issuer = "https://idp.bench";
    options.audiences = {"pillar"};
    verifier = std::make_unique<identity::JwtVerifier>(options, *identity::Jwks::Parse(jwks));
    options.cache_entries = 0;
    uncached = std::make_unique<identity::JwtVerifier>(options, *identity::Jwks::Parse(jwks));
  }
};

JwtWorld& TheJwtWorld() {
  static JwtWorld* world = new JwtWorld;
  return *world;
}

void VerifyLoop(benchmark::State& state, bool cached) {
  JwtWorld& world = TheJwtWorld();
  const auto& [alg, token] = world.tokens[size_t(state.range(0))];
  state.SetLabel(alg);
  const identity::JwtVerifier& verifier = cached ? *world.verifier : *world.uncached;
  for (auto _ : state) {
    auto who = verifier.Verify(token, 1'800'000'000'000'000);
    if (!who.ok()) std::abort();
    benchmark::DoNotOptimize(who);
  }
}

// The signature check itself (a token seen for the first time).
void BM_JwtVerify(benchmark::State& state) { VerifyLoop(state, false); }
BENCHMARK(BM_JwtVerify)->Arg(0)->Arg(1)->Arg(2);

// A token the verifier has already checked (the same client's next request).
void BM_JwtVerifyRepeated(benchmark::State& state) { VerifyLoop(state, true); }
BENCHMARK(BM_JwtVerifyRepeated)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace pillar

BENCHMARK_MAIN();
