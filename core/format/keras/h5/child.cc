// The child of h5::Describe: libhdf5 runs here and only here (protocol.h).
//
// The child confines itself first (one descriptor, no core dumps, capped memory and CPU,
// default signal handlers), then opens the file through a read-only virtual file driver
// whose reads are kRead requests to the parent, walks the tree and sends the description.
// It touches nothing of the daemon but malloc (made fork-safe by glibc) and its own stack.
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "core/checked.h"
#include "core/format/keras/h5/protocol.h"

namespace ckptfs::h5::internal {
namespace {

constexpr int kSocketFd = 3;
uint64_t g_size = 0;  // the file's size: the driver's EOF

bool WriteAll(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = send(kSocketFd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = read(kSocketFd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool Send(const Header& h, const void* body, size_t n) {
  uint8_t raw[kHeaderBytes];
  EncodeHeader(h, raw);
  return WriteAll(raw, sizeof raw) && (n == 0 || WriteAll(body, n));
}

[[noreturn]] void Finish(Status::Code code, const std::string& reason) {
  const std::string text = reason.substr(0, kMaxErrorBytes);
  Send({kError, text.size(), static_cast<uint64_t>(code)}, text.data(), text.size());
  _exit(0);
}

// Asks the parent for [addr, addr + size): false if it refuses or the socket broke.
bool RequestRead(uint64_t addr, uint64_t size, void* out) {
  if (!Send({kRead, addr, size}, nullptr, 0)) return false;
  uint8_t raw[kHeaderBytes];
  if (!ReadAll(raw, sizeof raw)) return false;
  const Header h = DecodeHeader(raw);
  if (h.type != kData || h.a != size) _exit(0);  // refused: the parent ends the description
  return ReadAll(out, size);
}

// libhdf5 reads metadata in many small pieces, often next to each other and again (a
// Keras file of 94 KB takes 75 reads): each is a round trip to the parent and, for a
// remote source, a request. So the child asks for whole aligned blocks and keeps them;
// what it keeps is bounded by the parent's read budget.
constexpr uint64_t kBlockBytes = 4096;
std::map<uint64_t, std::vector<uint8_t>> g_blocks;  // block number -> its bytes

bool CachedRead(uint64_t addr, uint64_t size, void* out) {
  const uint64_t first = addr / kBlockBytes;
  const uint64_t last = (addr + size - 1) / kBlockBytes;
  for (uint64_t b = first; b <= last;) {
    if (g_blocks.count(b) != 0) {
      ++b;
      continue;
    }
    uint64_t end = b + 1;  // one request for the run of blocks missing
    while (end <= last && g_blocks.count(end) == 0) ++end;
    const uint64_t from = b * kBlockBytes;
    const uint64_t to = std::min(end * kBlockBytes, g_size);
    std::vector<uint8_t> run(to - from);
    if (!RequestRead(from, run.size(), run.data())) return false;
    for (uint64_t k = b; k < end; ++k) {
      const uint64_t at = (k - b) * kBlockBytes;
      const uint64_t n = std::min(kBlockBytes, run.size() - at);
      g_blocks[k].assign(run.begin() + static_cast<ptrdiff_t>(at),
                         run.begin() + static_cast<ptrdiff_t>(at + n));
    }
    b = end;
  }
  auto* p = static_cast<uint8_t*>(out);
  for (uint64_t b = first; b <= last; ++b) {
    const std::vector<uint8_t>& block = g_blocks[b];
    const uint64_t start = std::max(addr, b * kBlockBytes);
    const uint64_t stop = std::min(addr + size, b * kBlockBytes + block.size());
    if (stop < start) return false;  // a short block: past the file's end
    std::memcpy(p + (start - addr), block.data() + (start - b * kBlockBytes), stop - start);
  }
  return true;
}

// ---- The virtual file driver: read-only, every read a request to the parent. ----

struct DriverFile {
  H5FD_t pub;  // first: libhdf5 casts between the two
  haddr_t eoa;
};

H5FD_t* DriverOpen(const char* /*name*/, unsigned flags, hid_t /*fapl*/, haddr_t /*maxaddr*/) {
  if ((flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC)) != 0) return nullptr;
  auto* f = static_cast<DriverFile*>(calloc(1, sizeof(DriverFile)));
  return f == nullptr ? nullptr : &f->pub;
}

herr_t DriverClose(H5FD_t* file) {
  free(reinterpret_cast<DriverFile*>(file));
  return 0;
}

haddr_t DriverGetEoa(const H5FD_t* file, H5FD_mem_t /*type*/) {
  return reinterpret_cast<const DriverFile*>(file)->eoa;
}

herr_t DriverSetEoa(H5FD_t* file, H5FD_mem_t /*type*/, haddr_t addr) {
  reinterpret_cast<DriverFile*>(file)->eoa = addr;
  return 0;
}

haddr_t DriverGetEof(const H5FD_t* /*file*/, H5FD_mem_t /*type*/) { return g_size; }

herr_t DriverRead(H5FD_t* /*file*/, H5FD_mem_t /*type*/, hid_t /*dxpl*/, haddr_t addr, size_t size,
                  void* buffer) {
  // Outside the file is an error here, not zeros as sec2 gives past EOF: a read-only
  // checkpoint has no unwritten tail, so such a read means a lying or truncated file.
  if (addr == HADDR_UNDEF || !RangeWithin(addr, size, g_size)) return -1;
  if (size == 0) return 0;
  return CachedRead(addr, size, buffer) ? 0 : -1;
}

herr_t DriverWrite(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) { return -1; }

H5FD_class_t MakeDriverClass() {
  H5FD_class_t c;
  std::memset(&c, 0, sizeof c);
  c.name = "ckptfs";
  c.maxaddr = (static_cast<haddr_t>(1) << 63) - 1;
  c.fc_degree = H5F_CLOSE_WEAK;
  c.open = DriverOpen;
  c.close = DriverClose;
  c.get_eoa = DriverGetEoa;
  c.set_eoa = DriverSetEoa;
  c.get_eof = DriverGetEof;
  c.read = DriverRead;
  c.write = DriverWrite;
  const H5FD_mem_t map[] = H5FD_FLMAP_DICHOTOMY;
  std::memcpy(c.fl_map, map, sizeof map);
  return c;
}

// ---- Errors: libhdf5's own reason, its deepest entry ("truncated file: eof = ..."). ----

herr_t KeepDeepest(unsigned /*n*/, const H5E_error2_t* e, void* data) {
  if (e->desc != nullptr) *static_cast<std::string*>(data) = e->desc;
  return 0;
}

std::string LibraryReason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, KeepDeepest, &reason);
  H5Eclear2(H5E_DEFAULT);
  if (reason.size() > 200) reason.resize(200);
  return reason.empty() ? "no reason given" : reason;
}

[[noreturn]] void LibraryFailed(const std::string& doing) {
  std::string m = "the HDF5 library failed ";
  m += doing;
  m += " (";
  m += LibraryReason();
  m += ")";
  Finish(Status::Code::kCorruption, m);
}

// Closes an HDF5 identifier with the matching call when it goes out of scope.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// ---- The walk. ----

class Walker {
 public:
  explicit Walker(const Limits& limits) : limits_(limits) {}

