#include "cli/render_cmd.h"

#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "trainjob/manifest_input.h"
#include "trainjob/render.h"
#include "trainjob/trainjob.h"
#include "trainjob/yaml_json.h"

namespace bulwark::cli {
namespace {

int Usage(std::ostream& err, const std::string& msg) {
  err << "bulwark render: " << msg << "\n";
  return 2;
}

void Print(const std::vector<Json>& docs, const std::string& format, std::ostream& out) {
  if (format == "json") {
    out << Json(docs).dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    out << trainjob::EmitYaml(docs);
  }
}

// --node-names: each non-empty name a Kubernetes node name (RFC 1123 subdomain) and
// none twice (two agents on one host network would collide); notes for names that do
// not bind. 0, or the usage error's exit code.
int CheckNodeNames(const std::vector<std::string>& names, const trainjob::TrainJob& t,
                   std::ostream& err) {
  static const std::regex kNodeName("[a-z0-9]([-a-z0-9.]*[a-z0-9])?");
  std::set<std::string> seen;
  int given = 0;
  for (const std::string& n : names) {
    if (n.empty()) continue;
    ++given;
    if (n.size() > 253 || !std::regex_match(n, kNodeName)) {
      return Usage(err, "--node-names: '" + n +
                            "' is not a Kubernetes node name (lowercase "
                            "letters, digits, '-' and '.', at most 253 characters)");
    }
    if (!seen.insert(n).second) {
      return Usage(err, "--node-names: '" + n +
                            "' is named twice; each pod needs a node of "
                            "its own (their agents share the host network)");
    }
  }
  if (given > 0 && t.scheduling.gang != trainjob::GangMode::kBulwark) {
    err << "note: --node-names binds pods only under gang: bulwark; the scheduler places "
           "them here\n";
  } else if (given > 0 && given < t.job.nodes) {
    err << "note: --node-names binds " << given << " of " << t.job.nodes
        << " worker pods; the scheduler places the others\n";
  }
  return 0;
}

}  // namespace

int RenderRun(const RenderFlags& f, std::ostream& out, std::ostream& err) {
  if (f.output != "yaml" && f.output != "json") {
    return Usage(err, "-o must be yaml or json (got \"" + f.output + "\")");
  }
  if (f.crd) {
    if (!f.spec.empty()) return Usage(err, "--crd takes no SPEC");
    Print({trainjob::TrainJobCrd()}, f.output, out);
    return 0;
  }
  if (f.spec.empty()) return Usage(err, "give a SPEC (job spec, TrainJob or PyTorchJob) or --crd");
  auto in = trainjob::ReadManifestInput(f.spec);
  auto ms = in.ok() ? trainjob::ParseManifestInput(*in, trainjob::Target::kKubernetes)
                    : Result<std::vector<trainjob::LoadedManifest>>(in.status());
  if (!ms.ok()) {
    err << "bulwark render: " << ms.status().message() << "\n";
    return ms.status().code() == Code::kInvalidArgument || ms.status().code() == Code::kNotFound
               ? 2
               : 1;
  }
  if (ms->size() > 1 && !f.node_names.empty()) {
    return Usage(err, "--node-names binds the pods of one job; " + in->name + " holds " +
                          std::to_string(ms->size()) + " manifests");
  }
  trainjob::RenderOptions o;
  o.agent_image = f.agent_image;
  if (!f.controller.empty()) {
    const size_t colon = f.controller.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == f.controller.size()) {
      return Usage(err, "--controller must be HOST:PORT (got \"" + f.controller + "\")");
    }
    o.controller_addr = f.controller;
  }
  std::vector<Json> objects;  // every document's, in order: one YAML stream
  for (trainjob::LoadedManifest& m : *ms) {
    for (const std::string& note : m.notes) err << "note: " << note << "\n";
    trainjob::TrainJob& t = m.job;
    if (!f.image.empty()) t.pod.image = f.image;
    if (f.trainjob) {
      objects.push_back(trainjob::ToObject(t));
      continue;
    }
    if (t.pod.image.empty()) {
      return Usage(err, in->name + ": " + t.name +
                            ": no pod.image: pass --image IMAGE, or write a TrainJob (bulwark "
                            "render " +
                            in->name + " --trainjob prints one to start from)");
    }
    std::vector<std::string> names;
    std::stringstream list(f.node_names);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (int rc = CheckNodeNames(names, t, err); rc != 0) return rc;
    for (Json& obj : trainjob::RenderJobObjects(t, names, o)) objects.push_back(std::move(obj));
  }
  Print(objects, f.output, out);
  return 0;
}

CLI::App* AddRenderCommand(CLI::App& app, int* exit_code, std::ostream& out, std::ostream& err,
                           const CommandFilter& filter) {
  auto flags = std::make_shared<RenderFlags>();
  auto* cmd = app.add_subcommand(
      "render", "print the Kubernetes objects the operator would create for a spec (no cluster)");
  if (!filter.Full("render")) return cmd;
  cmd->add_option("spec,-f,--filename", flags->spec,
                  "job spec, TrainJob or Kubeflow PyTorchJob (YAML, every document; - reads "
                  "standard input)");
  cmd->add_option("--node-names", flags->node_names,
                  "comma-separated node names that bind the pods in order (gang: bulwark)");
  cmd->add_option("--controller", flags->controller, "controller HOST:PORT the agents dial");
  cmd->add_option("-o,--output", flags->output, "yaml (default) or json");
  cmd->add_option("--image", flags->image, "container image when the spec has no pod.image");
  cmd->add_option("--agent-image", flags->agent_image,
                  "image the pods' init container copies bulwark-agent from (as the operator's "
                  "--agent-image); '' = the job's image must carry it")
      ->capture_default_str();
  cmd->add_flag("--crd", flags->crd, "print the TrainJob CustomResourceDefinition");
  cmd->add_flag("--trainjob", flags->trainjob, "print the TrainJob the spec converts to");
  cmd->footer(
      "Examples:\n  bulwark render deploy/sample-trainjob.yaml\n"
      "  bulwark render examples/pytorch-ddp/job.yaml --trainjob --image repo/trainer:1 > tj.yaml\n"
      "  bulwark render --crd | kubectl apply -f -");
  cmd->callback([=, &out, &err] { *exit_code = RenderRun(*flags, out, err); });
  return cmd;
}

}  // namespace bulwark::cli
