#include "core/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "core/cache/disk_cache.h"
#include "core/codec/zstd_source.h"
#include "core/format/hf_index.h"
#include "core/format/torch_file.h"
#include "core/source/http_source.h"
#include "core/source/local_dir.h"
#include "core/source/remote_source.h"
#include "core/source/s3.h"

namespace ckptfs {
namespace {

constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
constexpr std::string_view kTorchIndexSuffix = ".bin.index.json";
constexpr std::string_view kWeightSuffix = ".safetensors";
constexpr std::string_view kTorchSuffixes[] = {".bin", ".pt", ".pth"};
constexpr std::string_view kZstdSuffix = ".zst";
constexpr std::string_view kPreferredIndex = "model.safetensors.index.json";
constexpr std::string_view kPreferredTorchFile = "pytorch_model.bin";
constexpr uint64_t kMaxIndexBytes = 256ull << 20;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Splits "dir/name" into ("dir", "name"); a bare name lives in ".".
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// A SourceDir over local directory `root` offering `files`. Every file is opened through
// `root`, so nothing outside it is served (core/source/local_dir.h).
SourceDir LocalDir(std::shared_ptr<const LocalDirectory> root, std::vector<std::string> files) {
  SourceDir dir{root->path(), std::move(files), nullptr};
  dir.open = [root](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    CKPTFS_ASSIGN_OR_RETURN(auto file, root->OpenFile(name));
    return std::unique_ptr<ByteSource>(std::move(file));
  };
  return dir;
}

Result<std::string> ReadWhole(const ByteSource& source);

bool IsUrl(std::string_view path) {
  return path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0 || IsS3Url(path);
}

// Files a directory URL may hold besides weights. A server cannot list a directory, so
// these are asked for by name, and a 404 only means the file is not there.
constexpr std::string_view kKnownRemoteFiles[] = {"config.json",
                                                  "generation_config.json",
                                                  "tokenizer.json",
                                                  "tokenizer_config.json",
                                                  "special_tokens_map.json",
                                                  "tokenizer.model",
                                                  "vocab.json",
                                                  "merges.txt",
                                                  "added_tokens.json",
                                                  "preprocessor_config.json"};

// A SourceDir over a URL: a directory (ending in '/') whose index names the shards, or
// one weights file. Objects found while discovering stay open for `open`, so each is
// asked for once.
// An object read through the block cache, the disk cache and parallel fetches once the
// mount serves (see RemoteSource).
std::unique_ptr<ByteSource> CachedRemote(std::unique_ptr<HttpSource> object, CodecContext& codec) {
  std::string identity = object->Identity();
  return std::make_unique<RemoteSource>(std::move(object), std::move(identity), codec,
                                        codec.disk_cache());
}

Result<SourceDir> HttpDir(const std::string& url, const HttpOptions& options, CodecContext& codec) {
  const size_t slash = url.rfind('/');
  const std::string base = url.substr(0, slash + 1);
  // One deadline for every request of opening: discovery here, then the header reads of
  // OpenCheckpointIn (the sources keep it until BeginServing).
  if (std::string problem = UrlPasswordProblem(url); !problem.empty()) {
    return Status::InvalidArgument(problem);
  }
  HttpOptions http = options;
  http.open_deadline = std::chrono::steady_clock::now() + http.timeout;
  if (const char* password = std::getenv("CKPTFS_HTTP_PASSWORD");
      password && http.password.empty()) {
    http.password = password;
  }
  // The one file a URL names is asked for as the user wrote it; every other name (known
  // names, names from an index) becomes one percent-encoded segment under `base`.
  const std::string named_file = slash + 1 < url.size() ? url.substr(slash + 1) : std::string();
  auto url_of = [base, named_file, url](const std::string& name) {
    return !named_file.empty() && name == named_file ? url : base + EncodeUrlSegment(name);
  };
  auto found = std::make_shared<std::map<std::string, std::unique_ptr<ByteSource>>>();
  auto probe = [url_of, found, http, &codec](const std::string& name) -> Result<bool> {
    if (found->count(name)) return true;
    auto source = HttpSource::Open(url_of(name), name, http);
    if (!source.ok()) {
      if (source.status().code() == Status::Code::kNotFound) return false;
      return source.status();
    }
    found->emplace(name, CachedRemote(std::move(source).value(), codec));
    return true;
  };
  SourceDir dir{RedactedUrl(url), {}, nullptr, /*remote=*/true};
  dir.open = [url_of, found, http,
              &codec](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    auto it = found->find(name);
    if (it != found->end() && it->second) return std::move(it->second);
    CKPTFS_ASSIGN_OR_RETURN(auto source, HttpSource::Open(url_of(name), name, http));
    return CachedRemote(std::move(source), codec);
  };
  auto add_weight = [&](const std::string& name) -> Result<bool> {
    for (const std::string& stored : {name, name + std::string(kZstdSuffix)}) {
      CKPTFS_ASSIGN_OR_RETURN(bool there, probe(stored));
      if (there) {
        dir.files.push_back(stored);
        return true;
      }
    }
    return false;
  };
  if (!named_file.empty()) {  // one file
    CKPTFS_ASSIGN_OR_RETURN(bool there, probe(named_file));
    if (!there) return Status::NotFound(dir.path + ": not found");
    dir.files.push_back(named_file);
    return dir;
  }
  bool have_weights = false;
  for (std::string_view index_name :
       {kPreferredIndex, std::string_view("pytorch_model.bin.index.json")}) {
    const std::string name(index_name);
    CKPTFS_ASSIGN_OR_RETURN(bool there, probe(name));
    if (!there) continue;
    CKPTFS_ASSIGN_OR_RETURN(std::string text, ReadWhole(*found->at(name)));
    CKPTFS_ASSIGN_OR_RETURN(HfIndex index, ParseHfIndex(text, name));
    // Opening the checkpoint reads the index again: hand it these bytes, not the server.
    (*found)[name] = std::make_unique<MemorySource>(name, std::move(text));
    dir.files.push_back(name);
    for (const std::string& shard : index.shard_files) {
      // A server decodes what it is sent: "..%2Fx" would be "../x" to it.
      if (const std::string problem = UrlNameProblem(shard); !problem.empty()) {
        return Status::Corruption(name + ": shard name \"" + shard.substr(0, 200) +
                                  "\" is not a plain file name inside the checkpoint directory (" +
                                  problem + ")");
      }
      CKPTFS_ASSIGN_OR_RETURN(bool stored, add_weight(shard));
      if (!stored) return Status::NotFound(shard + ": shard named in " + name + " is missing");
    }
    have_weights = true;
    break;
  }
  for (std::string_view single : {"model.safetensors", "pytorch_model.bin"}) {
    if (have_weights) break;
    CKPTFS_ASSIGN_OR_RETURN(have_weights, add_weight(std::string(single)));
  }
  if (!have_weights) {
    return Status::InvalidArgument(url +
                                   ": no model.safetensors.index.json, "
                                   "pytorch_model.bin.index.json, model.safetensors or "
                                   "pytorch_model.bin found");
  }
  for (std::string_view other : kKnownRemoteFiles) {
    CKPTFS_ASSIGN_OR_RETURN(bool there, probe(std::string(other)));
    if (there) dir.files.push_back(std::string(other));
  }
  std::sort(dir.files.begin(), dir.files.end());
  return dir;
}

// A SourceDir over s3://bucket/prefix/ or s3://bucket/key. A directory is one
// ListObjectsV2 (paged), which gives every object's size and ETag: files are made from
// it with no request each. One object is HEADed. Only objects directly under the prefix
// with safe names are files (S3CheckpointFiles): deeper keys are subdirectories.
Result<SourceDir> S3Dir(const std::string& url, const RemoteOptions& remote, CodecContext& codec) {
  CKPTFS_ASSIGN_OR_RETURN(S3Url where, ParseS3Url(url));
  CKPTFS_ASSIGN_OR_RETURN(S3Target target, ResolveS3(where, remote));
  // One deadline for every request of opening (see HttpDir).
  target.http.open_deadline = std::chrono::steady_clock::now() + target.http.timeout;
  auto target_ptr = std::make_shared<const S3Target>(std::move(target));
  SourceDir dir{where.ToString(), {}, nullptr, /*remote=*/true};
  auto listed = std::make_shared<std::map<std::string, S3Object>>();
  auto headed = std::make_shared<std::map<std::string, std::unique_ptr<ByteSource>>>();
  if (where.IsDirectory()) {
    CKPTFS_ASSIGN_OR_RETURN(std::vector<S3Object> objects, ListS3(*target_ptr, where));
    for (auto& [name, object] : S3CheckpointFiles(where.key, std::move(objects))) {
      dir.files.push_back(name);
      listed->emplace(name, std::move(object));
    }
    if (dir.files.empty()) return Status::NotFound(dir.path + ": no objects under this prefix");
  } else {
    const std::string name = where.key.substr(where.key.rfind('/') + 1);
    CKPTFS_ASSIGN_OR_RETURN(auto object, HttpSource::Open(target_ptr->ObjectUrl(where.key), name,
                                                          target_ptr->http, dir.path));
    headed->emplace(name, CachedRemote(std::move(object), codec));
    dir.files.push_back(name);
  }
  dir.open = [target_ptr, listed, headed, where, shown = dir.path,
              &codec](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    if (auto it = headed->find(name); it != headed->end() && it->second) {
      return std::move(it->second);
    }
    if (auto it = listed->find(name); it != listed->end()) {
      const S3Object& o = it->second;
      return CachedRemote(HttpSource::FromListing(target_ptr->ObjectUrl(o.key), name, o.size,
                                                  o.etag, target_ptr->http),
                          codec);
    }
    if (!where.IsDirectory() && headed->count(name)) {  // the one object, opened again
      CKPTFS_ASSIGN_OR_RETURN(auto source, HttpSource::Open(target_ptr->ObjectUrl(where.key), name,
                                                            target_ptr->http, shown));
      return CachedRemote(std::move(source), codec);
    }
    return Status::NotFound(name + ": not in " + shown);
  };
  return dir;
}

Result<StoredFile> OpenStored(const SourceDir& dir, const std::string& name) {
  CKPTFS_ASSIGN_OR_RETURN(auto source, dir.open(name));
  const uint32_t mode = source->Mode();
  return StoredFile{name, name, std::move(source), mode};
}

bool Contains(const std::vector<std::string>& sorted, const std::string& name) {
  return std::binary_search(sorted.begin(), sorted.end(), name);
}

// A weight file as stored: NAME itself, or NAME.zst decoded on read (plain wins when both
// exist: same bytes, no decoding).
Result<StoredFile> OpenWeightFile(const SourceDir& dir, const std::string& name,
                                  CodecContext& codec) {
  if (Contains(dir.files, name) || !Contains(dir.files, name + std::string(kZstdSuffix))) {
    return OpenStored(dir, name);
  }
  const std::string stored = name + std::string(kZstdSuffix);
  CKPTFS_ASSIGN_OR_RETURN(auto compressed, dir.open(stored));
  const uint32_t mode = compressed->Mode();
  CKPTFS_ASSIGN_OR_RETURN(auto decoded, ZstdSource::Open(std::move(compressed), codec));
  return StoredFile{name, stored, std::move(decoded), mode};
}

std::string_view StripZst(std::string_view name) {
  if (EndsWith(name, kZstdSuffix)) name.remove_suffix(kZstdSuffix.size());
  return name;
}

// "x.safetensors" for both "x.safetensors" and "x.safetensors.zst"; empty otherwise.
std::string WeightName(const std::string& file) {
  std::string_view name = StripZst(file);
  return EndsWith(name, kWeightSuffix) ? std::string(name) : std::string();
}

// "x.bin" for "x.bin" and "x.bin.zst" (likewise .pt, .pth); empty otherwise.
std::string TorchWeightName(const std::string& file) {
  std::string_view name = StripZst(file);
  for (std::string_view suffix : kTorchSuffixes) {
    if (EndsWith(name, suffix)) return std::string(name);
  }
  return std::string();
}

bool IsTorchShard(const std::string& name) { return !EndsWith(name, kWeightSuffix); }

Result<std::string> ReadWhole(const ByteSource& source) {
  if (source.Size() > kMaxIndexBytes) {
    return Status::Corruption(source.Name() + ": index larger than 256 MiB");
  }
  std::string text(source.Size(), '\0');
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(0, {reinterpret_cast<uint8_t*>(text.data()), text.size()}));
  return text;
}

// What one weight file holds, shard-local: storage indices count from 0.
struct ShardContents {
  std::vector<Tensor> tensors;
  std::vector<Storage> storages;
  Metadata metadata;
  std::string state_json;
};

ShardContents FromSafetensors(SafetensorsHeader& header, uint32_t shard_no) {
  ShardContents out;
  out.tensors.reserve(header.tensors.size());
  out.storages.reserve(header.tensors.size());
  for (TensorEntry& t : header.tensors) {
    const uint64_t offset = header.data_start + t.begin, size = t.end - t.begin;
    out.storages.push_back(Storage{shard_no, offset, size, t.dtype});
    Tensor tensor{std::move(t.name),
                  t.dtype,
                  std::move(t.shape),
                  shard_no,
                  offset,
                  size,
                  static_cast<uint32_t>(out.storages.size() - 1),
                  0,
                  {}};
    out.tensors.push_back(std::move(tensor));
  }
  out.metadata = std::move(header.metadata);
  return out;
}

ShardContents FromTorch(TorchFile& file, uint32_t shard_no) {
  ShardContents out;
  for (const TorchStorage& s : file.storages) {
    out.storages.push_back(Storage{shard_no, s.data_offset, s.size, s.dtype, true, s.crc32});
  }
  for (TorchTensor& t : file.tensors) {
    const Storage& s = out.storages[t.storage];
    const uint64_t element = DtypeSize(s.dtype);
    Tensor tensor{std::move(t.name), s.dtype, std::move(t.shape), shard_no, 0, 0, t.storage,
                  t.storage_offset,  {}};
    if (IsRowMajor(tensor.shape, t.stride)) {
      // The interpreter checked that the view lies inside the storage.
      tensor.size = TensorByteSize(s.dtype, tensor.shape).value_or(0);  // 0: empty
      // An empty view may name any offset; keep it at its storage.
      tensor.offset = s.offset + (tensor.size ? t.storage_offset * element : 0);
    } else {
      tensor.stride = std::move(t.stride);
    }
    out.tensors.push_back(std::move(tensor));
  }
  out.state_json = std::move(file.state_json);
  return out;
}

Result<ShardContents> ReadShard(const StoredFile& shard, uint32_t shard_no) {
  if (IsTorchShard(shard.name)) {
    CKPTFS_ASSIGN_OR_RETURN(TorchFile file, ReadTorchFile(*shard.source));
    return FromTorch(file, shard_no);
  }
  CKPTFS_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(*shard.source));
  return FromSafetensors(header, shard_no);
}

