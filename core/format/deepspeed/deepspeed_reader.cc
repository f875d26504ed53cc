// The DeepSpeed entry of the format table: a ZeRO tag directory (global_stepN/ as
// DeepSpeed's save_checkpoint writes it), mounted as the consolidated model zero_to_fp32.py
// would write, with nothing copied (core/format/deepspeed/zero.h).
//
// Claimed by its model states file (mp_rank_00_model_states.pt, or at stage 3
// zero_pp_rank_0_mp_rank_00_model_states.pt); the world size that file states names the
// other rank files, which are asked for by name (SourceDir::Has / open), so a server that
// cannot list serves a tag too. Every rank file is a shard; the tensors are
//   model.<name>                 the consolidated model (the model view)
//   module.<name>                the module-dtype weights as saved (stage 0-2)
//   optimizer.exp_avg.<name>     Adam's moments, consolidated like the weights
//   optimizer.exp_avg_sq.<name>
// and any other tensor of the model states file (a client_state's) under its own name.
// A save directory (`latest` and tags) is a run: core/run handles it, each tag through here.
#include <zlib.h>

#include <algorithm>
#include <numeric>

#include "core/checked.h"
#include "core/checkpoint/assembly.h"
#include "core/checkpoint/model.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"
#include "core/format/deepspeed/zero.h"
#include "core/format/formats.h"
#include "core/transient.h"

namespace ckptfs {
namespace {

namespace ds = deepspeed;

constexpr std::string_view kProbeNames[] = {"mp_rank_00_model_states.pt",
                                            "zero_pp_rank_0_mp_rank_00_model_states.pt"};

// A rank file's name (plain or .zst): mp_rank_XX_model_states.pt or
// [bf16_]zero_pp_rank_R_mp_rank_XX_{model,optim}_states.pt.
bool IsRankFile(std::string_view name) {
  name = StripZst(name);
  return EndsWith(name, "_model_states.pt") || EndsWith(name, "_optim_states.pt");
}

// The dp rank and mp rank a zero_pp rank file names, if it is one.
bool ParseZeroName(std::string_view name, uint64_t& dp, uint64_t& mp) {
  name = StripZst(name);
  if (name.substr(0, 5) == "bf16_") name.remove_prefix(5);
  constexpr std::string_view kHead = "zero_pp_rank_";
  if (name.substr(0, kHead.size()) != kHead) return false;
  name.remove_prefix(kHead.size());
  auto number = [&](uint64_t& out) {
    size_t n = 0;
    out = 0;
    while (n < name.size() && n < 9 && name[n] >= '0' && name[n] <= '9') {
      out = out * 10 + static_cast<uint64_t>(name[n++] - '0');
    }
    name.remove_prefix(n);
    return n > 0;
  };
  if (!number(dp) || name.substr(0, 9) != "_mp_rank_") return false;
  name.remove_prefix(9);
  return number(mp);
}

// A pipeline layer file (PipelineModule.save_state_dict, runtime/pipe/module.py): one
// `layer.state_dict()` per layer and tensor-parallel rank, named by ckpt_layer_path
// "layer_{idx:02d}[-{rank_repr}]-model_states.pt", idx the global layer index. rank_repr is
// the topology's get_rank_repr, data and pipe axes omitted: "model_YY" under
// PipeModelDataParallelTopology (Megatron-DeepSpeed), "" under PipeDataParallelTopology (the
// default PipelineModule builds), which leaves layer_XX-model_states.pt (TP rank 0).
struct LayerFile {
  std::string name;  // without .zst
  uint64_t layer = 0;
  uint64_t mp = 0;
};

std::vector<LayerFile> LayerFiles(const SourceDir& dir) {
  std::vector<LayerFile> out;
  for (const std::string& f : dir.files) {
    std::string_view n = StripZst(f);
    constexpr std::string_view kHead = "layer_", kMid = "-model_", kTail = "-model_states.pt";
    if (n.substr(0, kHead.size()) != kHead || !EndsWith(n, kTail) ||
        n.size() < kHead.size() + kTail.size()) {
      continue;
    }
    const std::string_view middle = n.substr(kHead.size(), n.size() - kHead.size() - kTail.size());
    const size_t dash = middle.find(kMid);
    auto number = [](std::string_view digits, uint64_t& v) {
      if (digits.empty() || digits.size() > 9) return false;
      v = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      return true;
    };
    LayerFile l{std::string(n)};
    if (!number(middle.substr(0, dash), l.layer) ||
        (dash != std::string_view::npos && !number(middle.substr(dash + kMid.size()), l.mp))) {
      continue;
    }
    if (out.empty() || out.back().name != l.name) out.push_back(std::move(l));  // x, x.zst
  }
  std::sort(out.begin(), out.end(), [](const LayerFile& a, const LayerFile& b) {
    return std::tie(a.mp, a.layer, a.name) < std::tie(b.mp, b.layer, b.name);
  });
  return out;
}

// Each layer file belongs to a tensor-parallel rank the tag has, one file per layer and
// rank: otherwise two files would give the same merged names (a TP rank's slice is not the
// layer, and DeepSpeed's own loader, load_state_dir, would take whichever its SDLoader
// picks), so the tag is refused rather than served with one of them.
Status CheckLayers(const std::vector<LayerFile>& layers, const std::string& states,
                   uint32_t mp_world_size) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerFile& l = layers[i];
    if (l.mp >= mp_world_size) {
      return Status::Corruption(l.name + ": tensor-parallel rank " + std::to_string(l.mp) +
                                " but " + states + " says mp_world_size " +
                                std::to_string(mp_world_size) +
                                ": layer files of another model-parallel layout");
    }
    if (i > 0 && layers[i - 1].layer == l.layer && layers[i - 1].mp == l.mp) {
      return Status::Corruption(l.name + ": layer " + std::to_string(l.layer) +
                                " of tensor-parallel rank " + std::to_string(l.mp) +
                                " is saved in " + layers[i - 1].name + " too");
    }
  }
  return Status::Ok();
}

