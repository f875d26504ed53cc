// .ckptfs/: stats.json, a kStats node whose bytes the mount makes at each open, and
// metadata.json, the checkpoint's non-tensor values (MetadataJson), made at mount. Both
// are files of the whole checkpoint (LayoutBuilder::whole_mode).
#include "core/layout/views/views.h"

namespace ckptfs {
namespace {

class MetadataView final : public View {
 public:
  explicit MetadataView(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  std::string RootName() const override { return ".ckptfs"; }

  void LayOut(LayoutBuilder& b) override {
    const uint64_t dir = b.AddDir(Layout::kRoot, RootName());
    b.AddFile(dir, "stats.json", b.whole_mode(), NodeKind::kStats);
    b.AppendHeld(b.AddFile(dir, "metadata.json", b.whole_mode()), MetadataJson(ckpt_));
  }

 private:
  const Checkpoint& ckpt_;
};

}  // namespace

std::unique_ptr<View> MakeMetadataView(const Checkpoint& ckpt) {
  return std::make_unique<MetadataView>(ckpt);
}

}  // namespace ckptfs
