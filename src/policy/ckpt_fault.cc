#include "policy/ckpt_fault.h"

namespace bulwark {

CkptWriteVerdict ClassifyCheckpointWriteError(const std::string& tier, const std::string& error) {
  CkptWriteVerdict v;
  if (tier != "disk") return v;
  for (const char* full : {"No space left on device", "ENOSPC", "[Errno 28]"}) {
    if (error.find(full) != std::string::npos) {
      v.node_fault = true;
      v.subtype = "disk_full";
    }
  }
  return v;
}

}  // namespace bulwark