// A layer file's tensors as `prefix<layer>.<key>`, over its own storages, as saved; its
// non-tensor values are left out. Empties `file`.
void AddLayer(TorchFile& file, uint32_t shard, const std::string& prefix, uint64_t layer,
              Checkpoint& ckpt) {
  ShardContents contents = FromTorchFile(file, shard);
  contents.state_json.clear();
  for (Tensor& t : contents.tensors) {
    t.name = prefix + std::to_string(layer) + "." + t.name;
    t.top_key_size = static_cast<uint32_t>(prefix.size() - 1);
    t.top_is_dict = true;
  }
  AddShard(ckpt, contents, shard);
}

// Whether `name` (or name.zst) is in `dir`.
Result<bool> Exists(const SourceDir& dir, const std::string& name) {
  if (dir.Lists(name) || dir.Lists(name + std::string(kZstdSuffix))) return true;
  CKPTFS_ASSIGN_OR_RETURN(const bool plain, dir.Has(name));
  if (plain) return true;
  return dir.Has(name + std::string(kZstdSuffix));
}

// HF Trainer with DeepSpeed saves the engine's checkpoint into its own `checkpoint-N/`
// (Trainer._save_optimizer_and_scheduler -> engine.save_checkpoint(output_dir)): the tag
// directory, `latest` naming it, zero_to_fp32.py, beside Trainer's files. Such a directory is
// told from a plain DeepSpeed save dir (a run of tags, core/run) by what Trainer writes
// there too: config.json (save_pretrained), training_args.bin or trainer_state.json, and
// by the one subdirectory, the tag.
constexpr std::string_view kLatestFile = "latest";
constexpr uint64_t kMaxLatestBytes = 4096;
constexpr std::string_view kTrainerMarks[] = {"config.json", "training_args.bin",
                                              "trainer_state.json"};

// The tag the `latest` file of `dir` names, stripped as DeepSpeed strips it
// (ds::StripLatest); "" when there is no such file or it names no plain directory name.
Result<std::string> LatestTag(const SourceDir& dir) {
  const std::string name(kLatestFile);
  if (!dir.Lists(name)) return std::string();
  auto file = dir.open(name);
  // Gone or refused (a link out of SOURCE): no record. Only a failure that may pass fails.
  if (!file.ok()) {
    if (IsTransient(file.status())) return file.status();
    return std::string();
  }
  auto text = ReadWhole(**file, kMaxLatestBytes);
  if (!text.ok()) return std::string();
  std::string tag(ds::StripLatest(*text));
  return IsPlainName(tag) ? tag : std::string();
}

