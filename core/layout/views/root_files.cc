// The files a format shows at the mount root (FormatReader::root_files): a stored weight
// file under its SOURCE name (a stored file's mode and mtime), or a file laid end to end
// from stored ranges and made bytes (a GGUF split set's merged NAME.gguf), no more
// readable than the least readable stored file, with the newest shard's mtime. Made bytes
// are kept once in the layout: small ones (padding) in its shared pool, large ones (a
// header holding a tokenizer's vocabulary) as their own source.
#include "core/checkpoint/format_reader.h"
#include "core/layout/views/views.h"

namespace ckptfs {
namespace {

// Made bytes above this go in a source of their own, not the pool (AppendHeld).
constexpr size_t kHeldBytes = 64 << 10;

class RootFilesView final : public View {
 public:
  explicit RootFilesView(const Checkpoint& ckpt) {
    if (const auto root_files = FormatOf(ckpt).root_files) files_ = root_files(ckpt);
  }
  // The first file's name: the view's own entry for stats.json (the rest count as other).
  std::string RootName() const override { return files_.empty() ? "" : files_.front().name; }

  void LayOut(LayoutBuilder& b) override {
    for (RootFile& f : files_) {
      if (f.shard) {
        b.AddStoredFile(Layout::kRoot, f.name, b.ShardSource(*f.shard));
        continue;
      }
      // Made from the whole checkpoint (a merged header holds every file's tensor infos):
      // no more readable than its least readable stored file, whatever its pieces.
      const uint64_t ino = b.AddFile(Layout::kRoot, f.name, b.whole_mode());
      for (RootFile::Piece& p : f.pieces) {
        if (p.bytes.empty()) {
          b.AppendSource(ino, b.ShardSource(p.range.shard), p.range.offset, p.range.size, p.tensor);
        } else if (p.bytes.size() > kHeldBytes) {
          b.AppendHeld(ino, std::move(p.bytes));
        } else {
          b.AppendShared(ino, std::move(p.bytes));
        }
      }
    }
    files_ = {};
  }

 private:
  std::vector<RootFile> files_;
};

}  // namespace

std::unique_ptr<View> MakeRootFilesView(const Checkpoint& ckpt) {
  return std::make_unique<RootFilesView>(ckpt);
}

}  // namespace ckptfs
