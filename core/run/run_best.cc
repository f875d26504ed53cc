// latest and best from the frameworks' own records: the best checkpoint HF Trainer's
// trainer_state.json names, and the one Lightning's ModelCheckpoint state names (the rules
// around them, and latest, are run_listing.cc's; docs/run-discovery.md says which record
// wins).
#include <nlohmann/json.hpp>

#include "core/checkpoint/assembly.h"
#include "core/encoding/ordered_json.h"
#include "core/encoding/torch_file.h"
#include "core/run/run_entries.h"
#include "core/transient.h"

namespace ckptfs {

const RunEntry* Find(const RunListing& run, const std::string& name) {
  for (const RunEntry& e : run.entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

bool Usable(const RunEntry* e) { return e && e->complete && e->problem.empty(); }

namespace {

// Sets run.best from a record's path, or says why not.
void MatchBest(RunListing& run, const std::string& written, const std::string& record,
               const std::string& where) {
  const std::string name = LastComponent(written);
  const RunEntry* e = IsPlainName(name) ? Find(run, name) : nullptr;
  if (!Usable(e)) {
    run.skipped.push_back(where + ": best \"" + EscapeControlChars(written.substr(0, 200)) +
                          "\" is " + (e ? "not complete" : "no entry of the run") + ", skipped");
    return;
  }
  run.best = name;
  run.best_from = record;
}

}  // namespace

// HF: the trainer_state.json of the checkpoint Trainer resumes from (get_last_checkpoint: the
// latest complete checkpoint, by `latest`, else the highest step), whose
// best_model_checkpoint Trainer._load_best_model loads (TrainerState.load_from_json); SOURCE's
// own (Trainer.save_state at the end) only when no checkpoint holds one. Never by time: a
// copied or synced run has arbitrary times.
Status BestFromTrainerState(const SourceDir& dir, TrainerStates states, RunListing& run) {
  const std::string trainer(kTrainerState);
  const std::pair<std::string, timespec>* chosen = nullptr;
  for (const auto& s : states) {
    const RunEntry* e = Find(run, s.first);
    if (!Usable(e)) continue;
    if (s.first == run.latest) {
      chosen = &s;
      break;
    }
    const RunEntry* c = chosen ? Find(run, chosen->first) : nullptr;
    if (!c || (e->step && (!c->step || *e->step > *c->step))) chosen = &s;
  }
  if (!chosen && !dir.Lists(trainer)) return Status::Ok();
  const std::string holder_name = chosen ? chosen->first : std::string();
  SourceDir holder = dir;
  if (!holder_name.empty()) {
    CKPTFS_ASSIGN_OR_RETURN(holder, dir.OpenDir(holder_name));
  }
  const std::string shown = JoinShown(holder.path, trainer);
  auto file = holder.open(trainer);
  if (!file.ok()) return Skip(run.skipped, file.status());
  auto text = ReadWhole(**file, kMaxTrainerStateBytes);
  if (!text.ok()) return Skip(run.skipped, text.status());
  const Result<nlohmann::json> parsed = ParseJson<nlohmann::json>(*text, shown);
  if (!parsed.ok() && parsed.status().code() != Status::Code::kCorruption) {
    return Skip(run.skipped, parsed.status());
  }
  if (!parsed.ok() || !parsed->is_object()) {
    run.skipped.push_back(shown + ": not a JSON object, skipped");
    return Status::Ok();
  }
  const nlohmann::json& state = *parsed;
  auto best = state.find("best_model_checkpoint");
  if (best == state.end() || best->is_null()) return Status::Ok();
  if (!best->is_string()) {
    run.skipped.push_back(shown + ": best_model_checkpoint is not a string, skipped");
    return Status::Ok();
  }
  MatchBest(run, best->get<std::string>(), std::string(kTrainerState), shown);
  return Status::Ok();
}

// The Lightning entry a resumed fit() would load: the newest complete "last" save
// (LightningLastVersion), else the newest complete .ckpt by time; nullptr when none.
const RunEntry* LightningResumeEntry(const RunListing& run) {
  const RunEntry* last = nullptr;
  const RunEntry* newest = nullptr;
  for (const RunEntry& e : run.entries) {
    if (e.kind != RunEntry::Kind::kFile || !EndsWith(StripZst(e.name), ".ckpt") || !Usable(&e)) {
      continue;
    }
    const std::optional<uint64_t> version = LightningLastVersion(e.name);
    if (version && (!last || *version > *LightningLastVersion(last->name))) last = &e;
    if (!newest || Later(e.mtime, newest->mtime)) newest = &e;
  }
  return last ? last : newest;
}

// Lightning: best_model_path of the FIRST ModelCheckpoint callback in the callbacks state of
// the checkpoint fit() resumes from (LightningResumeEntry). Trainer.checkpoint_callback is
// the first ModelCheckpoint in trainer.callbacks, and _get_callbacks_state_dict saves them in
// that order, keyed by ModelCheckpoint.state_key ("ModelCheckpoint{'monitor': ...}"): the
// order saved counts, not the keys' order, so the state is read as an ordered JSON object.
// best_model_path is an absolute path on the training machine: matched by its file name.
Status BestFromLightning(const SourceDir& dir, RunListing& run) {
  const RunEntry* source = LightningResumeEntry(run);
  if (!source) return Status::Ok();
  const std::string shown = JoinShown(dir.path, source->name);
  auto file = dir.open(source->name);
  if (!file.ok()) return Skip(run.skipped, file.status());
  auto torch = ReadTorchFile(**file);
  if (!torch.ok()) return Skip(run.skipped, torch.status());
  // Linear in the state's size: a checkpoint's pickle may hold 100,000 keys.
  const nlohmann::ordered_json state = ParseOrderedJson(torch->state_json);
  if (!state.is_object() || !state.contains("callbacks") || !state["callbacks"].is_object()) {
    return Status::Ok();
  }
  for (const auto& [key, value] : state["callbacks"].items()) {
    if (!key.starts_with("ModelCheckpoint") || !value.is_object()) continue;
    // The first ModelCheckpoint decides, with or without a best: a later one is never asked.
    auto best = value.find("best_model_path");
    if (best == value.end() || !best->is_string() || best->get<std::string>().empty()) {
      return Status::Ok();
    }
    MatchBest(run, best->get<std::string>(), "ModelCheckpoint best_model_path", shown);
    return Status::Ok();
  }
  return Status::Ok();
}
}  // namespace ckptfs
