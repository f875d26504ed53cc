// model.safetensors (Checkpoint::safetensors_view): one header and every tensor of the
// model (in_model tensors, named by ModelName), ordered by element size (largest first)
// then name (AlignedOrder), so every tensor is aligned. Complex tensors are left out with
// a note. A file of the whole checkpoint (LayoutBuilder::whole_mode).
//
// The header's entries would cost about 90 bytes a tensor if kept: the view keeps the
// header's ends (in the layout's pool) and where each chunk of entries starts, and makes
// a chunk's entries again on each read of it (EntryBytes). A chunk closes after
// kChunkTensors tensors or once its bytes reach kChunkBytes, whichever comes first:
// hostile long names then cost a read at most one entry beyond that.
#include <algorithm>
#include <cstring>

#include "core/checkpoint/model.h"
#include "core/encoding/safetensors.h"
#include "core/layout/views/views.h"

namespace ckptfs {
namespace {

constexpr uint32_t kChunkTensors = 1024;
constexpr uint64_t kChunkBytes = 1u << 20;

class MergedSafetensorsView final : public View {
 public:
  explicit MergedSafetensorsView(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  std::string RootName() const override { return ckpt_.safetensors_view; }

  // The model's order, and every chunk's entries measured (made and dropped).
  void Plan() override {
    order_ = AlignedOrder(ckpt_);
    // Complex tensors: no safetensors dtype every reader knows (dtype.h).
    std::erase_if(order_, [this](uint32_t i) {
      return !ckpt_.tensors[i].in_model || IsComplex(ckpt_.tensors[i].dtype);
    });
    std::string bytes;
    uint64_t data_offset = 0;
    Chunk chunk{0, 0, 0, 0};
    for (uint32_t j = 0; j < order_.size(); ++j) {
      AppendEntry(bytes, j, data_offset);
      data_offset += ckpt_.tensors[order_[j]].size;
      chunk.end = j + 1;
      if (chunk.end - chunk.begin == kChunkTensors || bytes.size() >= kChunkBytes ||
          chunk.end == order_.size()) {
        chunks_.push_back(chunk);
        chunk = Chunk{chunk.end, chunk.end, data_offset, chunk.at + bytes.size()};
        bytes.clear();
      }
    }
    entries_size_ = chunk.at;
    chunks_.shrink_to_fit();
  }

  void LayOut(LayoutBuilder& b) override {
    ino_ = b.AddFile(Layout::kRoot, RootName(), b.whole_mode());
  }

  void Finish(LayoutBuilder& b) override {
    for (const Tensor& t : ckpt_.tensors) {
      if (t.in_model && t.contiguous() && IsComplex(t.dtype)) {
        notes.push_back("tensor \"" + t.name + "\" is " + std::string(DtypeName(t.dtype)) +
                        " (complex): not in model.safetensors, which has no such dtype "
                        "for every reader; in tensors/ and pytorch_model.bin");
      }
    }
    const uint64_t ino = ino_;
    b.BeginExtents(ino);
    // BuildSafetensorsHeader's bytes: the JSON body is the opening, the entries and '}';
    // the 8-byte length before it counts the padding too.
    const std::string opening = SafetensorsHeaderOpening(ckpt_.metadata);
    const uint64_t body = opening.size() + entries_size_ + 1;
    const uint64_t padding = (8 - body % 8) % 8;
    std::string prefix;
    for (int i = 0; i < 8; ++i) {
      prefix.push_back(static_cast<char>(((body + padding) >> (8 * i)) & 0xff));
    }
    b.AppendInline(ino, prefix + opening);
    b.AppendSource(ino, b.AddSource(std::make_unique<EntryBytes>(*this)), 0, entries_size_);
    std::string closing(padding + 1, ' ');
    closing.front() = '}';
    b.AppendInline(ino, closing);
    for (uint32_t i : order_) b.AppendTensor(ino, ckpt_.tensors[i]);
  }

 private:
  // Entries [begin, end) of order_, the first's data offset, and where they start among
  // the header's entry bytes.
  struct Chunk {
    uint32_t begin;
    uint32_t end;
    uint64_t data_offset;
    uint64_t at;
  };

  // The header's entries, chunk by chunk, made on each read.
  class EntryBytes final : public ByteSource {
   public:
    explicit EntryBytes(const MergedSafetensorsView& view) : view_(view) {}
    uint64_t Size() const override { return view_.entries_size_; }
    const std::string& Name() const override { return view_.ckpt_.safetensors_view; }
    Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
      CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
      return ReadMadePieces(offset, length, sink, Name(), [this](uint64_t at, std::string& bytes) {
        const std::vector<Chunk>& chunks = view_.chunks_;
        const Chunk& chunk =
            *(std::upper_bound(chunks.begin(), chunks.end(), at,
                               [](uint64_t off, const Chunk& c) { return off < c.at; }) -
              1);
        uint64_t data_offset = chunk.data_offset;
        for (uint32_t j = chunk.begin; j < chunk.end; ++j) {
          view_.AppendEntry(bytes, j, data_offset);
          data_offset += view_.ckpt_.tensors[view_.order_[j]].size;
        }
        return chunk.at;
      });
    }

   private:
    const MergedSafetensorsView& view_;
  };

  // The entry of tensor order_[j] at data offset `data_offset`, after a ',' unless it
  // opens the header's JSON.
  void AppendEntry(std::string& out, size_t j, uint64_t data_offset) const {
    const Tensor& t = ckpt_.tensors[order_[j]];
    if (j > 0 || !ckpt_.metadata.empty()) out += ',';
    AppendSafetensorsEntry(out, ModelName(ckpt_, t), t.dtype, t.shape, data_offset,
                           data_offset + t.size);
  }

  const Checkpoint& ckpt_;
  uint64_t ino_ = 0;
  std::vector<uint32_t> order_;
  std::vector<Chunk> chunks_;
  uint64_t entries_size_ = 0;
};

}  // namespace

std::unique_ptr<View> MakeMergedSafetensorsView(const Checkpoint& ckpt) {
  return std::make_unique<MergedSafetensorsView>(ckpt);
}

}  // namespace ckptfs
