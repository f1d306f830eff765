// tokenizer/tokenizer.cpp — vocabulary validation, BPE encoding, decoding, streaming decode.
//
// Encoding (§8.3): each pre-tokenizer piece starts as one symbol per byte (the GPT-2 map sends
// each byte to one code point, i.e. one character of the mapped string); the adjacent pair
// with the smallest merge rank is merged (leftmost on equal ranks) until no pair has a merge.
// Because load-time validation guarantees every byte symbol, every merge operand and every
// merge result is a token, symbols are always token ids and the string-keyed algorithm of
// §8.3 reduces exactly to an id-keyed one; the "unknown symbol -> per-byte" fallback can
// therefore never trigger and is not needed.
// Speed: merges live in an open-addressing table keyed by (left id, right id); the merge loop
// is a min-heap over (rank, left position) with lazy invalidation on a doubly linked list
// (O(n log n) per piece); a bounded per-thread cache maps piece bytes to ids.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {

namespace detail {
size_t next_piece_end(std::string_view text, size_t i);
size_t next_piece_end_v4(std::string_view text, size_t i);
void append_codepoint_utf8(uint32_t cp, std::string* out);
}  // namespace detail

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
constexpr std::string_view kFullwidthBar = "\xEF\xBD\x9C";  // U+FF5C

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix64(h ^ w);
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix64(h ^ w ^ (uint64_t(n) << 56));
}

// Decodes one UTF-8 code point of a token string; returns its length (1 for malformed bytes,
// with *cp = 0xFFFFFFFF).
size_t decode_cp(std::string_view s, size_t i, uint32_t* cp) {
  const auto b0 = uint8_t(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (uint8_t(s[i + k]) & 0xC0) == 0x80; };
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 <= 0xDF && cont(1)) {
    *cp = (uint32_t(b0 & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF && cont(1) && cont(2)) {
    *cp = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6) |
          (uint8_t(s[i + 2]) & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    *cp = (uint32_t(b0 & 0x07) << 18) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12) |
          (uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F);
    return 4;
  }
  *cp = 0xFFFFFFFFu;
  return 1;
}

// Token string -> bytes (§8.1): tokens containing U+FF5C are literal; otherwise each code point
// that is the image of a byte becomes that byte and any other code point is dropped, as ds4
// does (such tokens never come out of encode()). Malformed UTF-8 in a token string (not
// possible in a valid GGUF) is copied byte for byte.
std::string token_to_bytes(std::string_view tok) {
  if (tok.find(kFullwidthBar) != std::string_view::npos) return std::string(tok);
  std::string out;
  out.reserve(tok.size());
  for (size_t i = 0; i < tok.size();) {
    uint32_t cp;
    const size_t len = decode_cp(tok, i, &cp);
    if (cp == 0xFFFFFFFFu) {
      out.append(tok.substr(i, len));
    } else {
      const int b = byte_from_codepoint(cp);
      if (b >= 0) out.push_back(char(b));
    }
    i += len;
  }
  return out;
}

// Open-addressing map (left id, right id) -> (rank, result id).
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t result = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  void init(size_t n_merges) {
    size_t cap = 16;
    while (cap < n_merges * 2 + 16) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // Keeps the smallest rank when a pair is listed twice.
  void insert(int32_t a, int32_t b, int32_t rank, int32_t result) {
    const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      Entry& e = slots_[i];
      if (e.key == kEmpty) {
        e = Entry{key, rank, result};
        return;
      }
      if (e.key == key) return;  // earlier (smaller) rank wins
    }
  }
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

struct Tokenizer::Impl {
  uint64_t instance = 0;                          // identifies this vocab for thread caches
  std::vector<std::string> tokens;                // [n_vocab] stored token strings
  std::vector<std::string> bytes;                 // [n_vocab] decoded bytes
  std::vector<int32_t> types;                     // [n_vocab] TokenType values
  std::unordered_map<std::string_view, int32_t> ids;  // token string -> id (views into tokens)
  int32_t byte_token[256] = {};                   // byte -> id of its GPT-2 symbol
  MergeTable merges;
  int32_t n_merges = 0;
  SpecialTokens special;
  // The 7 specials sorted by text for encode_rendered (first byte dispatch).
  std::vector<std::pair<std::string_view, int32_t>> special_list;

