// Sharded checkpoints below the programs (train/formats/sharded_checkpoint.h): a
// state written as every rank of one layout owns it is read back by every
// rank of every other layout, each rank reading only what it holds, and
// equals that rank's cut of the whole state bit for bit (vocabulary padding
// zero); the runs of every layout tile the model exactly once; merging
// gives the whole state; a manifest or rank file that lies is refused.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/params.h"
#include "model/tokenizer.h"
#include "parallel/zero.h"
#include "train/formats/checkpoint.h"
#include "train/run/run_state.h"
#include "train/formats/sharded_checkpoint.h"
#include "util/json.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

// How a layout's ranks hold the state: the tp and pp cut, and over dp either
// the same whole part (ZeRO 0: each writes an even share), one contiguous
// range of it (ZeRO-1), or a piece of every unit (ZeRO-2/3).
enum class DpCut { kReplicated, kContiguous, kUnits };
struct Layout {
  std::string name;
  int tp = 1, pp = 1, dp = 1;
  bool vocab = false;
  DpCut cut = DpCut::kReplicated;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"serial"},
      {"dp 2", 1, 1, 2},
      {"dp 2 ZeRO-1", 1, 1, 2, false, DpCut::kContiguous},
      {"dp 3 ZeRO-1", 1, 1, 3, false, DpCut::kContiguous},
      {"dp 4 ZeRO-3", 1, 1, 4, false, DpCut::kUnits},
      {"tp 2", 2, 1, 1},
      {"tp 4 vocab", 4, 1, 1, true},
      {"pp 2", 1, 2, 1},
      {"pp 3 dp 2 ZeRO-1", 1, 3, 2, false, DpCut::kContiguous},
      {"tp 2 x pp 2", 2, 2, 1},
      {"tp 2 vocab x dp 2 ZeRO-2", 2, 1, 2, true, DpCut::kUnits},
  };
  return all;
}

Gpt2Config config() {
  Gpt2Config c{53, 16, 4, 4, 32};  // V 53: a vocabulary that 4 ranks cut with padding
  c.validate();
  return c;
}

// One rank of a layout: its part (every range it holds) and what it writes.
struct Rank {
  RankPart part;           // the ranges it holds, packed by pos where `packed`
  RankPart owned;          // the ranges it writes (ZeRO 0: its even share)
  bool packed = false;
};

std::vector<Rank> ranks_of(const Gpt2Config& cfg, const Layout& l) {
  std::vector<Rank> out;
  for (int s = 0; s < l.pp; ++s) {
    const StageLayers stage = StageLayers::of(cfg.L, l.pp, s);
    for (int t = 0; t < l.tp; ++t) {
      const TpShape shape(l.tp, l.vocab);
      const size_t n = param_count(cfg, shape, stage);
      ParamTensors scratch;
      const std::vector<ParamInfo> infos = layout(cfg, scratch, shape, stage);
      for (int d = 0; d < l.dp; ++d) {
        Rank r;
        r.part = {shape, t, stage, {}};
        if (l.cut == DpCut::kReplicated) {
          r.part.ranges = {{0, n, 0}};
          r.owned = r.part;
          const size_t lo = n * static_cast<size_t>(d) / static_cast<size_t>(l.dp);
          const size_t hi = n * static_cast<size_t>(d + 1) / static_cast<size_t>(l.dp);
          r.owned.ranges = {{lo, hi, lo}};
        } else if (l.cut == DpCut::kContiguous) {
          const size_t padded = (n + static_cast<size_t>(l.dp) - 1) / static_cast<size_t>(l.dp) * static_cast<size_t>(l.dp);
          const ContiguousShard c = contiguous_shard(n, padded, l.dp, d);
          if (c.end > c.begin) r.part.ranges = {{c.begin, c.end, 0}};
          r.owned = r.part;
          r.packed = true;
        } else {
          r.part.ranges = nonempty(UnitShards::of(param_units(cfg, infos), l.dp, d).ranges);
          r.owned = r.part;
          r.packed = true;
        }
        out.push_back(r);
      }
    }
  }
  return out;
}

