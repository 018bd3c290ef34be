#include "train/formats/sharded_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "util/files.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

constexpr char kRankMagic[8] = {'G', 'P', 'T', '2', 'S', 'H', 'R', 'D'};
constexpr uint32_t kRankVersion = 1;
constexpr const char* kFormat = "gpt2 sharded checkpoint";
constexpr size_t kIoFloats = size_t{2} << 20;  // 8 MiB: the bounded buffer of a write

uint64_t file_header_bytes(const std::string& run_id) { return 8 + 4 + 4 + 8 + 8 + 4 + run_id.size(); }

// Reads exactly n bytes at `offset`, or throws naming `path`.
void read_at(int fd, void* p, size_t n, uint64_t offset, const fs::path& path) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::pread(fd, c, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw std::invalid_argument(fmt::format("{}: truncated or unreadable rank file: {}", path.string(),
                                              r < 0 ? std::strerror(errno) : "fewer bytes than its manifest says"));
    }
    c += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

struct Header {  // the fixed part of a rank file, before its arrays
  std::string bytes;
  template <typename X>
  void put(X x) {
    bytes.append(reinterpret_cast<const char*>(&x), sizeof x);
  }
};

std::string rank_header(int rank, int64_t step, uint64_t n, const std::string& run_id) {
  Header h;
  h.bytes.append(kRankMagic, sizeof kRankMagic);
  h.put<uint32_t>(kRankVersion);
  h.put<uint32_t>(static_cast<uint32_t>(rank));
  h.put<uint64_t>(static_cast<uint64_t>(step));
  h.put<uint64_t>(n);
  h.put<uint32_t>(static_cast<uint32_t>(run_id.size()));
  h.bytes += run_id;
  return h.bytes;
}

Json part_json(const RankPart& p) {
  Json ranges = Json::array();
  for (const ShardRange& r : p.ranges) ranges.push_back({r.lo, r.hi});
  Json stage = {{"first", p.stage.first}, {"last", p.stage.last}, {"embed", p.stage.embed}, {"head", p.stage.head}};
  if (!p.stage.more.empty()) {  // virtual stages: the rank's further chunks (absent with one, as before them)
    Json more = Json::array();
    for (const LayerSpan& s : p.stage.more) more.push_back({s.first, s.last});
    stage["more"] = more;
  }
  return {{"tp", p.tp.size}, {"tp_rank", p.tp_rank}, {"vocab_parallel", p.tp.vocab}, {"stage", stage},
          {"ranges", ranges}};
}

size_t run_floats(const std::vector<GlobalRun>& runs) {
  size_t n = 0;
  for (const GlobalRun& r : runs) n += r.count;
  return n;
}

}  // namespace

std::vector<ShardRange> nonempty(std::vector<ShardRange> r) {
  std::erase_if(r, [](const ShardRange& x) { return x.hi <= x.lo; });
  return r;
}

std::vector<ShardRange> owned_ranges(size_t n, int dp, int dp_rank, bool replicated, std::vector<ShardRange> held) {
  if (!replicated) return held;
  const size_t d = static_cast<size_t>(dp), r = static_cast<size_t>(dp_rank);
  const size_t lo = n * r / d, hi = n * (r + 1) / d;
  if (hi <= lo) return {};
  return {{lo, hi, lo}};
}

std::vector<GlobalRun> global_runs(const Gpt2Config& cfg, const RankPart& part, bool owned) {
  const std::vector<ShardPiece> pieces = shard_pieces(cfg, part.tp, part.tp_rank, part.stage);
  std::vector<GlobalRun> runs;
  size_t k = 0;  // pieces are in local order, and so are the ranges
  for (const ShardRange& r : part.ranges) {
    const size_t first = runs.size();  // runs never span two ranges (their places may not be adjacent)
    while (k < pieces.size() && pieces[k].local + pieces[k].count <= r.lo) ++k;
    for (size_t j = k; j < pieces.size() && pieces[j].local < r.hi; ++j) {
      const ShardPiece& p = pieces[j];
      if (owned && p.replicated && part.tp_rank != 0) continue;
      const size_t lo = std::max(r.lo, p.local), hi = std::min(r.hi, p.local + p.count);
      if (lo >= hi) continue;
      if (runs.size() > first && runs.back().full + runs.back().count == p.full + (lo - p.local) &&
          runs.back().local + runs.back().count == lo) {
        runs.back().count += hi - lo;  // one run where two pieces meet
      } else {
        runs.push_back({p.full + (lo - p.local), lo, hi - lo});
      }
    }
  }
  return runs;
}