  PretokMode pretok = PretokMode::kDs4Scanner;    // never kAuto
  // Added tokens (kControl / kUserDefined) for encode_with_added: byte lengths present, longest
  // first, and whether a byte can start one.
  std::vector<size_t> added_lengths;
  bool added_first_byte[256] = {};

  void encode_plain(std::string_view text, std::vector<int32_t>* out) const;
};

// ---- per-thread encode scratch: merge-loop buffers and a bounded piece cache ----
namespace {

struct HeapItem {
  int32_t rank;
  int32_t left;   // index of the left symbol (= its first byte offset in the piece)
  bool operator>(const HeapItem& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

struct PieceCache {
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0;  // into keys
    uint32_t ids_off = 0, ids_len = 0;  // into ids
    bool used = false;
  };
  static constexpr size_t kSlots = size_t(1) << 17;
  static constexpr size_t kMaxEntries = kSlots / 2;
  static constexpr size_t kMaxKeyLen = 128;  // longer pieces are not cached
  static constexpr size_t kMaxKeyBytes = size_t(2) << 20;  // arena bounds: reset beyond
  static constexpr size_t kMaxIds = size_t(512) << 10;

  uint64_t owner = 0;
  size_t entries = 0;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<int32_t> ids;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    entries = 0;
    if (slots.empty()) slots.resize(kSlots);
    else std::fill(slots.begin(), slots.end(), Slot{});
    keys.clear();
    ids.clear();
  }
  // Returns the slot holding `key` or the empty slot where it belongs.
  Slot* probe(std::string_view key, uint64_t h) {
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      Slot& s = slots[i];
      if (!s.used) return &s;
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(keys.data() + s.key_off, key.data(), key.size()) == 0)
        return &s;
    }
  }
};

struct EncodeScratch {
  std::vector<int32_t> sym;   // symbol id per start position (valid only for live symbols)
  std::vector<int32_t> prev;  // previous live symbol, -1 at the start
  std::vector<int32_t> next;  // next live symbol, n at the end
  std::vector<HeapItem> heap;
  PieceCache cache;
};

EncodeScratch& thread_scratch() {
  thread_local EncodeScratch scratch;
  return scratch;
}

}  // namespace

