// The Communicator's verbs (dist/comm.h) checked with exact values, on any
// communicator and in either memory: comm_test runs them on host memory
// (local and MPI), nccl_test on device memory (NCCL and host-staged MPI).
// Every rank puts (world rank + 1) * 1000 + i % 1000 at index i: small
// integers, so sums over a few ranks are exact in float, and each value names
// the rank it came from. A group is checked against who is in it (its
// members, in the order of its ranks), so a wrong split fails too.
// Not a gtest: the ranks of a job check together, each printing its failures
// (rank 0 also its passes), and main() agrees on the count.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/comm.h"

namespace gpt2::testing {

inline float value(int world_rank, size_t i) { return static_cast<float>((world_rank + 1) * 1000 + i % 1000); }

// Counts failures; prints each failure on the rank that saw it, passes on
// world rank 0 only.
class Checks {
 public:
  explicit Checks(int world_rank) : world_rank_(world_rank) {}
  void check(bool ok, const std::string& what) {
    ++count_;
    failures_ += ok ? 0 : 1;
    if (!ok) std::printf("FAIL rank %d: %s\n", world_rank_, what.c_str());
    if (ok && world_rank_ == 0) std::printf("ok   %s\n", what.c_str());
    std::fflush(stdout);
  }
  // got == expected exactly; a failure names the first wrong index.
  void equal(const std::string& what, const std::vector<float>& got, const std::vector<float>& expected) {
    size_t bad = 0, first = got.size();
    for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
      if (got[i] != expected[i] && bad++ == 0) first = i;
    }
    if (got.size() != expected.size()) {
      check(false, fmt::format("{}: {} values, expected {}", what, got.size(), expected.size()));
    } else if (bad > 0) {
      check(false, fmt::format("{}: {} of {} wrong, first at {}: expected {}, got {}", what, bad, got.size(), first,
                               expected[first], got[first]));
    } else {
      check(true, what);
    }
  }
  // fn() throws an Error (std::invalid_argument: a bad argument) whose
  // message contains `needle`.
  template <typename Error = std::invalid_argument>
  void rejects(const std::string& what, const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      check(false, fmt::format("{}: no error", what));
    } catch (const Error& e) {
      const std::string msg = e.what();
      check(msg.find(needle) != std::string::npos, fmt::format("{}: \"{}\"", what, msg));
    }
  }
  int count() const { return count_; }
  int failures() const { return failures_; }

 private:
  int world_rank_, count_ = 0, failures_ = 0;
};

// Where a check's float arrays live: the host, or a backend's device memory.
class Arrays {
 public:
  virtual ~Arrays() = default;
  virtual std::string name() const = 0;
  // A new array holding `values`, alive as long as this Arrays.
  virtual float* make(const std::vector<float>& values) = 0;
  // Its first n values, after every verb queued on it.
  virtual std::vector<float> read(const float* p, size_t n) = 0;
};

class HostArrays final : public Arrays {
 public:
  std::string name() const override { return "host"; }
  float* make(const std::vector<float>& values) override { return arrays_.emplace_back(values).data(); }
  std::vector<float> read(const float* p, size_t n) override { return {p, p + n}; }

 private:
  std::deque<std::vector<float>> arrays_;  // a deque never moves its elements
};

// A communicator under test: members[i] is the world rank of its rank i.
struct Group {
  Communicator* comm;
  std::vector<int> members;
  int world_rank;
  std::string label;
};

// The members of world_rank's group when `parent` splits by color(rank) with
// key(rank) (ranks in `parent`): MPI_Comm_split's order, ties by rank.
inline std::vector<int> split_members(const Group& parent, const std::function<int(int)>& color,
                                      const std::function<int(int)>& key) {
  const int n = static_cast<int>(parent.members.size());
  const int me = static_cast<int>(std::find(parent.members.begin(), parent.members.end(), parent.world_rank) -
                                  parent.members.begin());
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) {
    if (color(r) == color(me)) ranks.push_back(r);
  }
  std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return key(a) < key(b); });
  std::vector<int> members;
  for (int r : ranks) members.push_back(parent.members[static_cast<size_t>(r)]);
  return members;
}

