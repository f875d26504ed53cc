#include "core/checkpoint/assembly.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/codec/zstd_source.h"
#include "core/encoding/ordered_json.h"
#include "core/encoding/safetensors.h"

namespace ckptfs {
namespace {

// Threads for `jobs` independent pieces of work: one piece per thread at most, so a few
// shards of many tensors parse in parallel too.
size_t WorkerCount(size_t jobs) {
  return std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), jobs, 8});
}

// Reads the headers of `shards[i]` for each i in `which` (the rest stay Status::Ok()),
// several at once.
std::vector<Result<ShardContents>> ReadShards(const std::vector<StoredFile>& shards,
                                              const std::vector<uint32_t>& which,
                                              ShardParser parse) {
  std::vector<Result<ShardContents>> contents(shards.size(), Status::Ok());
  ForEachInParallel(which.size(),
                    [&](size_t i) { contents[which[i]] = parse(shards[which[i]], which[i]); });
  return contents;
}

}  // namespace

void ForEachInParallel(size_t jobs, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < jobs; i = next++) work(i);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < WorkerCount(jobs); ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view StripZst(std::string_view name) {
  if (EndsWith(name, kZstdSuffix)) name.remove_suffix(kZstdSuffix.size());
  return name;
}

Result<std::string> ReadWhole(const ByteSource& source, uint64_t max_bytes) {
  if (source.Size() > max_bytes) {
    return Status::Corruption(source.Name() + ": larger than " + std::to_string(max_bytes >> 20) +
                              " MiB");
  }
  std::string text(source.Size(), '\0');
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(0, {reinterpret_cast<uint8_t*>(text.data()), text.size()}));
  return text;
}

bool ListsStored(const SourceDir& dir, const std::string& name) {
  return dir.Lists(name) || dir.Lists(name + std::string(kZstdSuffix));
}

Result<bool> StoredOrAsked(const SourceDir& dir, const std::string& name) {
  if (ListsStored(dir, name) || !dir.probe) return ListsStored(dir, name);
  return dir.Has(name);
}

Result<StoredFile> OpenStored(const SourceDir& dir, const std::string& name) {
  CKPTFS_ASSIGN_OR_RETURN(auto source, dir.open(name));
  const uint32_t mode = source->Mode();
  const struct timespec mtime = source->MTime();
  return StoredFile{name, name, std::move(source), mode, mtime};
}

Result<StoredFile> OpenWeightFile(const SourceDir& dir, const std::string& name,
                                  ReadContext& context) {
  const std::string zst = name + std::string(kZstdSuffix);
  bool plain = dir.Lists(name) || !dir.Lists(zst);
  if (plain && !dir.Lists(name)) {  // neither listed: ask the store
    CKPTFS_ASSIGN_OR_RETURN(const bool have_plain, dir.Has(name));
    if (!have_plain) {
      CKPTFS_ASSIGN_OR_RETURN(const bool have_zst, dir.Has(zst));
      plain = !have_zst;
    }
  }
  if (plain) {
    auto stored = OpenStored(dir, name);
    // A complete listing (no probe) holds regular files only: NAME.zst may still be there
    // as a FIFO or device, whose refusal says so where NotFound would say "missing".
    if (stored.ok() || stored.status().code() != Status::Code::kNotFound || dir.probe ||
        dir.Lists(name)) {
      return stored;
    }
    auto special = dir.open(zst);
    if (special.ok() || special.status().code() == Status::Code::kNotFound) return stored;
    return special.status();
  }
  CKPTFS_ASSIGN_OR_RETURN(auto compressed, dir.open(zst));
  const uint32_t mode = compressed->Mode();
  const struct timespec mtime = compressed->MTime();
  // A safetensors header (8 bytes, then up to kMaxSafetensorsHeader) is the largest a
  // format reads at open.
  CKPTFS_ASSIGN_OR_RETURN(
      auto decoded, ZstdSource::Open(std::move(compressed), context, 8 + kMaxSafetensorsHeader));
  return StoredFile{name, zst, std::move(decoded), mode, mtime};
}

