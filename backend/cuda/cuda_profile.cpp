// backend/cuda/cuda_profile.cpp — the CUDA event clock of the op profiler (cuda_profile.h).
#include "backend/cuda/cuda_profile.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ds4::backend {

namespace {

[[noreturn]] void fatal(const Status& s) {
  std::fflush(stdout);
  std::fprintf(stderr, "ds4: CUDA backend error in the op profiler: %s\n", s.message().c_str());
  std::fflush(stderr);
  std::_Exit(70);
}

class CudaEventClock final : public OpClock {
 public:
  CudaEventClock(cuda::Stream stream, std::vector<cuda::Event> events) : stream_(stream), ev_(std::move(events)) {}
  ~CudaEventClock() override {
    for (cuda::Event e : ev_) cuda::event_destroy(e);
  }
  int capacity() const override { return static_cast<int>(ev_.size()); }
  void record(int mark) override { check(cuda::event_record(ev_[static_cast<size_t>(mark)], stream_)); }
  void wait(int mark) override { check(cuda::event_sync(ev_[static_cast<size_t>(mark)])); }
  double elapsed_us(int from, int to) override {
    float ms = 0.0f;
    check(cuda::event_elapsed_ms(ev_[static_cast<size_t>(from)], ev_[static_cast<size_t>(to)], &ms));
    return static_cast<double>(ms) * 1e3;
  }

 private:
  static void check(const Status& s) {
    if (!s.ok()) fatal(s);
  }
  cuda::Stream stream_;
  std::vector<cuda::Event> ev_;
};

}  // namespace

Expected<std::unique_ptr<OpClock>> make_cuda_event_clock(cuda::Stream stream, int capacity) {
  std::vector<cuda::Event> ev;
  ev.reserve(static_cast<size_t>(capacity));
  for (int i = 0; i < capacity; ++i) {
    cuda::Event e = nullptr;
    const Status s = cuda::event_create_timed(&e);
    if (!s.ok()) {
      for (cuda::Event x : ev) cuda::event_destroy(x);
      return s;
    }
    ev.push_back(e);
  }
  return std::unique_ptr<OpClock>(new CudaEventClock(stream, std::move(ev)));
}

}  // namespace ds4::backend