// BPE over one piece of raw bytes; appends the ids.
namespace {
void bpe_piece(const int32_t* byte_token, const MergeTable& merges, std::string_view piece,
               EncodeScratch& sc, std::vector<int32_t>* out) {
  const int32_t n = int32_t(piece.size());
  if (n == 1) {
    out->push_back(byte_token[uint8_t(piece[0])]);
    return;
  }
  sc.sym.resize(n);
  sc.prev.resize(n);
  sc.next.resize(n);
  sc.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    sc.sym[i] = byte_token[uint8_t(piece[i])];
    sc.prev[i] = i - 1;
    sc.next[i] = i + 1;
  }
  auto greater = [](const HeapItem& a, const HeapItem& b) { return a > b; };
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sc.next[left];
    if (right >= n) return;
    const MergeTable::Entry* e = merges.find(sc.sym[left], sc.sym[right]);
    if (!e) return;
    sc.heap.push_back(HeapItem{e->rank, left});
    std::push_heap(sc.heap.begin(), sc.heap.end(), greater);
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    const MergeTable::Entry* e = merges.find(sc.sym[i], sc.sym[i + 1]);
    if (e) sc.heap.push_back(HeapItem{e->rank, i});
  }
  std::make_heap(sc.heap.begin(), sc.heap.end(), greater);
  // A dead symbol has next == -2.
  while (!sc.heap.empty()) {
    std::pop_heap(sc.heap.begin(), sc.heap.end(), greater);
    const HeapItem top = sc.heap.back();
    sc.heap.pop_back();
    const int32_t left = top.left;
    if (sc.next[left] == -2) continue;
    const int32_t right = sc.next[left];
    if (right >= n) continue;
    const MergeTable::Entry* e = merges.find(sc.sym[left], sc.sym[right]);
    if (!e || e->rank != top.rank) continue;  // stale
    sc.sym[left] = e->result;
    const int32_t after = sc.next[right];
    sc.next[left] = after;
    if (after < n) sc.prev[after] = left;
    sc.next[right] = -2;
    push_pair(sc.prev[left]);
    push_pair(left);
  }
  for (int32_t i = 0; i < n; i = sc.next[i]) out->push_back(sc.sym[i]);
}
}  // namespace

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>* out) const {
  EncodeScratch& sc = thread_scratch();
  PieceCache& cache = sc.cache;
  if (cache.owner != instance) cache.reset(instance);
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = pretok == PretokMode::kDeepSeekV4 ? detail::next_piece_end_v4(text, i)
                                                       : detail::next_piece_end(text, i);
    const std::string_view piece = text.substr(i, j - i);
    i = j;
    if (piece.size() == 1) {
      out->push_back(byte_token[uint8_t(piece[0])]);
      continue;
    }
    if (piece.size() > PieceCache::kMaxKeyLen) {
      bpe_piece(byte_token, merges, piece, sc, out);
      continue;
    }
    const uint64_t h = hash_bytes(piece.data(), piece.size());
    PieceCache::Slot* slot = cache.probe(piece, h);
    if (slot->used) {
      out->insert(out->end(), cache.ids.begin() + slot->ids_off,
                  cache.ids.begin() + slot->ids_off + slot->ids_len);
      continue;
    }
    const size_t before = out->size();
    bpe_piece(byte_token, merges, piece, sc, out);
    if (cache.entries >= PieceCache::kMaxEntries || cache.keys.size() >= PieceCache::kMaxKeyBytes ||
        cache.ids.size() >= PieceCache::kMaxIds) {
      cache.reset(instance);
      slot = cache.probe(piece, h);
    }
    slot->used = true;
    slot->hash = h;
    slot->key_off = uint32_t(cache.keys.size());
    slot->key_len = uint32_t(piece.size());
    slot->ids_off = uint32_t(cache.ids.size());
    slot->ids_len = uint32_t(out->size() - before);
    cache.keys.append(piece);
    cache.ids.insert(cache.ids.end(), out->begin() + before, out->end());
    ++cache.entries;
  }
}

// ---- construction and validation ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::create(VocabData vocab) {
  return create(std::move(vocab.tokens), std::move(vocab.merges), std::move(vocab.token_types),
                vocab.pretok);
}

