// The parent/child wire of h5::Describe (protocol.h): message headers and the description
// as JSON text, decoded with a check of every field because the child's answer is no more
// trusted than the file it read.
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/encoding/ordered_json.h"
#include "core/format/keras/h5/protocol.h"

namespace ckptfs::h5::internal {

using nlohmann::json;

void EncodeHeader(const Header& h, uint8_t out[kHeaderBytes]) {
  out[0] = h.type;
  std::memcpy(out + 1, &h.a, 8);
  std::memcpy(out + 9, &h.b, 8);
}

Header DecodeHeader(const uint8_t in[kHeaderBytes]) {
  Header h;
  h.type = in[0];
  std::memcpy(&h.a, in + 1, 8);
  std::memcpy(&h.b, in + 9, 8);
  return h;
}

namespace {

json EncodeAttributes(const std::vector<Attribute>& attributes) {
  json out = json::array();
  for (const Attribute& a : attributes) out.push_back(json::array({a.name, a.value}));
  return out;
}

// Whether `v` is what an Attribute may hold: a string, a number, or an array of those.
bool PlainValue(const json& v, bool nested) {
  if (v.is_string() || v.is_number()) return true;
  if (v.is_null()) return true;  // a NaN float, as nlohmann writes it
  if (!v.is_array() || nested) return false;
  for (const json& e : v) {
    if (!PlainValue(e, true)) return false;
  }
  return true;
}

class Decoder {
 public:
  explicit Decoder(const std::string& shown) : shown_(shown) {}

  Status Bad(const std::string& what) const {
    std::string m = shown_;
    m += ": the HDF5 reader answered malformed (";
    m += what;
    m += ")";
    return Status::Corruption(m);
  }

  Status String(const json& o, const char* key, std::string* out) const {
    const auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return Bad(key);
    *out = it->get<std::string>();
    return Status::Ok();
  }

  Status U64(const json& o, const char* key, uint64_t* out) const {
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number_unsigned()) return Bad(key);
    *out = it->get<uint64_t>();
    return Status::Ok();
  }

  Status Attributes(const json& o, std::vector<Attribute>* out) const {
    const auto it = o.find("attrs");
    if (it == o.end() || !it->is_array()) return Bad("attrs");
    for (const json& a : *it) {
      if (!a.is_array() || a.size() != 2 || !a[0].is_string() || !PlainValue(a[1], false)) {
        return Bad("attribute");
      }
      out->push_back({a[0].get<std::string>(), a[1]});
    }
    return Status::Ok();
  }

  Status Dataset(const json& o, h5::Dataset* d) const {
    if (!o.is_object()) return Bad("dataset");
    CKPTFS_RETURN_IF_ERROR(String(o, "path", &d->path));
    uint64_t type = 0, type_size = 0;
    CKPTFS_RETURN_IF_ERROR(U64(o, "type", &type));
    if (type > static_cast<uint64_t>(TypeClass::kOther)) return Bad("type");
    d->type = static_cast<TypeClass>(type);
    CKPTFS_RETURN_IF_ERROR(U64(o, "type_size", &type_size));
    if (type_size > UINT32_MAX) return Bad("type_size");
    d->type_size = static_cast<uint32_t>(type_size);
    const auto is_signed = o.find("signed");
    if (is_signed == o.end() || !is_signed->is_boolean()) return Bad("signed");
    d->is_signed = is_signed->get<bool>();
    const auto shape = o.find("shape");
    if (shape == o.end() || !shape->is_array()) return Bad("shape");
    for (const json& n : *shape) {
      if (!n.is_number_unsigned()) return Bad("shape");
      d->shape.push_back(n.get<uint64_t>());
    }
    CKPTFS_RETURN_IF_ERROR(U64(o, "offset", &d->offset));
    CKPTFS_RETURN_IF_ERROR(U64(o, "size", &d->size));
    CKPTFS_RETURN_IF_ERROR(String(o, "problem", &d->problem));
    return Attributes(o, &d->attributes);
  }

 private:
  const std::string& shown_;
};

}  // namespace

std::string EncodeFile(const File& file) {
  json groups = json::array();
  for (const Group& g : file.groups) {
    groups.push_back({{"path", g.path}, {"attrs", EncodeAttributes(g.attributes)}});
  }
  json datasets = json::array();
  for (const Dataset& d : file.datasets) {
    datasets.push_back({{"path", d.path},
                        {"type", static_cast<uint64_t>(d.type)},
                        {"type_size", static_cast<uint64_t>(d.type_size)},
                        {"signed", d.is_signed},
                        {"shape", d.shape},
                        {"offset", d.offset},
                        {"size", d.size},
                        {"problem", d.problem},
                        {"attrs", EncodeAttributes(d.attributes)}});
  }
  const json out = {{"groups", std::move(groups)}, {"datasets", std::move(datasets)}};
  // Names and strings in a file need not be UTF-8: replaced bytes make at worst two paths
  // equal, which ValidateFile refuses.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<File> DecodeFile(std::string_view text, const std::string& shown) {
  const Decoder d(shown);
  try {
    // The child ran libhdf5 on untrusted bytes: what it sends is untrusted too.
    Result<json> parsed = ParseJson<json>(text, "its description");
    if (!parsed.ok()) return d.Bad(parsed.status().message());
    const json& doc = *parsed;
    if (!doc.is_object()) return d.Bad("not a JSON object");
    const auto groups = doc.find("groups");
    const auto datasets = doc.find("datasets");
    if (groups == doc.end() || !groups->is_array()) return d.Bad("groups");
    if (datasets == doc.end() || !datasets->is_array()) return d.Bad("datasets");
    File file;
    for (const json& g : *groups) {
      if (!g.is_object()) return d.Bad("group");
      Group group;
      CKPTFS_RETURN_IF_ERROR(d.String(g, "path", &group.path));
      CKPTFS_RETURN_IF_ERROR(d.Attributes(g, &group.attributes));
      file.groups.push_back(std::move(group));
    }
    for (const json& o : *datasets) {
      Dataset dataset;
      CKPTFS_RETURN_IF_ERROR(d.Dataset(o, &dataset));
      file.datasets.push_back(std::move(dataset));
    }
    return file;
  } catch (const json::exception& e) {
    return d.Bad(e.what());
  }
}

}  // namespace ckptfs::h5::internal