std::string rank_file_record(const RankFile& f) {
  Json j = {{"file", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"checksum", f.checksum}, {"floats", f.floats}};
  j.update(part_json(f.part));
  return j.dump();
}

RankFile parse_rank_file_record(const std::string& text) {
  const Json j = Json::parse(text);
  RankFile f;
  f.name = j.at("file").get<std::string>();
  f.rank = j.at("rank").get<int>();
  f.bytes = j.at("bytes").get<uint64_t>();
  f.checksum = j.at("checksum").get<uint64_t>();
  f.floats = j.at("floats").get<uint64_t>();
  const Json& st = j.at("stage");
  f.part.tp = TpShape(j.at("tp").get<int>(), j.at("vocab_parallel").get<bool>());
  f.part.tp_rank = j.at("tp_rank").get<int>();
  f.part.stage = {st.at("first").get<int>(), st.at("last").get<int>(), st.at("embed").get<bool>(), st.at("head").get<bool>(), {}};
  if (st.contains("more")) {
    for (const Json& s : st.at("more")) f.part.stage.more.push_back({s.at(0).get<int>(), s.at(1).get<int>()});
  }
  for (const Json& r : j.at("ranges")) f.part.ranges.push_back({r[0].get<size_t>(), r[1].get<size_t>(), 0});
  return f;
}

uint64_t rank_file_bytes(const Gpt2Config& cfg, const RankPart& part, const std::string& run_id) {
  return file_header_bytes(run_id) + 3 * sizeof(float) * run_floats(global_runs(cfg, part, true)) + sizeof(uint64_t);
}

