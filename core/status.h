// Status and Result<T>: how every core function reports failure.
//
// A Status is either OK or carries a code, an errno class for the FUSE reply and a
// one-line message that names the file and the problem ("shard-1.safetensors: header
// length 9999 runs past end of file (1024 bytes)"). Core never throws across its API
// and never logs; the caller decides whether a Status becomes a log line, an exit code
// or an errno. Messages stay one line whatever the names in them hold: control
// characters are escaped when a Status is made (see EscapeControlChars). Thread safety:
// values, freely copied.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ckptfs {

// `text` with every control character (bytes below 0x20, and 0x7f) written as \xNN, so
// that a file name holding a newline or a terminal escape cannot split a message line or
// drive the terminal it is printed on. Other bytes, UTF-8 included, are kept; a backslash
// is not doubled, so escaping twice changes nothing.
inline std::string EscapeControlChars(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
      continue;
    }
    constexpr char kHex[] = "0123456789abcdef";
    out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
  }
  return out;
}

class Status {
 public:
  enum class Code { kOk, kNotFound, kCorruption, kInvalidArgument, kIoError, kUnsupported };

  Status() = default;
  static Status Ok() { return Status(); }
  // A file or name the caller asked for does not exist (ENOENT).
  static Status NotFound(std::string msg) {
    return Status(Code::kNotFound, ENOENT, std::move(msg));
  }
  // Input bytes break their format's rules: the checkpoint is invalid (EIO on a read).
  static Status Corruption(std::string msg) {
    return Status(Code::kCorruption, EIO, std::move(msg));
  }
  // The caller passed something unusable (EINVAL).
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, EINVAL, std::move(msg));
  }
  // A system call failed; `err` is its errno.
  static Status IoError(std::string msg, int err = EIO) {
    return Status(Code::kIoError, err, std::move(msg));
  }
  // Valid input that this version does not handle (ENOTSUP).
  static Status Unsupported(std::string msg) {
    return Status(Code::kUnsupported, ENOTSUP, std::move(msg));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  // The errno a FUSE reply should carry; 0 when ok.
  int errno_value() const { return errno_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, int err, std::string msg)
      : code_(code), errno_(err), message_(EscapeControlChars(msg)) {}

  Code code_ = Code::kOk;
  int errno_ = 0;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ckptfs

// Early-return helpers: keep call sites to one line per fallible step.
#define CKPTFS_RETURN_IF_ERROR(expr)       \
  do {                                     \
    ::ckptfs::Status ckptfs_s_ = (expr);   \
    if (!ckptfs_s_.ok()) return ckptfs_s_; \
  } while (0)

#define CKPTFS_CONCAT_INNER(a, b) a##b
#define CKPTFS_CONCAT(a, b) CKPTFS_CONCAT_INNER(a, b)
#define CKPTFS_ASSIGN_OR_RETURN(lhs, expr) \
  CKPTFS_ASSIGN_OR_RETURN_IMPL(CKPTFS_CONCAT(ckptfs_r_, __LINE__), lhs, expr)
#define CKPTFS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
