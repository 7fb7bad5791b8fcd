// The `pillar` command line: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "app/commands.h"

#ifndef PILLAR_VERSION
#define PILLAR_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  // Lock-order cycle detection costs a graph lookup per lock; the hot path takes a few locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App cli{"pillar: serve AI models with every control in the request path"};
  cli.set_version_flag("--version", "pillar " PILLAR_VERSION);
  cli.require_subcommand(1);

  pillar::app::ServeOptions serve;
  CLI::App* serve_cmd =
      cli.add_subcommand("serve", "Run the inference server (data and admin planes)");
  serve_cmd->add_option("-c,--config", serve.config_path, "Configuration file (TOML)");
  serve_cmd->add_option("--ports-file", serve.ports_file,
                        "Write the bound ports here once listening");

  pillar::app::KeyOptions key;
  CLI::App* key_cmd = cli.add_subcommand("key", "Manage API keys");
  key_cmd->require_subcommand(1);
  key_cmd->fallthrough();  // "key create -c FILE" as well as "key -c FILE create"
  key_cmd->add_option("-c,--config", key.config_path, "Configuration file (TOML)");
  key_cmd->add_option("--state", key.state_path, "State database (overrides the config)");
  key_cmd->add_flag("--json", key.json, "Print JSON");
  CLI::App* create = key_cmd->add_subcommand("create", "Create a key; its text is printed once");
  create->add_option("--name", key.name, "What the key is for")->required();
  create->add_option("--owner", key.owner, "Who is responsible for the key");
  create->add_option("--tenant", key.tenant, "The tenant the key acts for");
  create->add_option("--role", key.roles, "A role the key holds (repeatable)");
  create->add_option("--attr", key.attributes, "An attribute, name=v1[,v2] (repeatable)");
  create->add_option("--expires-in", key.expires_in, "Lifetime: 90d, 12h, 30m, 45s");
  CLI::App* list = key_cmd->add_subcommand("list", "List keys (never their secrets)");
  CLI::App* revoke = key_cmd->add_subcommand("revoke", "Revoke a key by id");
  revoke->add_option("id", key.id, "Key id (the 12 hex characters after pk_)")->required();
  CLI::App* rotate = key_cmd->add_subcommand(
      "rotate", "Make a successor key; the old one keeps working for the overlap, then expires");
  rotate->add_option("id", key.id, "Key id to rotate")->required();
  rotate->add_option("--overlap", key.overlap, "How long the old key stays valid (default 24h)");
  rotate->add_option("--expires-in", key.expires_in, "Lifetime of the new key");

  pillar::app::PolicyOptions policy;
  CLI::App* policy_cmd = cli.add_subcommand("policy", "Validate a policy and explain decisions");
  policy_cmd->require_subcommand(1);
  policy_cmd->fallthrough();
  policy_cmd->add_option("-c,--config", policy.config_path, "Configuration file (TOML)");
  policy_cmd->add_option("--policy", policy.policy_path, "Policy file (overrides the config)");
  CLI::App* validate = policy_cmd->add_subcommand("validate", "Check a policy file");
  CLI::App* check = policy_cmd->add_subcommand(
      "check", "Explain one decision; exits 0 when allowed, 1 when denied");
  check->add_option("--principal", policy.principal, "Principal id, e.g. key:3f2a9c01d4e5");
  check->add_option("--tenant", policy.tenant, "The principal's tenant");
  check->add_option("--role", policy.roles, "A role of the principal (repeatable)");
  check->add_option("--attr", policy.attributes, "A principal attribute, name=v1[,v2]");
  check->add_option("--plane", policy.plane, "data (default) or admin");
  check->add_option("--action", policy.action, "infer, read_metadata, ...")->required();
  check->add_option("--resource", policy.resource, "e.g. model:digits/1, server, metrics")
      ->required();
  check->add_option("--resource-attr", policy.resource_attributes,
                    "A resource attribute, name=v1[,v2], e.g. tenant=acme");

  pillar::app::SigningOptions signing;
  CLI::App* keygen = cli.add_subcommand("keygen", "Make an Ed25519 signing key pair");
  keygen->add_option("--out", signing.out, "Path prefix: writes PREFIX.key (0600) and PREFIX.pub")
      ->required();
  CLI::App* model_cmd =
      cli.add_subcommand("model", "Sign, verify, push, promote and roll back model versions");
  model_cmd->require_subcommand(1);
  CLI::App* sign = model_cmd->add_subcommand("sign", "Sign a model version directory");
  sign->add_option("dir", signing.dir, "The version directory, e.g. store/digits/3")->required();
  sign->add_option("--key", signing.key, "The private key file (from pillar keygen)")->required();
  sign->add_option("--name", signing.name, "Subject name (default: <model>/<version>)");
  CLI::App* verify = model_cmd->add_subcommand("verify", "Verify a model version directory");
  verify->add_option("dir", signing.dir, "The version directory")->required();
  verify
      ->add_option("--trusted-key", signing.trusted_keys, "A trusted public key file (repeatable)")
      ->required();
  verify->add_option("--name", signing.expected,
                     "The model/version the signature must name (default: from the path)");
  CLI::App* show =
      model_cmd->add_subcommand("show", "Show a version: files, digests, signature and lineage");
  show->add_option("dir", signing.dir, "The version directory")->required();
  show->add_option("--trusted-key", signing.trusted_keys, "Check the signature against these keys");

  pillar::app::ModelStoreOptions store;
  auto store_source = [&store](CLI::App* cmd) {
    cmd->add_option("-c,--config", store.config_path,
                    "Configuration file ([repository] path and trusted_keys, [audit])");
    cmd->add_option("--store", store.store, "The model store (overrides [repository] path)");
  };
  auto store_key = [&store](CLI::App* cmd) {
    cmd->add_option("--key", store.key,
                    "The signing key (overrides [repository] signing_key): versions and alias "
                    "files are signed for where they are served");
  };
  auto replace_aliases = [&store](CLI::App* cmd) {
    cmd->add_flag("--replace-aliases", store.replace_aliases,
                  "When aliases.json is refused (unsigned, forged, replayed), start the model's "
                  "aliases afresh with this move");
  };
  CLI::App* push = model_cmd->add_subcommand(
      "push",
      "Add a version directory to the store as a new, immutable version, signed for its place");
  store_source(push);
  push->add_option("dir", store.dir, "The version directory (model.toml, model.pt, signature)")
      ->required();
  push->add_option("--name", store.name, "The model's name")->required();
  store_key(push);
  CLI::App* model_list = model_cmd->add_subcommand("list", "List the store's versions and aliases");
  store_source(model_list);
  model_list->add_option("--name", store.name, "Only this model");
  CLI::App* promote = model_cmd->add_subcommand("promote", "Point an alias at a version");
  store_source(promote);
  promote->add_option("name", store.name, "The model")->required();
  promote->add_option("version", store.version, "The version")
      ->required()
      ->check(CLI::PositiveNumber);
  promote->add_option("--alias", store.alias, "The alias (default prod)");
  store_key(promote);
  replace_aliases(promote);
  CLI::App* rollback = model_cmd->add_subcommand(
      "rollback", "Point an alias back at the version it named before its last move");
  store_source(rollback);
  rollback->add_option("name", store.name, "The model")->required();
  rollback->add_option("--alias", store.alias, "The alias (default prod)");
  store_key(rollback);
  CLI::App* history = model_cmd->add_subcommand(
      "history", "Every alias move of a model: when, which, from, to, by whom");
  store_source(history);
  history->add_option("name", store.name, "The model")->required();

  pillar::app::TrainOptions train;
  CLI::App* train_cmd = cli.add_subcommand(
      "train", "Train the demo digits MLP with checkpoints; resumes from the newest good one");
  train_cmd->add_option("--run", train.run, "Checkpoint directory (the fast tier)")->required();
  train_cmd->add_option("--durable", train.durable, "A second, durable tier (shared file system)");
  train_cmd->add_option("--data", train.data, "Training rows (label + 64 pixels, CSV)");
  train_cmd->add_option("--steps", train.steps, "Steps in all")->check(CLI::PositiveNumber);
  train_cmd->add_option("--every", train.every, "Checkpoint every this many steps")
      ->check(CLI::PositiveNumber);
  train_cmd->add_option("--seed", train.seed, "Seed (weights and batches)");
  train_cmd->add_option("--batch", train.batch, "Rows per step")->check(CLI::Range(1, 65536));
  train_cmd->add_option("--lr", train.lr, "Learning rate");
  train_cmd->add_option("--keep-last", train.keep_last, "Checkpoints kept per tier")
      ->check(CLI::Range(1, 1000000));
  train_cmd->add_flag("--sync", train.sync, "Wait for each checkpoint before the next step");

  pillar::app::CkptOptions ckpt;
  CLI::App* ckpt_cmd = cli.add_subcommand("ckpt", "Inspect, verify and move training checkpoints");
  ckpt_cmd->require_subcommand(1);
  auto ckpt_target = [&ckpt](CLI::App* cmd) {
    cmd->add_option("run", ckpt.run, "A run directory, or one checkpoint directory")->required();
    cmd->add_option("--step", ckpt.step, "A step of the run (default: the newest)");
    cmd->add_flag("--json", ckpt.json, "Machine-readable output");
  };
  CLI::App* ckpt_list = ckpt_cmd->add_subcommand("list", "The run's checkpoints");
  ckpt_target(ckpt_list);
  CLI::App* ckpt_show = ckpt_cmd->add_subcommand("show", "One checkpoint's manifest");
  ckpt_target(ckpt_show);
  CLI::App* ckpt_verify = ckpt_cmd->add_subcommand(
      "verify", "Check every shard and entry checksum (all checkpoints of a run, or one)");
  ckpt_target(ckpt_verify);
  CLI::App* ckpt_restore = ckpt_cmd->add_subcommand(
      "restore", "Copy the newest good (or --step) checkpoint to another run directory");
  ckpt_target(ckpt_restore);
  ckpt_restore->add_option("--to", ckpt.to, "The run directory to restore into")->required();
  CLI::App* ckpt_prune = ckpt_cmd->add_subcommand("prune", "Apply a retention policy");
  ckpt_target(ckpt_prune);
  ckpt_prune->add_option("--keep-last", ckpt.keep_last, "Keep the newest N")
      ->check(CLI::NonNegativeNumber);
  ckpt_prune->add_option("--keep-every", ckpt.keep_every, "Also keep steps that are multiples of K")
      ->check(CLI::NonNegativeNumber);
  CLI::App* ckpt_export = ckpt_cmd->add_subcommand(
      "export", "Write a checkpoint as a PyTorch state_dict file (torch.load reads it)");
  ckpt_target(ckpt_export);
  ckpt_export->add_option("--out", ckpt.file, "The .pt file")->required();
  CLI::App* ckpt_import =
      ckpt_cmd->add_subcommand("import", "Make a checkpoint of a torch.save'd state_dict");
  ckpt_target(ckpt_import);
  ckpt_import->add_option("--file", ckpt.file, "The .pt file")->required();
  CLI::App* ckpt_interval = ckpt_cmd->add_subcommand(
      "interval", "Recommend a checkpoint interval (Young/Daly) from the cost and the MTBF");
  ckpt_interval->add_option("run", ckpt.run, "A run whose checkpoints give the measured cost");
  ckpt_interval->add_option("--mtbf", ckpt.mtbf, "Mean time between failures, e.g. 24h")
      ->required();
  ckpt_interval->add_option("--cost", ckpt.cost_s, "Seconds per checkpoint (default: measured)");
  ckpt_interval->add_flag("--json", ckpt.json, "Machine-readable output");

  pillar::app::AuditOptions audit;
  CLI::App* audit_cmd = cli.add_subcommand("audit", "Verify and read the tamper-evident audit log");
  audit_cmd->require_subcommand(1);
  auto audit_source = [&audit](CLI::App* cmd) {
    cmd->add_option("-c,--config", audit.config_path, "Configuration file ([audit] section)");
    cmd->add_option("--file", audit.file, "The audit log file (overrides [audit] file)");
    cmd->add_option("--postgres", audit.postgres,
                    "A libpq connection string: read the chains in PostgreSQL");
    cmd->add_option("--instance", audit.instance, "PostgreSQL: the instance whose chain to read");
  };
  CLI::App* audit_verify = audit_cmd->add_subcommand(
      "verify", "Check every record, link and signed checkpoint; name the first bad record");
  audit_source(audit_verify);
  audit_verify->add_option(
      "--key", audit.keys,
      "A trusted audit public key (repeatable; overrides [audit] public_keys)");
  audit_verify->add_option("--anchor", audit.anchor,
                           "A file holding a checkpoint kept off this host (`pillar audit "
                           "anchor`), or COUNT:HEAD: the chain must still reach it");
  audit_verify
      ->add_option("--min-records", audit.min_records,
                   "The chain must hold at least this many records")
      ->check(CLI::NonNegativeNumber);
  CLI::App* audit_anchor_cmd = audit_cmd->add_subcommand(
      "anchor", "Verify, then print the newest signed checkpoint: one line to keep off this host");
  audit_source(audit_anchor_cmd);
  audit_anchor_cmd->add_option("--key", audit.keys,
                               "A trusted audit public key (repeatable; overrides [audit] "
                               "public_keys)");
  CLI::App* audit_tail = audit_cmd->add_subcommand("tail", "Print the newest records (JSON lines)");
  audit_source(audit_tail);
  audit_tail->add_option("-n,--lines", audit.lines, "How many records")
      ->check(CLI::Range(1, 1000000));
  audit_tail->add_flag("-f,--follow", audit.follow, "Keep printing records as they are written");
  CLI::App* audit_export =
      audit_cmd->add_subcommand("export", "Print records as JSON lines, for a SIEM");
  audit_source(audit_export);
  audit_export->add_option("--since", audit.since,
                           "Only records from this time on: RFC 3339, or an age such as 24h");

  CLI::App* bench_cmd = cli.add_subcommand("bench", "Cluster benchmarks");
  bench_cmd->require_subcommand(1);
  CLI::App* collective_cmd =
      bench_cmd->add_subcommand("collective",
                                "nccl-tests compatible collective bandwidth (OP and flags as "
                                "all_reduce_perf; -h lists them)");
  // nccl-tests' flags (-b8, -e 128M, --minbytes=8, ...) are parsed by the benchmark itself.
  collective_cmd->prefix_command();
  collective_cmd->allow_extras();
  collective_cmd->set_help_flag();

  pillar::app::HealthOptions health;
  CLI::App* health_cmd = cli.add_subcommand(
      "health",
      "Check this node against thresholds; exit 0 healthy, 1 unhealthy, 2 could not check");
  health_cmd
      ->add_option("-c,--config", health.config_path,
                   "Thresholds for this machine family (configs/health/*.toml)")
      ->required();
  health_cmd->add_flag("--json", health.json, "Machine-readable output");
  health_cmd->add_option("--prometheus", health.prometheus,
                         "Also write a Prometheus textfile (node_exporter textfile collector)");
  health_cmd->add_option("--root", health.root, "Read /proc and /sys under this directory");

  CLI11_PARSE(cli, argc, argv);

  if (serve_cmd->parsed()) return pillar::app::RunServe(serve);
  if (create->parsed()) return pillar::app::RunKeyCreate(key);
  if (list->parsed()) return pillar::app::RunKeyList(key);
  if (revoke->parsed()) return pillar::app::RunKeyRevoke(key);
  if (rotate->parsed()) return pillar::app::RunKeyRotate(key);
  if (validate->parsed()) return pillar::app::RunPolicyValidate(policy);
  if (check->parsed()) return pillar::app::RunPolicyCheck(policy);
  if (keygen->parsed()) return pillar::app::RunKeygen(signing);
  if (sign->parsed()) return pillar::app::RunModelSign(signing);
  if (verify->parsed()) return pillar::app::RunModelVerify(signing);
  if (show->parsed()) return pillar::app::RunModelShow(signing);
  if (push->parsed()) return pillar::app::RunModelPush(store);
  if (model_list->parsed()) return pillar::app::RunModelList(store);
  if (promote->parsed()) return pillar::app::RunModelPromote(store);
  if (rollback->parsed()) return pillar::app::RunModelRollback(store);
  if (history->parsed()) return pillar::app::RunModelHistory(store);
  if (train_cmd->parsed()) return pillar::app::RunTrain(train);
  if (ckpt_list->parsed()) return pillar::app::RunCkptList(ckpt);
  if (ckpt_show->parsed()) return pillar::app::RunCkptShow(ckpt);
  if (ckpt_verify->parsed()) return pillar::app::RunCkptVerify(ckpt);
  if (ckpt_restore->parsed()) return pillar::app::RunCkptRestore(ckpt);
  if (ckpt_prune->parsed()) return pillar::app::RunCkptPrune(ckpt);
  if (ckpt_export->parsed()) return pillar::app::RunCkptExport(ckpt);
  if (ckpt_import->parsed()) return pillar::app::RunCkptImport(ckpt);
  if (ckpt_interval->parsed()) return pillar::app::RunCkptInterval(ckpt);
  if (audit_verify->parsed()) return pillar::app::RunAuditVerify(audit);
  if (audit_anchor_cmd->parsed()) return pillar::app::RunAuditAnchor(audit);
  if (audit_tail->parsed()) return pillar::app::RunAuditTail(audit);
  if (audit_export->parsed()) return pillar::app::RunAuditExport(audit);
  if (collective_cmd->parsed()) return pillar::app::RunBenchCollective(collective_cmd->remaining());
  if (health_cmd->parsed()) return pillar::app::RunHealth(health);
  return 2;
}
