// The view table: what a mount shows besides SOURCE's own files. Each view is one file of
// this folder and one line of kViews; Layout::Build makes each, runs their Plan steps at
// once, then lays them out in this order (which fixes inode numbers). Names of the merged
// files come from the checkpoint (Checkpoint::safetensors_view and torch_view:
// adapter_model.* for a peft adapter, see HfViewNamesOf).
//
//   /NAME                    root_files.cc: the format's own (FormatReader::root_files:
//                            a GGUF split set's merged NAME.gguf, and its splits)
//   /model.safetensors       merged_safetensors.cc: every model tensor, one header
//   /pytorch_model.bin       torch_zip.cc: a torch.save zip of every model tensor
//   /tensors/a/b/leaf.npy    tensors.cc: every tensor, model or not, one file each
//   /shards/NAME             shards.cc: each stored weight file and the index, unchanged
//   /pytorch_model/<key>.pt  split.cc: the per-key split layout (docs/split.md)
//   /.ckptfs/                metadata.cc: stats.json and metadata.json
//
// Which tensors each holds: the model (Checkpoint::model: in_model tensors, named by
// ModelName) in the merged files and pytorch_model/, every tensor in tensors/. Strided
// tensors (non-contiguous torch views) are only in pytorch_model.bin. Complex tensors
// (C64, C128) are left out of model.safetensors with a note (safetensors has no C128, and
// C64 only since 0.6); tensors/ has them as .npy (<c8, <c16), pytorch_model.bin and
// pytorch_model/ as torch's Complex*Storage. Each view's own rules: its file's header.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/checkpoint/checkpoint.h"
#include "core/layout/layout.h"

namespace ckptfs {

struct ViewEntry {
  std::string_view name;  // what docs and logs call it
  // The view over `ckpt`; it must not outlive `ckpt`.
  std::unique_ptr<View> (*make)(const Checkpoint& ckpt);
};

extern const std::span<const ViewEntry> kViews;

// The Read of a view's source whose bytes are made on each read, piece by piece:
// `piece(at, bytes)` makes the piece holding offset `at` into `bytes` and returns the
// offset where that piece starts. Fills `sink` with [offset, offset + length); a piece
// that does not hold `at` is a Corruption error naming `name`.
Status ReadMadePieces(uint64_t offset, uint64_t length, ReadSink& sink, const std::string& name,
                      const std::function<uint64_t(uint64_t at, std::string& bytes)>& piece);

}  // namespace ckptfs
