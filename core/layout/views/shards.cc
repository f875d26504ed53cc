// shards/NAME: each stored weight file and the index, unchanged (a stored file's mode and
// mtime). Decoded data (Checkpoint::decoded) has no stored file and is not shown.
#include "core/layout/views/views.h"

namespace ckptfs {
namespace {

class ShardsView final : public View {
 public:
  explicit ShardsView(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  std::string RootName() const override { return "shards"; }

  void LayOut(LayoutBuilder& b) override {
    const uint64_t dir = b.AddDir(Layout::kRoot, RootName());
    for (uint32_t i = 0; i < ckpt_.shards.size(); ++i) {
      b.AddStoredFile(dir, ckpt_.shards[i].name, b.ShardSource(i));
    }
    for (uint32_t i = 0; i < ckpt_.index.size(); ++i) {
      b.AddStoredFile(dir, ckpt_.index[i].name, b.IndexSource(i));
    }
  }

 private:
  const Checkpoint& ckpt_;
};

}  // namespace

std::unique_ptr<View> MakeShardsView(const Checkpoint& ckpt) {
  return std::make_unique<ShardsView>(ckpt);
}

}  // namespace ckptfs