  File& file() { return file_; }

  void Root(hid_t root) {
    Visit(root, "");
    file_.groups.push_back({"", {}});
    Attributes(root, "", &file_.groups.back().attributes);
    Links(root, "", 0);
  }

 private:
  static std::string Join(const std::string& parent, const char* name) {
    std::string p = parent;
    if (!p.empty()) p += '/';
    p += name;
    return p;
  }

  // Remembers the object's address: a second arrival is a cycle or a second hard link,
  // either of which would make one set of bytes two files or the walk endless.
  void Visit(hid_t object, const std::string& path) {
    H5O_info_t info;
    if (H5Oget_info2(object, &info, H5O_INFO_BASIC) < 0) LibraryFailed("on object " + path);
    if (!seen_.insert(info.addr).second) {
      std::string m = "object ";
      m += path.empty() ? "/" : path;
      m += " reached twice (a cycle or a hard link)";
      Finish(Status::Code::kCorruption, m);
    }
    if (seen_.size() > limits_.objects) {
      std::string m = "more than ";
      m += std::to_string(limits_.objects);
      m += " objects";
      Finish(Status::Code::kUnsupported, m);
    }
  }

  struct LinkContext {
    Walker* walker;
    const std::string* parent;
    uint32_t depth;
  };

  void Links(hid_t group, const std::string& path, uint32_t depth) {
    if (depth > limits_.depth) {
      std::string m = "groups nested deeper than ";
      m += std::to_string(limits_.depth);
      m += " at ";
      m += path;
      Finish(Status::Code::kUnsupported, m);
    }
    LinkContext context{this, &path, depth};
    if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, OnLink, &context) < 0) {
      LibraryFailed(path.empty() ? std::string("listing the root group") : "listing group " + path);
    }
  }