// Adds one shard's tensors and storages as shard `shard_no`, merging its metadata and
// state. (A shard read before the index was parsed did not know its number.)
void AddShard(Checkpoint& ckpt, ShardContents& shard, uint32_t shard_no) {
  const uint32_t base = static_cast<uint32_t>(ckpt.storages.size());
  for (Storage& s : shard.storages) {
    s.shard = shard_no;
    ckpt.storages.push_back(s);
  }
  for (Tensor& t : shard.tensors) {
    t.storage += base;
    t.shard = shard_no;
    ckpt.tensors.push_back(std::move(t));
  }
  std::vector<Tensor>().swap(shard.tensors);  // the peak holds one shard twice, not all
  std::vector<Storage>().swap(shard.storages);
  for (auto& kv : shard.metadata) {
    auto same_key = [&](const auto& m) { return m.first == kv.first; };
    if (std::none_of(ckpt.metadata.begin(), ckpt.metadata.end(), same_key)) {
      ckpt.metadata.push_back(std::move(kv));
    }
  }
  if (shard.state_json.empty()) return;
  if (ckpt.state_json.empty()) {
    ckpt.state_json = std::move(shard.state_json);
    return;
  }
  // Several shards with state (rare): merge their objects, first shard wins.
  auto merged = nlohmann::ordered_json::parse(ckpt.state_json);
  auto more = nlohmann::ordered_json::parse(shard.state_json);
  if (merged.is_object() && more.is_object()) {
    for (auto& [key, value] : more.items()) {
      if (!merged.contains(key)) merged[key] = value;
    }
    ckpt.state_json = merged.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
}

// Threads for `jobs` independent pieces of work: one piece per thread at most, so a few
// shards of many tensors parse in parallel too.
size_t WorkerCount(size_t jobs) {
  return std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), jobs, 8});
}