// The record of a DeepSpeed save dir (RunRule::record): the tag `latest` names. DeepSpeed
// writes the tag alone, a directory of the save dir, after every rank's files
// (DeepSpeedEngine.save_checkpoint: a barrier, then rank 0 writes `latest`): anything but
// a plain name (`../secret_tag`, `a/b`) is refused, never reduced to a name nor asked for.
// A directory named `latest` is an entry of its own, not this record.
Result<std::optional<RunRecord>> DeepSpeedRunRecord(const SourceDir& dir,
                                                    std::vector<std::string>& skipped) {
  const std::string name(kLatestFile);
  if (std::find(dir.dirs.begin(), dir.dirs.end(), name) != dir.dirs.end()) {
    return std::optional<RunRecord>();
  }
  CKPTFS_ASSIGN_OR_RETURN(const bool has, dir.Has(name));
  if (!has) return std::optional<RunRecord>();
  RunRecord record;
  record.title = "DeepSpeed latest file";
  // A record naming nothing (unreadable, or no plain name) is said, and refuses a directory
  // that holds nothing else.
  auto refused = [&](std::string line) {
    skipped.push_back(line);
    record.problem = Status::InvalidArgument(line);
    return std::optional<RunRecord>(std::move(record));
  };
  auto file = dir.open(name);
  if (!file.ok()) return refused(file.status().message());
  auto text = ReadWhole(**file, kMaxLatestBytes);
  if (!text.ok()) return refused(text.status().message());
  const std::string tag(ds::StripLatest(*text));  // as DeepSpeed's load_checkpoint
  if (!IsPlainName(tag)) {
    return refused(JoinShown(dir.path, name) + ": \"" + EscapeControlChars(text->substr(0, 200)) +
                   "\" names no tag of " + dir.path + " (a tag is a plain directory name)");
  }
  record.latest = tag;
  record.latest_is_dir = true;
  record.latest_unusable =
      "latest file: tag \"" + EscapeControlChars(tag) + "\" is no complete entry, skipped";
  return std::optional<RunRecord>(std::move(record));
}

// The claim on the tag `latest` names inside an HF Trainer checkpoint (Claim::Rank::kInside),
// its file "TAG/<model states>"; nullopt when `dir` is no such checkpoint.
Result<std::optional<Claim>> DetectTrainerTag(const SourceDir& dir) {
  const bool trainer = std::any_of(std::begin(kTrainerMarks), std::end(kTrainerMarks),
                                   [&](std::string_view f) { return dir.Lists(std::string(f)); });
  if (!trainer) return std::optional<Claim>();
  CKPTFS_ASSIGN_OR_RETURN(const std::string tag, LatestTag(dir));
  // Trainer's checkpoint holds that one tag; a save dir of several (a run) stays a run even
  // where an HF config.json sits beside them.
  if (tag.empty() || dir.dirs.size() != 1 || dir.dirs[0] != tag) {
    return std::optional<Claim>();
  }
  auto sub = dir.OpenDir(tag);
  if (!sub.ok()) {
    if (IsTransient(sub.status())) return sub.status();
    return std::optional<Claim>();
  }
  for (std::string_view name : {kProbeNames[1], kProbeNames[0]}) {
    const std::string n(name);
    if (sub->Lists(n) || sub->Lists(n + std::string(kZstdSuffix))) {
      return std::optional<Claim>(Claim{.rank = Claim::Rank::kInside, .file = tag + "/" + n});
    }
  }
  return std::optional<Claim>();
}

