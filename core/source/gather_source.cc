#include "core/source/gather_source.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/checked.h"

namespace ckptfs {

Result<std::unique_ptr<GatherSource>> GatherSource::Make(std::string name,
                                                         std::vector<GatherGroup> groups) {
  std::unique_ptr<GatherSource> out(new GatherSource());
  out->name_ = std::move(name);
  uint64_t size = 0;
  for (GatherGroup& g : groups) {
    // Empty runs and groups hold no byte: dropped, so every kept group starts past the
    // one before and a read's binary search lands on the group that has its byte.
    std::erase_if(g.runs, [](const GatherRun& r) { return r.length == 0; });
    uint64_t row = 0;
    for (const GatherRun& r : g.runs) {
      if (!r.source) return Status::InvalidArgument(out->name_ + ": a run has no source");
      if (g.count == 0) continue;
      const std::optional<uint64_t> last = CheckedMul(g.count - 1, r.stride);
      const std::optional<uint64_t> at = last ? CheckedAdd(r.base, *last) : std::nullopt;
      if (!at || !RangeWithin(*at, r.length, r.source->Size())) {
        return Status::InvalidArgument(
            out->name_ + ": a run of " + std::to_string(g.count) + " x " +
            std::to_string(r.length) + " bytes from offset " + std::to_string(r.base) +
            " (stride " + std::to_string(r.stride) + ") lies past the end of " + r.source->Name());
      }
      const std::optional<uint64_t> next = CheckedAdd(row, r.length);
      if (!next) return Status::InvalidArgument(out->name_ + ": size overflows 64 bits");
      row = *next;
    }
    if (g.count == 0 || row == 0) continue;
    const std::optional<uint64_t> bytes = CheckedMul(g.count, row);
    const std::optional<uint64_t> end = bytes ? CheckedAdd(size, *bytes) : std::nullopt;
    if (!end) return Status::InvalidArgument(out->name_ + ": size overflows 64 bits");
    out->group_start_.push_back(size);
    out->row_bytes_.push_back(row);
    out->groups_.push_back(std::move(g));
    size = *end;
  }
  out->size_ = size;
  return out;
}

namespace {

// Where one piece goes when the reader takes lent spans: what its source lends is passed
// on, and what it fills lands in `made` (one buffer for the whole read, made on the first
// piece that fills, never resized after) at the piece's place in the read.
class PieceSink final : public ReadSink {
 public:
  PieceSink(std::vector<LentBytes>* lent_to, std::shared_ptr<std::vector<uint8_t>>& made,
            uint64_t total, uint64_t at, uint64_t length)
      : ReadSink(lent_to), made_(made), total_(total), at_(at), length_(length) {}
  std::span<uint8_t> Fill() override {
    if (!made_) made_ = std::make_shared<std::vector<uint8_t>>(total_);
    filled_ = true;
    return {made_->data() + at_, length_};
  }
  bool filled() const { return filled_; }

 private:
  std::shared_ptr<std::vector<uint8_t>>& made_;
  uint64_t total_, at_, length_;
  bool filled_ = false;
};

}  // namespace

Status GatherSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  if (length == 0) return Status::Ok();
  const std::span<uint8_t> out = sink.lent ? std::span<uint8_t>() : sink.Fill();
  std::shared_ptr<std::vector<uint8_t>> made;  // pieces filled for a lending read

  // The first piece by arithmetic: the group (binary search), the repetition (a
  // division), then the run within it (a walk over one repetition's runs).
  size_t g =
      static_cast<size_t>(std::upper_bound(group_start_.begin(), group_start_.end(), offset) -
                          group_start_.begin() - 1);
  uint64_t within_group = offset - group_start_[g];
  uint64_t rep = within_group / row_bytes_[g];
  uint64_t within_row = within_group % row_bytes_[g];
  size_t k = 0;
  while (within_row >= groups_[g].runs[k].length) within_row -= groups_[g].runs[k++].length;

  for (uint64_t done = 0; done < length;) {
    const GatherRun& run = groups_[g].runs[k];
    const uint64_t n = std::min(length - done, run.length - within_row);
    // Inside the source: Make checked the run's last repetition.
    const uint64_t at = run.base + rep * run.stride + within_row;
    if (!sink.lent) {
      CKPTFS_RETURN_IF_ERROR(run.source->ReadAt(at, out.subspan(done, n)));
    } else {
      const size_t lent_before = sink.lent->size();
      PieceSink piece(sink.lent, made, length, done, n);
      CKPTFS_RETURN_IF_ERROR(run.source->Read(at, n, piece));
      if (piece.filled()) {
        // A source fills or lends, not both; keep only the filled bytes, joined to the
        // span before when that is the filled piece just before this one.
        sink.lent->resize(lent_before);
        const uint8_t* here = made->data() + done;
        if (!sink.lent->empty() && sink.lent->back().keep_alive == made &&
            sink.lent->back().bytes.data() + sink.lent->back().bytes.size() == here) {
          sink.lent->back().bytes = {sink.lent->back().bytes.data(),
                                     sink.lent->back().bytes.size() + n};
        } else {
          sink.lent->push_back({{here, n}, made});
        }
      }
    }
    done += n;
    within_row = 0;
    if (++k == groups_[g].runs.size()) {
      k = 0;
      if (++rep == groups_[g].count) {
        rep = 0;
        ++g;
      }
    }
  }
  return Status::Ok();
}