// `rank`'s array as it would hold it: its part's floats of `whole`, packed or in place.
std::vector<float> held(const Gpt2Config& cfg, const Rank& r, const std::vector<float>& whole) {
  const std::vector<float> local = shard_of(cfg, r.part.tp, r.part.tp_rank, whole, r.part.stage);
  if (!r.packed) return local;
  size_t total = 0;
  for (const ShardRange& x : r.part.ranges) total = std::max(total, x.pos + x.hi - x.lo);
  std::vector<float> packed(total, 0.0f);
  for (const ShardRange& x : r.part.ranges) std::copy(local.begin() + x.lo, local.begin() + x.hi, packed.begin() + x.pos);
  return packed;
}

struct State {
  std::vector<float> params, m, v;
};

State random_state(const Gpt2Config& cfg, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  State s;
  for (std::vector<float>* a : {&s.params, &s.m, &s.v}) {
    a->resize(param_count(cfg));
    for (float& x : *a) x = n(g);
  }
  return s;
}

Tokenizer tokenizer() {
  std::vector<std::string> vocab;
  for (int i = 0; i < 40; ++i) vocab.push_back(std::string(1, static_cast<char>('A' + i)));
  vocab.push_back("[EOS]");
  return Tokenizer::from_vocab(TokenizerKind::kChar, vocab);
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("gpt2_sharded_test_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Writes `state` as the ranks of `l` own it into `dir`.
void write_as(const fs::path& dir, const Gpt2Config& cfg, const Layout& l, const State& state,
              const std::string& run_id = "run-a", int64_t step = 7) {
  std::vector<RankFile> files;
  const std::vector<Rank> ranks = ranks_of(cfg, l);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Rank& r = ranks[i];
    std::vector<float> p = held(cfg, r, state.params), m = held(cfg, r, state.m), v = held(cfg, r, state.v);
    const RankArrays at{{p.data(), r.packed}, {m.data(), r.packed}, {v.data(), r.packed}};
    files.push_back(write_rank_file(dir, static_cast<int>(i), step, run_id, cfg, r.owned, at));
  }
  TrainingState ts;
  ts.steps_done = step;
  const Tokenizer tok = tokenizer();
  write_manifest(dir, step, run_id, cfg, checkpoint_header(cfg, tok, &ts, {{"run.id", run_id}}),
                 vocabulary_bytes(tok), files);
}

TEST(ShardedCheckpoint, EveryLayoutReadsWhatEveryOtherWrote) {
  const Gpt2Config cfg = config();
  const State state = random_state(cfg, 11);
  for (const Layout& from : layouts()) {
    const fs::path dir = temp_dir("matrix");
    write_as(dir, cfg, from, state);
    const ShardedCheckpoint ck(dir);
    for (size_t i = 0; i < ck.files().size(); ++i) EXPECT_EQ(ck.verify(i), "") << from.name;
    for (const Layout& to : layouts()) {
      for (const Rank& r : ranks_of(cfg, to)) {
        for (auto [a, whole] : {std::pair(StateArray::kParams, &state.params), {StateArray::kM, &state.m},
                                {StateArray::kV, &state.v}}) {
          const std::vector<float> want = held(cfg, r, *whole);
          std::vector<float> got(want.size(), 1e30f);  // the padding must come back 0
          ck.read_part(a, r.part, {got.data(), r.packed});
          ASSERT_EQ(got, want) << from.name << " -> " << to.name << " tp rank " << r.part.tp_rank << " stage "
                               << r.part.stage.first << ", array " << static_cast<int>(a);
        }
      }
    }
    const Checkpoint merged = merge_sharded(ck);
    EXPECT_EQ(merged.params, state.params) << from.name;
    EXPECT_EQ(merged.training->m, state.m) << from.name;
    EXPECT_EQ(merged.training->v, state.v) << from.name;
    EXPECT_EQ(merged.training->steps_done, 7);
    fs::remove_all(dir);
  }
}

TEST(ShardedCheckpoint, ReadsNoMoreThanTheRankHolds) {
  const Gpt2Config cfg = config();
  for (const Layout& l : layouts()) {
    uint64_t total = 0;
    for (const Rank& r : ranks_of(cfg, l)) {
      uint64_t mine = 0;
      for (const ShardRange& x : r.part.ranges) mine += (x.hi - x.lo) * sizeof(float);
      EXPECT_LE(ShardedCheckpoint::part_bytes(cfg, r.part), mine) << l.name;
      total += rank_file_bytes(cfg, r.owned, "run-a");
    }
    // What the ranks write is the model once (three arrays), plus each file's header and checksum.
    const uint64_t files = ranks_of(cfg, l).size();
    EXPECT_EQ(total, files * (8 + 4 + 4 + 8 + 8 + 4 + 5 + 8) + 3 * sizeof(float) * param_count(cfg)) << l.name;
  }
}

// A manifest edited to lie, or a rank file swapped: refused naming the file.
class BadShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = config();
    dir_ = temp_dir("bad");
    write_as(dir_, cfg_, layouts()[4], random_state(cfg_, 3));  // dp 4 ZeRO-3
    manifest_ = parse_json(read(dir_ / kManifestFile), "manifest");
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  void write_manifest_json(const Json& m) { std::ofstream(dir_ / kManifestFile) << m.dump(1); }
  // The error opening the folder (and verifying every file) gives, or "".
  std::string error() {
    try {
      const ShardedCheckpoint ck(dir_);
      for (size_t i = 0; i < ck.files().size(); ++i) {
        if (std::string bad = ck.verify(i); !bad.empty()) return bad;
      }
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
  Gpt2Config cfg_;
  fs::path dir_;
  Json manifest_;
};

TEST_F(BadShardedCheckpoint, AWholeOneIsTaken) { EXPECT_EQ(error(), ""); }

TEST_F(BadShardedCheckpoint, SizesThatLie) {
  manifest_["files"][1]["bytes"] = manifest_["files"][1]["bytes"].get<uint64_t>() + 4;
  write_manifest_json(manifest_);
  EXPECT_NE(error().find("rank-00001.bin: \"bytes\""), std::string::npos) << error();
}

TEST_F(BadShardedCheckpoint, RangesThatOverlap) {
  Json& r = manifest_["files"][1]["ranges"][0];
  r[0] = r[0].get<uint64_t>() - 1;  // one float of rank 0's piece too
  manifest_["files"][1]["floats"] = manifest_["files"][1]["floats"].get<uint64_t>() + 1;
  manifest_["files"][1]["bytes"] = manifest_["files"][1]["bytes"].get<uint64_t>() + 12;
  write_manifest_json(manifest_);
  EXPECT_NE(error().find("rank-00000.bin and rank-00001.bin both hold"), std::string::npos) << error();
}

TEST_F(BadShardedCheckpoint, RangesThatLeaveAGap) {
  Json& r = manifest_["files"][2]["ranges"][0];
  r[1] = r[1].get<uint64_t>() - 1;
  manifest_["files"][2]["floats"] = manifest_["files"][2]["floats"].get<uint64_t>() - 1;
  manifest_["files"][2]["bytes"] = manifest_["files"][2]["bytes"].get<uint64_t>() - 12;
  write_manifest_json(manifest_);
  EXPECT_NE(error().find("the ranges leave a gap"), std::string::npos) << error();
}

TEST_F(BadShardedCheckpoint, AMissingRankFile) {
  fs::remove(dir_ / "rank-00003.bin");
  EXPECT_NE(error().find("rank-00003.bin: missing rank file"), std::string::npos) << error();
}

TEST_F(BadShardedCheckpoint, AChecksumMismatch) {
  std::fstream f(dir_ / "rank-00002.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(100);
  f.put('\x7f');
  f.close();
  EXPECT_NE(error().find("rank-00002.bin: corrupted rank file: checksum mismatch"), std::string::npos) << error();
}

TEST_F(BadShardedCheckpoint, ARankFileOfAnotherRun) {
  const fs::path other = temp_dir("other");
  write_as(other, cfg_, layouts()[4], random_state(cfg_, 3), "run-b");
  fs::copy_file(other / "rank-00001.bin", dir_ / "rank-00001.bin", fs::copy_options::overwrite_existing);
  fs::remove_all(other);
  EXPECT_NE(error().find("rank-00001.bin: its header is not this checkpoint's"), std::string::npos) << error();
}

TEST_F(BadShardedCheckpoint, TensorsOfAnotherModel) {
  manifest_["tensors"][0]["shape"][0] = 54;
  write_manifest_json(manifest_);
  EXPECT_NE(error().find("tensor 0 is wte [54,32]"), std::string::npos) << error();
}

}  // namespace
}  // namespace gpt2