Result<std::optional<Claim>> DetectDeepSpeed(const SourceDir& dir) {
  if (!dir.named.empty()) {  // a tag is a directory: one of its files is refused as such
    if (!IsRankFile(dir.named)) return std::optional<Claim>();
    return std::optional<Claim>(Claim{
        Claim::Rank::kNamed, dir.named,
        Status::InvalidArgument(dir.named + ": a DeepSpeed rank file; mount the tag directory "
                                            "that holds it (global_stepN/)")});
  }
  for (std::string_view name : {kProbeNames[1], kProbeNames[0]}) {
    const std::string n(name);
    if (dir.Lists(n) || dir.Lists(n + std::string(kZstdSuffix))) {
      return std::optional<Claim>(Claim{.rank = Claim::Rank::kNamed, .file = n});
    }
  }
  return DetectTrainerTag(dir);
}

// Refuses a tag whose listing holds rank files another world size would write.
Status CheckListing(const SourceDir& dir, uint32_t dp, uint32_t mp, bool bf16, bool stage3) {
  for (const std::string& f : dir.files) {
    uint64_t r = 0, m = 0;
    if (!ParseZeroName(f, r, m)) continue;
    const bool optim = EndsWith(StripZst(f), "_optim_states.pt");
    if (r >= dp || m >= mp) {
      return Status::Corruption(f + ": rank " + std::to_string(r) + " (mp rank " +
                                std::to_string(m) + ") but " + std::string(kProbeNames[stage3]) +
                                " says dp_world_size " + std::to_string(dp) + ", mp_world_size " +
                                std::to_string(mp) + ": rank files of different world sizes");
    }
    if (optim && (f.substr(0, 5) == "bf16_") != bf16) {
      return Status::Corruption(f + ": bf16 and non-bf16 optimizer rank files side " +
                                "by side: rank files of different runs");
    }
    if (!optim && !stage3) {
      return Status::Corruption(f + ": a ZeRO-3 model states file beside " +
                                std::string(kProbeNames[0]) + ": rank files of different runs");
    }
  }
  return Status::Ok();
}

struct OpenedRank {
  std::string name;  // file name as the tag names it (no .zst)
  StoredFile file;
  TorchFile torch;
};

// Opens and reads the rank files `names`, several at once; a missing one is refused as
// such, naming the file and the world size that asks for it.
Result<std::vector<OpenedRank>> OpenRanks(const SourceDir& dir,
                                          const std::vector<std::string>& names,
                                          const std::string& why, ReadContext& context) {
  std::vector<OpenedRank> out(names.size());
  std::vector<Status> errors(names.size(), Status::Ok());
  for (size_t i = 0; i < names.size(); ++i) {
    CKPTFS_ASSIGN_OR_RETURN(const bool there, Exists(dir, names[i]));
    if (!there) {
      return Status::NotFound(names[i] + ": missing (" + why +
                              "); a tag is complete only when every rank has saved");
    }
    out[i].name = names[i];
  }
  ForEachInParallel(names.size(), [&](size_t i) {
    Result<StoredFile> f = OpenWeightFile(dir, names[i], context);
    if (!f.ok()) {
      errors[i] = f.status();
      return;
    }
    Result<TorchFile> t = ReadTorchFile(*f->source, PickleGlobals::kDeepSpeed);
    if (!t.ok()) {
      errors[i] = t.status();
      return;
    }
    out[i].file = std::move(f).value();
    out[i].torch = std::move(t).value();
  });
  for (const Status& e : errors) CKPTFS_RETURN_IF_ERROR(e);
  return out;
}

