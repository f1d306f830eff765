// server/disk_cache.h — --kv-cache-dir: session states saved on disk (engine/state_file.h
// format) and found again by token prefix, across restarts.
//
// Role: the scheduler thread asks for the longest cached prefix of a prompt and loads it into
// a session instead of prefilling; after a job's shareable prompt prefix is prefilled it hands
// the session over for a save. save() exports the state on the caller's thread (the scheduler
// owns every session) and a writer thread writes the image (temporary file + fsync + rename),
// so the scheduler never waits on the disk.
// Invariants:
//   * Only files whose header matches this engine (model identity, n_ctx) are indexed; others
//     (another model, truncated, unreadable) are ignored with a warning, and left in place.
//     A load checks everything again (checksum, shapes, token ids == the indexed prefix); a
//     file that fails is dropped from the index with a warning and the caller prefills.
//   * Stray temporary files of a killed writer ("*.tmp") are removed at open; a finished file is
//     never partial (write_file_atomic).
//   * Disk use is bounded by max_bytes: the oldest entries are deleted first.
//   * At most kMaxPendingWrites (4) images wait for the writer (each may be GBs at full shape); a
//     save beyond that is skipped and counted (stats().skipped), never waited for.
//   * close() writes every queued image, then stops the writer (SIGTERM: nothing is cut off).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace ds4::server {

struct DiskCacheStats {
  int64_t entries = 0;
  uint64_t bytes = 0;
  int64_t saves = 0;     // files written
  int64_t loads = 0;     // sessions restored from a file
  int64_t rejected = 0;  // files ignored (at open or at load): corrupt, truncated, foreign
  int64_t skipped = 0;   // saves not queued: the writer was kMaxPendingWrites images behind
};

class DiskCache {
 public:
  DiskCache(const Engine& engine, std::string dir, int n_ctx, uint64_t max_bytes);
  ~DiskCache();  // close()

  // Creates the folder, removes stray temporaries, indexes the valid files (oldest first) and
  // starts the writer. May be called again after close() (re-indexes the folder).
  Status open();
  // The longest indexed prefix that `prompt` extends by >= 1 token and that is longer than
  // min_len: its length and file (0: none).
  size_t best_prefix(const std::vector<int32_t>& prompt, size_t min_len, std::string* path) const;
  // Loads `path` into session; it must then hold exactly prompt[0, len). On any failure: a
  // warning, the entry leaves the index, the session is empty, false.
  bool load(Session& session, const std::string& path, const std::vector<int32_t>& prompt, size_t len);
  // True when this prefix is indexed or queued for writing.
  bool contains(std::span<const int32_t> prefix) const;
  // Exports the session's whole state (its tokens are the prefix) and queues the write.
  void save(const Session& session);
  void close();
  DiskCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> prefix;
    std::string path;
    uint64_t bytes = 0;
  };
  struct Pending {
    std::vector<int32_t> prefix;
    std::string path;
    std::vector<uint8_t> image;
  };
  std::string path_for(std::span<const int32_t> prefix) const;
  void writer();
  void add_entry_locked(Entry e);  // mu_ held; evicts the oldest beyond max_bytes_

  const Engine& engine_;
  const std::string dir_;
  const int n_ctx_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;  // oldest first
  std::deque<Pending> pending_;
  uint64_t bytes_ = 0;
  DiskCacheStats stats_;
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace ds4::server
