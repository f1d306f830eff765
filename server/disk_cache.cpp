// server/disk_cache.cpp — the --kv-cache-dir index, loads and background writes (role and
// invariants: server/disk_cache.h).
#include "server/disk_cache.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/log.h"
#include "engine/state_file.h"

namespace ds4::server {

namespace {

constexpr size_t kMaxPendingWrites = 4;  // images held in memory waiting for the writer

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

DiskCache::DiskCache(const Engine& engine, std::string dir, int n_ctx, uint64_t max_bytes)
    : engine_(engine), dir_(std::move(dir)), n_ctx_(n_ctx), max_bytes_(max_bytes) {}

DiskCache::~DiskCache() { close(); }

Status DiskCache::open() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec)) {
    return invalid_argument("--kv-cache-dir '%s': cannot create or use the folder (%s)", dir_.c_str(),
                            ec ? ec.message().c_str() : "not a folder");
  }
  struct Found {
    fs::file_time_type mtime;
    Entry e;
  };
  std::vector<Found> found;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string();
    if (!it->is_regular_file(ec)) continue;
    if (ends_with(path, ".tmp") && path.find(kStateFileSuffix) != std::string::npos) {
      DS4_LOG_WARN("kv cache: removing the unfinished write '%s'", path.c_str());
      fs::remove(it->path(), ec);
      continue;
    }
    if (!ends_with(path, kStateFileSuffix)) continue;
    Expected<StateFileHeader> h = read_state_header(path);
    std::string why;
    if (!h.ok()) {
      why = h.status().message();
    } else if (h->model_id != engine_.info().model_id) {
      why = "written by another model or numerics";
    } else if (h->n_ctx != n_ctx_) {
      why = "written for context " + std::to_string(h->n_ctx) + ", this server uses " + std::to_string(n_ctx_);
    } else if (h->tokens.empty()) {
      why = "holds no tokens";
    }
    if (!why.empty()) {
      DS4_LOG_WARN("kv cache: ignoring '%s': %s", path.c_str(), why.c_str());
      stats_.rejected++;
      continue;
    }
    Found f;
    f.mtime = fs::last_write_time(it->path(), ec);
    f.e.prefix = std::move(h->tokens);
    f.e.path = path;
    f.e.bytes = h->file_bytes;
    found.push_back(std::move(f));
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();  // a re-open after close() indexes the folder afresh
    bytes_ = 0;
    closing_ = false;
    for (Found& f : found) add_entry_locked(std::move(f.e));
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { writer(); });
  return Status();
}

std::string DiskCache::path_for(std::span<const int32_t> prefix) const {
  const uint64_t h = state_checksum(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(prefix.data()),
                                                             prefix.size_bytes()));
  char name[96];
  std::snprintf(name, sizeof(name), "%016" PRIx64 "-%016" PRIx64 "-%zu%s", engine_.info().model_id, h,
                prefix.size(), kStateFileSuffix);
  return (std::filesystem::path(dir_) / name).string();
}

size_t DiskCache::best_prefix(const std::vector<int32_t>& prompt, size_t min_len, std::string* path) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t best = 0;
  for (const Entry& e : entries_) {
    const size_t n = e.prefix.size();
    if (n > min_len && n > best && n < prompt.size() && std::equal(e.prefix.begin(), e.prefix.end(), prompt.begin())) {
      best = n;
      *path = e.path;
    }
  }
  return best;
}

bool DiskCache::load(Session& session, const std::string& path, const std::vector<int32_t>& prompt, size_t len) {
  Status s = load_state_file(session, path);
  const std::span<const int32_t> got = session.tokens();
  if (s.ok() && (got.size() != len || !std::equal(got.begin(), got.end(), prompt.begin()))) {
    s = corrupt("its tokens are not the indexed prefix");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok()) {
    stats_.loads++;
    // Most recently used last: the eviction order follows use, not only writing.
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.path == path; });
    if (it != entries_.end()) {
      Entry e = std::move(*it);
      entries_.erase(it);
      entries_.push_back(std::move(e));
    }
    return true;
  }
  session.reset();
  DS4_LOG_WARN("kv cache: ignoring '%s': %s (prefilling instead)", path.c_str(), s.message().c_str());
  stats_.rejected++;
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.path == path; });
  if (it != entries_.end()) {
    bytes_ -= it->bytes;
    entries_.erase(it);
  }
  return false;
}

bool DiskCache::contains(std::span<const int32_t> prefix) const {
  const std::string path = path_for(prefix);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_) {
    if (e.path == path) return true;
  }
  for (const Pending& p : pending_) {
    if (p.path == path) return true;
  }
  return false;
}

void DiskCache::save(const Session& session) {
  Pending p;
  p.prefix.assign(session.tokens().begin(), session.tokens().end());
  if (p.prefix.empty()) return;
  p.path = path_for(p.prefix);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_ || !thread_.joinable()) return;
    if (pending_.size() >= kMaxPendingWrites) {
      if (stats_.skipped++ == 0) {
        DS4_LOG_WARN("kv cache: the writer is %zu states behind; saves are skipped until it catches up",
                     kMaxPendingWrites);
      }
      return;
    }
  }
  Status s = session.export_state(&p.image);
  if (!s.ok()) {
    DS4_LOG_WARN("kv cache: cannot export a session: %s", s.message().c_str());
    return;
  }
  if (p.image.size() > max_bytes_) return;  // would evict everything, itself included
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(p));
  }
  cv_.notify_all();
}

void DiskCache::writer() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return closing_ || !pending_.empty(); });
    if (pending_.empty()) return;  // closing, everything written
    Pending& p = pending_.front();
    lock.unlock();
    const Status s = write_file_atomic(p.path, p.image);
    lock.lock();
    Pending done = std::move(pending_.front());
    pending_.pop_front();
    if (!s.ok()) {
      DS4_LOG_WARN("kv cache: %s", s.message().c_str());
      continue;
    }
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.path == done.path; });
    if (it != entries_.end()) {  // rewritten (an earlier copy was rejected): replace it
      bytes_ -= it->bytes;
      entries_.erase(it);
    }
    stats_.saves++;
    add_entry_locked(Entry{std::move(done.prefix), done.path, done.image.size()});
  }
}

void DiskCache::add_entry_locked(Entry e) {
  bytes_ += e.bytes;
  entries_.push_back(std::move(e));
  while (bytes_ > max_bytes_ && entries_.size() > 1) {
    std::error_code ec;
    std::filesystem::remove(entries_.front().path, ec);
    bytes_ -= entries_.front().bytes;
    entries_.pop_front();
  }
}

void DiskCache::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DiskCacheStats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskCacheStats s = stats_;
  s.entries = static_cast<int64_t>(entries_.size());
  s.bytes = bytes_;
  return s;
}

}  // namespace ds4::server
