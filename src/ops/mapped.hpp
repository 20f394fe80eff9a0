// CPU tensors in pages of their own, outside glibc's heap.
//
// trainer keeps freed memory in the heap (cli's keep_freed_memory: each step reuses it instead of
// faulting in fresh pages), so a large buffer that is allocated and freed over and over between
// longer-lived tensors leaves holes the heap cannot always reuse, and resident memory climbs
// above what is live. The buffers that cycle that way on purpose take their pages from mmap
// instead, and give them back to the system when freed:
// - ZeRO-2/3's full main-gradient buffers (one microbatch or one step each) and ZeRO-3's gathered
//   parameters (data_parallel/), whose memory is the point of those stages;
// - the fp32 scratch of bf16 products on CPUs without bf16 units (cpu_ops.cpp), kept for the
//   process but out of the heap's way.
// Off the CPU (CUDA's caching allocator) these are plain tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace trainer::ops {

// Like at::empty({numel}, options), contents undefined. On the CPU its memory is mapped for it
// alone and unmapped when its storage lets go of it; a storage that lets go and asks again through
// its own allocator (ZeRO-3's gathers) gets mapped pages again.
at::Tensor empty_mapped(int64_t numel, const at::TensorOptions& options);

// The same, zero-filled.
at::Tensor zeros_mapped(int64_t numel, const at::TensorOptions& options);

// The memory behind `t`'s storage goes (the tensor and every view of it stay, pointing at
// nothing) or comes back (uninitialised), through the storage's own allocator: ZeRO-3's
// parameters between their uses.
void drop_memory(const at::Tensor& t);
void give_memory(const at::Tensor& t);

}  // namespace trainer::ops