RankFile write_rank_file(const fs::path& dir, int rank, int64_t step, const std::string& run_id, const Gpt2Config& cfg,
                         const RankPart& part, const RankArrays& arrays, bool sync) {
  const std::vector<GlobalRun> runs = global_runs(cfg, part, true);
  const size_t n = run_floats(runs);
  RankFile rf;
  rf.name = rank_file_name(rank);
  rf.rank = rank;
  rf.floats = n;
  rf.part = part;
  const fs::path path = dir / rf.name;
  const int fd = create_new_file(path);
  try {
    const std::string head = rank_header(rank, step, n, run_id);
    Fnv1a64x4 sum;
    sum.update(head.data(), head.size());
    write_all(fd, head.data(), head.size(), path);
    std::vector<float> buf;
    buf.reserve(std::min(kIoFloats, std::max<size_t>(n, 1)));
    auto flush = [&] {
      sum.update(buf.data(), buf.size() * sizeof(float));
      write_all(fd, buf.data(), buf.size() * sizeof(float), path);
      buf.clear();
    };
    for (StateArray a : {StateArray::kParams, StateArray::kM, StateArray::kV}) {
      const StateAt& at = arrays[a];
      size_t ri = 0;  // the range holding the run (runs follow the ranges' order)
      for (const GlobalRun& run : runs) {
        while (part.ranges[ri].hi <= run.local) ++ri;
        const float* src = at.at(part.ranges[ri], run.local);
        for (size_t done = 0; done < run.count;) {
          const size_t take = std::min(run.count - done, kIoFloats - buf.size());
          buf.insert(buf.end(), src + done, src + done + take);
          done += take;
          if (buf.size() == kIoFloats) flush();
        }
      }
    }
    flush();
    const uint64_t h = sum.digest();
    write_all(fd, &h, sizeof h, path);
    if (sync && ::fsync(fd) != 0) {
      throw std::runtime_error(fmt::format("{}: fsync failed: {}", path.string(), std::strerror(errno)));
    }
    rf.checksum = h;
    rf.bytes = head.size() + 3 * n * sizeof(float) + sizeof h;
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw std::runtime_error(fmt::format("{}: close failed: {}", path.string(), std::strerror(errno)));
  return rf;
}

void write_manifest(const fs::path& dir, int64_t step, const std::string& run_id, const Gpt2Config& cfg,
                    const KeyValues& header, const std::string& vocabulary, const std::vector<RankFile>& files) {
  write_file_atomically(dir / kVocabularyFile, vocabulary, true);
  Json head = Json::object();
  for (const auto& [k, v] : header) head[k] = v;
  Json tensors = Json::array();
  ParamTensors scratch;
  for (const ParamInfo& info : layout(cfg, scratch)) {
    tensors.push_back({{"name", info.name}, {"shape", info.shape}, {"offset", info.offset}});
  }
  Json list = Json::array();
  for (const RankFile& f : files) {
    Json j = {{"file", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"fnv1a64x4", fmt::format("{:016x}", f.checksum)},
              {"floats", f.floats}};
    j.update(part_json(f.part));
    list.push_back(std::move(j));
  }
  const Json m = {{"format", kFormat},
                  {"version", 1},
                  {"run_id", run_id},
                  {"step", step},
                  {"params", param_count(cfg)},
                  {"vocabulary", {{"file", kVocabularyFile},
                                  {"bytes", vocabulary.size()},
                                  {"fnv1a64", fmt::format("{:016x}", fnv1a64(vocabulary.data(), vocabulary.size()))}}},
                  {"header", head},
                  {"tensors", tensors},
                  {"files", list}};
  write_file_atomically(dir / kManifestFile, json_text(m, 1) + "\n", true);
}

std::string rank_file_name(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

bool is_rank_file_name(std::string_view name) {
  if (name.size() <= 9 || !name.starts_with("rank-") || !name.ends_with(".bin")) return false;
  return name.substr(5, name.size() - 9).find_first_not_of("0123456789") == std::string_view::npos;
}

bool is_sharded_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(fs::symlink_status(dir / kManifestFile, ec));
}

// ---- Reading ----

namespace {

// The manifest's fields, each checked for its type; errors name the manifest.
class ManifestReader {
 public:
  explicit ManifestReader(fs::path path) : path_(std::move(path)) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(fmt::format("{}: invalid sharded checkpoint manifest: {}", path_.string(), what));
  }
  const Json& at(const Json& obj, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) fail(fmt::format("no \"{}\"", key));
    return obj.at(key);
  }
  uint64_t num(const Json& obj, const char* key) const {
    const Json& j = at(obj, key);
    if (!j.is_number_unsigned()) fail(fmt::format("\"{}\" is not a count", key));
    return j.get<uint64_t>();
  }
  std::string text(const Json& obj, const char* key) const {
    const Json& j = at(obj, key);
    if (!j.is_string()) fail(fmt::format("\"{}\" is not text", key));
    return j.get<std::string>();
  }
  bool flag(const Json& obj, const char* key) const {
    const Json& j = at(obj, key);
    if (!j.is_boolean()) fail(fmt::format("\"{}\" is not true or false", key));
    return j.get<bool>();
  }
  int integer(const Json& obj, const char* key) const {
    const Json& j = at(obj, key);
    if (!j.is_number_integer() || j.get<int64_t>() < -1 || j.get<int64_t>() > (int64_t{1} << 30)) {
      fail(fmt::format("\"{}\" is not a small integer", key));
    }
    return static_cast<int>(j.get<int64_t>());
  }
  uint64_t hex(const Json& obj, const char* key) const {
    const std::string s = text(obj, key);
    if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) {
      fail(fmt::format("\"{}\" is not 16 hex digits", key));
    }
    return std::stoull(s, nullptr, 16);
  }

 private:
  fs::path path_;
};

