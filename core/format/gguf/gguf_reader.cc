// The GGUF entry of the format table: one `.gguf` file (plain or .zst), or a split set
// `NAME-0000K-of-0000N.gguf` as llama.cpp's gguf-split and convert_hf_to_gguf.py
// --split-max-size write them (llama_split_path: "%s-%05d-of-%05d.gguf"; every split
// holds split.no, split.count and split.tensors.count, the first the model's key-values).
// SOURCE is the file, a directory holding one model, or any split of a set (the set is
// read from its first split, as llama.cpp's loader does).
//
// Each file is a shard; its tensors are the checkpoint's, named as GGUF names them. A
// tensor of a ggml type with a Dtype (F32, F16, BF16, F64, I8..I64) is that Dtype in
// numpy's shape (GGUF's dimensions reversed: ne[0] is innermost); a quantized one (Q4_0,
// the K-quants, IQ types...) is its bytes, whose BlockType says what they hold.
// At the root: the file itself, or for a split set its splits and NAME.gguf, the set as
// one file (MergedFile below). .ckptfs/metadata.json holds the key-values.
#include <algorithm>
#include <atomic>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/format_reader.h"
#include "core/checkpoint/model.h"
#include "core/format/gguf/gguf_file.h"

namespace ckptfs {
namespace {

constexpr std::string_view kSuffix = ".gguf";
constexpr std::string_view kSplitKeyPrefix = "split.";
// Names a server that cannot list is asked for: ckptfs pack's and a plain `model.gguf`.
constexpr std::string_view kProbeNames[] = {"model.gguf", "model.gguf.zst"};

// A split's place in its set, from its name: "NAME-00002-of-00003.gguf" -> {NAME, 2, 3}.
struct SplitName {
  std::string prefix;
  uint32_t no = 0;  // 1-based, as the name counts
  uint32_t count = 0;
};

bool IsGguf(std::string_view name) { return EndsWith(StripZst(name), kSuffix); }

std::optional<SplitName> ParseSplitName(std::string_view name) {
  name = StripZst(name);
  constexpr size_t kTail = std::string_view("-00001-of-00003.gguf").size();
  if (!EndsWith(name, kSuffix) || name.size() <= kTail) return std::nullopt;
  const std::string_view tail = name.substr(name.size() - kTail);
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || !digits(tail.substr(1, 5)) ||
      !digits(tail.substr(10, 5))) {
    return std::nullopt;
  }
  SplitName out{std::string(name.substr(0, name.size() - kTail)),
                static_cast<uint32_t>(std::stoul(std::string(tail.substr(1, 5)))),
                static_cast<uint32_t>(std::stoul(std::string(tail.substr(10, 5))))};
  if (out.no == 0 || out.count == 0 || out.no > out.count) return std::nullopt;
  return out;
}

std::string SplitFileName(const std::string& prefix, uint32_t no, uint32_t count) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "-%05u-of-%05u.gguf", no, count);
  return prefix + tail;
}

// The models of `dir`: lone files, and split sets by their first split (plain names).
std::vector<std::string> Models(const SourceDir& dir) {
  std::vector<std::string> models;
  for (const std::string& f : dir.files) {
    if (!IsGguf(f)) continue;
    std::string plain(StripZst(f));
    if (std::optional<SplitName> split = ParseSplitName(plain)) {
      plain = SplitFileName(split->prefix, 1, split->count);
    }
    if (std::find(models.begin(), models.end(), plain) == models.end()) {
      models.push_back(std::move(plain));
    }
  }
  return models;
}

Result<std::optional<Claim>> DetectGguf(const SourceDir& dir) {
  if (!dir.named.empty()) {
    if (!IsGguf(dir.named)) return std::optional<Claim>();
    std::string file(StripZst(dir.named));
    if (std::optional<SplitName> split = ParseSplitName(file)) {
      return std::optional<Claim>(
          Claim{Claim::Rank::kNamed, SplitFileName(split->prefix, 1, split->count)});
    }
    return std::optional<Claim>(Claim{Claim::Rank::kLoneFile, std::move(file)});
  }
  const std::vector<std::string> models = Models(dir);
  if (models.empty()) return std::optional<Claim>();
  if (models.size() > 1) {
    return std::optional<Claim>(Claim{
        Claim::Rank::kLoneFile, "",
        Status::InvalidArgument(dir.path + ": " + std::to_string(models.size()) + " GGUF models (" +
                                models[0] + ", " + models[1] + (models.size() > 2 ? ", ..." : "") +
                                "); mount one of them")});
  }
  const bool split = ParseSplitName(models[0]).has_value();
  return std::optional<Claim>(
      Claim{split ? Claim::Rank::kNamed : Claim::Rank::kLoneFile, models[0]});
}