Expected<Tokenizer> Tokenizer::create(std::vector<std::string> tokens,
                                      std::vector<std::string> merges,
                                      std::vector<int32_t> token_types, PretokMode pretok) {
  if (tokens.empty()) return invalid_argument("tokenizer: vocabulary is empty (no tokens)");
  if (tokens.size() > size_t(INT32_MAX))
    return invalid_argument("tokenizer: vocabulary too large (%zu tokens)", tokens.size());
  if (!token_types.empty() && token_types.size() != tokens.size())
    return invalid_argument("tokenizer: token_type has %zu entries, expected %zu (one per token)",
                            token_types.size(), tokens.size());
  auto im = std::make_unique<Impl>();
  im->instance = g_next_instance.fetch_add(1);
  im->tokens = std::move(tokens);
  const int32_t n_vocab = int32_t(im->tokens.size());
  im->ids.reserve(im->tokens.size() * 2);
  for (int32_t id = 0; id < n_vocab; ++id) {
    const std::string& t = im->tokens[id];
    if (t.empty()) return invalid_argument("tokenizer: token %d is the empty string", id);
    auto [it, inserted] = im->ids.emplace(std::string_view(t), id);
    if (!inserted)
      return invalid_argument("tokenizer: duplicate token '%s' at ids %d and %d", t.c_str(),
                              it->second, id);
  }
  if (token_types.empty()) token_types.assign(im->tokens.size(), int32_t(TokenType::kNormal));
  im->types = std::move(token_types);

  // All 256 byte symbols must exist so that every byte string is encodable.
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    detail::append_codepoint_utf8(byte_to_codepoint(uint8_t(b)), &sym);
    auto it = im->ids.find(sym);
    if (it == im->ids.end())
      return invalid_argument("tokenizer: vocabulary lacks the byte token '%s' for byte 0x%02X",
                              sym.c_str(), b);
    im->byte_token[b] = it->second;
  }

  im->n_merges = int32_t(merges.size());
  im->merges.init(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size())
      return invalid_argument("tokenizer: merge %zu '%s' is not of the form 'A B'", rank,
                              m.c_str());
    const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
    auto ia = im->ids.find(a);
    if (ia == im->ids.end())
      return invalid_argument("tokenizer: merge %zu '%s' names unknown token '%.*s'", rank,
                              m.c_str(), int(a.size()), a.data());
    auto ib = im->ids.find(b);
    if (ib == im->ids.end())
      return invalid_argument("tokenizer: merge %zu '%s' names unknown token '%.*s'", rank,
                              m.c_str(), int(b.size()), b.data());
    std::string ab;
    ab.reserve(a.size() + b.size());
    ab.append(a).append(b);
    auto ir = im->ids.find(ab);
    if (ir == im->ids.end())
      return invalid_argument("tokenizer: merge %zu '%s' yields '%s', which is not a token", rank,
                              m.c_str(), ab.c_str());
    im->merges.insert(ia->second, ib->second, int32_t(rank), ir->second);
  }

  struct Want {
    std::string_view text;
    const char* name;
    int32_t* slot;
  };
  const Want wants[] = {
      {kBosText, "BOS", &im->special.bos},
      {kEosText, "EOS", &im->special.eos},
      {kUserText, "User", &im->special.user},
      {kAssistantText, "Assistant", &im->special.assistant},
      {kThinkOpenText, "<think>", &im->special.think_open},
      {kThinkCloseText, "</think>", &im->special.think_close},
      {kDsmlText, "DSML", &im->special.dsml},
  };
  for (const Want& w : wants) {
    auto it = im->ids.find(w.text);
    if (it == im->ids.end())
      return invalid_argument("tokenizer: special token %s '%.*s' is missing from the vocabulary",
                              w.name, int(w.text.size()), w.text.data());
    *w.slot = it->second;
    im->special_list.emplace_back(w.text, it->second);
  }

  im->bytes.resize(im->tokens.size());
  for (int32_t id = 0; id < n_vocab; ++id) im->bytes[id] = token_to_bytes(im->tokens[id]);

  if (pretok == PretokMode::kAuto) {
    pretok = n_vocab == kDeepSeekV4Tokens && int32_t(merges.size()) == kDeepSeekV4Merges
                 ? PretokMode::kDeepSeekV4
                 : PretokMode::kDs4Scanner;
  }
  im->pretok = pretok;
  for (int32_t id = 0; id < n_vocab; ++id) {
    const int32_t t = im->types[id];
    if (t != int32_t(TokenType::kControl) && t != int32_t(TokenType::kUserDefined)) continue;
    const std::string& s = im->tokens[id];
    if (s.empty()) continue;
    im->added_first_byte[uint8_t(s[0])] = true;
    if (std::find(im->added_lengths.begin(), im->added_lengths.end(), s.size()) ==
        im->added_lengths.end())
      im->added_lengths.push_back(s.size());
  }
  std::sort(im->added_lengths.rbegin(), im->added_lengths.rend());
  return Tokenizer(std::move(im));
}

// ---- encode ----

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  impl_->encode_plain(text, &out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>* out) const {
  impl_->encode_plain(text, out);
}

void Tokenizer::encode_rendered_append(std::string_view text, std::vector<int32_t>* out) const {
  // Every special string starts with '<' or U+FF5C (0xEF); scan for those bytes only.
  size_t span_begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c != '<' && c != '\xEF') {
      ++i;
      continue;
    }
    int32_t hit = -1;
    size_t hit_len = 0;
    for (const auto& [s, id] : impl_->special_list) {
      if (text.compare(i, s.size(), s) == 0) {
        hit = id;
        hit_len = s.size();
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > span_begin) impl_->encode_plain(text.substr(span_begin, i - span_begin), out);
    out->push_back(hit);
    i += hit_len;
    span_begin = i;
  }
  if (span_begin < text.size()) impl_->encode_plain(text.substr(span_begin), out);
}

