// pillar's subcommands. Each returns the process exit code and prints its own errors.
#pragma once

#include <string>
#include <vector>

namespace pillar::app {

struct ServeOptions {
  std::string config_path;  // empty: defaults
  std::string ports_file;   // where to write the bound ports once listening (tests use port 0)
};
int RunServe(const ServeOptions& options);

struct KeyOptions {
  std::string config_path;
  std::string state_path;  // overrides the config's [state] path
  std::string name;
  std::string id;
  bool json = false;
  // create
  std::string owner;
  std::string tenant;
  std::vector<std::string> roles;
  std::vector<std::string> attributes;  // "name=v1,v2"
  std::string expires_in;               // "90d", "12h", "30m", "45s"; empty: never
  // rotate
  std::string overlap = "24h";  // how long the old key keeps working
};
int RunKeyCreate(const KeyOptions& options);
int RunKeyList(const KeyOptions& options);
int RunKeyRevoke(const KeyOptions& options);
int RunKeyRotate(const KeyOptions& options);

struct PolicyOptions {
  std::string config_path;
  std::string policy_path;  // overrides the config's [policy] file
  // check
  std::string plane = "data";
  std::string principal = "who";
  std::string tenant;
  std::vector<std::string> roles;
  std::vector<std::string> attributes;  // principal attributes, "name=v1,v2"
  std::string action;
  std::string resource;
  std::vector<std::string> resource_attributes;  // "name=v1,v2"
};
int RunPolicyCheck(const PolicyOptions& options);

struct SigningOptions {
  std::string out;  // keygen: the path prefix of the key pair
  std::string dir;  // the model version directory
  std::string key;  // sign: the private key file
  std::string name; // sign: the subject name; default "<model>/<version>" from the path
  std::vector<std::string> trusted_keys;  // verify: public key files
};
int RunKeygen(const SigningOptions& options);
int RunModelSign(const SigningOptions& options);
int RunModelVerify(const SigningOptions& options);
int RunModelShow(const SigningOptions& options);
int RunPolicyValidate(const PolicyOptions& options);

struct ModelStoreOptions {
  std::string config_path;
  std::string store;  // overrides [repository] path
  std::string name;
  std::string dir;    // push: the version directory to add
  int64_t version = 0;
  std::string alias = "prod";
};
int RunModelPush(const ModelStoreOptions& options);
int RunModelList(const ModelStoreOptions& options);
int RunModelPromote(const ModelStoreOptions& options);
int RunModelRollback(const ModelStoreOptions& options);
int RunModelHistory(const ModelStoreOptions& options);

struct AuditOptions {
  std::string config_path;
  std::string file;                // overrides [audit] file
  std::string postgres;            // overrides [audit] postgres, and reads the chains there
  std::string instance;            // postgres: the chain (verify: default all of them)
  std::vector<std::string> keys;   // overrides [audit] public_keys
  int lines = 20;                  // tail
  bool follow = false;             // tail
  std::string since;               // export: RFC 3339 time, or an age such as "24h"
};
int RunAuditVerify(const AuditOptions& options);
int RunAuditTail(const AuditOptions& options);
int RunAuditExport(const AuditOptions& options);

}  // namespace pillar::app