// Reads the headers of `shards[i]` for each i in `which` (the rest stay Status::Ok()),
// several at once: headers are independent, and a checkpoint of thousands of shards would
// otherwise parse them one core at a time.
std::vector<Result<ShardContents>> ReadShards(const std::vector<StoredFile>& shards,
                                              const std::vector<uint32_t>& which) {
  std::vector<Result<ShardContents>> contents(shards.size(), Status::Ok());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < which.size(); i = next++) {
      contents[which[i]] = ReadShard(shards[which[i]], which[i]);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < WorkerCount(which.size()); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return contents;
}

// A weight file opened and read before the index that names it was parsed.
struct EarlyShard {
  std::string name;  // as the index would name it (without .zst)
  Result<StoredFile> file = Status::Ok();
  Result<ShardContents> contents = Status::Ok();
};

// Opens and reads, on worker threads, the weight files a local index is likely to name,
// while the caller parses the index: at a million tensors the index alone is a second of
// parsing, and the shards as much again. What the index does not name is dropped unseen;
// what it names is used as if opened and read after it, errors included.
class EarlyShards {
 public:
  EarlyShards(const SourceDir& dir, std::vector<std::string> names, CodecContext& codec)
      : dir_(dir), codec_(codec) {
    shards_.resize(names.size());
    for (size_t i = 0; i < names.size(); ++i) shards_[i].name = std::move(names[i]);
    for (size_t t = 0; t < WorkerCount(shards_.size()); ++t) {
      threads_.emplace_back([this] { Work(); });
    }
  }
  ~EarlyShards() { Wait(); }
  EarlyShards(const EarlyShards&) = delete;
  EarlyShards& operator=(const EarlyShards&) = delete;

