// backend/backend.cpp — the backend-independent parts of backend.h: the Buffer handle and
// Backend::alloc (which delegates to the backend's allocator).
#include "backend/backend.h"

#include <algorithm>
#include <utility>

#include "quant/kv_sim.h"

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

void Backend::compressor_rows(const CompressorRowsParams& p) {
  constexpr int kBatch = 16;  // steps per compressor_steps call (a stack array: no allocation)
  const CompressorStepParams& c = p.step;
  const int64_t width = static_cast<int64_t>(c.ratio == 4 ? 2 : 1) * c.head_dim;
  const int64_t row_bytes = c.indexer ? quant::fp4_row_bytes(c.head_dim) : quant::fp8_row_bytes(c.head_dim, c.n_rot);
  CompressorStepParams steps[kBatch];
  int64_t emitted = 0;
  for (int i0 = 0; i0 < p.n; i0 += kBatch) {
    const int m = std::min(kBatch, p.n - i0);
    for (int k = 0; k < m; ++k) {
      const int64_t i = i0 + k;
      CompressorStepParams& s = steps[k];
      s = c;
      s.pos = c.pos + i;
      s.kv_cur = c.kv_cur + i * width;
      s.sc_cur = c.sc_cur + i * width;
      if (c.out_fp8 != nullptr) s.out_fp8 = c.out_fp8 + emitted * row_bytes;
      if (c.out_fp4 != nullptr) s.out_fp4 = c.out_fp4 + emitted * row_bytes;
      if (compressor_emits(s.pos, c.ratio)) ++emitted;
    }
    compressor_steps(steps, m);
  }
}

}  // namespace ds4::backend