// A file of the checkpoint folder, read whole (small: the vocabulary).
std::string read_small(const fs::path& path) {
  return read_input_file(path, kMaxTextInputBytes * 4, "", "a sharded checkpoint's file");
}

// The manifest's "header": the one-file format's key/value entries, each text.
KeyValues read_header_entries(const ManifestReader& r, const Json& m) {
  KeyValues head;
  const Json& hj = r.at(m, "header");
  if (!hj.is_object()) r.fail("\"header\" is not an object");
  for (const auto& [k, v] : hj.items()) {
    if (!v.is_string()) r.fail(fmt::format("header entry \"{}\" is not text", k));
    head.emplace_back(k, v.get<std::string>());
  }
  return head;
}

// The vocabulary file, of the size and checksum the manifest records.
std::string read_vocabulary(const ManifestReader& r, const Json& m, const fs::path& dir) {
  const Json& vj = r.at(m, "vocabulary");
  const fs::path vpath = dir / kVocabularyFile;
  if (r.text(vj, "file") != kVocabularyFile) r.fail("\"vocabulary\" names another file");
  const std::string vocab = read_small(vpath);
  if (vocab.size() != r.num(vj, "bytes") || fnv1a64(vocab.data(), vocab.size()) != r.hex(vj, "fnv1a64")) {
    throw std::invalid_argument(fmt::format("{}: corrupted sharded checkpoint: size or checksum differs from the manifest's",
                                            vpath.string()));
  }
  return vocab;
}