  // Helps with what is left, then waits for every read; names sorted.
  std::vector<EarlyShard>& Wait() {
    Work();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    return shards_;
  }

 private:
  void Work() {
    for (size_t i = next_++; i < shards_.size(); i = next_++) {
      EarlyShard& shard = shards_[i];
      shard.file = OpenWeightFile(dir_, shard.name, codec_);
      if (shard.file.ok()) shard.contents = ReadShard(*shard.file, 0);
    }
  }

  const SourceDir& dir_;
  CodecContext& codec_;
  std::vector<EarlyShard> shards_;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> threads_;
};

// The weight files of `dir` an index named `index_name` may list: distinct names without
// .zst, sorted.
std::vector<std::string> LikelyShards(const SourceDir& dir, const std::string& index_name) {
  const bool torch = EndsWith(index_name, kTorchIndexSuffix);
  std::vector<std::string> names;
  for (const std::string& f : dir.files) {
    std::string name = torch ? TorchWeightName(f) : WeightName(f);
    if (!name.empty()) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// Sorts tensors by name; a name stored in two shards is an error.
Status SortTensors(Checkpoint& ckpt) {
  // Sorting indices and moving each tensor once is cheaper than swapping whole tensors.
  std::vector<uint32_t> order(ckpt.tensors.size());
  std::iota(order.begin(), order.end(), 0u);
  auto by_name = [&](uint32_t a, uint32_t b) {
    return ckpt.tensors[a].name < ckpt.tensors[b].name;
  };
  // Writers list a shard's tensors in name order, so the table is usually a few sorted
  // runs: merging them costs a fraction of a sort. Names repeated across shards (an error)
  // take the sort, which picks the pair the error names.
  std::vector<size_t> runs = {0};
  for (size_t i = 1; i < order.size() && runs.size() <= 64; ++i) {
    if (by_name(order[i], order[i - 1])) runs.push_back(i);
  }
  runs.push_back(order.size());
  bool merged = runs.size() <= 65;
  for (size_t width = 1; merged && width + 1 < runs.size(); width *= 2) {
    for (size_t r = 0; r + width + 1 < runs.size(); r += 2 * width) {
      const size_t end = runs[std::min(r + 2 * width, runs.size() - 1)];
      std::inplace_merge(order.begin() + runs[r], order.begin() + runs[r + width],
                         order.begin() + end, by_name);
    }
  }
  if (merged) {
    for (size_t i = 1; i < order.size() && merged; ++i) {
      merged = ckpt.tensors[order[i - 1]].name != ckpt.tensors[order[i]].name;
    }
  }
  if (!merged) {
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), by_name);
  }
  if (!std::is_sorted(order.begin(), order.end())) {
    std::vector<Tensor> sorted;
    sorted.reserve(order.size());
    for (uint32_t i : order) sorted.push_back(std::move(ckpt.tensors[i]));
    ckpt.tensors = std::move(sorted);
  }
  for (size_t i = 1; i < ckpt.tensors.size(); ++i) {
    const Tensor& a = ckpt.tensors[i - 1];
    const Tensor& b = ckpt.tensors[i];
    if (a.name == b.name) {
      return Status::Corruption(ckpt.shards[b.shard].name + ": tensor \"" + b.name +
                                "\" also appears in " + ckpt.shards[a.shard].name);
    }
  }
  return Status::Ok();
}

