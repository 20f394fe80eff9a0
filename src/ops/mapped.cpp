#include "ops/mapped.hpp"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace trainer::ops {
namespace {

// mmap's pages come zeroed and page-aligned (more than the 64 bytes LibTorch aligns to). The
// deleter needs the length: it lives in the DataPtr's context.
struct Mapping {
  void* data;
  size_t bytes;
};

void unmap(void* context) {
  auto* m = static_cast<Mapping*>(context);
  if (m->bytes > 0) munmap(m->data, m->bytes);
  delete m;
}

struct MappedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    void* data = nullptr;
    if (bytes > 0) {
      data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data == MAP_FAILED) throw std::bad_alloc();
    }
    return {data, new Mapping{data, bytes}, &unmap, c10::Device(c10::DeviceType::CPU)};
  }
  void copy_data(void* dest, const void* src, size_t count) const override { std::memcpy(dest, src, count); }
};

MappedAllocator& mapped_allocator() {
  static MappedAllocator allocator;
  return allocator;
}

}  // namespace

at::Tensor empty_mapped(int64_t numel, const at::TensorOptions& options) {
  if (!options.device().is_cpu()) return at::empty({numel}, options);
  return at::detail::empty_generic({numel}, &mapped_allocator(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   c10::typeMetaToScalarType(options.dtype()), std::nullopt);
}

at::Tensor zeros_mapped(int64_t numel, const at::TensorOptions& options) {
  at::Tensor t = empty_mapped(numel, options);
  return options.device().is_cpu() ? t : t.zero_();  // fresh mappings are zero already
}

void drop_memory(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void give_memory(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = t.numel() * t.element_size();
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace trainer::ops
