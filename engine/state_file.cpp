// engine/state_file.cpp — the session-state file format, its checksum and atomic file I/O
// (format and invariants: engine/state_file.h).
#include "engine/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ds4 {

namespace {

static_assert(std::endian::native == std::endian::little, "state files are little-endian");

constexpr char kMagic[8] = {'D', 'S', '4', 'S', 'T', 'A', 'T', 'E'};
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr int64_t kMaxCtx = int64_t{1} << 31;

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const size_t off = out.size();
  out.resize(off + sizeof(T));
  std::memcpy(out.data() + off, &v, sizeof(T));
}

template <typename T>
T get_at(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

// Parses the fixed header; `avail` bytes are at p (>= kStateHeaderBytes).
Expected<StateFileHeader> parse_fixed(const uint8_t* p, uint64_t file_bytes) {
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return corrupt("not a ds4 state file (bad magic)");
  const uint32_t version = get_at<uint32_t>(p, 8);
  if (version != kStateFileVersion) {
    return corrupt("state file version %u, this build reads version %u", version, kStateFileVersion);
  }
  StateFileHeader h;
  h.model_id = get_at<uint64_t>(p, 16);
  h.n_ctx = get_at<int64_t>(p, 24);
  const int64_t n = get_at<int64_t>(p, 32);
  h.payload_bytes = get_at<uint64_t>(p, 40);
  h.file_bytes = file_bytes;
  if (h.n_ctx < 1 || h.n_ctx > kMaxCtx) return corrupt("state file n_ctx %lld out of range", static_cast<long long>(h.n_ctx));
  if (n < 0 || n > h.n_ctx) {
    return corrupt("state file holds %lld tokens for n_ctx %lld", static_cast<long long>(n), static_cast<long long>(h.n_ctx));
  }
  const uint64_t want = kStateHeaderBytes + 4 * static_cast<uint64_t>(n) + 8;
  if (h.payload_bytes > file_bytes || want + h.payload_bytes != file_bytes) {
    return corrupt("state file is %llu bytes, its header describes %llu (truncated or padded)",
                   static_cast<unsigned long long>(file_bytes),
                   static_cast<unsigned long long>(want + std::min(h.payload_bytes, file_bytes)));
  }
  h.tokens.resize(static_cast<size_t>(n));
  return h;
}

Status errno_error(const char* what, const std::string& path) {
  return resource_error("%s '%s': %s", what, path.c_str(), std::strerror(errno));
}

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_error("write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status();
}

}  // namespace

uint64_t state_checksum(std::span<const uint8_t> bytes) {
  uint64_t h = kFnvOffset ^ static_cast<uint64_t>(bytes.size());
  h *= kFnvPrime;
  const size_t words = bytes.size() / 8;
  const uint8_t* p = bytes.data();
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    h = (h ^ w) * kFnvPrime;
  }
  if (const size_t tail = bytes.size() % 8; tail != 0) {
    uint64_t w = 0;
    std::memcpy(&w, p + 8 * words, tail);
    h = (h ^ w) * kFnvPrime;
  }
  return h;
}

void encode_state_image(uint64_t model_id, int64_t n_ctx, std::span<const int32_t> tokens,
                        std::span<const uint8_t> payload, std::vector<uint8_t>* image) {
  std::vector<uint8_t>& out = *image;
  out.clear();
  out.reserve(kStateHeaderBytes + 4 * tokens.size() + payload.size() + 8);
  out.insert(out.end(), kMagic, kMagic + sizeof(kMagic));
  put(out, kStateFileVersion);
  put(out, uint32_t{0});
  put(out, model_id);
  put(out, n_ctx);
  put(out, static_cast<int64_t>(tokens.size()));
  put(out, static_cast<uint64_t>(payload.size()));
  const size_t off = out.size();
  out.resize(off + 4 * tokens.size());
  if (!tokens.empty()) std::memcpy(out.data() + off, tokens.data(), 4 * tokens.size());
  out.insert(out.end(), payload.begin(), payload.end());
  put(out, state_checksum(out));
}

Expected<StateFileHeader> decode_state_image(std::span<const uint8_t> image, uint64_t model_id, int64_t n_ctx,
                                             std::span<const uint8_t>* payload) {
  if (image.size() < kStateHeaderBytes + 8) {
    return corrupt("state file is %zu bytes, shorter than its header (truncated)", image.size());
  }
  Expected<StateFileHeader> h = parse_fixed(image.data(), image.size());
  if (!h.ok()) return h.status();
  const uint64_t sum = get_at<uint64_t>(image.data(), image.size() - 8);
  if (sum != state_checksum(image.first(image.size() - 8))) return corrupt("state file checksum mismatch (corrupt)");
  if (h->model_id != model_id) {
    return invalid_argument("state file is from another model or numerics (id %016llx, this engine %016llx)",
                            static_cast<unsigned long long>(h->model_id), static_cast<unsigned long long>(model_id));
  }
  if (h->n_ctx != n_ctx) {
    return invalid_argument("state file was written for n_ctx %lld, this session has %lld",
                            static_cast<long long>(h->n_ctx), static_cast<long long>(n_ctx));
  }
  if (!h->tokens.empty()) std::memcpy(h->tokens.data(), image.data() + kStateHeaderBytes, 4 * h->tokens.size());
  *payload = image.subspan(kStateHeaderBytes + 4 * h->tokens.size(), h->payload_bytes);
  return h;
}

Expected<StateFileHeader> read_state_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("open", path);
  struct stat st {};
  Status s;
  uint8_t fixed[kStateHeaderBytes];
  Expected<StateFileHeader> h = corrupt("state file '%s' is shorter than its header (truncated)", path.c_str());
  if (::fstat(fd, &st) != 0) {
    s = errno_error("stat", path);
  } else if (static_cast<uint64_t>(st.st_size) >= kStateHeaderBytes + 8 &&
             ::pread(fd, fixed, sizeof(fixed), 0) == static_cast<ssize_t>(sizeof(fixed))) {
    h = parse_fixed(fixed, static_cast<uint64_t>(st.st_size));
    if (h.ok() && !h->tokens.empty()) {
      const size_t n = 4 * h->tokens.size();
      if (::pread(fd, h->tokens.data(), n, kStateHeaderBytes) != static_cast<ssize_t>(n)) {
        h = corrupt("state file '%s': short read of its token ids", path.c_str());
      }
    }
  }
  ::close(fd);
  if (!s.ok()) return s;
  return h;
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  const std::filesystem::path target(path);
  // A unique temporary name beside the target (same filesystem, so rename is atomic).
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = path + "." + std::to_string(::getpid()) + "." + std::to_string(serial.fetch_add(1)) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("create", tmp);
  Status s = write_all(fd, bytes.data(), bytes.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = errno_error("fsync", tmp);
  if (::close(fd) != 0 && s.ok()) s = errno_error("close", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = errno_error("rename", tmp);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status();
}

Expected<std::vector<uint8_t>> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = errno_error("stat", path);
    ::close(fd);
    return s;
  }
  std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Status save_state_file(const Session& session, const std::string& path) {
  std::vector<uint8_t> image;
  DS4_RETURN_IF_ERROR(session.export_state(&image));
  return write_file_atomic(path, image);
}

Status load_state_file(Session& session, const std::string& path) {
  Expected<std::vector<uint8_t>> bytes = read_file_bytes(path);
  if (!bytes.ok()) return bytes.status();
  return session.import_state(*bytes);
}

}  // namespace ds4
