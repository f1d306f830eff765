// tests/model/sha256.h — SHA-256 of float32 words as lowercase hex (the project's frontier
// logits hash: the little-endian words of the values, in order), for tests.
#pragma once

#include <openssl/evp.h>

#include <cstdio>
#include <span>
#include <string>

namespace ds4::testing_tiny {

inline std::string sha256_hex(std::span<const float> v) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Host is little-endian (quant/blocks.h invariant), so the float bytes are the LE words.
  EVP_Digest(v.data(), v.size() * sizeof(float), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  char buf[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  return hex;
}

}  // namespace ds4::testing_tiny
