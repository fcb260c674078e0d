#include "common/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bulwark {

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kDataLoss:
      return "DATA_LOSS";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kAborted:
      return "ABORTED";
    case Code::kPermissionDenied:
      return "PERMISSION_DENIED";
    case Code::kOutOfRange:
      return "OUT_OF_RANGE";
    case Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + msg_;
}

Status Status::Annotate(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + msg_);
}

void DieOnErrorResultAccess(const Status& status) {
  std::fprintf(stderr, "bulwark: the value of an error Result was read (check ok() first): %s\n",
               status.ToString().c_str());
  std::abort();
}

Status ErrnoStatus(const std::string& what, int err) {
  Code c = Code::kInternal;
  if (err == ENOENT) c = Code::kNotFound;
  if (err == EEXIST) c = Code::kAlreadyExists;
  if (err == EINVAL) c = Code::kInvalidArgument;
  if (err == ECONNREFUSED || err == ECONNRESET || err == EPIPE) c = Code::kUnavailable;
  if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) c = Code::kResourceExhausted;
  return Status(c, what + ": " + std::strerror(err));
}

}  // namespace bulwark
