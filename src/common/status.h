// Status and Result<T>: the error currency at every module boundary.
//
// A Status is OK or carries a code and a human-readable message that names the
// offending field/file and, where possible, the fix. Result<T> holds either a value
// or a non-OK Status. Both are value types; not thread-safe for concurrent mutation.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace bulwark {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // bad input: spec, CLI flag, message, file contents
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kDataLoss,  // corruption detected (checksum, truncation)
  kDeadlineExceeded,
  kUnavailable,  // peer gone, transient I/O
  kInternal,
  kAborted,            // optimistic-concurrency conflict (e.g. a stale resourceVersion)
  kPermissionDenied,   // authentication or authorization refused
  kOutOfRange,         // a version or position no longer (or not yet) served, e.g. HTTP 410
  kResourceExhausted,  // a queue or buffer is full for now: the same request may pass later
};
// How many codes there are (a new code goes last, and this names it).
inline constexpr int kNumCodes = static_cast<int>(Code::kResourceExhausted) + 1;

const char* CodeName(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;
  // Returns a copy with `prefix + ": "` prepended to the message.
  Status Annotate(const std::string& prefix) const;

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
// Status from errno with the failing operation and path: "open /x/y: No such file".
Status ErrnoStatus(const std::string& what, int err);

// Reached by reading the value of an error Result: a programming error. Prints the
// status and aborts (defined behaviour, and the message says what was not checked).
[[noreturn]] void DieOnErrorResultAccess(const Status& status);

// A value or the error why there is none. Reading the value (value(), *, ->) of an
// error Result aborts through DieOnErrorResultAccess; check ok() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(runtime/explicit)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(runtime/explicit)
    assert(!status_.ok());
    if (status_.ok()) status_ = Internal("Result constructed from OK status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return Checked(); }

 private:
  T& Checked() {
    if (!value_) DieOnErrorResultAccess(status_);
    return *value_;
  }
  const T& Checked() const {
    if (!value_) DieOnErrorResultAccess(status_);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

// Discards a status on purpose. `why` states why a failure needs no handling at this
// call (the process group may be gone already, the peer's loss is seen by the loop,
// cleanup is best effort, ...): every ignored error is grep-able with its reason.
inline void IgnoreError(const Status& status, const char* why) {
  (void)status;
  (void)why;
}
template <typename T>
inline void IgnoreError(const Result<T>& result, const char* why) {
  (void)result;
  (void)why;
}

}  // namespace bulwark

#define BW_CONCAT_INNER(a, b) a##b
#define BW_CONCAT(a, b) BW_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define BW_RETURN_IF_ERROR(expr)       \
  do {                                 \
    ::bulwark::Status _bw_st = (expr); \
    if (!_bw_st.ok()) return _bw_st;   \
  } while (0)

// `BW_ASSIGN_OR_RETURN(auto x, Foo());` binds the value or returns the error.
#define BW_ASSIGN_OR_RETURN(lhs, expr) \
  BW_ASSIGN_OR_RETURN_IMPL(BW_CONCAT(_bw_r, __LINE__), lhs, expr)
#define BW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