// The header and the vocabulary: the configuration, tokenizer and counters.
// A header the one-file format refuses is bad input here too.
Checkpoint read_header(const ManifestReader& r, const Json& m, const fs::path& dir, const fs::path& mpath) {
  KeyValues head = read_header_entries(r, m);
  const std::string vocab = read_vocabulary(r, m, dir);
  try {
    return checkpoint_from_header(std::move(head), true, vocab, mpath.string());
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
}

// The tensors must be the configuration's.
void check_tensors(const ManifestReader& r, const Json& m, const std::vector<ParamInfo>& infos) {
  const Json& tj = r.at(m, "tensors");
  if (!tj.is_array() || tj.size() != infos.size()) r.fail(fmt::format("\"tensors\" does not list the model's {} tensors", infos.size()));
  for (size_t i = 0; i < infos.size(); ++i) {
    const Json& t = tj[i];
    if (r.text(t, "name") != infos[i].name || r.at(t, "shape") != Json(infos[i].shape) || r.num(t, "offset") != infos[i].offset) {
      r.fail(fmt::format("tensor {} is {} {} at {}, the configuration has {} {} at {}", i, field_text(t, "name"),
                         field_text(t, "shape"), field_text(t, "offset"), infos[i].name, Json(infos[i].shape).dump(),
                         infos[i].offset));
    }
  }
}

// A rank file's stage (`f`'s "stage", the file `name`): its layers, then any
// virtual stages' further chunks.
StageLayers read_stage(const ManifestReader& r, const Json& f, const std::string& name, const Gpt2Config& cfg) {
  const Json& sj = r.at(f, "stage");
  StageLayers st{r.integer(sj, "first"), r.integer(sj, "last"), r.flag(sj, "embed"), r.flag(sj, "head"), {}};
  if (st.first < 0 || st.first >= cfg.L || (st.last >= 0 && (st.last <= st.first || st.last > cfg.L))) {
    r.fail(fmt::format("{}: stage layers [{}, {}) of a {}-layer model", name, st.first, st.last, cfg.L));
  }
  if (sj.contains("more")) {  // virtual stages' further chunks, each above the one before
    int below = st.last;
    for (const Json& s : sj.at("more")) {
      const bool pair = s.is_array() && s.size() == 2 && s[0].is_number_unsigned() && s[1].is_number_unsigned() &&
                        s[0].get<uint64_t>() <= uint64_t{1} << 30 && s[1].get<uint64_t>() <= uint64_t{1} << 30;
      const int a = pair ? static_cast<int>(s[0].get<uint64_t>()) : -1;  // in range: no wrap
      const int b = pair ? static_cast<int>(s[1].get<uint64_t>()) : -1;
      if (!pair || a < below || b <= a || b > cfg.L) {
        r.fail(fmt::format("{}: stage chunk {} of a {}-layer model above layer {}", name, s.dump(), cfg.L, below));
      }
      st.more.push_back({a, b});
      below = b;
    }
  }
  return st;
}

// A rank file's ranges of its part (part_n floats): ascending, none empty,
// none past the part.
std::vector<ShardRange> read_ranges(const ManifestReader& r, const Json& f, const std::string& name, size_t part_n) {
  const Json& rj = r.at(f, "ranges");
  if (!rj.is_array()) r.fail(fmt::format("{}: \"ranges\" is not a list", name));
  std::vector<ShardRange> ranges;
  size_t prev = 0;
  for (const Json& x : rj) {
    if (!x.is_array() || x.size() != 2 || !x[0].is_number_unsigned() || !x[1].is_number_unsigned()) {
      r.fail(fmt::format("{}: a range is not [lo, hi]", name));
    }
    const size_t lo = x[0].get<size_t>(), hi = x[1].get<size_t>();
    if (lo < prev || hi <= lo || hi > part_n) {
      r.fail(fmt::format("{}: range [{}, {}) is out of order, empty or past its part's {} floats", name, lo, hi,
                         part_n));
    }
    ranges.push_back({lo, hi, 0});
    prev = hi;
  }
  return ranges;
}

// An entry of "files" and the runs of the whole model its file holds.
struct FileEntry {
  RankFile file;
  std::vector<GlobalRun> runs;
};

// Entry `f` of "files", which must be rank `rank`'s: its part, ranges and
// size checked against each other and the configuration.
FileEntry read_file_entry(const ManifestReader& r, const Json& f, int rank, const Gpt2Config& cfg,
                          const std::string& run_id) {
  RankFile rf;
  rf.name = r.text(f, "file");
  rf.rank = r.integer(f, "rank");
  if (rf.name != rank_file_name(rf.rank) || rf.rank != rank) {
    r.fail(fmt::format("file \"{}\" of rank {}: expected {}", excerpt(rf.name), rf.rank, rank_file_name(rank)));
  }
  rf.bytes = r.num(f, "bytes");
  rf.checksum = r.hex(f, "fnv1a64x4");
  rf.floats = r.num(f, "floats");
  const int tp = r.integer(f, "tp"), tp_rank = r.integer(f, "tp_rank");
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp) r.fail(fmt::format("{}: tp rank {} of {}", rf.name, tp_rank, tp));
  rf.part.tp = TpShape(tp, r.flag(f, "vocab_parallel"));
  rf.part.tp_rank = tp_rank;
  rf.part.stage = read_stage(r, f, rf.name, cfg);
  if (tp > 1) {
    try {
      TpPlace{tp, 0, {}, nullptr, rf.part.tp.vocab}.validate(cfg);
    } catch (const std::invalid_argument& e) {
      r.fail(fmt::format("{}: tp {}: {}", rf.name, tp, e.what()));
    }
  }
  rf.part.ranges = read_ranges(r, f, rf.name, param_count(cfg, rf.part.tp, rf.part.stage));
  std::vector<GlobalRun> runs = global_runs(cfg, rf.part, true);
  if (run_floats(runs) != rf.floats) {
    r.fail(fmt::format("{}: \"floats\" is {}, its ranges hold {}", rf.name, rf.floats, run_floats(runs)));
  }
  if (rf.bytes != file_header_bytes(run_id) + 3 * sizeof(float) * rf.floats + sizeof(uint64_t)) {
    r.fail(fmt::format("{}: \"bytes\" is {}, its ranges take {}", rf.name, rf.bytes,
                       file_header_bytes(run_id) + 3 * sizeof(float) * rf.floats + sizeof(uint64_t)));
  }
  return {std::move(rf), std::move(runs)};
}

