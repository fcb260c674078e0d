// Manifest reader (trainjob/trainjob.h ParseManifest, what LoadManifest runs for
// `bulwark validate/run/render/submit`): a plain job spec, a TrainJob or a Kubeflow
// PyTorchJob, converted. The corpus is PyTorchJobs, so the fuzzer spends its time in
// the conversion. Contracts checked beyond "no crash":
//  * errors are InvalidArgument, each line naming the source;
//  * a manifest that loads for kKubernetes round-trips through ToObject and
//    TrainJobFromObject (the converted TrainJob is one the operator can read back);
//  * its job passes the job spec invariants.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "spec/job_update.h"
#include "trainjob/trainjob.h"

namespace {

using bulwark::Json;
using bulwark::fuzz::Check;
namespace tj = bulwark::trainjob;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (tj::Target target : {tj::Target::kKubernetes, tj::Target::kLocal}) {
    auto r = tj::ParseManifest(text, "fuzz.yaml", "/base/dir", target);
    if (!r.ok()) {
      Check(r.status().code() == bulwark::Code::kInvalidArgument,
            "error other than "
            "InvalidArgument",
            r.status().ToString());
      bulwark::fuzz::CheckErrorLines(r.status(), "fuzz.yaml");
      continue;
    }
    tj::TrainJob& t = r->job;
    Check(!t.name.empty() && t.job.name == t.name, "job.name differs from metadata.name");
    // (command may be empty: a TrainJob may run its image's entrypoint.)
    Check(t.job.nodes >= 1 && t.job.procs_per_node >= 1, "job invariants broken");
    for (const std::string& n : r->notes) Check(!n.empty(), "empty note");
    if (target != tj::Target::kKubernetes) continue;
    // A plain job spec names no image; `bulwark render/submit --image` supplies one.
    if (r->kind == tj::ManifestKind::kJobSpec && t.pod.image.empty()) {
      t.pod.image = "registry.example/bulwark-agent:1";
    }
    Json obj = tj::ToObject(t);
    auto back = tj::TrainJobFromObject(obj);
    Check(back.ok(), "a loaded manifest's TrainJob does not parse back",
          back.ok() ? "" : back.status().ToString() + "\n" + obj.dump());
    Check(tj::ToObject(*back) == obj, "TrainJobFromObject(ToObject(t)) differs from t",
          obj.dump() + "\n" + tj::ToObject(*back).dump());
    auto u = bulwark::PlanJobUpdate(t.job, back->job);
    Check(!u.ok() && u.status().code() == bulwark::Code::kFailedPrecondition,
          "round trip changed the job", u.ok() ? u->Describe() : u.status().ToString());
  }
  return 0;
}