  static herr_t OnLink(hid_t group, const char* name, const H5L_info_t* info, void* data) {
    const auto* c = static_cast<LinkContext*>(data);
    c->walker->Link(group, Join(*c->parent, name), name, info->type, c->depth);
    return 0;
  }

  void Link(hid_t group, const std::string& path, const char* name, H5L_type_t type,
            uint32_t depth) {
    if (type != H5L_TYPE_HARD) {
      std::string m = type == H5L_TYPE_SOFT       ? "soft link "
                      : type == H5L_TYPE_EXTERNAL ? "external link "
                                                  : "user-defined link ";
      m += path;
      m += ", which Keras does not write";
      Finish(Status::Code::kUnsupported, m);
    }
    const Id object(H5Oopen(group, name, H5P_DEFAULT), H5Oclose);
    if (!object.ok()) LibraryFailed("opening " + path);
    Visit(object.get(), path);
    switch (H5Iget_type(object.get())) {
      case H5I_GROUP:
        file_.groups.push_back({path, {}});
        Attributes(object.get(), path, &file_.groups.back().attributes);
        Links(object.get(), path, depth + 1);
        break;
      case H5I_DATASET:
        DescribeDataset(object.get(), path);
        break;
      default:  // a named datatype: no bytes to serve
        break;
    }
  }