// What the blocks and root_files hooks need: each file's header, and each tensor's type.
struct GgufState final : FormatState {
  std::vector<gguf::Header> headers;  // per shard (split order)
  std::string merged_name;            // NAME.gguf of a split set; "" for one file
  // Per tensor of Checkpoint::tensors: its ggml type and (for a block type) its shape.
  std::vector<const gguf::GgmlType*> types;
  std::vector<std::vector<uint64_t>> block_shapes;
  std::string summary;  // inspect's "gguf" line
};

const GgufState* StateOf(const Checkpoint& ckpt) {
  return dynamic_cast<const GgufState*>(ckpt.format_state.get());
}

// The split keys of split `k` (0-based) of `count`, checked against its name and set.
Status CheckSplit(const gguf::Header& h, uint32_t k, uint32_t count, uint64_t& tensors_total,
                  const std::string& shown) {
  const std::optional<uint64_t> no = h.Unsigned("split.no");
  const std::optional<uint64_t> n = h.Unsigned("split.count");
  const std::optional<uint64_t> total = h.Unsigned("split.tensors.count");
  if (!no || !n || !total) {
    return Status::Corruption(shown + ": named as split " + std::to_string(k + 1) + " of " +
                              std::to_string(count) +
                              " but holds no split.no, split.count and split.tensors.count");
  }
  if (*no != k || *n != count) {
    return Status::Corruption(shown + ": says it is split " + std::to_string(*no + 1) + " of " +
                              std::to_string(*n) + ", its name split " + std::to_string(k + 1) +
                              " of " + std::to_string(count) + " (from another set?)");
  }
  if (k == 0) tensors_total = *total;
  if (*total != tensors_total) {
    return Status::Corruption(shown + ": split.tensors.count " + std::to_string(*total) +
                              ", the first split's " + std::to_string(tensors_total) +
                              " (from another model?)");
  }
  return Status::Ok();
}

Status SplitMissing(const SourceDir& dir, const std::string& name, uint32_t k, uint32_t count,
                    const std::string& first) {
  return Status::NotFound(JoinShown(dir.path, name) + ": split " + std::to_string(k) + " of " +
                          std::to_string(count) + " of " + JoinShown(dir.path, first) +
                          " is missing");
}

// The files of the claim, opened, and their headers, read several at once.
Status OpenFiles(const SourceDir& dir, const Claim& claim, ReadContext& context, Checkpoint& ckpt,
                 GgufState& state) {
  std::vector<std::string> names = {claim.file};
  const std::optional<SplitName> split = ParseSplitName(claim.file);
  if (split) {
    names.clear();
    for (uint32_t k = 1; k <= split->count; ++k) {
      names.push_back(SplitFileName(split->prefix, k, split->count));
    }
    state.merged_name = split->prefix + std::string(kSuffix);
  }
  std::vector<StoredFile> files(names.size());
  std::vector<gguf::Header> headers(names.size());
  std::vector<Status> errors(names.size());
  // Once a split is missing the set is refused: the splits not yet begun are not asked
  // for, so a name claiming 99999 splits costs a few questions, not 99999.
  std::atomic<bool> missing{false};
  ForEachInParallel(names.size(), [&](size_t i) {
    if (missing) return;
    Result<StoredFile> f = OpenWeightFile(dir, names[i], context);
    if (!f.ok()) {
      missing = missing || f.status().code() == Status::Code::kNotFound;
      errors[i] = f.status();
      return;
    }
    Result<gguf::Header> h = gguf::ReadHeader(*f->source, f->source->Name());
    if (!h.ok()) {
      errors[i] = h.status();
      return;
    }
    files[i] = std::move(f).value();
    headers[i] = std::move(h).value();
  });
  uint64_t tensors_total = 0, tensors = 0;
  // In order: a split skipped above comes after the one found missing.
  for (size_t i = 0; i < names.size(); ++i) {
    // Neither NAME nor NAME.zst (OpenWeightFile tries both, asking a server that cannot
    // list): the set is not whole.
    if (split && errors[i].code() == Status::Code::kNotFound) {
      return SplitMissing(dir, names[i], static_cast<uint32_t>(i + 1), split->count, claim.file);
    }
    CKPTFS_RETURN_IF_ERROR(errors[i]);
    const std::string shown = JoinShown(dir.path, files[i].stored_name);
    if (split) {
      CKPTFS_RETURN_IF_ERROR(
          CheckSplit(headers[i], static_cast<uint32_t>(i), split->count, tensors_total, shown));
    }
    tensors += headers[i].tensors.size();
    ckpt.shards.push_back(std::move(files[i]));
    state.headers.push_back(std::move(headers[i]));
  }
  if (split && tensors != tensors_total) {
    return Status::Corruption(JoinShown(dir.path, claim.file) + ": the splits hold " +
                              std::to_string(tensors) + " tensors, split.tensors.count says " +
                              std::to_string(tensors_total));
  }
  return Status::Ok();
}