const Tensor* FindTensor(const Checkpoint& ckpt, std::string_view name) {
  auto it = std::lower_bound(ckpt.tensors.begin(), ckpt.tensors.end(), name,
                             [](const Tensor& t, std::string_view n) { return t.name < n; });
  return it != ckpt.tensors.end() && it->name == name ? &*it : nullptr;
}

// Every stored tensor must be in the index, under the shard that stores it, and every
// index entry must be stored. Both lists are walked in name order (an index is usually
// written sorted, so sorting it is a check), which costs a fraction of a hash map's
// lookups at a million tensors. The errors are those of a lookup per tensor: the first
// tensor in name order that is unlisted or listed elsewhere (the first listing of a name
// counts), then the first entry in index order that no shard stores.
Status CheckAgainstIndex(const Checkpoint& ckpt, const HfIndex& index, const std::string& file) {
  const auto& map = index.weight_map;
  std::vector<uint32_t> order(map.size());
  std::iota(order.begin(), order.end(), 0u);
  auto by_name = [&](uint32_t a, uint32_t b) { return map[a].first < map[b].first; };
  if (!std::is_sorted(order.begin(), order.end(), by_name)) {
    std::stable_sort(order.begin(), order.end(), by_name);
  }
  size_t next = 0;  // into order
  bool missing = false;
  for (const Tensor& t : ckpt.tensors) {
    for (; next < order.size() && map[order[next]].first < t.name; ++next) missing = true;
    const std::string& shard = ckpt.shards[t.shard].name;
    if (next == order.size() || map[order[next]].first != t.name) {
      return Status::Corruption(shard + ": tensor \"" + t.name + "\" is not listed in " + file);
    }
    if (map[order[next]].second != shard) {
      return Status::Corruption(file + ": tensor \"" + t.name + "\" is listed in " +
                                map[order[next]].second + " but stored in " + shard);
    }
    while (next < order.size() && map[order[next]].first == t.name) ++next;
  }
  if (!missing && next == order.size()) return Status::Ok();
  for (const auto& [tensor, shard] : map) {
    if (!FindTensor(ckpt, tensor)) {
      return Status::Corruption(shard + ": tensor \"" + tensor + "\" listed in " + file +
                                " is missing from the shard");
    }
  }
  return Status::Ok();
}

