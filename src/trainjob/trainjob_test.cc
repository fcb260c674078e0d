// Parsing TrainJobs: every field, defaults, both targets, errors with line and fix,
// the API object path, round trips, and equivalence with a plain job spec.
#include "trainjob/trainjob.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "trainjob/testing/test_files.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using testing::kTestdata;

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

Result<TrainJob> ParseK8s(const std::string& yaml) {
  return ParseTrainJob(yaml, "tj.yaml", "/jobs", Target::kKubernetes);
}

// The TrainJob around `spec_body` (indented by the caller under "spec:").
std::string Manifest(const std::string& spec_body) {
  return "apiVersion: bulwark.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: demo, namespace: "
         "ml}\nspec:\n" +
         spec_body;
}

// JsonToYaml keeps every key and value and marks strings as quoted, so that YamlToJson
// gives the same JSON back (a string "2" stays a string).
TEST(TrainJobTest, JsonToYamlRoundTripsThroughYamlToJson) {
  const Json j = Json::parse(R"({"a": {"b": 2, "c": "2", "d": [true, null, 1.5, "x"]},
                                 "e": {}, "f": [], "g": "", "h": {"i": {"j": "k"}}})");
  const YAML::Node y = JsonToYaml(j);
  ASSERT_TRUE(y.IsMap());
  EXPECT_EQ(y.size(), 5u);
  EXPECT_EQ(y["a"]["b"].as<int>(), 2);
  EXPECT_EQ(y["a"]["c"].Tag(), "!");
  EXPECT_EQ(y["h"]["i"]["j"].as<std::string>(), "k");
  EXPECT_EQ(YamlToJson(y), j);
  Json wide = Json::object();
  for (int i = 0; i < 300; ++i) wide["k" + std::to_string(i)] = i;
  EXPECT_EQ(YamlToJson(JsonToYaml(wide)), wide);
}

