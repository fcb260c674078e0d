// TrainJob reader (trainjob/trainjob.h): ParseTrainJob on arbitrary text for both
// targets (`bulwark run` reads a TrainJob for kLocal, `render`/`submit` for
// kKubernetes) and TrainJobFromObject on JSON input (the operator's objects from the
// API). Contracts checked beyond "no crash":
//  * errors are InvalidArgument, each line naming the source;
//  * the documented round trip: a TrainJob parsed for kKubernetes converts with
//    ToObject and back with TrainJobFromObject to the same TrainJob (same object,
//    same job: PlanJobUpdate finds nothing to change);
//  * the parsed job spec passes its invariants (job.name == metadata.name).
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

void CheckSame(const tj::TrainJob& a, const tj::TrainJob& b, const char* what) {
  Check(a.name == b.name && a.ns == b.ns && a.labels == b.labels &&
            a.annotations == b.annotations && a.scheduling == b.scheduling && a.pod == b.pod &&
            a.suspend == b.suspend,
        what, tj::ToObject(a).dump() + "\n" + tj::ToObject(b).dump());
  auto u = bulwark::PlanJobUpdate(a.job, b.job);
  Check(!u.ok() && u.status().code() == bulwark::Code::kFailedPrecondition, what,
        u.ok() ? u->Describe() : u.status().ToString());
}

void RoundTrip(const tj::TrainJob& t) {
  Json obj = tj::ToObject(t);
  auto back = tj::TrainJobFromObject(obj);
  Check(back.ok(), "ToObject of a parsed TrainJob does not parse back",
        back.ok() ? "" : back.status().ToString() + "\n" + obj.dump());
  CheckSame(t, *back, "TrainJobFromObject(ToObject(t)) differs from t");
  Check(tj::ToObject(*back) == obj, "ToObject is not stable across a round trip");
}

void CheckParsed(const tj::TrainJob& t) {
  Check(!t.name.empty() && t.job.name == t.name, "job.name differs from metadata.name", t.name);
  Check(!t.ns.empty(), "empty namespace");
  // (command may be empty: a TrainJob may run its image's entrypoint.)
  Check(t.job.nodes >= 1 && t.job.procs_per_node >= 1, "job invariants broken");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (tj::Target target : {tj::Target::kKubernetes, tj::Target::kLocal}) {
    auto r = tj::ParseTrainJob(text, "fuzz.yaml", "/base/dir", target);
    if (!r.ok()) {
      Check(r.status().code() == bulwark::Code::kInvalidArgument,
            "error other than "
            "InvalidArgument",
            r.status().ToString());
      bulwark::fuzz::CheckErrorLines(r.status(), "fuzz.yaml");
      continue;
    }
    CheckParsed(*r);
    if (target == tj::Target::kKubernetes) RoundTrip(*r);
  }
  // The operator's path: an object from the API server (JSON).
  Json obj = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!obj.is_discarded()) {
    auto r = tj::TrainJobFromObject(obj);
    if (!r.ok()) {
      Check(r.status().code() == bulwark::Code::kInvalidArgument && !r.status().message().empty(),
            "TrainJobFromObject error without InvalidArgument and a message",
            r.status().ToString());
    } else {
      CheckParsed(*r);
      RoundTrip(*r);
    }
  }
  return 0;
}
