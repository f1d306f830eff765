// backend/cuda/device.cu — device probing, minimal device memory helpers and launch errors.
//
// Role: the host side every launcher shares: turns CUDA error codes into ds4 Status values
// that say what failed (the op, the sizes, the driver's words) instead of aborting.
#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "core/log.h"

namespace ds4::cuda {

namespace {

Status cuda_error(const char* what, cudaError_t e) {
  return resource_error("cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

Status probe_device(int device, DeviceInfo* info) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of the failed query
    return unsupported("cuda: no usable CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
  }
  if (count == 0) return unsupported("cuda: no CUDA device found");
  if (device < 0 || device >= count)
    return invalid_argument("cuda: device %d does not exist (%d device(s) found)", device, count);
  cudaDeviceProp prop{};
  const cudaError_t pe = cudaGetDeviceProperties(&prop, device);
  if (pe != cudaSuccess) return cuda_error("cudaGetDeviceProperties", pe);
  if (prop.major < 9)
    return unsupported("cuda: device %d (%s) has compute capability %d.%d; this build needs 9.0 "
                       "(Hopper: H100/H200)", device, prop.name, prop.major, prop.minor);
  const cudaError_t se = cudaSetDevice(device);
  if (se != cudaSuccess) return cuda_error("cudaSetDevice", se);
  if (info != nullptr) {
    info->device = device;
    info->name = prop.name;
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    info->total_mem = prop.totalGlobalMem;
    info->l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  }
  return Status();
}

Status device_alloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  const cudaError_t e = cudaMalloc(ptr, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return resource_error("cuda: cannot allocate %zu bytes of device memory (%zu of %zu free): %s",
                          bytes, free_b, total_b, cudaGetErrorString(e));
  }
  return Status();
}

void device_free(void* ptr) {
  if (ptr != nullptr) cudaFree(ptr);
}

Status upload(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return e == cudaSuccess ? Status() : cuda_error("upload", e);
}

Status download(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? Status() : cuda_error("download", e);
}

Status synchronize() {
  const cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? Status() : cuda_error("kernel", e);
}

Status stream_create(Stream* stream) {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return e == cudaSuccess ? Status() : cuda_error("cudaStreamCreate", e);
}

void stream_destroy(Stream stream) {
  if (stream != nullptr) cudaStreamDestroy(stream);
}

Status stream_sync(Stream stream) {
  const cudaError_t e = cudaStreamSynchronize(stream);
  return e == cudaSuccess ? Status() : cuda_error("kernel (found at a stream synchronization)", e);
}

Status copy_async(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return Status();
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  if (e == cudaSuccess) return Status();
  return resource_error("cuda: copy of %zu bytes: %s (%s)", bytes, cudaGetErrorString(e), cudaGetErrorName(e));
}

Status memset_async(void* dst, int value, size_t bytes, Stream stream) {
  if (bytes == 0) return Status();
  const cudaError_t e = cudaMemsetAsync(dst, value, bytes, stream);
  return e == cudaSuccess ? Status() : cuda_error("cudaMemsetAsync", e);
}

Status host_alloc_pinned(void** ptr, size_t bytes) {
  *ptr = nullptr;
  const cudaError_t e = cudaMallocHost(ptr, bytes);
  if (e == cudaSuccess) return Status();
  cudaGetLastError();
  return resource_error("cuda: cannot allocate %zu bytes of pinned host memory: %s", bytes, cudaGetErrorString(e));
}

void host_free_pinned(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

Status event_create(Event* event) {
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  *event = ev;
  return e == cudaSuccess ? Status() : cuda_error("cudaEventCreate", e);
}

Status event_create_timed(Event* event) {
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDefault);
  *event = ev;
  return e == cudaSuccess ? Status() : cuda_error("cudaEventCreate", e);
}

Status event_elapsed_ms(Event from, Event to, float* ms) {
  const cudaError_t e = cudaEventElapsedTime(ms, from, to);
  return e == cudaSuccess ? Status() : cuda_error("cudaEventElapsedTime", e);
}

void event_destroy(Event event) {
  if (event != nullptr) cudaEventDestroy(event);
}

Status event_record(Event event, Stream stream) {
  const cudaError_t e = cudaEventRecord(event, stream);
  return e == cudaSuccess ? Status() : cuda_error("cudaEventRecord", e);
}

Status stream_wait_event(Stream stream, Event event) {
  const cudaError_t e = cudaStreamWaitEvent(stream, event, 0);
  return e == cudaSuccess ? Status() : cuda_error("cudaStreamWaitEvent", e);
}

Status event_sync(Event event) {
  const cudaError_t e = cudaEventSynchronize(event);
  return e == cudaSuccess ? Status() : cuda_error("kernel (found at an event synchronization)", e);
}

Status mem_info(size_t* free_bytes, size_t* total_bytes) {
  const cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
  return e == cudaSuccess ? Status() : cuda_error("cudaMemGetInfo", e);
}

Status last_error(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status() : cuda_error(what, e);
}

void kernel_off(const char* kernel, const char* fallback, int dev) {
  const cudaError_t e = cudaGetLastError();  // clears it: not a launch error of the caller's
  DS4_LOG_WARN("cuda: device %d: the %s is off (its set-up failed: %s); %s run instead, slower", dev, kernel,
               cudaGetErrorString(e), fallback);
}

Status launch_status(const char* op, int64_t n_in, int64_t n_out, int r) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status();
  return resource_error("cuda: %s (n_in %lld, n_out %lld, rows %d) failed to launch: %s", op,
                        static_cast<long long>(n_in), static_cast<long long>(n_out), r,
                        cudaGetErrorString(e));
}

}  // namespace ds4::cuda
