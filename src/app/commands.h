// pillar's subcommands. Each returns the process exit code and prints its own errors.
#pragma once

#include <string>
#include <vector>

#include "torch_module/torch_module.h"

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
  std::string out;   // keygen: the path prefix of the key pair
  std::string dir;   // the model version directory
  std::string key;   // sign: the private key file
  std::string name;  // sign: the subject name; default "<model>/<version>" from the path
  std::vector<std::string> trusted_keys;  // verify: public key files
  std::string expected;  // verify: the subject it must name; default "<model>/<version>"
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
  std::string dir;  // push: the version directory to add
  int64_t version = 0;
  std::string alias = "prod";
  std::string key;               // push, promote, rollback: overrides [repository] signing_key
  bool replace_aliases = false;  // promote, rollback: start from no aliases if the file is refused
};
int RunModelPush(const ModelStoreOptions& options);
int RunModelList(const ModelStoreOptions& options);
int RunModelPromote(const ModelStoreOptions& options);
int RunModelRollback(const ModelStoreOptions& options);
int RunModelHistory(const ModelStoreOptions& options);

using TrainOptions = torch_module::TrainOptions;
int RunTrain(const TrainOptions& options);

struct CkptOptions {
  std::string run;    // a run directory, or one checkpoint directory
  int64_t step = -1;  // -1: the newest (or the one `run` names)
  bool json = false;
  std::string to;     // restore: the run directory to copy into
  std::string file;   // export / import: the state_dict file
  int keep_last = 3;  // prune
  int64_t keep_every = 0;
  std::string mtbf;   // interval: "24h"
  double cost_s = 0;  // interval: seconds per checkpoint; 0: measured from `run`
};
int RunCkptList(const CkptOptions& options);
int RunCkptShow(const CkptOptions& options);
int RunCkptVerify(const CkptOptions& options);
int RunCkptRestore(const CkptOptions& options);
int RunCkptPrune(const CkptOptions& options);
int RunCkptExport(const CkptOptions& options);
int RunCkptImport(const CkptOptions& options);
int RunCkptInterval(const CkptOptions& options);

struct AuditOptions {
  std::string config_path;
  std::string file;               // overrides [audit] file
  std::string postgres;           // overrides [audit] postgres, and reads the chains there
  std::string instance;           // postgres: the chain (verify: default all of them)
  std::vector<std::string> keys;  // overrides [audit] public_keys
  int lines = 20;                 // tail
  bool follow = false;            // tail
  std::string since;              // export: RFC 3339 time, or an age such as "24h"
  // verify: what is known from off the chain's host, so that records cut off the end together
  // with the checkpoint kept beside it are found (formats/audit-log.md, "Anchors").
  std::string anchor;       // a file holding an anchor line, or COUNT:HEAD itself; empty: none
  int64_t min_records = 0;  // the chain must hold at least this many records
};
int RunAuditVerify(const AuditOptions& options);
// `pillar audit anchor`: verifies the chain and prints its newest signed checkpoint, one line,
// to be kept off the host and given to `verify --anchor` later. Exit 1 when the chain does not
// verify or holds no signed checkpoint.
int RunAuditAnchor(const AuditOptions& options);
int RunAuditTail(const AuditOptions& options);
int RunAuditExport(const AuditOptions& options);

// `pillar bench collective OP [nccl-tests flags]`: `args` are the words after "collective".
int RunBenchCollective(const std::vector<std::string>& args);

struct HealthOptions {
  std::string config_path;  // the machine family's thresholds (configs/health/*.toml)
  std::string root = "/";   // where /proc and /sys are read (tests point it at a fake tree)
  bool json = false;
  std::string prometheus;  // also write a node_exporter textfile here
};
int RunHealth(const HealthOptions& options);

}  // namespace pillar::app