// The world and its sub-groups: pairs (rank / 2), parities (rank % 2, keys
// reversing the order), and nested splits of those (parities reversed back;
// pairs split into single ranks). Owns the sub-groups.
struct Groups {
  std::vector<std::unique_ptr<Communicator>> owned;
  std::vector<Group> list;

  explicit Groups(Communicator& world, int world_rank) {
    std::vector<int> all(static_cast<size_t>(world.size()));
    std::iota(all.begin(), all.end(), 0);
    list.push_back({&world, all, world_rank, fmt::format("world of {}", world.size())});
    const Group world_group = list.back();
    const Group pairs = add(world_group, "pairs (rank / 2)", [](int r) { return r / 2; }, [](int r) { return r; });
    const Group parities = add(world_group, "parities (rank % 2, reversed)", [](int r) { return r % 2; },
                               [](int r) { return -r; });
    add(parities, "parities reversed back (nested)", [](int) { return 0; }, [](int r) { return -r; });
    add(pairs, "pairs split into ranks (nested)", [](int r) { return r; }, [](int) { return 0; });
  }

 private:
  Group add(const Group& parent, const std::string& label, const std::function<int(int)>& color,
            const std::function<int(int)>& key) {
    const int r = parent.comm->rank();
    owned.push_back(parent.comm->split(color(r), key(r)));
    list.push_back({owned.back().get(), split_members(parent, color, key), parent.world_rank, label});
    return list.back();
  }
};