// The tensor holding float x of the whole model, for a refusal's message.
std::string tensor_at(const std::vector<ParamInfo>& infos, size_t x) {
  auto it = std::upper_bound(infos.begin(), infos.end(), x, [](size_t v, const ParamInfo& i) { return v < i.offset; });
  return it == infos.begin() ? std::string("?") : std::prev(it)->name;
}

// The rank file at `p`: there, a plain file of the size the manifest
// records, opened for reading.
int open_rank_file(const fs::path& p, uint64_t bytes) {
  struct stat sb {};
  if (::lstat(p.c_str(), &sb) != 0) {
    throw std::invalid_argument(fmt::format("{}: missing rank file of the sharded checkpoint", p.string()));
  }
  if (!S_ISREG(sb.st_mode)) throw std::invalid_argument(fmt::format("{}: is {}", p.string(), file_kind(sb.st_mode)));
  if (static_cast<uint64_t>(sb.st_size) != bytes) {
    throw std::invalid_argument(fmt::format("{}: {} bytes, but the manifest says {}", p.string(), sb.st_size, bytes));
  }
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw std::invalid_argument(fmt::format("{}: cannot open: {}", p.string(), std::strerror(errno)));
  return fd;
}

// The header of rank file `f` (open as fd, at `p`) must be this checkpoint's.
void check_rank_header(int fd, const fs::path& p, const RankFile& f, const std::string& run_id, int64_t step) {
  std::string head(file_header_bytes(run_id), '\0');
  read_at(fd, head.data(), head.size(), 0, p);
  if (head != rank_header(f.rank, step, f.floats, run_id)) {
    const bool magic = head.compare(0, 8, std::string(kRankMagic, 8)) == 0;
    throw std::invalid_argument(fmt::format(
        "{}: {}", p.string(),
        !magic ? "not a rank file of a sharded checkpoint (no GPT2SHRD magic)"
               : fmt::format("its header is not this checkpoint's (run {}, step {}, rank {}, {} floats): a rank "
                             "file of another run or save", run_id, step, f.rank, f.floats)));
  }
}

}  // namespace

ShardedCheckpoint::ShardedCheckpoint(const fs::path& dir) : dir_(dir) {
  const fs::path mpath = dir / kManifestFile;
  const ManifestReader r(mpath);
  Json m;
  try {  // nested past the parser's bound, or not JSON: bad input like any other lie in the manifest
    m = parse_json(read_input_file(mpath, kMaxTextInputBytes * 4, "", "a sharded checkpoint manifest"), mpath.string());
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  if (!m.is_object() || !m.contains("format") || m.at("format") != kFormat) r.fail(fmt::format("not a \"{}\"", kFormat));
  if (r.num(m, "version") != 1) r.fail(fmt::format("version {}, this program reads version 1", r.num(m, "version")));
  run_id_ = r.text(m, "run_id");
  step_ = static_cast<int64_t>(r.num(m, "step"));
  header_ = read_header(r, m, dir, mpath);
  const Gpt2Config& cfg = header_.config;
  if (const std::string* id = header_.find("run.id"); id == nullptr || *id != run_id_) r.fail("the header's run.id differs from \"run_id\"");
  if (header_.training->steps_done != step_) r.fail("the header's state.steps_done differs from \"step\"");
  const size_t N = param_count(cfg);
  if (r.num(m, "params") != N) r.fail(fmt::format("\"params\" is {}, the configuration has {}", r.num(m, "params"), N));
  ParamTensors scratch;
  const std::vector<ParamInfo> infos = layout(cfg, scratch);
  check_tensors(r, m, infos);
  // The files: each one's part, ranges and size, then the runs over all of them.
  const Json& fj = r.at(m, "files");
  if (!fj.is_array() || fj.empty()) r.fail("\"files\" lists no rank file");
  for (const Json& f : fj) {
    FileEntry e = read_file_entry(r, f, static_cast<int>(files_.size()), cfg, run_id_);
    size_t pos = 0;
    for (const GlobalRun& g : e.runs) {
      runs_.push_back({g.full, g.count, files_.size(), pos});
      pos += g.count;
    }
    files_.push_back(std::move(e.file));
  }
  std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) { return a.full < b.full; });
  if (const std::string problem = coverage_problem(infos, N); !problem.empty()) r.fail(problem);
  open_rank_files();
}

