// Kubeflow PyTorchJob -> TrainJob on manifests of the shapes Kubeflow's examples
// and production jobs have; the launcher stripping on its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainjob/launcher.h"
#include "trainjob/testing/test_files.h"
#include "trainjob/trainjob.h"

namespace bulwark::trainjob {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kTestdata;

std::string AllNotes(const LoadedManifest& m) {
  std::string s;
  for (const std::string& n : m.notes) s += n + "\n";
  return s;
}

Result<LoadedManifest> Convert(const std::string& file, Target target = Target::kKubernetes) {
  return LoadManifest(kTestdata + "/" + file, target);
}

TEST(PyTorchJobTest, ClassicMasterWorkerMnist) {
  auto m = Convert("pytorchjob-mnist.yaml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->kind, ManifestKind::kPyTorchJob);
  const TrainJob& t = m->job;
  EXPECT_EQ(t.name, "pytorch-dist-mnist-nccl");
  EXPECT_EQ(t.ns, "kubeflow");
  EXPECT_EQ(t.job.nodes, 4);
  EXPECT_EQ(t.job.procs_per_node, 1);
  EXPECT_EQ(t.job.command, (std::vector<std::string>{"python", "/opt/mnist/src/mnist.py"}));
  EXPECT_EQ(t.job.args, (std::vector<std::string>{"--backend", "nccl"}));
  EXPECT_EQ(t.pod.image, "kubeflow/pytorch-dist-mnist:latest");
  EXPECT_EQ(t.pod.gpus_per_node, 1);
  EXPECT_EQ(t.pod.gpu_resource, "nvidia.com/gpu");
  const std::string notes = AllNotes(*m);
  EXPECT_THAT(notes, HasSubstr("nodes: 4 = Master.replicas 1, Worker.replicas 3"));
  EXPECT_THAT(notes, HasSubstr("procsPerNode: 1 (from the container's GPU limit)"));
  EXPECT_THAT(notes, HasSubstr("Master.restartPolicy OnFailure dropped: Bulwark restarts"));
  EXPECT_THAT(notes, HasSubstr("Worker.template: ignored"));
  EXPECT_THAT(notes, HasSubstr("bulwark-agent"));
}

TEST(PyTorchJobTest, ElasticEchoLosesItsLauncherAndElasticity) {
  auto m = Convert("pytorchjob-elastic.yaml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const TrainJob& t = m->job;
  EXPECT_EQ(t.ns, "default");
  EXPECT_EQ(t.job.nodes, 2);
  EXPECT_EQ(t.job.command, (std::vector<std::string>{"python", "./echo.py"}));
  EXPECT_TRUE(t.job.args.empty());
  EXPECT_EQ(t.job.env.at("LOGLEVEL"), "DEBUG");
  EXPECT_EQ(t.job.fault_policy.restart_budget, 100);
  const std::string notes = AllNotes(*m);
  EXPECT_THAT(notes, HasSubstr("command: python -m torch.distributed.run and its flags "
                               "(--rdzv_backend=c10d) removed"));
  EXPECT_THAT(notes, HasSubstr("elasticPolicy.maxRestarts 100 -> faultPolicy.restartBudget"));
  EXPECT_THAT(notes, HasSubstr("procsPerNode: 1 (the default: no nprocPerNode"));
  EXPECT_THAT(notes, HasSubstr("elasticPolicy: rdzvBackend, minReplicas, maxReplicas dropped"));
}

TEST(PyTorchJobTest, ProductionTorchrunJobMapsEveryPart) {
  auto m = Convert("pytorchjob-llm.yaml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const TrainJob& t = m->job;
  EXPECT_EQ(t.name, "llama-ft");
  EXPECT_EQ(t.labels.at("team"), "research");
  EXPECT_EQ(t.job.nodes, 4);
  EXPECT_EQ(t.job.procs_per_node, 8);
  EXPECT_EQ(t.job.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(t.job.args, (std::vector<std::string>{"--config", "/etc/train/config.yaml", "--data",
                                                  "/datasets/pile"}));
  EXPECT_EQ(t.job.workdir, "/workspace");
  EXPECT_EQ(t.job.env.size(), 1u);
  EXPECT_EQ(t.job.env.at("NCCL_DEBUG"), "WARN");
  EXPECT_EQ(t.job.fault_policy.restart_budget, 6);
  EXPECT_EQ(t.job.checkpoint.dir, "/bulwark/shared/ml/llama-ft");
  EXPECT_EQ(t.scheduling.gang, GangMode::kKueue);
  EXPECT_EQ(t.scheduling.kueue_queue, "team-a");
  EXPECT_EQ(t.scheduling.queue, "research");
  const PodOptions& p = t.pod;
  EXPECT_EQ(p.image, "ghcr.io/acme/llama-train:2.3");
  EXPECT_EQ(p.gpus_per_node, 8);
  EXPECT_EQ(p.cpu, "96");
  EXPECT_EQ(p.memory, "1000Gi");
  EXPECT_EQ(p.shm_size, "128Gi");
  EXPECT_EQ(p.service_account_name, "trainer");
  EXPECT_EQ(p.priority_class_name, "high-priority");
  EXPECT_EQ(p.node_selector.at("cloud.google.com/gke-accelerator"), "nvidia-h100-80gb");
  EXPECT_EQ(p.tolerations.size(), 1u);
  EXPECT_EQ(p.data_volume["persistentVolumeClaim"]["claimName"], "pile-ro");
  EXPECT_EQ(p.shared_checkpoint_claim, "ckpt-rwx");
  EXPECT_EQ(p.config_map, "llama-config");

  const std::string notes = AllNotes(*m);
  EXPECT_THAT(notes, HasSubstr("torchrun and its flags (--nnodes=4, --nproc_per_node=8, "
                               "--rdzv_backend c10d, --max_restarts=3) removed"));
  EXPECT_THAT(notes, HasSubstr("procsPerNode: 8 (from spec.nprocPerNode)"));
  EXPECT_THAT(notes, HasSubstr("env.HF_TOKEN dropped: valueFrom"));
  EXPECT_THAT(notes, HasSubstr("env.WORLD_SIZE dropped: the agent sets it"));
  EXPECT_THAT(notes, HasSubstr("limits: rdma/hca dropped"));
  EXPECT_THAT(notes, HasSubstr("ports dropped"));
  EXPECT_THAT(notes, HasSubstr("volume datasets -> pod.dataVolume, mounted read-only at /data "
                               "(was /datasets): update paths in args"));
  EXPECT_THAT(notes, HasSubstr("volume ckpt at /checkpoints -> pod.sharedCheckpointClaim"));
  EXPECT_THAT(notes, HasSubstr("volume config (configMap) -> pod.configMap"));
  EXPECT_THAT(notes, HasSubstr("volume dshm at /dev/shm -> pod.shmSize"));
  EXPECT_THAT(notes, HasSubstr("runPolicy.backoffLimit 6 -> faultPolicy.restartBudget"));
  EXPECT_THAT(notes, HasSubstr("runPolicy.cleanPodPolicy dropped"));
  EXPECT_THAT(notes, HasSubstr("minAvailable dropped"));
  EXPECT_THAT(notes, HasSubstr("priorityClass -> pod.priorityClassName"));
  EXPECT_THAT(notes, HasSubstr("label kueue.x-k8s.io/queue-name -> scheduling.gang: kueue"));
}

TEST(PyTorchJobTest, LocalTargetDropsTheImagesWorkingDirectory) {
  auto m = Convert("pytorchjob-llm.yaml", Target::kLocal);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->job.job.workdir, kTestdata);
  EXPECT_THAT(AllNotes(*m), HasSubstr("workingDir /workspace dropped"));
}

// Kubeflow's quick-start: no command, so the image's ENTRYPOINT + CMD run.
TEST(PyTorchJobTest, QuickStartWithoutCommandTakesItFromTheImage) {
  for (Target target : {Target::kKubernetes, Target::kLocal}) {
    auto m = Convert("pytorchjob-quickstart.yaml", target);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const TrainJob& t = m->job;
    EXPECT_EQ(t.job.nodes, 4);
    EXPECT_TRUE(t.job.command.empty());
    EXPECT_TRUE(t.job.args.empty());
    EXPECT_EQ(t.pod.image, "pytorch/pytorch:latest");
    EXPECT_THAT(AllNotes(*m), HasSubstr("containers[0].command: not set: the command will be "
                                        "the image's ENTRYPOINT + CMD"));
    // The TrainJob it converts to leaves command out, and parses again.
    const Json obj = ToObject(t);
    EXPECT_FALSE(obj["spec"].contains("command"));
    if (target == Target::kKubernetes) {
      auto back = TrainJobFromObject(obj);
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_TRUE(back->job.command.empty());
    }
  }
}

TEST(PyTorchJobTest, ArgsWithoutCommandReplaceTheImagesCmd) {
  const std::string text =
      "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\nspec:\n"
      "  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n"
      "        spec:\n          imagePullSecrets: [{name: regcred}]\n          containers:\n"
      "          - {name: pytorch, image: reg.example/t:1, args: [train.py, --lr, '0.1']}\n";
  auto m = ParseManifest(text, "p.yaml", "/j", Target::kKubernetes);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->job.job.command.empty());
  EXPECT_EQ(m->job.job.args, (std::vector<std::string>{"train.py", "--lr", "0.1"}));
  EXPECT_EQ(m->job.pod.image_pull_secrets, (std::vector<std::string>{"regcred"}));
  EXPECT_THAT(AllNotes(*m), HasSubstr("ENTRYPOINT + args (which replace CMD)"));

  registry::ImageConfig img;
  img.image = "reg.example/t:1";
  img.manifest_digest = "sha256:abc";
  img.entrypoint = {"python3"};
  img.cmd = {"serve.py"};
  img.working_dir = "/workspace";
  img.env = {"PATH=/opt/bin:/usr/bin", "RANK=9", "HF_HOME=/cache"};
  TrainJob t = m->job;
  t.job.env["HF_HOME"] = "/mine";
  auto line = ApplyImageConfig(img, Target::kKubernetes, &t);
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_EQ(*line,
            "command from image reg.example/t:1 (sha256:abc): "
            "[\"python3\", \"train.py\", \"--lr\", \"0.1\"]");
  EXPECT_EQ(t.job.command, (std::vector<std::string>{"python3"}));
  EXPECT_EQ(t.job.args, (std::vector<std::string>{"train.py", "--lr", "0.1"}));
  EXPECT_EQ(t.job.workdir, "/workspace");
  EXPECT_EQ(t.job.env.at("PATH"), "/opt/bin:/usr/bin");
  EXPECT_EQ(t.job.env.at("HF_HOME"), "/mine");  // the spec wins
  EXPECT_FALSE(t.job.env.contains("RANK"));     // the agent sets it
  // Applied once: a job with a command is left alone.
  EXPECT_EQ(*ApplyImageConfig(img, Target::kKubernetes, &t), "");

  // The local backend takes the command only.
  TrainJob local = m->job;
  local.job.workdir = "/j";
  ASSERT_TRUE(ApplyImageConfig(img, Target::kLocal, &local).ok());
  EXPECT_EQ(local.job.workdir, "/j");
  EXPECT_FALSE(local.job.env.contains("PATH"));

  // A torchrun ENTRYPOINT loses its launcher as a PyTorchJob's command does.
  TrainJob tr = m->job;
  tr.job.args.clear();
  img.entrypoint = {"torchrun", "--nproc_per_node=8"};
  img.cmd = {"train.py", "--steps", "10"};
  line = ApplyImageConfig(img, Target::kKubernetes, &tr);
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_THAT(*line, HasSubstr("torchrun and its flags removed"));
  EXPECT_EQ(tr.job.args, (std::vector<std::string>{"--steps", "10"}));

  // Neither ENTRYPOINT nor CMD: the one refusal left.
  TrainJob none = m->job;
  none.job.args.clear();
  img.entrypoint.clear();
  img.cmd.clear();
  auto refused = ApplyImageConfig(img, Target::kKubernetes, &none);
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("neither ENTRYPOINT nor CMD"), HasSubstr("set command")));
}

TEST(PyTorchJobTest, WhatCannotBeConvertedIsAnErrorWithLineAndFix) {
  const std::string head = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\n";
  auto chief = ParseManifest(head +
                                 "spec:\n  pytorchReplicaSpecs:\n    Chief: {replicas: 1}\n    "
                                 "Worker:\n      replicas: x\n",
                             "p.yaml", "/j", Target::kKubernetes);
  ASSERT_FALSE(chief.ok());
  EXPECT_THAT(chief.status().message(),
              AllOf(HasSubstr("p.yaml:6: spec.pytorchReplicaSpecs.Chief: unknown replica type"),
                    HasSubstr("p.yaml:8: spec.pytorchReplicaSpecs.Worker.replicas: must be an "
                              "integer")));

  auto shell = ParseManifest(
      head +
          "spec:\n  pytorchReplicaSpecs:\n    Worker:\n      template:\n        spec:\n          "
          "containers:\n            - name: pytorch\n              image: i\n              "
          "command: [sh, -c, \"cd /w && torchrun --nproc_per_node=8 t.py\"]\n",
      "p.yaml", "/j", Target::kKubernetes);
  ASSERT_FALSE(shell.ok());
  EXPECT_THAT(shell.status().message(),
              AllOf(HasSubstr("p.yaml:12:"), HasSubstr("inside a shell script"),
                    HasSubstr("call the training script directly")));

  auto empty = ParseManifest(head + "spec: {}\n", "p.yaml", "/j", Target::kKubernetes);
  EXPECT_THAT(empty.status().message(), HasSubstr("spec.pytorchReplicaSpecs: required"));
  auto wrong = ParseManifest("apiVersion: kubeflow.org/v2\nkind: PyTorchJob\n", "p.yaml", "/j",
                             Target::kKubernetes);
  EXPECT_THAT(wrong.status().message(),
              AllOf(HasSubstr("p.yaml:1: apiVersion: must be kubeflow.org/v1"),
                    HasSubstr("metadata.name: required")));
}

TEST(LauncherTest, TorchrunFlagsAreRemoved) {
  auto l = StripLauncher({"torchrun"}, {"--nnodes", "2", "--nproc-per-node=4", "--standalone",
                                        "train.py", "--lr", "3e-4"});
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_THAT(l->argv, ElementsAre("python", "train.py", "--lr", "3e-4"));
  EXPECT_EQ(l->program_args, 2u);
  EXPECT_EQ(l->launcher, "torchrun");
  EXPECT_THAT(l->dropped_flags, ElementsAre("--nnodes 2", "--nproc-per-node=4", "--standalone"));
  EXPECT_EQ(l->nproc_per_node, 4);
}

TEST(LauncherTest, PythonModuleFormsAndModes) {
  auto run = StripLauncher({"/usr/bin/python3", "-m", "torch.distributed.launch"},
                           {"--nproc_per_node", "gpu", "--use_env", "t.py"});
  ASSERT_TRUE(run.ok());
  EXPECT_THAT(run->argv, ElementsAre("/usr/bin/python3", "t.py"));
  EXPECT_EQ(run->nproc_per_node, 0);  // "gpu": not a number
  auto module = StripLauncher({"torchrun", "-m", "pkg.train", "--x"}, {});
  ASSERT_TRUE(module.ok());
  EXPECT_THAT(module->argv, ElementsAre("python", "-m", "pkg.train", "--x"));
  EXPECT_EQ(module->program_args, 3u);
  auto exe = StripLauncher({"torchrun", "--no-python", "./run.sh", "a"}, {});
  ASSERT_TRUE(exe.ok());
  EXPECT_THAT(exe->argv, ElementsAre("./run.sh", "a"));
  auto shell = StripLauncher({"/bin/bash", "-c"}, {"torchrun --nproc_per_node 2 'my script.py' x"});
  ASSERT_TRUE(shell.ok()) << shell.status().message();
  EXPECT_THAT(shell->argv, ElementsAre("python", "my script.py", "x"));
  EXPECT_EQ(shell->launcher, "/bin/bash -c torchrun");
}

TEST(LauncherTest, PlainCommandsPassAndBrokenLaunchersFail) {
  auto plain = StripLauncher({"python", "train.py"}, {"--a"});
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(plain->argv, ElementsAre("python", "train.py", "--a"));
  EXPECT_EQ(plain->program_args, 2u);
  EXPECT_TRUE(plain->launcher.empty());
  auto sh = StripLauncher({"sh", "-c", "python t.py > log"}, {});  // no launcher: untouched
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(sh->argv.size(), 3u);
  EXPECT_FALSE(StripLauncher({"torchrun", "--nnodes", "2"}, {}).ok());
  EXPECT_FALSE(StripLauncher({"sh", "-c", "torchrun t.py; echo done"}, {}).ok());
  EXPECT_FALSE(StripLauncher({"sh", "-c", "torchrun $SCRIPT"}, {}).ok());
}

}  // namespace
}  // namespace bulwark::trainjob