  void DescribeDataset(hid_t dataset, const std::string& path) {
    Dataset d;
    d.path = path;
    const Id type(H5Dget_type(dataset), H5Tclose);
    const Id space(H5Dget_space(dataset), H5Sclose);
    const Id dcpl(H5Dget_create_plist(dataset), H5Pclose);
    if (!type.ok() || !space.ok() || !dcpl.ok()) LibraryFailed("on dataset " + path);
    std::string type_problem = Type(type.get(), &d);
    // Shape.
    const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
    std::string space_problem;
    if (space_class == H5S_NULL) {
      // No elements: shown as shape {0}, so that size 0 is still elements x type size.
      d.shape = {0};
      space_problem = "null dataspace";
    } else if (space_class == H5S_SIMPLE) {
      const int rank = H5Sget_simple_extent_ndims(space.get());
      if (rank < 0) LibraryFailed("on dataset " + path);
      if (static_cast<uint32_t>(rank) > limits_.rank) {
        std::string m = "dataset ";
        m += path;
        m += " has rank ";
        m += std::to_string(rank);
        m += " (more than ";
        m += std::to_string(limits_.rank);
        m += ")";
        Finish(Status::Code::kUnsupported, m);
      }
      std::vector<hsize_t> dims(static_cast<size_t>(rank));
      if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
        LibraryFailed("on dataset " + path);
      }
      d.shape.assign(dims.begin(), dims.end());
    } else if (space_class != H5S_SCALAR) {
      LibraryFailed("on the dataspace of " + path);
    }
    const std::optional<uint64_t> elements = CheckedProduct(d.shape);
    const std::optional<uint64_t> bytes =
        elements ? CheckedMul(*elements, d.type_size) : std::nullopt;
    if (!bytes) {
      Finish(Status::Code::kCorruption, "dataset " + path + " has more bytes than 64 bits count");
    }
    d.size = *bytes;
    d.problem = !type_problem.empty() ? type_problem : space_problem;
    if (d.problem.empty()) d.problem = Storage(dataset, dcpl.get(), d);
    if (d.problem.empty() && d.size > 0) {
      const haddr_t offset = H5Dget_offset(dataset);
      if (offset == HADDR_UNDEF) {
        d.problem = "storage not allocated";
      } else {
        d.offset = offset;
      }
    }
    Attributes(dataset, path, &d.attributes);
    file_.datasets.push_back(std::move(d));
  }

  // Fills the dataset's type; returns why it cannot be served, or "".
  static std::string Type(hid_t type, Dataset* d) {
    const H5T_class_t cls = H5Tget_class(type);
    const size_t size = H5Tget_size(type);
    d->type_size = size > UINT32_MAX ? 0 : static_cast<uint32_t>(size);
    switch (cls) {
      case H5T_INTEGER:
        d->type = TypeClass::kInteger;
        d->is_signed = H5Tget_sign(type) == H5T_SGN_2;
        if (H5Tget_precision(type) != 8 * size || H5Tget_offset(type) != 0 ||
            (size != 1 && size != 2 && size != 4 && size != 8)) {
          return "type: integer of " + std::to_string(H5Tget_precision(type)) + " bits";
        }
        break;
      case H5T_FLOAT: {
        d->type = TypeClass::kFloat;
        size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
        H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
        const bool ieee = (size == 2 && spos == 15 && epos == 10 && esize == 5 && msize == 10) ||
                          (size == 4 && spos == 31 && epos == 23 && esize == 8 && msize == 23) ||
                          (size == 8 && spos == 63 && epos == 52 && esize == 11 && msize == 52);
        if (!ieee || mpos != 0 || H5Tget_offset(type) != 0) return "type: non-IEEE float";
        break;
      }
      case H5T_OPAQUE:
        d->type = TypeClass::kOpaque;
        return "";
      case H5T_ENUM: {
        d->type = TypeClass::kEnum;
        const Id base(H5Tget_super(type), H5Tclose);
        if (!base.ok() || H5Tget_class(base.get()) != H5T_INTEGER) return "type: enum";
        d->is_signed = H5Tget_sign(base.get()) == H5T_SGN_2;
        break;
      }
      default:
        d->type = TypeClass::kOther;
        return ClassName(cls);
    }
    if (H5Tget_order(type) == H5T_ORDER_BE) return "big-endian";
    return "";
  }

  static std::string ClassName(H5T_class_t cls) {
    switch (cls) {
      case H5T_STRING:
        return "type: string";
      case H5T_COMPOUND:
        return "type: compound";
      case H5T_REFERENCE:
        return "type: reference";
      case H5T_ARRAY:
        return "type: array";
      case H5T_VLEN:
        return "type: variable length";
      case H5T_BITFIELD:
        return "type: bitfield";
      case H5T_TIME:
        return "type: time";
      default:
        return "type: unknown";
    }
  }

  static std::string FilterName(H5Z_filter_t id) {
    switch (id) {
      case H5Z_FILTER_DEFLATE:
        return "compressed (deflate)";
      case H5Z_FILTER_SZIP:
        return "compressed (szip)";
      case H5Z_FILTER_NBIT:
        return "compressed (nbit)";
      case H5Z_FILTER_SCALEOFFSET:
        return "compressed (scaleoffset)";
      case H5Z_FILTER_SHUFFLE:
        return "filtered (shuffle)";
      case H5Z_FILTER_FLETCHER32:
        return "checksummed (fletcher32)";
      default:  // a plugin's (lzf 32000, blosc 32001, ...): none is a plain range
        return "compressed (filter " + std::to_string(id) + ")";
    }
  }

  // Why the dataset's bytes are not one plain range of the file, or "".
  static std::string Storage(hid_t dataset, hid_t dcpl, const Dataset& d) {
    // A compressor's name says most ("compressed (deflate)" over the shuffle before it).
    const int filters = H5Pget_nfilters(dcpl);
    std::string first;
    for (int i = 0; i < filters; ++i) {
      unsigned flags = 0, config = 0;
      size_t n = 0;
      const H5Z_filter_t id =
          H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n, nullptr, 0, nullptr, &config);
      const std::string name = FilterName(id);
      if (name.rfind("compressed", 0) == 0) return name;
      if (first.empty()) first = name;
    }
    if (!first.empty()) return first;
    if (H5Pget_external_count(dcpl) > 0) return "external storage";
    switch (H5Pget_layout(dcpl)) {
      case H5D_CONTIGUOUS:
        break;
      case H5D_CHUNKED:
        return "chunked";
      case H5D_COMPACT:
        return "compact";
      case H5D_VIRTUAL:
        return "virtual";
      default:
        return "layout unknown";
    }
    // A contiguous dataset's storage must hold all its elements.
    if (d.size > 0) {
      const hsize_t stored = H5Dget_storage_size(dataset);
      if (stored != 0 && stored != d.size) return "storage size differs from its shape";
    }
    return "";
  }

  // ---- Attributes. ----

  struct AttributeContext {
    Walker* walker;
    const std::string* path;
    std::vector<Attribute>* out;
  };

  void Attributes(hid_t object, const std::string& path, std::vector<Attribute>* out) {
    AttributeContext context{this, &path, out};
    hsize_t index = 0;
    if (H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, OnAttribute, &context) < 0) {
      LibraryFailed("listing the attributes of " + (path.empty() ? std::string("/") : path));
    }
  }

  static herr_t OnAttribute(hid_t object, const char* name, const H5A_info_t* /*info*/,
                            void* data) {
    const auto* c = static_cast<AttributeContext*>(data);
    c->walker->ReadAttribute(object, name, *c->path, c->out);
    return 0;
  }

  [[noreturn]] void AttributeFailed(const std::string& name, const std::string& path) {
    LibraryFailed("reading attribute " + name + " of " + (path.empty() ? "/" : path));
  }

  void ReadAttribute(hid_t object, const char* name, const std::string& path,
                     std::vector<Attribute>* out) {
    const Id attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
    if (!attribute.ok()) AttributeFailed(name, path);
    // Bounded before anything is read, so a huge attribute costs no memory.
    const hsize_t stored = H5Aget_storage_size(attribute.get());
    if (stored > limits_.attribute_bytes) TooLarge(name, path);
    const Id type(H5Aget_type(attribute.get()), H5Tclose);
    const Id space(H5Aget_space(attribute.get()), H5Sclose);
    if (!type.ok() || !space.ok()) AttributeFailed(name, path);
    const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
    if (space_class != H5S_SCALAR && space_class != H5S_SIMPLE) return;
    const hssize_t points = H5Sget_simple_extent_npoints(space.get());
    if (points < 0) AttributeFailed(name, path);
    const auto n = static_cast<uint64_t>(points);
    const bool scalar = space_class == H5S_SCALAR;
    nlohmann::json value;
    switch (H5Tget_class(type.get())) {
      case H5T_STRING:
        if (!Strings(attribute.get(), type.get(), space.get(), n, name, path, &value)) return;
        break;
      case H5T_INTEGER:
        if (H5Tget_sign(type.get()) == H5T_SGN_2) {
          value = Numbers<int64_t>(attribute.get(), H5T_NATIVE_INT64, n, name, path);
        } else {
          value = Numbers<uint64_t>(attribute.get(), H5T_NATIVE_UINT64, n, name, path);
        }
        break;
      case H5T_FLOAT:
        value = Numbers<double>(attribute.get(), H5T_NATIVE_DOUBLE, n, name, path);
        break;
      default:
        return;  // other types are left out (the header's promise)
    }
    if (scalar && value.is_array() && value.size() == 1) value = nlohmann::json(value[0]);
    out->push_back({name, std::move(value)});
  }

  [[noreturn]] void TooLarge(const std::string& name, const std::string& path) {
    std::string m = "attribute ";
    m += name;
    m += " of ";
    m += path.empty() ? "/" : path;
    m += " is larger than ";
    m += std::to_string(limits_.attribute_bytes);
    m += " bytes";
    Finish(Status::Code::kUnsupported, m);
  }

  template <typename T>
  nlohmann::json Numbers(hid_t attribute, hid_t memtype, uint64_t n, const char* name,
                         const std::string& path) {
    if (n > limits_.attribute_bytes) TooLarge(name, path);
    std::vector<T> values(n);
    if (n > 0 && H5Aread(attribute, memtype, values.data()) < 0) AttributeFailed(name, path);
    return nlohmann::json(values);
  }

  bool Strings(hid_t attribute, hid_t type, hid_t space, uint64_t n, const char* name,
               const std::string& path, nlohmann::json* value) {
    *value = nlohmann::json::array();
    if (n > limits_.attribute_bytes) TooLarge(name, path);
    const htri_t variable = H5Tis_variable_str(type);
    if (variable < 0) AttributeFailed(name, path);
    const Id memtype(H5Tcopy(H5T_C_S1), H5Tclose);
    if (!memtype.ok() || H5Tset_cset(memtype.get(), H5Tget_cset(type)) < 0) {
      AttributeFailed(name, path);
    }
    if (variable > 0) {
      if (H5Tset_size(memtype.get(), H5T_VARIABLE) < 0) AttributeFailed(name, path);
      std::vector<char*> strings(n, nullptr);
      if (n > 0 && H5Aread(attribute, memtype.get(), strings.data()) < 0) {
        AttributeFailed(name, path);
      }
      uint64_t total = 0;
      for (char* s : strings) {
        const std::string text = s == nullptr ? std::string() : std::string(s);
        total = SaturatingAdd(total, text.size());
        value->push_back(text);
      }
      H5Dvlen_reclaim(memtype.get(), space, H5P_DEFAULT, strings.data());
      if (total > limits_.attribute_bytes) TooLarge(name, path);
      return true;
    }
    const size_t size = H5Tget_size(type);
    const std::optional<uint64_t> bytes = CheckedMul(n, size);
    if (size == 0 || !bytes || *bytes > limits_.attribute_bytes) TooLarge(name, path);
    if (H5Tset_size(memtype.get(), size) < 0 ||
        H5Tset_strpad(memtype.get(), H5Tget_strpad(type)) < 0) {
      AttributeFailed(name, path);
    }
    std::string raw(*bytes, '\0');
    if (n > 0 && H5Aread(attribute, memtype.get(), raw.data()) < 0) AttributeFailed(name, path);
    const bool null_term = H5Tget_strpad(type) == H5T_STR_NULLTERM;
    for (uint64_t i = 0; i < n; ++i) {
      std::string s = raw.substr(i * size, size);
      if (null_term) {
        s.resize(std::strlen(s.c_str()));
      } else {
        while (!s.empty() && s.back() == '\0') s.pop_back();
      }
      value->push_back(std::move(s));
    }
    return true;
  }

  const Limits& limits_;
  File file_;
  std::set<haddr_t> seen_;
};