// Turns the consolidated tensors into the checkpoint's storages and tensors.
// Tensors named model.* are renamed `model_as`.* when given (a pipeline's fp32 masters, whose
// model is its layer files').
void Fill(ds::ZeroCheckpoint& zero, const std::vector<uint32_t>& shard_of,
          const std::string& model_as, Checkpoint& ckpt) {
  for (StoredRange& r : zero.ranges) r.shard = shard_of[r.shard];
  std::vector<uint32_t> storage_of(zero.tensors.size(), 0);
  for (size_t i = 0; i < zero.tensors.size(); ++i) {
    const ds::ZeroTensor& z = zero.tensors[i];
    if (z.same_as != ds::ZeroTensor::kOwnBytes) continue;
    Storage s;
    s.dtype = z.dtype;
    s.size = z.size;
    if (z.range_count > 0) {
      s.shard = zero.ranges[z.first_range].shard;
      s.offset = zero.ranges[z.first_range].offset;
    }
    if (z.range_count > 1) {
      s.first_range = static_cast<uint32_t>(ckpt.ranges.size());
      s.range_count = z.range_count;
      ckpt.ranges.insert(ckpt.ranges.end(), zero.ranges.begin() + z.first_range,
                         zero.ranges.begin() + z.first_range + z.range_count);
    }
    storage_of[i] = static_cast<uint32_t>(ckpt.storages.size());
    ckpt.storages.push_back(s);
  }
  for (size_t i = 0; i < zero.tensors.size(); ++i) {
    ds::ZeroTensor& z = zero.tensors[i];
    const uint32_t owner =
        z.same_as == ds::ZeroTensor::kOwnBytes ? static_cast<uint32_t>(i) : z.same_as;
    const Storage& s = ckpt.storages[storage_of[owner]];
    if (!model_as.empty() && z.name.compare(0, 6, "model.") == 0) {
      z.name = model_as + z.name.substr(5);
      z.top_key_size = static_cast<uint32_t>(model_as.size());
    }
    ckpt.tensors.push_back(Tensor{.name = std::move(z.name),
                                  .dtype = z.dtype,
                                  .top_is_dict = z.top_is_dict,
                                  .shape = std::move(z.shape),
                                  .shard = s.shard,
                                  .offset = s.offset,
                                  .size = s.size,
                                  .storage = storage_of[owner],
                                  .top_key_size = z.top_key_size});
  }
  ckpt.ranges.shrink_to_fit();
}