TEST(TrainJobTest, FullManifestSetsEveryField) {
  auto r = ParseK8s(testing::ReadTestFile(kTestdata + "/trainjob-full.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TrainJob& t = *r;
  EXPECT_EQ(t.name, "gpt-char");
  EXPECT_EQ(t.ns, "ml");
  EXPECT_EQ(t.labels.at("team"), "research");
  EXPECT_EQ(t.job.name, "gpt-char");
  EXPECT_EQ(t.job.nodes, 2);
  EXPECT_EQ(t.job.procs_per_node, 8);
  EXPECT_EQ(t.job.command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(t.job.args, (std::vector<std::string>{"--steps", "600"}));
  EXPECT_EQ(t.job.env.at("RUN_NAME"), "demo run");
  EXPECT_EQ(t.job.workdir, "/workspace");
  EXPECT_TRUE(t.job.checkpoint.interval_auto);
  EXPECT_EQ(t.job.checkpoint.keep, 5);
  EXPECT_EQ(t.job.checkpoint.golden_every, 1000);
  EXPECT_EQ(t.job.checkpoint.dir, "/bulwark/shared/ml/gpt-char");  // sharedCheckpointClaim set
  EXPECT_EQ(t.job.fault_policy.restart_budget, 20);
  EXPECT_TRUE(t.job.fault_policy.spare_nodes_auto);
  EXPECT_EQ(t.job.fault_policy.heartbeat_interval_seconds, 2);
  EXPECT_EQ(t.job.fault_policy.heartbeat_misses, 4);
  ASSERT_EQ(t.job.chaos.size(), 2u);
  EXPECT_EQ(t.job.chaos[0].rank, 9);
  EXPECT_EQ(t.job.chaos[1].node, 1);
  EXPECT_EQ(t.scheduling.queue, "team-a");
  EXPECT_EQ(t.scheduling.priority, 10);
  EXPECT_EQ(t.scheduling.tier, sched::Tier::kResearch);
  EXPECT_EQ(t.scheduling.topology, sched::TopologyLevel::kRack);
  EXPECT_EQ(t.scheduling.gpu_type, "a100");
  EXPECT_EQ(t.scheduling.gang, GangMode::kVolcano);
  EXPECT_TRUE(t.suspend);
  const PodOptions& p = t.pod;
  EXPECT_EQ(p.image, "ghcr.io/acme/train:1.0");
  EXPECT_EQ(p.image_pull_policy, "Always");
  EXPECT_EQ(p.gpus_per_node, 8);
  EXPECT_EQ(p.gpu_resource, "nvidia.com/gpu");
  EXPECT_EQ(p.cpu, "32");
  EXPECT_EQ(p.memory, "512Gi");
  EXPECT_EQ(p.shm_size, "64Gi");
  EXPECT_EQ(p.node_selector.at("cloud.google.com/gke-nodepool"), "a100-pool");
  ASSERT_EQ(p.tolerations.size(), 1u);
  EXPECT_EQ(p.tolerations[0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(p.service_account_name, "trainer");
  EXPECT_EQ(p.priority_class_name, "high");
  EXPECT_EQ(p.data_volume["persistentVolumeClaim"]["claimName"], "datasets");
  EXPECT_EQ(p.local_checkpoint_path, "/mnt/nvme/bulwark");
  EXPECT_EQ(p.shared_checkpoint_claim, "ckpt-rwx");
  EXPECT_EQ(p.config_map, "train-config");
}

TEST(TrainJobTest, MinimalManifestTakesTheDefaults) {
  auto r = ParseK8s(testing::ReadTestFile(kTestdata + "/trainjob-minimal.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ns, "default");
  EXPECT_EQ(r->job.nodes, 1);
  EXPECT_EQ(r->job.workdir, "");  // the image's working directory
  EXPECT_EQ(r->job.checkpoint.dir, "/bulwark/local/default/hello");
  EXPECT_EQ(r->scheduling.queue, "default");
  EXPECT_EQ(r->scheduling.tier, sched::Tier::kProduction);
  EXPECT_EQ(r->scheduling.topology, sched::TopologyLevel::kAny);
  EXPECT_EQ(r->scheduling.gpu_type, "h100");
  EXPECT_EQ(r->scheduling.gang, GangMode::kBulwark);
  EXPECT_FALSE(r->suspend);
  EXPECT_EQ(r->pod.image_pull_policy, "IfNotPresent");
  EXPECT_EQ(r->pod.gpus_per_node, 1);  // procsPerNode
  EXPECT_EQ(r->pod.gpu_resource, "nvidia.com/gpu");
  EXPECT_TRUE(r->pod.data_volume.is_null());
}

// Found by fuzz/fuzz_trainjob: pod.gpusPerNode defaults to procsPerNode, and the default
// skipped the 0-64 check an explicit value gets, so a TrainJob the parser took became,
// written out by ToObject (the operator's status and replays), one it refuses.
TEST(TrainJobTest, TheDefaultGpusPerNodeIsCheckedLikeAGivenOne) {
  auto r =
      ParseK8s(Manifest("  command: [python3, t.py]\n  procsPerNode: 82\n  pod: {image: i}\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("tj.yaml:6: spec.pod.gpusPerNode: is not set, so each node's pod would "
                        "request procsPerNode GPUs, more than 64 (got 82 (procsPerNode)); set "
                        "pod.gpusPerNode to the GPUs each node's pod requests (0 for a CPU job)"));
  auto cpu = ParseK8s(Manifest(
      "  command: [python3, t.py]\n  procsPerNode: 82\n  pod: {image: i, gpusPerNode: 0}\n"));
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto back = TrainJobFromObject(ToObject(*cpu));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->pod.gpus_per_node, 0);
  // The local backend has no pods: any procsPerNode runs.
  EXPECT_TRUE(ParseTrainJob(Manifest("  command: [python3, t.py]\n  procsPerNode: 82\n"), "tj.yaml",
                            "/jobs", Target::kLocal)
                  .ok());
}

TEST(TrainJobTest, KubernetesPathsStayInsideTheContainer) {
  auto r = ParseK8s(Manifest(
      "  command: [python3, t.py]\n  workdir: src\n  checkpoint: {dir: ck, sharedDir: sh}\n  pod: "
      "{image: i}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->job.workdir, "src");  // relative to the image's working directory
  EXPECT_EQ(r->job.checkpoint.dir, "src/ck");
  EXPECT_EQ(r->job.checkpoint.shared_dir, "src/sh");
  auto abs = ParseK8s(Manifest(
      "  command: [python3, t.py]\n  workdir: /w\n  checkpoint: {dir: ck}\n  pod: {image: i}\n"));
  ASSERT_TRUE(abs.ok()) << abs.status().message();
  EXPECT_EQ(abs->job.checkpoint.dir, "/w/ck");
}

TEST(TrainJobTest, TheOperatorRefusesElasticJobsTheLocalBackendRuns) {
  const std::string body =
      "  command: [python3, t.py]\n  nodes: 2\n  elastic: {minNodes: 1}\n  pod: {image: i}\n";
  auto k8s = ParseK8s(Manifest(body));
  ASSERT_FALSE(k8s.ok());
  EXPECT_THAT(k8s.status().message(),
              HasSubstr("spec.elastic: the Kubernetes operator does not resize jobs yet"));
  EXPECT_THAT(k8s.status().message(), HasSubstr("remove spec.elastic"));
  auto local = ParseTrainJob(Manifest(body), "tj.yaml", "/jobs", Target::kLocal);
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_EQ(local->job.elastic.min_nodes, 1);
}

TEST(TrainJobTest, ReplayOfNamesAnotherTrainJobsIncidentOnKubernetesOnly) {
  const std::string base = "  command: [python3, t.py]\n  pod: {image: i}\n";
  auto ok = ParseK8s(Manifest(base + "  replayOf: {trainJob: gpt, incident: 2}\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_TRUE(ok->replay_of.has_value());
  EXPECT_EQ(ok->replay_of->train_job, "gpt");
  EXPECT_EQ(ok->replay_of->incident, 2);
  EXPECT_FALSE(ok->replay_of->allow_code_change);
  EXPECT_FALSE(ParseK8s(Manifest(base))->replay_of.has_value());
  auto pinned =
      ParseK8s(Manifest("  command: [python3, t.py]\n  nodes: 2\n  pod: {image: i}\n"
                        "  replayOf: {trainJob: gpt, incident: 1, nodes: [a, b]}\n"));
  ASSERT_TRUE(pinned.ok()) << pinned.status().message();
  EXPECT_EQ(pinned->replay_of->nodes, (std::vector<std::string>{"a", "b"}));
  // Each mistake by its field, with the fix.
  for (const auto& [body, want] : std::vector<std::pair<std::string, std::string>>{
           {"  replayOf: {trainJob: gpt}\n", "spec.replayOf.incident"},
           {"  replayOf: {trainJob: gpt, incident: 0}\n", "spec.replayOf.incident"},
           {"  replayOf: {incident: 1}\n", "spec.replayOf.trainJob"},
           {"  replayOf: {trainJob: gpt, incident: 1, allowCodeChange: maybe}\n",
            "spec.replayOf.allowCodeChange"},
           {"  replayOf: {trainJob: gpt, incident: 1, nodes: [a, b]}\n",
            "spec.replayOf.nodes: names 2 node(s) for a job of 1"},
           {"  replayOf: {trainJob: gpt, incident: 1, nodes: [a, a]}\n",
            "spec.replayOf.nodes: names a node twice"},
           {"  replayOf: {trainJob: gpt, incident: 1, nodes: a}\n", "spec.replayOf.nodes"},
           {"  replayOf: {trainJob: demo, incident: 1}\n",
            "spec.replayOf.trainJob: names this TrainJob itself"}}) {
    auto r = ParseK8s(Manifest(base + body));
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_THAT(r.status().message(), HasSubstr(want)) << body;
  }
  auto local = ParseTrainJob(Manifest(base + "  replayOf: {trainJob: gpt, incident: 2}\n"),
                             "tj.yaml", "/jobs", Target::kLocal);
  ASSERT_FALSE(local.ok());
  EXPECT_THAT(local.status().message(),
              HasSubstr("spec.replayOf: is a replay run by the Kubernetes operator"));
  EXPECT_THAT(local.status().message(), HasSubstr("`bulwark replay JOB N`"));
}

TEST(TrainJobTest, MultiNodeCheckpointsNeedASharedVolumeOnKubernetes) {
  const std::string base = "  command: [python3, t.py]\n  nodes: 2\n";
  auto bad = ParseK8s(Manifest(base + "  checkpoint: {intervalSteps: 10}\n  pod: {image: i}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("spec.pod.sharedCheckpointClaim: a job on 2 nodes that checkpoints needs "
                        "a shared volume"));
  EXPECT_THAT(bad.status().message(), HasSubstr("ReadWriteMany"));
  // A shared claim, an explicit directory, one node, or no checkpoints: fine.
  for (const std::string& ok :
       {base + "  checkpoint: {intervalSteps: 10}\n  pod: {image: i, sharedCheckpointClaim: c}\n",
        base + "  checkpoint: {intervalSteps: 10, dir: /mnt/nfs/ck}\n  pod: {image: i}\n",
        std::string("  command: [python3, t.py]\n  checkpoint: {intervalSteps: 10}\n"
                    "  pod: {image: i}\n"),
        base + "  pod: {image: i}\n"}) {
    auto r = ParseK8s(Manifest(ok));
    EXPECT_TRUE(r.ok()) << ok << "\n" << r.status().message();
  }
  // An explicit directory on the node-local mount is node-local all the same, and the
  // shared mount exists only with a claim.
  auto local_dir = ParseK8s(Manifest(
      base + "  checkpoint: {intervalSteps: 10, dir: /bulwark/local/ck}\n  pod: {image: i}\n"));
  EXPECT_THAT(local_dir.status().message(),
              HasSubstr("needs a shared volume for its checkpoints (got checkpoint.dir "
                        "/bulwark/local/ck, node-local)"));
  auto unmounted = ParseK8s(Manifest(
      base + "  checkpoint: {intervalSteps: 10, dir: /bulwark/shared/ck}\n  pod: {image: i}\n"));
  EXPECT_THAT(unmounted.status().message(),
              HasSubstr("spec.checkpoint.dir: is under /bulwark/shared, which only "
                        "pod.sharedCheckpointClaim mounts"));
  // The local backend has one file system: no such rule there.
  EXPECT_TRUE(ParseTrainJob(Manifest(base + "  checkpoint: {intervalSteps: 10}\n"), "tj.yaml",
                            "/jobs", Target::kLocal)
                  .ok());
}

// Found by fuzz/fuzz_pytorchjob: a multi-line apiVersion or kind was quoted verbatim,
// which split the error over several lines.
TEST(TrainJobTest, UnknownKindIsQuotedOnOneLine) {
  for (const char* text : {"apiVersion: \"kubeflow.org/v1\\nfoo: bar\"\nkind: X\n",
                           "apiVersion: \"trainer.kubeflow.org/v1\\n\"\nkind: TrainJob\n"}) {
    auto r = ParseManifest(text, "tj.yaml", "/jobs", Target::kLocal);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("\\x0a"));
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  }
}

TEST(TrainJobTest, LocalTargetResolvesLikeAJobSpecAndSaysWhatItIgnores) {
  const std::string text = testing::ReadTestFile(kTestdata + "/trainjob-full.yaml");
  auto r = ParseManifest(text, "tj.yaml", "/jobs/a", Target::kLocal);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->kind, ManifestKind::kTrainJob);
  EXPECT_EQ(r->job.job.workdir, "/workspace");
  EXPECT_EQ(r->job.job.checkpoint.dir, "/workspace/checkpoints/gpt-char");
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_THAT(r->notes[0], AllOf(HasSubstr("spec.scheduling, spec.suspend, spec.pod"),
                                 HasSubstr("local backend ignores them")));

  // No image needed locally; relative paths against the manifest's directory.
  auto local =
      ParseManifest(Manifest("  command: [python3, t.py]\n"), "tj.yaml", "/jobs/a", Target::kLocal);
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_EQ(local->job.job.workdir, "/jobs/a");
  EXPECT_EQ(local->job.job.checkpoint.dir, "/jobs/a/checkpoints/demo");
  EXPECT_TRUE(local->notes.empty());
}

// The same job fields give the same JobSpec as a plain job spec: one parser.
TEST(TrainJobTest, JobFieldsEqualAPlainJobSpec) {
  const std::string fields =
      "nodes: 3\nprocsPerNode: 2\ncommand: [/usr/bin/python3, train.py]\nargs: [--steps, "
      "\"600\"]\nenv: {OMP_NUM_THREADS: 1}\nworkdir: run\ncheckpoint: {dir: ck, intervalSteps: "
      "20, keep: 2, memorySlots: 0, objectStore: \"s3://b/p\"}\nfaultPolicy: {restartBudget: 3, "
      "backoff: {baseSeconds: 2, capSeconds: 8}, hangTimeout: {floorSeconds: 40}, spareNodes: 1, "
      "stopGraceSeconds: 7}\nchaos:\n  - {kind: hang_rank, atStep: 50, rank: 5}\n";
  auto plain = ParseJobSpec("name: demo\n" + fields, "job.yaml", "/jobs/a");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  std::string indented;
  for (const std::string& l : Lines(fields)) indented += "  " + l + "\n";
  auto tj = ParseManifest(Manifest(indented), "tj.yaml", "/jobs/a", Target::kLocal);
  ASSERT_TRUE(tj.ok()) << tj.status().message();
  TrainJob wrapped;
  wrapped.name = "demo";
  wrapped.ns = "ml";
  wrapped.job = *plain;
  wrapped.pod.gpus_per_node = plain->procs_per_node;
  EXPECT_EQ(ToObject(tj->job)["spec"], ToObject(wrapped)["spec"]);
  EXPECT_EQ(tj->job.job.workdir, "/jobs/a/run");
  EXPECT_EQ(tj->job.job.checkpoint.object_store, "s3://b/p");
}

TEST(TrainJobTest, JobFieldErrorsKeepTheSpecParsersMessagesUnderSpec) {
  auto r =
      ParseK8s(Manifest("  command: [python3]\n  checkpoint:\n    keep: 0\n  pod: {image: i}\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "tj.yaml:7: spec.checkpoint.keep: must be >= 1 (got 0); set checkpoint.keep to how "
            "many committed checkpoints to retain (an integer >= 1)");
}

TEST(TrainJobTest, EveryProblemIsReportedTogetherWithLineAndFix) {
  const std::string yaml =
      "apiVersion: bulwark.dev/v1\n"                                             // 1
      "kind: TrainJob\n"                                                         // 2
      "metadata: {name: 9lives, namespce: ml}\n"                                 // 3
      "spec:\n"                                                                  // 4
      "  nodes: 0\n"                                                             // 5
      "  command: [python3]\n"                                                   // 6
      "  scheduling:\n"                                                          // 7
      "    tier: prod\n"                                                         // 8
      "    gang: kueue\n"                                                        // 9
      "  pod:\n"                                                                 // 10
      "    imagePullPolicy: Sometimes\n"                                         // 11
      "    cpu: 0.5.1\n"                                                         // 12
      "    tolerations: [{key: bulwark.dev/quarantined}, {operator: Exists}]\n"  // 13
      "    dataVolume: {emptyDir: {}, hostPath: {path: /x}}\n"                   // 14
      "    localCheckpointPath: nvme\n"                                          // 15
      "    gpuResorce: nvidia.com/gpu\n";                                        // 16
  auto r = ParseK8s(yaml);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  static const std::regex kForm(R"(^tj\.yaml:[0-9]+: .+: .+ \(got .*\); .+$)");
  for (const std::string& l : Lines(m)) {
    EXPECT_TRUE(std::regex_match(l, kForm)) << "malformed: " << l;
  }
  EXPECT_THAT(m, HasSubstr("tj.yaml:1: apiVersion: must be one of bulwark.dev/v1alpha1"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:3: metadata.name: must be a DNS-1035 label"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:3: metadata.namespce: unknown field (got namespce); did you "
                           "mean \"namespace\"?"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:5: spec.nodes: must be >= 1 (got 0)"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:8: spec.scheduling.tier: must be one of production, research "
                           "(got prod); set scheduling.tier to production"));
  EXPECT_THAT(m, HasSubstr("spec.scheduling.kueueQueue: required when gang is kueue"));
  EXPECT_THAT(m, HasSubstr("spec.pod.image: required field is missing"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:11: spec.pod.imagePullPolicy: must be one of Always, "
                           "IfNotPresent, Never (got Sometimes)"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:12: spec.pod.cpu: must be a Kubernetes quantity"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:13: spec.pod.tolerations[0]: tolerates Bulwark's quarantine "
                           "taint"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:13: spec.pod.tolerations[1]: tolerates every taint"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:14: spec.pod.dataVolume: must hold exactly one volume source"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:15: spec.pod.localCheckpointPath: must be an absolute path"));
  EXPECT_THAT(m, HasSubstr("tj.yaml:16: spec.pod.gpuResorce: unknown field (got gpuResorce); did "
                           "you mean \"gpuResource\"?"));
  EXPECT_GE(Lines(m).size(), 14u);
}

TEST(TrainJobTest, DocumentLevelProblems) {
  EXPECT_THAT(ParseK8s("").status().message(), HasSubstr("a TrainJob must be a mapping"));
  EXPECT_THAT(ParseK8s("- a\n- b\n").status().message(), HasSubstr("must be a mapping"));
  EXPECT_THAT(ParseK8s("apiVersion: bulwark.dev/v1alpha1\nkind: TrainJob\n").status().message(),
              AllOf(HasSubstr("metadata: required field is missing"),
                    HasSubstr("spec: required field is missing")));
  EXPECT_THAT(ParseK8s("a: [\n").status().message(), HasSubstr("(yaml syntax)"));
  EXPECT_THAT(
      ParseK8s(Manifest("  command: [x]\n  pod: {image: i}\n") + "---\nb: 1\n").status().message(),
      HasSubstr("single YAML document"));
  EXPECT_THAT(ParseK8s(std::string(2 << 20, '#')).status().message(), HasSubstr("too large"));
}

TEST(TrainJobTest, ObjectsFromTheApiRoundTripAndReportWithoutLines) {
  auto r = ParseK8s(testing::ReadTestFile(kTestdata + "/trainjob-full.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  r->uid = "6f1c1c6e-0d5f-4a38-9b5e-1f2f3a4b5c6d";
  r->generation = 3;
  r->resource_version = "4711";
  const Json obj = ToObject(*r);
  auto back = TrainJobFromObject(obj);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ToObject(*back), obj);
  EXPECT_EQ(back->uid, r->uid);
  EXPECT_EQ(back->generation, 3);
  auto from_json_text = ParseTrainJob(obj.dump(2), "tj.json", "", Target::kKubernetes);
  ASSERT_TRUE(from_json_text.ok()) << from_json_text.status().message();
  EXPECT_EQ(ToObject(*from_json_text), obj);

  Json bad = obj;
  bad["spec"]["nodes"] = "2";  // a string where the API wants an integer
  bad["spec"]["scheduling"]["topology"] = "region";
  bad["spec"]["suspend"] = "yes";
  bad["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z";  // API fields are accepted
  auto err = TrainJobFromObject(bad);
  ASSERT_FALSE(err.ok());
  const std::string& m = err.status().message();
  EXPECT_THAT(m, HasSubstr("trainjob ml/gpt-char: spec.nodes: must be an integer, not a quoted "
                           "string"));
  EXPECT_THAT(m, HasSubstr("trainjob ml/gpt-char: spec.scheduling.topology: must be one of any, "
                           "rack, block, zone (got \"region\")"));
  EXPECT_THAT(m, HasSubstr("spec.suspend: must be true or false"));
  EXPECT_THAT(m, Not(HasSubstr("creationTimestamp")));
  EXPECT_THAT(m, Not(HasSubstr("ml/gpt-char:1")));
}

TEST(TrainJobTest, ManifestKindsAreTold) {
  auto spec = ParseManifest("name: a\ncommand: [x]\n", "job.yaml", "/j", Target::kLocal);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->kind, ManifestKind::kJobSpec);
  EXPECT_EQ(spec->job.name, "a");
  EXPECT_EQ(spec->job.ns, "default");
  EXPECT_EQ(spec->job.job.checkpoint.dir, "/j/checkpoints/a");

  auto k8s = ParseManifest("name: a\ncommand: [x]\n", "job.yaml", "/j", Target::kKubernetes);
  ASSERT_TRUE(k8s.ok()) << k8s.status().message();
  EXPECT_EQ(k8s->job.job.workdir, "");
  EXPECT_EQ(k8s->job.job.checkpoint.dir, "/bulwark/local/default/a");
  EXPECT_THAT(k8s->notes.at(0), HasSubstr("no pod section"));
  EXPECT_EQ(k8s->notes.size(), 1u);
  auto with_slurm = ParseManifest("name: a\ncommand: [x]\nslurm: {partition: gpu}\n", "job.yaml",
                                  "/j", Target::kKubernetes);
  ASSERT_TRUE(with_slurm.ok()) << with_slurm.status().message();
  EXPECT_THAT(with_slurm->notes.back(), HasSubstr("job.yaml: slurm: ignored on Kubernetes"));

  // A job spec's name fit for this machine but not for a TrainJob's metadata.name (found by
  // fuzz_pytorchjob: it loaded, and the TrainJob rendered from it did not parse back).
  const std::string digit = "# a job\nname: 1hello\ncommand: [x]\n";
  EXPECT_TRUE(ParseManifest(digit, "job.yaml", "/j", Target::kLocal).ok());
  auto bad_name = ParseManifest(digit, "job.yaml", "/j", Target::kKubernetes);
  EXPECT_THAT(bad_name.status().message(),
              AllOf(HasSubstr("job.yaml:2: name: on Kubernetes the job's name is its TrainJob's "
                              "metadata.name, which must be a DNS-1035 label"),
                    HasSubstr("(got \"1hello\"); rename the job")));

  auto other = ParseManifest("apiVersion: batch/v1\nkind: Job\n", "job.yaml", "/j", Target::kLocal);
  EXPECT_THAT(other.status().message(),
              AllOf(HasSubstr("job.yaml:2: kind: not a manifest Bulwark runs (got batch/v1 Job)"),
                    HasSubstr("PyTorchJob")));
  // Kubeflow Trainer v2's TrainJob shares the kind: told apart by its group, with the map.
  auto kubeflow = ParseManifest(
      "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: t}\n"
      "spec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {image: img, numNodes: 2}\n",
      "tj.yaml", "/j", Target::kKubernetes);
  EXPECT_THAT(kubeflow.status().message(),
              AllOf(HasSubstr("tj.yaml:1: apiVersion: this is Kubeflow Trainer's TrainJob "
                              "(trainer.kubeflow.org/v1alpha1), not Bulwark's"),
                    HasSubstr("spec.trainer.image -> spec.pod.image"),
                    HasSubstr("spec.trainer.numNodes -> spec.nodes")));
  EXPECT_EQ(LoadManifest("/nonexistent/tj.yaml", Target::kLocal).status().code(), Code::kNotFound);
  auto loaded = LoadManifest(kTestdata + "/trainjob-minimal.yaml", Target::kKubernetes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->job.job.source_path, kTestdata + "/trainjob-minimal.yaml");
}

TEST(TrainJobTest, AnAliasBombInThePodSectionIsAnErrorNotGigabytes) {
  // 10^9 values once expanded: refused at the first 100000, with the field's line.
  std::string bomb = "      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    bomb += "      l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *l" : "*l") + std::to_string(i - 1);
    bomb += "]\n";
  }
  const std::string text =
      "apiVersion: bulwark.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: t}\nspec:\n"
      "  command: [python3, t.py]\n  pod:\n    image: img\n    dataVolume:\n"
      "      emptyDir: {}\n" +
      bomb + "    tolerations:\n      - {key: a, operator: Exists, extra: *l8}\n";
  auto r = ParseManifest(text, "tj.yaml", "/j", Target::kKubernetes);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("tj.yaml:9: spec.pod.dataVolume: expands to more than 100000 "
                              "values"),
                    HasSubstr("write the value out without YAML aliases")));
  // Depth too: 200 nested lists.
  const std::string deep =
      "apiVersion: bulwark.dev/v1alpha1\nkind: TrainJob\nmetadata: "
      "{name: t}\nspec:\n  command: [x]\n  pod: {image: i, dataVolume: "
      "{emptyDir: " +
      std::string(200, '[') + std::string(200, ']') + "}}\n";
  auto d = ParseManifest(deep, "deep.yaml", "/j", Target::kKubernetes);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("nests deeper than 100 levels"));
}

TEST(TrainJobTest, SchedRequestCarriesTheScheduling) {
  auto r = ParseK8s(testing::ReadTestFile(kTestdata + "/trainjob-full.yaml"));
  ASSERT_TRUE(r.ok());
  sched::JobRequest q = SchedRequest(*r, 2);
  EXPECT_EQ(q.id, "ml/gpt-char");
  EXPECT_EQ(q.queue, "team-a");
  EXPECT_EQ(q.priority, 10);
  EXPECT_EQ(q.nodes, 2);
  EXPECT_EQ(q.gpu_type, "a100");
  EXPECT_EQ(q.tier, sched::Tier::kResearch);
  EXPECT_EQ(q.required_level, sched::TopologyLevel::kRack);
  EXPECT_EQ(q.standby, 2);
  r->job.fault_policy.spare_nodes_auto = false;
  r->job.fault_policy.spare_nodes = 3;
  EXPECT_EQ(StandbyCount(r->job), 3);
  r->job.fault_policy.spare_nodes_auto = true;
  r->job.nodes = 1000;
  r->job.fault_policy.failures_per_node_day = 0.01;
  EXPECT_GE(StandbyCount(r->job), 1);
}

// Deterministic mutations of a valid manifest: parsing never crashes or throws, and
// every failure is a well-formed error.
TEST(TrainJobTest, MutatedManifestsNeverCrash) {
  const std::string base = testing::ReadTestFile(kTestdata + "/trainjob-full.yaml");
  const std::string alphabet = "{}[]:,-'\"#&*!|>%@` \n\tx0.";
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::string s = base;
    for (int k = 0; k < 1 + i % 4; ++k) {
      const size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          s.erase(pos, 1 + rng() % 8);
          break;
        default:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
      }
    }
    auto r = ParseManifest(s, "m.yaml", "/j", i % 2 ? Target::kLocal : Target::kKubernetes);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().message();
      EXPECT_THAT(r.status().message(), HasSubstr("m.yaml"));
    }
  }
}

TEST(YamlJsonTest, TypesFollowTheCoreSchemaAndEmitRoundTrips) {
  Json j = YamlToJson(YAML::Load(
      "a: 1\nb: \"1\"\nc: 1.5\nd: true\ne: ~\nf: [x, 'y']\ng: {h: -3}\ni: 0x1F\nj: \"\"\n"));
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"], "1");
  EXPECT_EQ(j["c"], 1.5);
  EXPECT_EQ(j["d"], true);
  EXPECT_TRUE(j["e"].is_null());
  EXPECT_EQ(j["f"], Json({"x", "y"}));
  EXPECT_EQ(j["g"]["h"], -3);
  EXPECT_EQ(j["i"], "0x1F");
  EXPECT_EQ(j["j"], "");
  Json strs = {{"n", "32"},          {"t", "true"},        {"e", ""}, {"z", "null"}, {"s", "a: b"},
               {"l", Json::array()}, {"m", Json::object()}};
  auto back = ParseYamlDocuments(EmitYaml({strs, j}), "x");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0], strs);
  EXPECT_EQ((*back)[1], j);
}

// Every document of a manifest is checked as a single spec is: an escape yaml-cpp
// decodes to a byte other than UTF-8 is refused with its line (found by fuzz_trainjob).
TEST(YamlJsonTest, AnEscapeThatDecodesToBytesOtherThanUtf8IsRefused) {
  auto r = ParseYamlDocuments("a: 1\n---\nb: \"x\\_y\"\n", "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("m.yaml:3: (encoding): this string decodes to bytes"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(ParseYamlDocuments("b: \"x\\u00a0y\"\n", "m.yaml").ok());
}

}  // namespace
}  // namespace bulwark::trainjob