void AddShard(Checkpoint& ckpt, ShardContents& shard, uint32_t shard_no) {
  const uint32_t base = static_cast<uint32_t>(ckpt.storages.size());
  uint32_t decoded_no = shard_no;
  if (!shard.decoded.empty()) {
    const StoredFile& file = ckpt.shards[shard_no];
    decoded_no = static_cast<uint32_t>(ckpt.shards.size() + ckpt.decoded.size());
    ckpt.decoded.push_back(
        StoredFile{file.name, file.stored_name,
                   std::make_unique<MemorySource>(file.source->Name() + " (decoded numpy data)",
                                                  std::move(shard.decoded)),
                   file.mode, file.mtime});
  }
  for (Storage& s : shard.storages) {
    s.shard = s.shard == kDecodedData ? decoded_no : shard_no;
    ckpt.storages.push_back(s);
  }
  for (Tensor& t : shard.tensors) {
    t.storage += base;
    t.shard = ckpt.storages[t.storage].shard;
    ckpt.tensors.push_back(std::move(t));
  }
  std::vector<Tensor>().swap(shard.tensors);  // the peak holds one shard twice, not all
  if (shard.weights_only) {
    if (!ckpt.weights_only) ckpt.weights_only.emplace();
    MergeWeightsOnlyVerdict(*ckpt.weights_only, *shard.weights_only);
  }
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
  auto merged = ParseOrderedJson(ckpt.state_json);
  auto more = ParseOrderedJson(shard.state_json);
  if (merged.is_object() && more.is_object()) {
    OrderedJsonObject object(std::move(merged));
    for (auto& [key, value] : more.items()) object.SetIfAbsent(key, std::move(value));
    ckpt.state_json =
        object.Take().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
}

EarlyShards::EarlyShards(const SourceDir& dir, std::vector<std::string> names, ReadContext& context,
                         ShardParser parse)
    : dir_(dir), context_(context), parse_(parse) {
  shards_.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) shards_[i].name = std::move(names[i]);
  for (size_t t = 0; t < WorkerCount(shards_.size()); ++t) {
    threads_.emplace_back([this] { Work(); });
  }
}

std::vector<EarlyShard>& EarlyShards::Wait() {
  Work();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  return shards_;
}

void EarlyShards::Work() {
  for (size_t i = next_++; i < shards_.size(); i = next_++) {
    EarlyShard& shard = shards_[i];
    shard.file = OpenWeightFile(dir_, shard.name, context_);
    if (shard.file.ok()) shard.contents = parse_(*shard.file, 0);
  }
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
      return Status::Corruption(ShardFile(ckpt, b.shard).name + ": tensor \"" + b.name +
                                "\" also appears in " + ShardFile(ckpt, a.shard).name);
    }
  }
  return Status::Ok();
}

const Tensor* FindTensor(const Checkpoint& ckpt, std::string_view name) {
  auto it = std::lower_bound(ckpt.tensors.begin(), ckpt.tensors.end(), name,
                             [](const Tensor& t, std::string_view n) { return t.name < n; });
  return it != ckpt.tensors.end() && it->name == name ? &*it : nullptr;
}

// Opens and reads the weight files `names`, taking those already read from `early`.
Status OpenShards(const SourceDir& dir, const std::vector<std::string>& names,
                  const std::string& named_by, ReadContext& context, ShardParser parse,
                  Checkpoint& ckpt, std::vector<EarlyShard>* early) {
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
    auto opened = found ? std::move(found->file) : OpenWeightFile(dir, name, context);
    if (!opened.ok()) {
      if (opened.status().code() != Status::Code::kNotFound) return opened.status();
      return Status::NotFound(name + ": shard named in " + named_by + " is missing");
    }
    if (found) {
      early_contents.push_back(std::move(found->contents));
    } else {
      early_contents.emplace_back(Status::Ok());
      to_read.push_back(static_cast<uint32_t>(ckpt.shards.size()));
    }
    ckpt.shards.push_back(std::move(opened).value());
  }
  std::vector<Result<ShardContents>> contents = ReadShards(ckpt.shards, to_read, parse);
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
  return SortTensors(ckpt);
}

Status OpenOthers(const SourceDir& dir, const ReadOptions& options,
                  const std::vector<std::string>& hidden, Checkpoint& ckpt) {
  auto stored_as = [&](const std::string& name) {
    return [&name](const StoredFile& f) { return f.stored_name == name; };
  };
  for (const std::string& name : dir.files) {
    bool used = std::any_of(ckpt.index.begin(), ckpt.index.end(), stored_as(name)) ||
                std::any_of(ckpt.shards.begin(), ckpt.shards.end(), stored_as(name));
    if (used || std::binary_search(hidden.begin(), hidden.end(), name)) continue;
    if (name == kPackedCrcFile && !ckpt.files_only) {
      // Untrusted like the rest of SOURCE: ResolveZipCrcs parses it strictly.
      auto crcs = dir.open(name);
      if (crcs.ok()) ckpt.packed_crcs = std::move(crcs).value();
      continue;
    }
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

}  // namespace ckptfs
