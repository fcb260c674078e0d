#include "trainjob/testing/schema_check.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/run.h"
#include "trainjob/render.h"

#ifndef BW_SOURCE_DIR
#define BW_SOURCE_DIR "."
#endif

namespace bulwark::trainjob::testing {
namespace {

namespace fs = std::filesystem;

bool OnPath(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && access((fs::path(dir) / exe).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Removes its file on destruction.
struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

}  // namespace

Status ValidateK8sObjects(const std::vector<Json>& objects, std::vector<std::string>* skipped,
                          const SchemaCheckOptions& o) {
  std::string dir = o.tool_dir;
  if (dir.empty()) {
    const char* env = std::getenv("BULWARK_K8S_SCHEMA_DIR");
    dir = env != nullptr && *env ? env : std::string(BW_SOURCE_DIR) + "/tools/k8s-schema";
  }
  const std::string script = dir + "/validate.mjs";
  const std::string fix = "; run scripts/setup.sh (it installs node and npm ci's " + dir + ")";
  if (!OnPath("node")) return FailedPrecondition("node is not on PATH" + fix);
  if (!fs::exists(script)) return FailedPrecondition(script + " not found" + fix);
  if (!fs::exists(dir + "/node_modules/kubernetes-models/package.json")) {
    return FailedPrecondition("kubernetes-models is not installed in " + dir + "/node_modules" +
                              fix);
  }

  Json input = Json::array();
  bool has_trainjob = false, has_crd = false;
  for (const Json& obj : objects) {
    input.push_back(obj);
    const std::string kind = obj.is_object() ? obj.value("kind", "") : "";
    has_trainjob |= kind == kKind;
    has_crd |= kind == "CustomResourceDefinition" &&
               obj.value("metadata", Json::object()).value("name", "") == "trainjobs.bulwark.dev";
  }
  if (has_trainjob && !has_crd) input.push_back(TrainJobCrd());

  TempFile tmp;
  {
    std::string templ = (fs::temp_directory_path() / "bw-k8s-schema-XXXXXX").string();
    int fd = mkstemp(templ.data());
    if (fd < 0) return ErrnoStatus("mkstemp " + templ, errno);
    close(fd);
    tmp.path = templ;
    std::ofstream out(tmp.path);
    out << input.dump();
    if (!out) return Internal("could not write " + tmp.path);
  }

  SpawnOptions so;
  so.argv = {"node", script, tmp.path};
  so.env = CurrentEnv();
  BW_ASSIGN_OR_RETURN(RunOutcome run, RunToEnd(so, o.timeout_s));
  if (run.timed_out) {
    return DeadlineExceeded("validate.mjs did not finish within " + std::to_string(o.timeout_s) +
                            " s; output so far:\n" + run.output);
  }
  const std::string& output = run.output;
  const ExitInfo* exit = &run.exit;

  std::vector<std::string> problems;
  std::stringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("skipped: ", 0) == 0) {
      if (skipped != nullptr) skipped->push_back(line.substr(9));
    } else if (!line.empty() && line.find("objects checked against") == std::string::npos &&
               line.find("objects failed validation") == std::string::npos) {
      problems.push_back(line);
    }
  }
  if (exit->ok()) return Status::Ok();
  if (exit->code == 1 && !problems.empty()) {
    std::string msg;
    for (const std::string& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    return InvalidArgument(msg);
  }
  return FailedPrecondition("validate.mjs failed (" + exit->Describe() + "): " + output + fix);
}

}  // namespace bulwark::trainjob::testing
