#include "controller/incident_json.h"

#include "common/json_util.h"

namespace bulwark {

Result<FaultKind> ParseFaultKind(const std::string& s) {
  for (FaultKind k : {FaultKind::kCrash, FaultKind::kHang, FaultKind::kNan, FaultKind::kFatalLog,
                      FaultKind::kNodeLost, FaultKind::kSdc}) {
    if (s == FaultKindName(k)) return k;
  }
  return InvalidArgument("incident kind '" + s +
                         "' is unknown; expected crash, hang, nan, fatal_log, node_lost or sdc");
}

Result<Incident> IncidentFromJson(const Json& j) {
  Incident inc;
  BW_ASSIGN_OR_RETURN(std::string kind, JStr(j, "kind"));
  BW_ASSIGN_OR_RETURN(inc.kind, ParseFaultKind(kind));
  BW_ASSIGN_OR_RETURN(inc.subtype, JStrOr(j, "subtype", ""));
  BW_ASSIGN_OR_RETURN(long rank, JIntOr(j, "rank", -1));
  inc.rank = static_cast<int>(rank);
  BW_ASSIGN_OR_RETURN(inc.step, JIntOr(j, "step", -1));
  BW_ASSIGN_OR_RETURN(inc.fault_time, JNumOr(j, "fault_time", 0));
  BW_ASSIGN_OR_RETURN(inc.detect_time, JNumOr(j, "detect_time", 0));
  BW_ASSIGN_OR_RETURN(inc.detail, JStrOr(j, "detail", ""));
  BW_ASSIGN_OR_RETURN(inc.good_step, JIntOr(j, "good_step", -1));
  return inc;
}

Json IncidentToJson(const Incident& inc) {
  Json j{{"kind", FaultKindName(inc.kind)},
         {"subtype", inc.subtype},
         {"rank", inc.rank},
         {"node", inc.node},
         {"step", inc.step},
         {"fault_time", inc.fault_time},
         {"detect_time", inc.detect_time},
         {"detail", inc.detail}};
  if (inc.good_step >= 0) j["good_step"] = inc.good_step;
  return j;
}

}  // namespace bulwark