namespace {

// Each source once, in the order first named.
std::vector<const ByteSource*> Sources(const std::vector<GatherGroup>& groups) {
  std::vector<const ByteSource*> out;
  std::set<const ByteSource*> seen;
  for (const GatherGroup& g : groups) {
    for (const GatherRun& r : g.runs) {
      if (seen.insert(r.source).second) out.push_back(r.source);
    }
  }
  return out;
}

}  // namespace

Status GatherSource::CheckUnchanged() const {
  for (const ByteSource* s : Sources(groups_)) CKPTFS_RETURN_IF_ERROR(s->CheckUnchanged());
  return Status::Ok();
}

uint32_t GatherSource::Mode() const {
  const std::vector<const ByteSource*> sources = Sources(groups_);
  if (sources.empty()) return 0444;  // as ByteSource's default: bytes of nothing stored
  uint32_t mode = 0555;
  for (const ByteSource* s : sources) mode &= s->Mode();
  return mode;
}

struct timespec GatherSource::MTime() const {
  struct timespec newest = {};
  for (const ByteSource* s : Sources(groups_)) {
    const struct timespec t = s->MTime();
    if (t.tv_sec > newest.tv_sec || (t.tv_sec == newest.tv_sec && t.tv_nsec > newest.tv_nsec)) {
      newest = t;
    }
  }
  return newest;
}

void GatherSource::Prefetch(uint64_t offset, uint64_t length) const {
  // A strided range touches each run's rows from its first repetition to its last: hint
  // each source that span of its bytes, group by group, never past the range's rows.
  if (offset >= size_ || length == 0) return;
  const uint64_t last = offset + std::min(length, size_ - offset) - 1;  // last byte hinted
  size_t g =
      static_cast<size_t>(std::upper_bound(group_start_.begin(), group_start_.end(), offset) -
                          group_start_.begin() - 1);
  for (; g < groups_.size() && group_start_[g] <= last; ++g) {
    const uint64_t from = std::max(offset, group_start_[g]) - group_start_[g];
    const uint64_t to = std::min(last - group_start_[g], groups_[g].count * row_bytes_[g] - 1);
    const uint64_t first_rep = from / row_bytes_[g], reps = to / row_bytes_[g] - first_rep + 1;
    for (const GatherRun& r : groups_[g].runs) {
      // Inside the source: Make checked the last repetition.
      r.source->Prefetch(r.base + first_rep * r.stride, (reps - 1) * r.stride + r.length);
    }
  }
}

void GatherSource::BeginServing() {
  // The sources are the checkpoint's shards, held const here only because reads do not
  // change them; they are not const objects, and beginning to serve twice (the volume
  // does so for every shard too) is a no-op.
  for (const ByteSource* s : Sources(groups_)) const_cast<ByteSource*>(s)->BeginServing();
}

std::string GatherSource::Identity() const {
  // Equal identities must mean equal bytes: the sources' identities and the pattern.
  const std::vector<const ByteSource*> sources = Sources(groups_);
  std::string id = "gather\n";
  for (const ByteSource* s : sources) {
    std::string one = s->Identity();
    if (one.empty()) return {};
    id += std::to_string(one.size()) + ":" + one + "\n";
  }
  for (const GatherGroup& g : groups_) {
    id += std::to_string(g.count);
    for (const GatherRun& r : g.runs) {
      const size_t index = static_cast<size_t>(std::find(sources.begin(), sources.end(), r.source) -
                                               sources.begin());
      // Appended piece by piece: GCC 12's -Wrestrict misfires on "literal" + std::string.
      id += ' ';
      id += std::to_string(index);
      for (uint64_t v : {r.base, r.stride, r.length}) {
        id += ',';
        id += std::to_string(v);
      }
    }
    id += "\n";
  }
  return id;
}

uint64_t GatherSource::DescriptionBytes() const {
  uint64_t bytes = sizeof(*this) + name_.capacity() + groups_.capacity() * sizeof(GatherGroup) +
                   group_start_.capacity() * sizeof(uint64_t) +
                   row_bytes_.capacity() * sizeof(uint64_t);
  for (const GatherGroup& g : groups_) bytes += g.runs.capacity() * sizeof(GatherRun);
  return bytes;
}

}  // namespace ckptfs