std::vector<int32_t> Tokenizer::encode_rendered(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_rendered_append(text, &out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_with_added(std::string_view text) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t span_begin = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    size_t hit_len = 0;
    if (im.added_first_byte[uint8_t(text[i])]) {
      for (size_t len : im.added_lengths) {  // longest first
        if (len > text.size() - i) continue;
        auto it = im.ids.find(text.substr(i, len));
        if (it == im.ids.end()) continue;
        const int32_t t = im.types[it->second];
        if (t == int32_t(TokenType::kControl) || t == int32_t(TokenType::kUserDefined)) {
          hit = it->second;
          hit_len = len;
          break;
        }
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > span_begin) im.encode_plain(text.substr(span_begin, i - span_begin), &out);
    out.push_back(hit);
    i += hit_len;
    span_begin = i;
  }
  if (span_begin < text.size()) im.encode_plain(text.substr(span_begin), &out);
  return out;
}

PretokMode Tokenizer::pretok_mode() const { return impl_->pretok; }

// ---- decode and accessors ----

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!valid_id(id)) return kReplacement;
  return impl_->bytes[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out.append(token_bytes(id));
  return out;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (!valid_id(id)) return {};
  return impl_->tokens[id];
}

int32_t Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->ids.find(text);
  return it == impl_->ids.end() ? -1 : it->second;
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (!valid_id(id)) return TokenType::kUndefined;
  return TokenType(impl_->types[id]);
}

int32_t Tokenizer::n_vocab() const { return int32_t(impl_->tokens.size()); }
int32_t Tokenizer::n_merges() const { return impl_->n_merges; }
const SpecialTokens& Tokenizer::special() const { return impl_->special; }

bool Tokenizer::is_special(int32_t id) const {
  for (const auto& [s, sid] : impl_->special_list)
    if (sid == id) return true;
  return false;
}

// ---- streaming decode ----

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool replace_invalid)
    : tok_(&tokenizer), replace_invalid_(replace_invalid) {}

std::string StreamDecoder::push(int32_t id) {
  std::string out;
  push(id, &out);
  return out;
}

void StreamDecoder::push(int32_t id, std::string* out) {
  pending_.append(tok_->token_bytes(id));
  drain(out, false);
}

std::string StreamDecoder::flush() {
  std::string out;
  drain(&out, true);
  return out;
}

// Emits every complete character of pending_; invalid bytes are emitted (or replaced) one at a
// time; a valid-so-far incomplete tail is kept unless `final`.
void StreamDecoder::drain(std::string* out, bool final) {
  const std::string& p = pending_;
  size_t i = 0;
  auto cont = [&](size_t k) { return (uint8_t(p[k]) & 0xC0) == 0x80; };
  auto invalid = [&](size_t k) {
    if (replace_invalid_) out->append(kReplacement);
    else out->push_back(p[k]);
  };
  while (i < p.size()) {
    const auto b0 = uint8_t(p[i]);
    if (b0 < 0x80) {
      out->push_back(char(b0));
      ++i;
      continue;
    }
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    if (need == 0) {
      invalid(i);
      ++i;
      continue;
    }
    // Check the bytes that are present.
    size_t k = 1;
    bool bad = false;
    for (; k < need && i + k < p.size(); ++k) {
      const auto b = uint8_t(p[i + k]);
      const bool ok = k == 1 ? (b >= lo && b <= hi) : cont(i + k);
      if (!ok) {
        bad = true;
        break;
      }
    }
    if (bad) {
      invalid(i);
      ++i;
      continue;
    }
    if (k < need) {  // valid prefix cut by the end of pending_
      if (!final) break;
      for (; i < p.size(); ++i) invalid(i);
      break;
    }
    out->append(p, i, need);
    i += need;
  }
  pending_.erase(0, i);
}

}  // namespace ds4::tok
