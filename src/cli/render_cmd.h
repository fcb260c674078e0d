// `bulwark render SPEC [--node-names a,b,...] [--controller HOST:PORT] [-o yaml|json]
// [--image IMAGE] [--trainjob]` and `bulwark render --crd`: print, without a cluster,
// the Kubernetes objects the operator would create for SPEC (a job spec, a TrainJob
// or a Kubeflow PyTorchJob), the TrainJob SPEC converts to, or the TrainJob CRD
// (deploy/crd.yaml is exactly `bulwark render --crd`). docs/trainjob.md.
//
// RenderRun writes the objects to `out` (multi-document YAML, or a JSON list) and
// conversion notes and errors to `err`; returns 0 on success, 2 for usage errors and
// invalid manifests (each error names the file, line, field and fix), 1 otherwise.
// Stateless; thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <ostream>
#include <string>

#include "cli/command_filter.h"
#include "trainjob/render.h"

namespace bulwark::cli {

struct RenderFlags {
  std::string spec;
  std::string node_names;  // comma-separated node names binding the pods in order
  std::string controller;  // HOST:PORT the agents dial ("" = RenderOptions' default)
  std::string output = "yaml";
  std::string image;      // for a manifest without pod.image (a plain job spec)
  bool crd = false;       // print the CRD instead
  bool trainjob = false;  // print the TrainJob SPEC converts to instead
  std::string agent_image = trainjob::DefaultAgentImage();  // RenderOptions::agent_image
};
int RenderRun(const RenderFlags& f, std::ostream& out, std::ostream& err);

// Registers `render` on `app` (only its name and description unless
// filter.Full("render")). After app.parse, if the returned subcommand was given,
// *exit_code holds the command's exit code.
CLI::App* AddRenderCommand(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                           std::ostream& err = std::cerr, const CommandFilter& filter = {});

}  // namespace bulwark::cli
