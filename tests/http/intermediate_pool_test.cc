// The intermediates a TLS listener keeps for checking clients again (a resumed connection holds
// only its client's own certificate); the end-to-end case is in tls_test.cc.
#include "http/intermediate_pool.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <vector>

namespace pillar::http::internal {
namespace {

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;

// A self-signed certificate named `cn`: the pool compares certificates, not their chains.
CertPtr Named(const std::string& cn, long serial) {
  KeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), EVP_PKEY_free);
  CertPtr cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  EXPECT_GT(X509_sign(cert.get(), key.get(), EVP_sha256()), 0);
  return cert;
}

class IntermediatePoolTest : public ::testing::Test {
 protected:
  IntermediatePoolTest() {
    for (int i = 0; i < 5; ++i) certs_.push_back(Named("cert " + std::to_string(i), 40 + i));
  }

  // A chain of the certificates numbered `which`, in that order.
  X509Stack Chain(const std::vector<int>& which) {
    X509Stack stack(sk_X509_new_null());
    for (int i : which) {
      X509_up_ref(certs_[size_t(i)].get());
      sk_X509_push(stack.get(), certs_[size_t(i)].get());
    }
    return stack;
  }

  // The names of what pool.With(sent) gives, in order.
  static std::vector<std::string> Given(const IntermediatePool& pool, STACK_OF(X509) * sent) {
    std::vector<std::string> names;
    X509Stack all = pool.With(sent);
    for (int i = 0; i < sk_X509_num(all.get()); ++i) {
      char name[64];
      X509_NAME_get_text_by_NID(X509_get_subject_name(sk_X509_value(all.get(), i)), NID_commonName,
                                name, sizeof name);
      names.emplace_back(name);
    }
    return names;
  }

  std::vector<CertPtr> certs_;
};

TEST_F(IntermediatePoolTest, KeepsOnlyWhatIsBetweenAChainsFirstAndLast) {
  IntermediatePool pool(4);
  pool.Remember(nullptr);
  pool.Remember(Chain({0, 1}).get());  // a leaf and its anchor: nothing between
  EXPECT_EQ(pool.size(), 0u);
  pool.Remember(Chain({0, 1, 2, 3}).get());
  EXPECT_EQ(Given(pool, nullptr), (std::vector<std::string>{"cert 1", "cert 2"}));
  pool.Remember(Chain({4, 1, 3}).get());  // cert 1 again: not held twice
  EXPECT_EQ(Given(pool, nullptr), (std::vector<std::string>{"cert 2", "cert 1"}));
}

TEST_F(IntermediatePoolTest, KeepsTheMostRecentlySeenWhenFull) {
  IntermediatePool pool(2);
  pool.Remember(Chain({0, 1, 2, 3}).get());
  pool.Remember(Chain({0, 1, 4}).get());  // cert 1 seen again: cert 2 is the least recent
  pool.Remember(Chain({0, 3, 4}).get());
  EXPECT_EQ(Given(pool, nullptr), (std::vector<std::string>{"cert 1", "cert 3"}));
}

TEST_F(IntermediatePoolTest, WhatTheClientSentComesFirst) {
  IntermediatePool pool;
  pool.Remember(Chain({0, 1, 2}).get());
  EXPECT_EQ(Given(pool, Chain({4}).get()), (std::vector<std::string>{"cert 4", "cert 1"}));
  // The stack holds references of its own: the pool and the sent chain outlive it or not.
  X509Stack given = pool.With(nullptr);
  certs_.clear();
  ASSERT_EQ(sk_X509_num(given.get()), 1);
  char name[64];
  X509_NAME_get_text_by_NID(X509_get_subject_name(sk_X509_value(given.get(), 0)), NID_commonName,
                            name, sizeof name);
  EXPECT_EQ(std::string(name), "cert 1");
}

}  // namespace
}  // namespace pillar::http::internal