// Every verb on `g`, its float arrays in `arrays`, with counts of n floats
// (allreduce, broadcast, point to point) and chunks of k floats per rank
// (reduce_scatter, all_gather). Every rank of the group calls it.
inline void check_verbs(Checks& c, const Group& g, Arrays& arrays, size_t n, size_t k) {
  Communicator& comm = *g.comm;
  const int R = comm.size(), w = g.world_rank;
  const int me = static_cast<int>(std::find(g.members.begin(), g.members.end(), w) - g.members.begin());
  const std::string at = fmt::format("{} [{}, {} memory, n {}, k {}]", g.label, comm.name(), arrays.name(), n, k);
  auto member = [&](int r) { return g.members[static_cast<size_t>((r + R) % R)]; };
  auto values = [](int world_rank, size_t count, size_t from = 0) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = value(world_rank, from + i);
    return v;
  };
  auto sum_over_members = [&](size_t count, size_t from) {
    std::vector<float> v(count, 0.0f);
    for (int m : g.members) {
      for (size_t i = 0; i < count; ++i) v[i] += value(m, from + i);
    }
    return v;
  };

  c.check(R == static_cast<int>(g.members.size()) && comm.rank() == me,
          fmt::format("{}: rank {} of {} (expected {} of {})", at, comm.rank(), R, me, g.members.size()));
  // Every test job runs on one machine.
  c.check(comm.local_size() == R && comm.local_rank() == comm.rank(),
          fmt::format("{}: local rank {} of {} on one machine", at, comm.local_rank(), comm.local_size()));

  // ---- Collectives ----
  float* data = arrays.make(values(w, n));
  comm.allreduce_sum(data, n);
  c.equal(at + ": allreduce_sum", arrays.read(data, n), sum_over_members(n, 0));

  float* buckets = arrays.make(values(w, n));
  comm.start_allreduce_sum(buckets + n / 2, n - n / 2);  // backward finishes the end first
  comm.progress();
  comm.start_allreduce_sum(buckets, n / 2);
  comm.wait_all();
  c.equal(at + ": start_allreduce_sum in two buckets, wait_all", arrays.read(buckets, n), sum_over_members(n, 0));

  const double total = comm.allreduce_sum(static_cast<double>(w + 1));
  double expected_total = 0;
  for (int m : g.members) expected_total += m + 1;
  c.check(total == expected_total, fmt::format("{}: allreduce_sum(double) {} (expected {})", at, total,
                                               expected_total));
  c.check(comm.all_equal(42) && comm.all_equal(static_cast<uint64_t>(w)) == (R == 1),
          at + ": all_equal of one value and of the ranks' own");

  const int root = R - 1;  // not 0 where there are several ranks
  std::vector<float> bytes = comm.rank() == root ? values(w, n) : std::vector<float>(n, -1.0f);
  comm.broadcast(bytes.data(), n * sizeof(float), root);
  c.equal(fmt::format("{}: broadcast from rank {} (host memory)", at, root), bytes, values(member(root), n));

  const size_t all = k * static_cast<size_t>(R), mine = k * static_cast<size_t>(comm.rank());
  const float* send = arrays.make(values(w, all));
  float* recv = arrays.make(std::vector<float>(k, -1.0f));
  comm.reduce_scatter_sum(send, recv, k);
  c.equal(at + ": reduce_scatter_sum out of place", arrays.read(recv, k), sum_over_members(k, mine));
  c.equal(at + ": reduce_scatter_sum leaves send alone", arrays.read(send, all), values(w, all));

  float* shards = arrays.make(values(w, all));
  comm.reduce_scatter_sum(shards, shards + mine, k);
  c.equal(at + ": reduce_scatter_sum in place", arrays.read(shards + mine, k), sum_over_members(k, mine));

  std::vector<float> gathered(all);
  for (int r = 0; r < R; ++r) {
    const std::vector<float> part = values(member(r), k);
    std::copy(part.begin(), part.end(), gathered.begin() + static_cast<std::ptrdiff_t>(k) * r);
  }
  const float* part = arrays.make(values(w, k));
  float* whole = arrays.make(std::vector<float>(all, -1.0f));
  comm.all_gather(part, whole, k);
  c.equal(at + ": all_gather out of place", arrays.read(whole, all), gathered);

  std::vector<float> own(all, -1.0f);
  std::copy_n(values(w, k).begin(), k, own.begin() + static_cast<std::ptrdiff_t>(mine));
  float* params = arrays.make(own);
  comm.all_gather(params + mine, params, k);
  c.equal(at + ": all_gather in place", arrays.read(params, all), gathered);

  comm.barrier();

  // ---- Point to point ----
  const int next = (comm.rank() + 1) % R, prev = (comm.rank() + R - 1) % R;
  if (R % 2 == 0) {
    // Pairwise (0 <-> 1, 2 <-> 3): the even rank sends first, the odd one receives first.
    const int peer = comm.rank() ^ 1;
    const float* mine_out = arrays.make(values(w, n));
    float* theirs = arrays.make(std::vector<float>(n, -1.0f));
    if (comm.rank() % 2 == 0) {
      comm.send(mine_out, n, peer);
      comm.recv(theirs, n, peer);
    } else {
      comm.recv(theirs, n, peer);
      comm.send(mine_out, n, peer);
    }
    c.equal(fmt::format("{}: send and recv with rank {}", at, peer), arrays.read(theirs, n), values(member(peer), n));

    // A ring of blocking sends: even ranks send first, so some rank always receives.
    float* from_prev = arrays.make(std::vector<float>(n, -1.0f));
    if (comm.rank() % 2 == 0) {
      comm.send(mine_out, n, next);
      comm.recv(from_prev, n, prev);
    } else {
      comm.recv(from_prev, n, prev);
      comm.send(mine_out, n, next);
    }
    c.equal(at + ": ring of send and recv", arrays.read(from_prev, n), values(member(prev), n));
  }
  // A ring of send_recv (with one rank, a copy to itself), each rank sending
  // n + its rank floats: the two counts of one call differ.
  const size_t out_count = n + static_cast<size_t>(comm.rank()), in_count = n + static_cast<size_t>(prev);
  const float* ring_out = arrays.make(values(w, out_count));
  float* ring_in = arrays.make(std::vector<float>(in_count, -1.0f));
  comm.send_recv(ring_out, out_count, next, ring_in, in_count, prev);
  c.equal(fmt::format("{}: send_recv ring, {} floats out, {} in", at, out_count, in_count),
          arrays.read(ring_in, in_count), values(member(prev), in_count));
  comm.barrier();
}

