// Natural order for names shown to people: runs of digits compare as numbers, so
// "layers.2" comes before "layers.10" and "model-9" before "model-10".
//
// Everything else compares byte by byte. Digit runs of any length compare without
// overflow (by value: leading zeros dropped, then length, then digits); names that are
// equal that way ("a01" and "a1") fall back to plain byte order, so the order is total
// and strict: std::sort and std::set may use it. Only listings for people use it (inspect,
// verify's messages); the files ckptfs writes keep their own, format-defined order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// True if `a` comes before `b` in natural order.
bool NaturalLess(std::string_view a, std::string_view b);

// The step number entry name `name` carries, only where the name says so: the number after
// "step" (`step=1000`, `global_step1000`, `epoch=3-step=1000.ckpt`), else after "checkpoint"
// or "ckpt" (`checkpoint-1500`, `ckpt-3`, `model.ckpt-1000`), else after "epoch"
// (`epoch=3.ckpt`), else the name's one number when it has no other and no `=`
// (`model_00010.pt`, `00000123`); Lightning's `-vN` version suffix is no step. nullopt when
// there is none (metrics only: `epoch-val_loss=0.25.ckpt`, `model_loss0.123.pt`; a model's
// name: `llama2-7b.bin`) or it exceeds 64 bits.
std::optional<uint64_t> StepInName(const std::string& name);

}  // namespace ckptfs