// Opens and reads the weight files `names`, taking those already read from `early`.
Status OpenShards(const SourceDir& dir, const std::vector<std::string>& names,
                  const std::string& named_by, CodecContext& codec, Checkpoint& ckpt,
                  std::vector<EarlyShard>* early = nullptr) {
  std::vector<Result<ShardContents>> early_contents;
  std::vector<uint32_t> to_read;
  for (const std::string& name : names) {
    EarlyShard* found = nullptr;
    if (early) {
      auto it =
          std::lower_bound(early->begin(), early->end(), name,
                           [](const EarlyShard& e, const std::string& n) { return e.name < n; });
      if (it != early->end() && it->name == name) found = &*it;
    }
    auto opened = found ? std::move(found->file) : OpenWeightFile(dir, name, codec);
    if (!opened.ok()) {
      if (opened.status().code() != Status::Code::kNotFound) return opened.status();
      return Status::NotFound(name + ": shard named in " + named_by + " is missing");
    }
    if (found) {
      early_contents.push_back(std::move(found->contents));
    } else {
      early_contents.push_back(Status::Ok());
      to_read.push_back(static_cast<uint32_t>(ckpt.shards.size()));
    }
    ckpt.shards.push_back(std::move(opened).value());
  }
  std::vector<Result<ShardContents>> contents = ReadShards(ckpt.shards, to_read);
  for (uint32_t i = 0; i < contents.size(); ++i) {
    if (!std::binary_search(to_read.begin(), to_read.end(), i)) {
      contents[i] = std::move(early_contents[i]);
    }
  }
  early_contents.clear();
  // Merged in shard order, so the first error reported is always the same one.
  size_t n_tensors = 0, n_storages = 0;
  for (const Result<ShardContents>& c : contents) {
    if (!c.ok()) return c.status();
    n_tensors += c->tensors.size();
    n_storages += c->storages.size();
  }
  // Exact sizes: the tables live as long as the mount, and growing them by doubling
  // would leave up to half of each unused.
  ckpt.tensors.reserve(n_tensors);
  ckpt.storages.reserve(n_storages);
  for (uint32_t i = 0; i < ckpt.shards.size(); ++i) AddShard(ckpt, contents[i].value(), i);
  contents.clear();
  if (!names.empty() && IsTorchShard(names.front())) {
    ckpt.format = CheckpointFormat::kTorch;
    // A safetensors conversion of torch weights: what transformers' loader looks for.
    ckpt.metadata = {{"format", "pt"}};
  }
  return SortTensors(ckpt);
}