// Bad arguments are refused at the front door, before any communication (so
// no rank waits for another), with the verb and the values named. Host
// pointers: no verb dereferences them.
inline void check_argument_errors(Checks& c, const Group& g) {
  Communicator& comm = *g.comm;
  const int R = comm.size(), me = comm.rank();
  const std::string at = fmt::format("{} [{}]: ", g.label, comm.name());
  std::vector<float> buf(4 * static_cast<size_t>(R) + 4, 0.0f);
  float* b = buf.data();
  const size_t mine = 2 * static_cast<size_t>(me);

  c.rejects(at + "send to a rank past the end", [&] { comm.send(b, 1, R); },
            fmt::format("send: peer {} is out of range for a communicator of {} rank(s)", R, R));
  c.rejects(at + "recv from rank -1", [&] { comm.recv(b, 1, -1); }, "recv: peer -1 is out of range");
  c.rejects(at + "send to itself", [&] { comm.send(b, 1, me); }, fmt::format("send: peer {} is this rank", me));
  c.rejects(at + "recv from itself", [&] { comm.recv(b, 1, me); }, fmt::format("recv: peer {} is this rank", me));
  c.rejects(at + "send of null", [&] { comm.send(nullptr, 3, (me + 1) % R); }, "send: data is null with a count of 3");
  c.rejects(at + "broadcast from a root past the end", [&] { comm.broadcast(b, 4, R); },
            fmt::format("broadcast: root {} is out of range", R));
  c.rejects(at + "broadcast of null", [&] { comm.broadcast(nullptr, 4, 0); }, "broadcast: data is null with a count of 4");
  c.rejects(at + "allreduce_sum of null", [&] { comm.allreduce_sum(nullptr, 3); },
            "allreduce_sum: data is null with a count of 3");
  c.rejects(at + "start_allreduce_sum of null", [&] { comm.start_allreduce_sum(nullptr, 3); },
            "start_allreduce_sum: data is null with a count of 3");
  c.rejects(at + "reduce_scatter_sum from null", [&] { comm.reduce_scatter_sum(nullptr, b, 2); },
            fmt::format("reduce_scatter_sum: send is null with a count of {}", 2 * R));
  c.rejects(at + "reduce_scatter_sum into a shifted chunk", [&] { comm.reduce_scatter_sum(b, b + mine + 1, 2); },
            "reduce_scatter_sum: recv overlaps send but is not this rank's chunk");
  c.rejects(at + "all_gather into null", [&] { comm.all_gather(b, nullptr, 2); },
            fmt::format("all_gather: recv is null with a count of {}", 2 * R));
  c.rejects(at + "all_gather from a shifted chunk", [&] { comm.all_gather(b + mine + 1, b, 2); },
            "all_gather: send overlaps recv but is not this rank's chunk");
  c.rejects(at + "send_recv with overlapping buffers", [&] { comm.send_recv(b, 3, 0, b + 2, 3, 0); },
            "send_recv: send_data (3 floats) and recv_data (3 floats) overlap");
  c.rejects(at + "send_recv to a rank past the end", [&] { comm.send_recv(b, 1, R, b + 2, 1, 0); },
            fmt::format("send_recv: dest {} is out of range", R));
  c.rejects(at + "send_recv with itself of two counts", [&] { comm.send_recv(b, 1, me, b + 2, 2, me); },
            "send_recv: with itself, sends 1 floats but receives 2");
  c.rejects(at + "split with a negative color", [&] { comm.split(-1, 0); }, "split: color -1 is negative");
}

}  // namespace gpt2::testing