// Reads tag directory `dir` from its model states file `states`.
Status ReadTag(const SourceDir& dir, const std::string& states, ReadContext& context,
               Checkpoint& ckpt) {
  const bool stage3 = states == kProbeNames[1];
  CKPTFS_ASSIGN_OR_RETURN(std::vector<OpenedRank> first,
                          OpenRanks(dir, {states}, "the tag's model states", context));
  const ds::RankFile first_rank{first[0].file.source->Name(), 0, &first[0].torch};
  CKPTFS_ASSIGN_OR_RETURN(const ds::TagInfo tag, ds::ReadTagInfo(first_rank));
  const std::vector<LayerFile> layers = LayerFiles(dir);
  // Tensor-parallel ranks are not merged: a pipeline's are sub-trees of layer files.
  const bool consolidate = tag.mp_world_size == 1;
  if (!consolidate && layers.empty()) {
    return Status::Unsupported(first_rank.name + ": mp_world_size " +
                               std::to_string(tag.mp_world_size) +
                               ": tensor-parallel ZeRO checkpoints are not consolidated (nor "
                               "does zero_to_fp32)");
  }
  CKPTFS_RETURN_IF_ERROR(CheckLayers(layers, first_rank.name, tag.mp_world_size));
  if (!tag.module_saved && !tag.zero_state && layers.empty()) {
    return Status::Unsupported(first_rank.name +
                               ": module and param_shapes are None and the tag lists no layer "
                               "files (layer_XX-model_states.pt): no weights to serve");
  }
  const uint32_t dp = tag.dp_world_size;
  const std::string world = "dp_world_size " + std::to_string(dp) + " in " + first_rank.name;

  // Which optimizer files: bf16_ ones under BF16_Optimizer; none at all without ZeRO.
  CKPTFS_ASSIGN_OR_RETURN(const bool plain, Exists(dir, ds::OptimStatesName(0, 0, false)));
  bool bf16 = false;
  if (!plain) {
    CKPTFS_ASSIGN_OR_RETURN(bf16, Exists(dir, ds::OptimStatesName(0, 0, true)));
  }
  // No optimizer files and either no ZeRO state saved (param_shapes None: stage 0, or an
  // engine without optimizer, as a pipeline saved for inference) or no ZeRO configured.
  const bool no_zero =
      !consolidate ||
      (!plain && !bf16 && (!tag.zero_state || (!stage3 && tag.config_stage.value_or(0) == 0)));
  CKPTFS_RETURN_IF_ERROR(CheckListing(dir, dp, tag.mp_world_size, bf16, stage3));

  std::vector<std::string> model_names = {states};
  for (uint32_t r = 1; stage3 && r < dp; ++r) model_names.push_back(ds::Zero3ModelStatesName(r, 0));
  std::vector<std::string> optim_names;
  for (uint32_t r = 0; !no_zero && r < dp; ++r)
    optim_names.push_back(ds::OptimStatesName(r, 0, bf16));

  std::vector<std::string> more(model_names.begin() + 1, model_names.end());
  CKPTFS_ASSIGN_OR_RETURN(std::vector<OpenedRank> models, OpenRanks(dir, more, world, context));
  models.insert(models.begin(), std::move(first[0]));
  CKPTFS_ASSIGN_OR_RETURN(std::vector<OpenedRank> optims,
                          OpenRanks(dir, optim_names, world, context));
  std::vector<std::string> layer_names;
  for (const LayerFile& l : layers) layer_names.push_back(l.name);
  CKPTFS_ASSIGN_OR_RETURN(std::vector<OpenedRank> layer_files,
                          OpenRanks(dir, layer_names, "a pipeline layer", context));

  // Shards in file name order.
  std::vector<OpenedRank*> all;
  for (OpenedRank& o : models) all.push_back(&o);
  for (OpenedRank& o : optims) all.push_back(&o);
  for (OpenedRank& o : layer_files) all.push_back(&o);
  std::vector<uint32_t> order(all.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return all[a]->name < all[b]->name; });
  std::vector<uint32_t> shard_of(all.size());
  for (uint32_t k = 0; k < order.size(); ++k) shard_of[order[k]] = k;

  std::vector<ds::RankFile> model_files, optim_files;
  for (size_t i = 0; i < models.size() + optims.size(); ++i) {
    ds::RankFile rf{all[i]->file.source->Name(), static_cast<uint32_t>(i), &all[i]->torch};
    (i < models.size() ? model_files : optim_files).push_back(std::move(rf));
  }
  CKPTFS_ASSIGN_OR_RETURN(ds::ZeroCheckpoint zero, ds::Consolidate(model_files, optim_files));
  for (uint32_t k : order) ckpt.shards.push_back(std::move(all[k]->file));
  Fill(zero, shard_of, layers.empty() ? "" : "model_fp32", ckpt);
  const size_t first_layer = models.size() + optims.size();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string prefix =
        consolidate ? "model."
                    : "model_" + ds::TwoDigits(static_cast<uint32_t>(layers[i].mp)) + ".";
    AddLayer(all[first_layer + i]->torch, shard_of[first_layer + i], prefix, layers[i].layer, ckpt);
  }
  CKPTFS_RETURN_IF_ERROR(SortTensors(ckpt));
  ckpt.state_json = std::move(zero.state_json);
  if (!layers.empty()) {
    ckpt.state_json = ds::WithPipeline(ckpt.state_json, tag, layers.size());
  }
  // The consolidated weights are torch's: what transformers' loader expects of a conversion.
  ckpt.metadata = {{"format", "pt"}};
  return Status::Ok();
}

Status ReadDeepSpeed(const SourceDir& dir, const Claim& claim, ReadContext& context,
                     Checkpoint& ckpt) {
  const size_t slash = claim.file.rfind('/');
  if (slash == std::string::npos) return ReadTag(dir, claim.file, context, ckpt);
  // An HF Trainer checkpoint: its tag's files are the shards, its own files the others.
  CKPTFS_ASSIGN_OR_RETURN(const SourceDir tag, dir.OpenDir(claim.file.substr(0, slash)));
  return ReadTag(tag, claim.file.substr(slash + 1), context, ckpt);
}

// Rank files this tag does not use (another world size's, pipeline layer files) would only
// mislead at the root.
std::vector<std::string> DeepSpeedHidden(const SourceDir& dir, const Checkpoint&) {
  std::vector<std::string> hidden;
  for (const std::string& f : dir.files) {
    if (IsRankFile(f)) hidden.push_back(f);
  }
  return hidden;
}