// The files of another copy of the weights: repositories often ship a torch index and
// its .bin shards beside the safetensors ones. Best effort: an unreadable index hides
// only itself.
std::vector<std::string> AlternativeCopy(const SourceDir& dir, const Checkpoint& ckpt) {
  std::vector<std::string> names;
  for (const std::string& f : dir.files) {
    const bool ours = !ckpt.index.empty() && ckpt.index[0].stored_name == f;
    if (ours || !(EndsWith(f, kIndexSuffix) || EndsWith(f, kTorchIndexSuffix))) continue;
    names.push_back(f);
    auto source = dir.open(f);
    if (!source.ok()) continue;
    auto text = ReadWhole(**source);
    auto index = text.ok() ? ParseHfIndex(*text, f) : Result<HfIndex>(text.status());
    if (!index.ok()) continue;
    for (const std::string& shard : index->shard_files) {
      names.push_back(shard);
      names.push_back(shard + std::string(kZstdSuffix));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every other regular file is shown unchanged, except weight files that are not part of
// this checkpoint: a stale or foreign .safetensors, or the shards and index of another
// copy of the weights, would only mislead. Other torch files (training_args.bin,
// optimizer.pt) are shown: they are not weights. One the source refuses to serve (a
// symlink leaving a local SOURCE, not a regular file) is left out with a line to `warn`:
// unlike a shard, the checkpoint is whole without it.
Status OpenOthers(const SourceDir& dir, const CodecOptions& options, Checkpoint& ckpt) {
  auto stored_as = [&](const std::string& name) {
    return [&name](const StoredFile& f) { return f.stored_name == name; };
  };
  const std::vector<std::string> alternative = AlternativeCopy(dir, ckpt);
  for (const std::string& name : dir.files) {
    bool used = std::any_of(ckpt.index.begin(), ckpt.index.end(), stored_as(name)) ||
                std::any_of(ckpt.shards.begin(), ckpt.shards.end(), stored_as(name));
    if (used || !WeightName(name).empty() || Contains(alternative, name)) continue;
    auto other = OpenStored(dir, name);
    if (!other.ok() && other.status().code() == Status::Code::kInvalidArgument) {
      if (options.warn) options.warn(other.status().message());
      continue;
    }
    CKPTFS_RETURN_IF_ERROR(other.status());
    ckpt.others.push_back(std::move(other).value());
  }
  return Status::Ok();
}

Result<std::string> ChooseIndex(const SourceDir& dir) {
  std::vector<std::string> indexes;
  for (const std::string& f : dir.files) {
    if (EndsWith(f, kIndexSuffix)) indexes.push_back(f);
  }
  // A repository with both keeps the safetensors copy current; torch's is the fallback.
  if (indexes.empty()) {
    for (const std::string& f : dir.files) {
      if (EndsWith(f, kTorchIndexSuffix)) indexes.push_back(f);
    }
  }
  if (indexes.size() <= 1) return indexes.empty() ? std::string() : indexes[0];
  // transformers names it model.safetensors.index.json; prefer that when several exist.
  if (std::find(indexes.begin(), indexes.end(), kPreferredIndex) != indexes.end()) {
    return std::string(kPreferredIndex);
  }
  return Status::InvalidArgument(dir.path + ": several index files (" + indexes[0] + ", " +
                                 indexes[1] + "); cannot tell which is the checkpoint");
}

// Without an index, the one weights file: a .safetensors file, else a torch file
// (pytorch_model.bin preferred, since trainers leave training_args.bin beside it).
Result<std::string> ChooseSingleFile(const SourceDir& dir) {
  for (auto* name_of : {&WeightName, &TorchWeightName}) {
    std::vector<std::string> weights;
    for (const std::string& f : dir.files) {
      std::string weight = (*name_of)(f);
      if (!weight.empty() && (weights.empty() || weights.back() != weight)) {
        weights.push_back(weight);
      }
    }
    if (weights.size() == 1) return weights[0];
    if (weights.empty()) continue;
    if (name_of == &TorchWeightName && Contains(weights, std::string(kPreferredTorchFile))) {
      return std::string(kPreferredTorchFile);
    }
    return Status::InvalidArgument(dir.path + ": " + std::to_string(weights.size()) +
                                   " weight files (" + weights[0] + ", " + weights[1] +
                                   ", ...) but no index json to join them");
  }
  return Status::InvalidArgument(dir.path +
                                 ": no checkpoint found (*.safetensors, *.bin, *.pt, *.pth, or "
                                 "an *.index.json)");
}

// The --cache-dir every remote source of this mount shares, if one was asked for.
Status OpenDiskCache(const RemoteOptions& remote, CodecContext& codec) {
  if (remote.cache_dir.empty() || codec.disk_cache()) return Status::Ok();
  CKPTFS_ASSIGN_OR_RETURN(
      auto disk, DiskCache::Open(remote.cache_dir, remote.cache_dir_bytes, codec.options().warn,
                                 remote.cache_dir_shared ? DiskCache::Sharing::kShared
                                                         : DiskCache::Sharing::kPrivate));
  codec.SetDiskCache(std::move(disk));
  return Status::Ok();
}

}  // namespace

std::vector<uint32_t> AlignedOrder(const Checkpoint& ckpt) {
  std::vector<uint32_t> order;
  order.reserve(ckpt.tensors.size());
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
    if (ckpt.tensors[i].contiguous()) order.push_back(i);
  }
  // Tensors are sorted by name; a stable sort keeps that order within one element size.
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return DtypeSize(ckpt.tensors[a].dtype) > DtypeSize(ckpt.tensors[b].dtype);
  });
  return order;
}

uint64_t Checkpoint::TotalTensorBytes() const {
  uint64_t total = 0;
  for (const Tensor& t : tensors) total += t.size;
  return total;
}

std::string MetadataJson(const Checkpoint& ckpt) {
  nlohmann::ordered_json out;
  if (ckpt.format == CheckpointFormat::kTorch) {
    out = ckpt.state_json.empty() ? nlohmann::ordered_json::object()
                                  : nlohmann::ordered_json::parse(ckpt.state_json);
  } else {
    out = nlohmann::ordered_json::object();
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : ckpt.metadata) meta[key] = value;
    out["__metadata__"] = std::move(meta);
  }
  return out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

