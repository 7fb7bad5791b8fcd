// Fuzzes the torch.save reader behind `pillar ckpt import`: a .pt file comes from anywhere
// (a model hub, a colleague), and the reader must never crash on it, never read outside it, and
// never call anything it does not know. Every tensor it returns must lie inside the input or in
// its own copies, with as many bytes as its shape and dtype say.
#include <cstdint>
#include <span>

#include "ckpt/torch_save_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = pillar::ckpt::ParseTorchSave(bytes);
  if (!file.ok()) return 0;
  for (const auto& t : file->tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= uint64_t(d);
    if (t.data.size() != elements * pillar::ckpt::DTypeSize(t.dtype)) __builtin_trap();
    volatile uint8_t sink = 0;
    for (std::byte b : t.data) sink = sink ^ uint8_t(b);  // ASan checks every byte is readable
  }
  return 0;
}
