// h5::Describe: what an HDF5 file holds (groups, datasets, attributes), read with the HDF5
// library without trusting it and without reading the file.
//
// Keras writes its checkpoints with h5py (.weights.h5, the model.weights.h5 of a .keras
// zip, legacy .h5). Every dataset Keras writes is contiguous and unfiltered, so its bytes
// lie at one file offset: ckptfs serves them as extents of the stored file and needs from
// HDF5 only the metadata: the tree, each dataset's type, shape, layout, offset and size,
// and the attributes. libhdf5 (Debian's libhdf5-dev, 1.10) reads that metadata; it reads
// the file through a virtual file driver whose every read is a ByteSource::Read of
// [base + addr, ...) of the source, so a remote file is fetched where the metadata lies,
// never whole, and a read outside [base, base + size) fails inside the driver.
//
// Isolation: libhdf5 is a large C parser with a history of crashes on crafted files, and a
// checkpoint is untrusted. So it never runs in the calling process. Describe forks a child
// that runs libhdf5 and nothing else of ckptfs: the child asks the parent for each byte
// range over a socketpair (the parent reads it from `source`, within the bounds below), and
// sends back the description as one message; then it exits (_exit). The parent waits with
// a deadline (Limits::timeout) and kills a child that overstays. A child that dies (a
// signal, an abort inside libhdf5), hangs, reads more than Limits::read_bytes, or answers
// malformed is one line naming the file: never a crash, a hang or a partial tree in the
// daemon. The child closes every other descriptor first and caps its address space, so
// libhdf5 can neither reach the daemon's files nor take its memory. Fork is safe in the
// multithreaded daemon because the child touches no lock of ours: libhdf5 is only ever
// initialised in children, and the child's reads are messages, not ByteSource calls.
//
// Then the parent validates the description as untrusted input (ValidateFile, also what
// the fuzz target drives): paths plain and unique, every allocated contiguous dataset
// inside [0, size), no two datasets' bytes overlapping (two datasets overlapping is
// Corruption naming both), byte counts equal to elements x type size (checked
// arithmetic), ranks and counts bounded.
//
// What a dataset that cannot be an extent becomes is the caller's choice: Dataset::problem
// says why ("chunked", "compressed (deflate)", "compact", "storage not allocated",
// "big-endian", "type: compound"), and the Keras reader refuses it by name.
//
// Thread safety: Describe may be called from many threads at once (each forks its own
// child); ValidateFile is a pure function.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs::h5 {

// An attribute's value as JSON: a string (fixed or variable length, decoded as UTF-8 with
// trailing NULs of fixed-length strings cut), an integer or float, or an array of those
// (h5py writes Keras's `layer_names`/`weight_names` as arrays of fixed-length byte
// strings, numpy arrays as numeric arrays). Attributes of any other type are left out.
struct Attribute {
  std::string name;
  nlohmann::json value;
};

// HDF5 datatype classes a dataset may have.
enum class TypeClass : uint8_t {
  kInteger,  // signed or not: Dataset::is_signed
  kFloat,    // IEEE 2, 4 or 8 bytes
  kOpaque,   // fixed-size bytes (h5py writes a numpy 'V2' this way: Keras's bfloat16)
  kEnum,     // h5py's bool is an enum over int8 {FALSE: 0, TRUE: 1}
  kOther,    // anything else (strings, compounds, references): Dataset::problem says which
};

struct Dataset {
  std::string path;  // from the root, no leading '/': "layers/dense/vars/0"
  TypeClass type = TypeClass::kOther;
  uint32_t type_size = 0;       // bytes per element
  bool is_signed = false;       // kInteger and kEnum's base type
  std::vector<uint64_t> shape;  // a scalar dataspace is {}
  // Contiguous and allocated: the data's offset from the file's start (from `base`, not
  // the source's start) and its size in bytes (elements x type_size). 0 and 0 for a
  // dataset of no elements.
  uint64_t offset = 0;
  uint64_t size = 0;
  // "" when [offset, offset + size) holds the data as little-endian row-major elements;
  // else why not, one phrase ("chunked", "compressed (deflate)", "compact", "storage not
  // allocated", "big-endian", "type: string", "external storage").
  std::string problem;
  std::vector<Attribute> attributes;
};

struct Group {
  std::string path;  // from the root, no leading '/'; the root itself is ""
  std::vector<Attribute> attributes;
};

// The file's objects in the order HDF5's own iteration gives (by name within a group,
// byte order; callers sort as they need): groups first met first, the root first.
struct File {
  std::vector<Group> groups;
  std::vector<Dataset> datasets;
};

struct Limits {
  uint64_t read_bytes = 64ull << 20;         // total bytes the child may ask for
  uint64_t objects = 1u << 20;               // groups + datasets
  uint32_t depth = 64;                       // group nesting
  uint32_t rank = 64;                        // dataset dimensions
  uint64_t attribute_bytes = 64ull << 20;    // one attribute's value (model_config is JSON text)
  std::chrono::milliseconds timeout{60000};  // the whole description
};

// Describes the HDF5 file that is [base, base + size) of `source` (a whole .h5 file: base
// 0, size source.Size(); a .keras zip's stored model.weights.h5 member: its data offset
// and size). `shown` names it in messages ("model.keras:model.weights.h5"). Errors:
// Corruption or Unsupported, one line starting with `shown` ("ckpt.weights.h5: not an
// HDF5 file", "...: the HDF5 library failed on it (killed by SIGSEGV)", "...: soft link
// layers/x, which Keras does not write", "...: object layers/a reached twice (a cycle or a
// hard link)"); IoError from the source as it is. Validated (ValidateFile) before return.
Result<File> Describe(const ByteSource& source, uint64_t base, uint64_t size,
                      const std::string& shown, const Limits& limits = {});

// Checks a description against the file's size and `limits` (the promises above); the
// parent's half of Describe, exposed for the fuzz target and the tests.
Status ValidateFile(const File& file, uint64_t size, const std::string& shown,
                    const Limits& limits = {});

}  // namespace ckptfs::h5
