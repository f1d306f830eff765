// quant/half.cpp — row forms of the half-precision conversions in quant/half.h.
#include "quant/half.h"

namespace ds4::quant {

void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}
void f16_round_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = f16_round(x[i]);
}

}  // namespace ds4::quant