// Leaves the child nothing of the daemon it could reach or spend: the socket alone at a
// fixed descriptor, default signal handling (a crash kills it; the daemon's handlers never
// run here), no core file, memory and CPU capped.
void Confine(int sock, const Limits& limits) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (sock != kSocketFd && dup2(sock, kSocketFd) < 0) _exit(1);
  for (int fd = 0; fd < kSocketFd; ++fd) close(fd);
  if (close_range(kSocketFd + 1, ~0U, 0) < 0) {
    for (int fd = kSocketFd + 1; fd < 65536; ++fd) close(fd);
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  }
  signal(SIGPIPE, SIG_IGN);
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  const struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  const auto cpu_seconds = static_cast<rlim_t>(limits.timeout.count() / 1000 + 2);
  const struct rlimit cpu = {cpu_seconds, cpu_seconds};
  setrlimit(RLIMIT_CPU, &cpu);
  // What the fork inherited, plus 1 GiB for libhdf5.
  unsigned long pages = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%lu", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  if (pages > 0) {
    const rlim_t cap =
        static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (1ull << 30);
    const struct rlimit as = {cap, cap};
    setrlimit(RLIMIT_AS, &as);
  }
}

// libhdf5 looks for the signature at 0, 512, 1024, ... and reads 8 bytes at the first
// power of two past a short file's end too (sec2 gives zeros there; this driver refuses),
// so a file without one would fail on that read, not as "not an HDF5 file". Looked for
// here first, the same way, within the file.
bool HasSignature() {
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  for (uint64_t addr = 0; RangeWithin(addr, 8, g_size); addr = addr == 0 ? 512 : 2 * addr) {
    char bytes[8];
    if (!CachedRead(addr, 8, bytes)) _exit(0);
    if (std::memcmp(bytes, kSignature, 8) == 0) return true;
  }
  return false;
}