std::string ShardedCheckpoint::coverage_problem(const std::vector<ParamInfo>& infos, size_t n) const {
  // Exactly once: sorted by where they start, each run must begin where the one before ended.
  size_t next = 0;
  for (size_t i = 0; i < runs_.size(); ++i) {
    const Run& run = runs_[i];
    if (run.full > next) {
      return fmt::format("no file holds floats [{}, {}) (tensor {}): the ranges leave a gap", next, run.full,
                         tensor_at(infos, next));
    }
    if (run.full < next) {
      const Run& before = *std::find_if(runs_.begin(), runs_.begin() + static_cast<std::ptrdiff_t>(i), [&](const Run& b) {
        return b.full + b.count > run.full;
      });
      return fmt::format("{} and {} both hold float {} (tensor {}): the ranges overlap", files_[before.file].name,
                         files_[run.file].name, run.full, tensor_at(infos, run.full));
    }
    next = run.full + run.count;
  }
  if (next != n) {
    return fmt::format("no file holds floats [{}, {}) (tensor {}): the ranges leave a gap", next, n,
                       tensor_at(infos, next));
  }
  return "";
}

void ShardedCheckpoint::open_rank_files() {
  // Each file checked, then closed: at most one is open here, and at most
  // kMaxOpenRankFiles while reading (rank_fd), so a checkpoint of thousands of
  // rank files reads under the common `ulimit -n 1024`.
  fds_.assign(files_.size(), -1);
  ids_.resize(files_.size());
  for (size_t i = 0; i < files_.size(); ++i) {
    const fs::path p = dir_ / files_[i].name;
    const int fd = open_rank_file(p, files_[i].bytes);
    struct stat sb {};
    try {
      check_rank_header(fd, p, files_[i], run_id_, step_);
      if (::fstat(fd, &sb) != 0)
        throw std::invalid_argument(fmt::format("{}: cannot stat: {}", p.string(), std::strerror(errno)));
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    ids_[i] = {sb.st_dev, sb.st_ino};
  }
}

int ShardedCheckpoint::rank_fd(size_t i) const {
  if (fds_[i] >= 0) return fds_[i];
  if (open_order_.size() >= kMaxOpenRankFiles) {  // the longest open one makes room
    ::close(fds_[open_order_.front()]);
    fds_[open_order_.front()] = -1;
    open_order_.pop_front();
  }
  const fs::path p = dir_ / files_[i].name;
  const int fd = open_rank_file(p, files_[i].bytes);
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || sb.st_dev != ids_[i].first || sb.st_ino != ids_[i].second) {
    ::close(fd);  // replaced since its header was checked: not the file this checkpoint is
    throw std::invalid_argument(
        fmt::format("{}: the rank file was replaced while the checkpoint was read", p.string()));
  }
  fds_[i] = fd;
  open_order_.push_back(i);
  return fd;
}

ShardedCheckpoint::~ShardedCheckpoint() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

uint64_t ShardedCheckpoint::header_bytes() const { return file_header_bytes(run_id_); }

