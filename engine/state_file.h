// engine/state_file.h — the session-state file: a disk KV cache entry that restores a Session
// to a token prefix without prefilling it (ds4-server --kv-cache-dir; usable by any frontend).
//
// Format (little-endian, version 4; version 3 stored the compressed rows as f16, version 2 the
// indexer rows too, version 1 all KV rows as f32):
//   0  char[8]  magic "DS4STATE"
//   8  u32      version (4)
//  12  u32      reserved (0)
//  16  u64      model identity (ModelInfo::model_id: GGUF metadata + tensor table + sampled
//               tensor bytes + numerics options; another model or numerics => another id)
//  24  i64      n_ctx of the session that wrote it (the payload's shape depends on it)
//  32  i64      n_tokens
//  40  u64      payload bytes
//  48  i32[n_tokens] token ids
//  ..  payload  session::State::serialize (tokens, logits, live raw KV rows as f16, compressed rows as
//               FP8 stores, indexer rows as FP4 stores, compressor states)
//  end u64      checksum: FNV-1a-64 over 64-bit little-endian words of every byte before it
//               (a zero-padded last word), seeded with the length
// Invariants:
//   * A file is trusted only when magic, version, identity, n_ctx, sizes (file size ==
//     48 + 4 n_tokens + payload + 8), checksum, the payload's own shape checks and its token
//     ids (== the header's) all agree; anything else is an error naming the mismatch, and the
//     session is left empty (never half loaded).
//   * write_file_atomic writes a temporary file beside the target, fsyncs it, renames it over
//     the target and fsyncs the folder: a crash or a kill leaves the old file or the new one,
//     never a truncated one (at worst a stray "*.tmp" that readers ignore).
//   * Export/import use backend download/upload only (no host view of backend memory).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace ds4 {

inline constexpr uint32_t kStateFileVersion = 4;
inline constexpr uint64_t kStateHeaderBytes = 48;
inline constexpr const char* kStateFileSuffix = ".ds4state";

struct StateFileHeader {
  uint64_t model_id = 0;
  int64_t n_ctx = 0;
  std::vector<int32_t> tokens;
  uint64_t payload_bytes = 0;
  uint64_t file_bytes = 0;  // header + tokens + payload + checksum
};

// The checksum of the format (see above).
uint64_t state_checksum(std::span<const uint8_t> bytes);

// Header + payload + checksum around a payload.
void encode_state_image(uint64_t model_id, int64_t n_ctx, std::span<const int32_t> tokens,
                        std::span<const uint8_t> payload, std::vector<uint8_t>* image);
// Checks everything but the payload's contents: magic, version, identity (model_id, n_ctx),
// sizes and checksum. On success *payload views the payload inside image.
Expected<StateFileHeader> decode_state_image(std::span<const uint8_t> image, uint64_t model_id, int64_t n_ctx,
                                             std::span<const uint8_t>* payload);
// The header alone (cheap: reads 48 + 4 n_tokens bytes), with the size check that catches a
// truncated file; the checksum is checked by a full load. Does not check the identity.
Expected<StateFileHeader> read_state_header(const std::string& path);

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
Expected<std::vector<uint8_t>> read_file_bytes(const std::string& path);

// Session::export_state + write_file_atomic; read_file_bytes + Session::import_state.
Status save_state_file(const Session& session, const std::string& path);
Status load_state_file(Session& session, const std::string& path);

}  // namespace ds4
