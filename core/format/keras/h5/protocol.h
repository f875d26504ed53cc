// The wire between h5::Describe (the parent) and the child that runs libhdf5: internal to
// core/format/h5.
//
// Every message starts with a fixed 17-byte header: a type byte and two u64 fields (host
// byte order: both ends are the same process image). The child sends kRead (a = offset,
// b = length, inside [0, size)), answered by kData (a = length, then that many bytes) or
// kFail (the read is refused; the parent then ends the description); at the end it sends
// kResult (a = length, then the description as JSON text, see EncodeFile) or kError (a =
// length, b = a Status::Code, then the one-line reason without the file's name). The
// parent treats every field the child sends as untrusted and bounds every length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/format/keras/h5/h5_file.h"
#include "core/status.h"

namespace ckptfs::h5::internal {

enum MessageType : uint8_t {
  kRead = 'R',
  kData = 'D',
  kFail = 'F',
  kResult = 'J',
  kError = 'E',
};

inline constexpr size_t kHeaderBytes = 17;
// The most the parent accepts as a description or an error from the child.
inline constexpr uint64_t kMaxResultBytes = 256ull << 20;
inline constexpr uint64_t kMaxErrorBytes = 4096;

struct Header {
  uint8_t type = 0;
  uint64_t a = 0;
  uint64_t b = 0;
};

void EncodeHeader(const Header& h, uint8_t out[kHeaderBytes]);
Header DecodeHeader(const uint8_t in[kHeaderBytes]);

// The description as the child sends it, and back: DecodeFile checks every field's JSON
// type and range (Corruption naming `shown`, one line) but not the promises of
// ValidateFile.
std::string EncodeFile(const File& file);
Result<File> DecodeFile(std::string_view text, const std::string& shown);

// Runs in the forked child (the socket at any descriptor): closes every other descriptor,
// caps its resources, describes the file of `size` bytes through libhdf5 reading over
// `sock`, sends the answer and exits. Never returns.
[[noreturn]] void RunChild(int sock, uint64_t size, const Limits& limits);

}  // namespace ckptfs::h5::internal