std::string ShardedCheckpoint::verify(size_t i) const {
  const RankFile& f = files_[i];
  const fs::path p = dir_ / f.name;
  std::vector<char> buf(kIoFloats * sizeof(float));
  Fnv1a64x4 sum;
  const uint64_t body = f.bytes - sizeof(uint64_t);
  for (uint64_t off = 0; off < body;) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(buf.size(), body - off));
    read_at(rank_fd(i), buf.data(), take, off, p);
    sum.update(buf.data(), take);
    off += take;
  }
  const uint64_t h = sum.digest();
  uint64_t stored = 0;
  read_at(rank_fd(i), &stored, sizeof stored, body, p);
  if (stored != h || h != f.checksum) {
    return fmt::format("{}: corrupted rank file: checksum mismatch ({} the manifest's)", p.string(),
                       stored == h ? "its own checksum matches, but not" : "neither its own nor");
  }
  return "";
}

void ShardedCheckpoint::read(StateArray a, size_t full, std::span<float> out) const {
  size_t done = 0;
  auto it = std::upper_bound(runs_.begin(), runs_.end(), full, [](size_t x, const Run& r) { return x < r.full; });
  if (it == runs_.begin()) throw std::logic_error("ShardedCheckpoint::read: before the model");
  for (--it; done < out.size(); ++it) {
    const size_t at = full + done, skip = at - it->full;
    const size_t take = std::min(out.size() - done, it->count - skip);
    const RankFile& f = files_[it->file];
    const uint64_t offset = header_bytes() + (static_cast<uint64_t>(a) * f.floats + it->pos + skip) * sizeof(float);
    read_at(rank_fd(it->file), out.data() + done, take * sizeof(float), offset, dir_ / f.name);
    done += take;
  }
}

void ShardedCheckpoint::read_part(StateArray a, const RankPart& part, StateAt at) const {
  for (const ShardRange& r : part.ranges) std::fill_n(at.at(r, r.lo), r.hi - r.lo, 0.0f);  // the padding stays 0
  const std::vector<GlobalRun> runs = global_runs(header_.config, part, false);
  size_t ri = 0;
  for (const GlobalRun& run : runs) {
    while (part.ranges[ri].hi <= run.local) ++ri;
    read(a, run.full, {at.at(part.ranges[ri], run.local), run.count});
  }
}

uint64_t ShardedCheckpoint::part_bytes(const Gpt2Config& cfg, const RankPart& part) {
  return run_floats(global_runs(cfg, part, false)) * sizeof(float);
}

std::unique_ptr<ShardedCheckpoint> open_sharded_checkpoint(const fs::path& dir, Communicator& comm) {
  auto ck = std::make_unique<ShardedCheckpoint>(dir);
  const size_t ranks = static_cast<size_t>(comm.size()), me = static_cast<size_t>(comm.rank());
  int64_t bad = -1;  // the first file this rank found corrupted
  for (size_t i = me; i < ck->files().size() && bad < 0; i += ranks) {
    if (!ck->verify(i).empty()) bad = static_cast<int64_t>(i);
  }
  std::vector<int64_t> all(ranks);
  comm.all_gather(&bad, all.data(), 1);
  for (int64_t b : all) {
    if (b >= 0) {
      throw std::invalid_argument(fmt::format("{}: corrupted rank file: its checksum differs from the manifest's",
                                              (dir / ck->files()[static_cast<size_t>(b)].name).string()));
    }
  }
  return ck;
}

Checkpoint merge_sharded(const ShardedCheckpoint& ck) {
  for (size_t i = 0; i < ck.files().size(); ++i) {
    if (const std::string bad = ck.verify(i); !bad.empty()) throw std::invalid_argument(bad);
  }
  Checkpoint out = ck.header();
  const size_t N = param_count(out.config);
  out.params.resize(N);
  out.training->m.resize(N);
  out.training->v.resize(N);
  ck.read(StateArray::kParams, 0, out.params);
  ck.read(StateArray::kM, 0, out.training->m);
  ck.read(StateArray::kV, 0, out.training->v);
  return out;
}

}  // namespace gpt2