void Describe(const Limits& limits) {
  if (!HasSignature()) Finish(Status::Code::kCorruption, "not an HDF5 file");
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // libhdf5 never prints
  const H5FD_class_t driver_class = MakeDriverClass();
  const hid_t driver = H5FDregister(&driver_class);
  const Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (driver < 0 || !fapl.ok() || H5Pset_driver(fapl.get(), driver, nullptr) < 0) {
    LibraryFailed("to start");
  }
  const Id file(H5Fopen("ckptfs", H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) {
    const std::string reason = LibraryReason();
    if (reason.find("signature") != std::string::npos) {
      Finish(Status::Code::kCorruption, "not an HDF5 file");
    }
    Finish(Status::Code::kCorruption, "the HDF5 library cannot open it (" + reason + ")");
  }
  const Id root(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.ok()) LibraryFailed("opening the root group");
  Walker walker(limits);
  walker.Root(root.get());
  const std::string text = EncodeFile(walker.file());
  if (text.size() > kMaxResultBytes) {
    Finish(Status::Code::kUnsupported, "description larger than 256 MiB");
  }
  Send({kResult, text.size(), 0}, text.data(), text.size());
}

}  // namespace

void RunChild(int sock, uint64_t size, const Limits& limits) {
  Confine(sock, limits);
  g_size = size;
  try {
    Describe(limits);
  } catch (const std::bad_alloc&) {
    Finish(Status::Code::kUnsupported, "the HDF5 reader ran out of memory");
  } catch (...) {
    Finish(Status::Code::kCorruption, "the HDF5 reader failed");
  }
  _exit(0);
}

}  // namespace ckptfs::h5::internal