// The CRC-32 of every stored record of rank file `shard` against its zip directory: the
// consolidated storages are ranges of several records, so they carry no CRC of their own.
Status CheckRecordCrcs(const StoredFile& shard, const std::function<void(const Status&)>& report) {
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<ZipEntry> entries, ReadZipDirectory(*shard.source));
  std::vector<uint8_t> buf(1 << 20);
  for (const ZipEntry& e : entries) {
    if (e.method != 0) continue;  // torch.save stores records; ReadTorchFile refused others
    uLong crc = crc32(0, nullptr, 0);
    for (uint64_t done = 0; done < e.size;) {
      const uint64_t n = std::min<uint64_t>(buf.size(), e.size - done);
      CKPTFS_RETURN_IF_ERROR(shard.source->ReadAt(e.data_offset + done, {buf.data(), n}));
      crc = crc32(crc, buf.data(), static_cast<uInt>(n));
      done += n;
    }
    if (static_cast<uint32_t>(crc) != e.crc32) {
      report(Status::Corruption(shard.name + ": record " + e.name +
                                ": CRC-32 differs from the zip directory's"));
    }
  }
  return Status::Ok();
}

// verify, once every stored byte was read: each consolidated tensor's ranges still add up
// to its shape and lie inside their rank files, and every rank file's records match their
// CRC-32.
Status VerifyDeepSpeed(const Checkpoint& ckpt, const std::function<void(const Status&)>& report) {
  for (const StoredFile& shard : ckpt.shards)
    CKPTFS_RETURN_IF_ERROR(CheckRecordCrcs(shard, report));
  for (const Tensor& t : ckpt.tensors) {
    StoredRange one;
    uint64_t bytes = 0;
    for (const StoredRange& r : RangesOf(ckpt, t, one)) {
      const StoredFile& shard = ckpt.shards[r.shard];
      if (!RangeWithin(r.offset, r.size, shard.source->Size())) {
        report(
            Status::Corruption(shard.name + ": tensor \"" + t.name + "\" reaches past the file"));
      }
      bytes += r.size;
    }
    const std::optional<uint64_t> want = TensorByteSize(t.dtype, t.shape);
    if (!want || *want != bytes) {
      report(Status::Corruption(ckpt.shards[t.shard].name + ": tensor \"" + t.name + "\": its " +
                                "partitions hold " + std::to_string(bytes) + " bytes, its shape " +
                                (want ? std::to_string(*want) : std::string("overflows"))));
    }
  }
  return Status::Ok();
}

// With no key: the consolidated model, under zero_to_fp32's names.
void DeepSpeedModel(Checkpoint& ckpt) {
  if (TakeModelSubtree(ckpt, "model", /*dicts_only=*/true)) ckpt.model.rule = "DeepSpeed: model";
}

// A run's view: the `global_stepN/` tag DeepSpeed saves inside an HF Trainer checkpoint.
bool IsTagDir(std::string_view name) {
  constexpr std::string_view kTag = "global_step";
  if (!name.starts_with(kTag) || name.size() == kTag.size()) return false;
  return std::all_of(name.begin() + kTag.size(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// inspect's line: the tag's ZeRO stage, world sizes, precision and rank files.
std::vector<std::pair<std::string, std::string>> DeepSpeedInspect(const Checkpoint& ckpt) {
  return {{"zero", ds::ZeroSummary(ckpt.state_json)}};
}

}  // namespace

FormatReader DeepSpeedFormat() {
  return FormatReader{
      .name = "deepspeed",
      .title = "DeepSpeed ZeRO",
      .probe_names = kProbeNames,
      .looks_for =
          "a DeepSpeed tag directory (mp_rank_00_model_states.pt, "
          "zero_pp_rank_0_mp_rank_00_model_states.pt)",
      .accepts_file = [](std::string_view) { return false; },
      .file_kinds = "",
      .detect = &DetectDeepSpeed,
      .read = &ReadDeepSpeed,
      .hidden = &DeepSpeedHidden,
      .verify = &VerifyDeepSpeed,
      .model = {.top_key = &PickledTopKey, .by_default = &DeepSpeedModel},
      .inspect = &DeepSpeedInspect,
      .run = {.nested_dir = &IsTagDir,
              .signs_claimed_folder = true,
              .torch_files_are_one = true,
              .record = &DeepSpeedRunRecord},
  };
}

}  // namespace ckptfs