Result<uint32_t> ReadStorageCrc(const Checkpoint& ckpt, const Storage& storage) {
  std::vector<uint8_t> buf(std::min<uint64_t>(storage.size, 4 << 20));
  uLong crc = crc32(0, nullptr, 0);
  for (uint64_t done = 0; done < storage.size;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), storage.size - done);
    CKPTFS_RETURN_IF_ERROR(
        ckpt.shards[storage.shard].source->ReadAt(storage.offset + done, {buf.data(), n}));
    crc = crc32(crc, buf.data(), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

Status ComputeStorageCrcs(Checkpoint& ckpt) {
  std::atomic<size_t> next{0};
  std::vector<Status> errors(ckpt.storages.size(), Status::Ok());
  auto work = [&] {
    for (size_t i = next++; i < ckpt.storages.size(); i = next++) {
      Storage& s = ckpt.storages[i];
      if (s.has_crc32) continue;
      Result<uint32_t> crc = ReadStorageCrc(ckpt, s);
      if (!crc.ok()) {
        errors[i] = crc.status();
        continue;
      }
      s.crc32 = crc.value();
      s.has_crc32 = true;
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    threads.emplace_back(work);
  }
  work();
  for (std::thread& t : threads) t.join();
  for (const Status& e : errors) CKPTFS_RETURN_IF_ERROR(e);
  return Status::Ok();
}

Result<Checkpoint> OpenCheckpointIn(const SourceDir& dir, CodecContext& codec) {
  Checkpoint ckpt;
  ckpt.source_path = dir.path;
  ckpt.remote = dir.remote;
  CKPTFS_ASSIGN_OR_RETURN(std::string index_name, ChooseIndex(dir));
  if (!index_name.empty()) {
    // Remote files are read only once the index names them: a request each, and a
    // listing may hold stale shards.
    std::optional<EarlyShards> early;
    if (!dir.remote) early.emplace(dir, LikelyShards(dir, index_name), codec);
    CKPTFS_ASSIGN_OR_RETURN(StoredFile index_file, OpenStored(dir, index_name));
    CKPTFS_ASSIGN_OR_RETURN(std::string text, ReadWhole(*index_file.source));
    CKPTFS_ASSIGN_OR_RETURN(HfIndex index, ParseHfIndex(text, index_name));
    std::string().swap(text);
    ckpt.index.push_back(std::move(index_file));
    CKPTFS_RETURN_IF_ERROR(OpenShards(dir, index.shard_files, index_name, codec, ckpt,
                                      early ? &early->Wait() : nullptr));
    early.reset();
    CKPTFS_RETURN_IF_ERROR(CheckAgainstIndex(ckpt, index, index_name));
  } else {
    CKPTFS_ASSIGN_OR_RETURN(std::string weight, ChooseSingleFile(dir));
    CKPTFS_RETURN_IF_ERROR(OpenShards(dir, {weight}, dir.path, codec, ckpt));
  }
  CKPTFS_RETURN_IF_ERROR(OpenOthers(dir, codec.options(), ckpt));
  return ckpt;
}

Result<Checkpoint> OpenCheckpoint(const std::string& source_path, CodecContext& codec,
                                  const RemoteOptions& remote) {
  if (IsUrl(source_path)) {
    CKPTFS_RETURN_IF_ERROR(OpenDiskCache(remote, codec));
    if (IsS3Url(source_path)) {
      CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, S3Dir(source_path, remote, codec));
      return OpenCheckpointIn(dir, codec);
    }
    CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, HttpDir(source_path, remote.http, codec));
    return OpenCheckpointIn(dir, codec);
  }
  struct stat st;
  if (::stat(source_path.c_str(), &st) != 0) {
    return Status::NotFound(source_path + ": no such file or directory");
  }
  if (S_ISREG(st.st_mode)) {
    auto [dir, name] = SplitPath(source_path);
    if (WeightName(name).empty() && TorchWeightName(name).empty()) {
      return Status::InvalidArgument(
          source_path +
          ": not a .safetensors, .bin, .pt or .pth file (or .zst of one), or a "
          "directory");
    }
    // A single file is bounded by its directory.
    CKPTFS_ASSIGN_OR_RETURN(auto root, LocalDirectory::Open(dir));
    return OpenCheckpointIn(LocalDir(std::move(root), {name}), codec);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(source_path + ": not a file or directory");
  }
  CKPTFS_ASSIGN_OR_RETURN(auto root, LocalDirectory::Open(source_path));
  CKPTFS_ASSIGN_OR_RETURN(LocalDirectory::Listing listing, root->List());
  // Links that leave SOURCE are offered too, so that opening one names it in a refusal
  // (a shard) or a skipped-file line (anything else).
  std::vector<std::string> files = std::move(listing.files);
  files.insert(files.end(), listing.outside.begin(), listing.outside.end());
  std::sort(files.begin(), files.end());
  return OpenCheckpointIn(LocalDir(std::move(root), std::move(files)), codec);
}

}  // namespace ckptfs
