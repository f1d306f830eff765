// backend/backend.cpp — the backend-independent parts of backend.h: the Buffer handle and
// Backend::alloc (which delegates to the backend's allocator).
#include "backend/backend.h"

#include <utility>

namespace ds4::backend {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void Buffer::reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->release(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

void Buffer::check_host() const {
  DS4_CHECK_MSG(owner_ == nullptr || owner_->host_addressable(),
                "Buffer::host(): this backend's memory is not host-addressable; use download()");
}

Buffer Backend::alloc(size_t bytes) {
  Buffer b;
  if (bytes == 0) return b;
  b.data_ = allocate(bytes);
  DS4_CHECK_MSG(b.data_ != nullptr, "backend allocation failed");
  b.owner_ = this;
  b.bytes_ = bytes;
  return b;
}

}  // namespace ds4::backend