// The tensors of every file, as storages in file order and tensors sorted by name.
Status AddTensors(Checkpoint& ckpt, GgufState& state) {
  struct Found {
    const gguf::TensorInfo* info;
    uint32_t shard;
    uint32_t storage;
  };
  std::vector<Found> found;
  for (uint32_t s = 0; s < state.headers.size(); ++s) {
    const gguf::Header& h = state.headers[s];
    std::vector<const gguf::TensorInfo*> by_offset;
    for (const gguf::TensorInfo& t : h.tensors) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->offset < b->offset; });
    for (const gguf::TensorInfo* t : by_offset) {
      const Dtype dtype = t->type->dtype.value_or(Dtype::kU8);
      ckpt.storages.push_back(Storage{s, h.data_start + t->offset, t->bytes, dtype});
      found.push_back({t, s, static_cast<uint32_t>(ckpt.storages.size() - 1)});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.info->name < b.info->name; });
  for (size_t i = 1; i < found.size(); ++i) {
    if (found[i].info->name == found[i - 1].info->name) {
      return Status::Corruption(ckpt.shards[found[i].shard].source->Name() + ": tensor \"" +
                                found[i].info->name + "\" is also in " +
                                ckpt.shards[found[i - 1].shard].source->Name());
    }
  }
  for (const Found& f : found) {
    const gguf::TensorInfo& t = *f.info;
    const Storage& s = ckpt.storages[f.storage];
    const bool blocks = !t.type->dtype;
    ckpt.tensors.push_back(
        Tensor{.name = t.name,
               .dtype = s.dtype,
               .shape = blocks ? std::vector<uint64_t>{t.bytes} : gguf::NumpyShape(t),
               .shard = f.shard,
               .offset = s.offset,
               .size = s.size,
               .storage = f.storage});
    state.types.push_back(t.type);
    state.block_shapes.push_back(blocks ? gguf::NumpyShape(t) : std::vector<uint64_t>());
  }
  return Status::Ok();
}

// metadata.json: the key-values of the (first) file, a split set's split.* left out as
// the merged file leaves them.
std::string MetadataText(const gguf::Header& h, bool split) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const gguf::KeyValue& kv : h.kv) {
    if (split && kv.key.starts_with(kSplitKeyPrefix)) continue;
    out[kv.key] = kv.value;
  }
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status ReadGguf(const SourceDir& dir, const Claim& claim, ReadContext& context, Checkpoint& ckpt) {
  auto state = std::make_unique<GgufState>();
  CKPTFS_RETURN_IF_ERROR(OpenFiles(dir, claim, context, ckpt, *state));
  CKPTFS_RETURN_IF_ERROR(AddTensors(ckpt, *state));
  const gguf::Header& first = state->headers.front();
  ckpt.state_json = MetadataText(first, !state->merged_name.empty());
  ckpt.metadata = {{"format", "pt"}};
  const size_t kvs = static_cast<size_t>(
      std::count_if(first.kv.begin(), first.kv.end(), [&](const gguf::KeyValue& kv) {
        return state->merged_name.empty() || !kv.key.starts_with(kSplitKeyPrefix);
      }));
  state->summary = first.String("general.architecture").value_or("no general.architecture") +
                   "; version " + std::to_string(first.version) + ", alignment " +
                   std::to_string(first.alignment) + ", " + std::to_string(kvs) + " key-values" +
                   (state->merged_name.empty() ? std::string()
                                               : "; " + std::to_string(state->headers.size()) +
                                                     " splits as " + state->merged_name);
  ckpt.format_state = std::move(state);
  return Status::Ok();
}

std::optional<BlockType> GgufBlocks(const Checkpoint& ckpt, size_t i) {
  const GgufState* state = StateOf(ckpt);
  if (!state || i >= state->types.size() || state->types[i]->dtype) return std::nullopt;
  const gguf::GgmlType& type = *state->types[i];
  return BlockType{type.name, type.extension, type.block_elements, type.block_bytes,
                   state->block_shapes[i]};
}

// A split set as the one file gguf-split --merge writes (gguf_merge, tools/gguf-split):
// the first split's key-values as stored, less split.*, then every split's tensors in
// split order, each tensor's data where the previous one's ends, padded with zeros to
// the first split's alignment. gguf-split itself keeps split.no and split.tensors.count
// and sets split.count to 0; leaving them out instead makes the file the one
// convert_hf_to_gguf.py writes unsplit, byte for byte, which llama.cpp's loader reads
// alike (no split.count: one file).
RootFile MergedFile(const GgufState& state) {
  const gguf::Header& first = state.headers.front();
  std::vector<gguf::KeyValue> kv;
  for (const gguf::KeyValue& k : first.kv) {
    if (!k.key.starts_with(kSplitKeyPrefix)) kv.push_back(k);
  }
  std::vector<gguf::TensorInfo> tensors;
  std::vector<StoredRange> ranges;
  for (uint32_t s = 0; s < state.headers.size(); ++s) {
    for (const gguf::TensorInfo& t : state.headers[s].tensors) {
      tensors.push_back(t);
      ranges.push_back({s, state.headers[s].data_start + t.offset, t.bytes});
    }
  }
  std::vector<uint64_t> offsets;
  RootFile file;
  file.name = state.merged_name;
  auto made = [&file](std::string bytes) {
    RootFile::Piece piece;
    piece.bytes = std::move(bytes);
    file.pieces.push_back(std::move(piece));
  };
  made(gguf::BuildHeader(kv, first.kv_bytes, tensors, first.alignment, offsets));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (ranges[i].size) {
      RootFile::Piece piece;
      piece.range = ranges[i];
      piece.tensor = true;
      file.pieces.push_back(std::move(piece));
    }
    const uint64_t pad = gguf::AlignUp(ranges[i].size, first.alignment) - ranges[i].size;
    if (pad) made(std::string(pad, '\0'));
  }
  return file;
}

std::vector<RootFile> GgufRootFiles(const Checkpoint& ckpt) {
  const GgufState* state = StateOf(ckpt);
  if (!state) return {};
  std::vector<RootFile> files;
  if (!state->merged_name.empty()) files.push_back(MergedFile(*state));
  for (uint32_t s = 0; s < ckpt.shards.size(); ++s) {
    RootFile stored;
    stored.name = ckpt.shards[s].name;
    stored.shard = s;
    files.push_back(std::move(stored));
  }
  return files;
}

std::vector<std::pair<std::string, std::string>> GgufInspect(const Checkpoint& ckpt) {
  const GgufState* state = StateOf(ckpt);
  if (!state) return {};
  // The architecture and the file's own numbers; bytes per ggml type are inspect's
  // "params" rows, whose dtypes are the ggml types (BlockType).
  return {{"gguf", state->summary}};
}

}  // namespace

FormatReader GgufFormat() {
  return FormatReader{
      .name = "gguf",
      .title = "GGUF",
      .probe_names = kProbeNames,
      .looks_for = "*.gguf, NAME-00001-of-0000N.gguf",
      .accepts_file = &IsGguf,
      .file_kinds = ".gguf",
      .detect = &DetectGguf,
      .read = &ReadGguf,
      .hidden = nullptr,  // every other file of SOURCE is shown
      .blocks = &GgufBlocks,
      .root_files = &GgufRootFiles,
      .model = {.top_key = &DottedTopKey},
      .inspect = &GgufInspect,
  };
}

}  // namespace ckptfs
