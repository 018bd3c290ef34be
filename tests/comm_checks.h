// The Communicator's verbs (parallel/comm.h) checked with exact values, on any
// communicator and in either memory: comm_test runs them on host memory
// (local and MPI), nccl_test on device memory (NCCL and host-staged MPI),
// both as GoogleTest programs under mpiexec (mpi_test_main.h).
// Every rank puts (world rank + 1) * 1000 + i % 1000 at index i: small
// integers, so sums over a few ranks are exact in float, and each value names
// the rank it came from. A group is checked against who is in it (its
// members, in the order of its ranks), so a wrong split fails too.
// The checks are gtest expectations (never assertions: a check that fails
// must not skip the collectives after it, or the other ranks would wait for
// them forever), each counted (comm_checks) so that a program can state how
// many it made.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace gpt2::testing {

inline float value(int world_rank, size_t i) { return static_cast<float>((world_rank + 1) * 1000 + i % 1000); }

// The checks made on this rank so far, for the program's summary line.
inline int& comm_checks() {
  static int n = 0;
  return n;
}

// One check, counted; a failure is reported with `what` (the group, the
// communicator, the verb and the values).
inline void expect(bool ok, const std::string& what) {
  ++comm_checks();
  if (!ok) ADD_FAILURE() << what;
}

// got == expected exactly; a failure names the first wrong index.
inline void expect_equal(const std::string& what, const std::vector<float>& got, const std::vector<float>& expected) {
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    if (got[i] != expected[i] && bad++ == 0) first = i;
  }
  if (got.size() != expected.size()) {
    expect(false, fmt::format("{}: {} values, expected {}", what, got.size(), expected.size()));
  } else {
    expect(bad == 0, bad == 0 ? what
                              : fmt::format("{}: {} of {} wrong, first at {}: expected {}, got {}", what, bad,
                                            got.size(), first, expected[first], got[first]));
  }
}

// fn() throws an Error (std::invalid_argument: a bad argument) whose message
// contains `needle`. An exception of another type propagates: the program
// ends the job (no rank may go on alone after a verb failed half-way).
template <typename Error = std::invalid_argument>
void expect_rejects(const std::string& what, const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    expect(msg.find(needle) != std::string::npos, fmt::format("{}: \"{}\" does not say \"{}\"", what, msg, needle));
    return;
  }
  expect(false, fmt::format("{}: no error (expected one saying \"{}\")", what, needle));
}

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
// pairs split into single ranks). Owns the sub-groups. Every rank of `world`
// builds it (the splits are collective), in the same order.
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
  // The entries of `list`, in order, as gtest parameter names (the same at
  // any number of ranks: a group of one rank is still a group).
  static std::vector<std::string> names() {
    return {"World", "Pairs", "Parities", "ParitiesReversedBack", "PairsSplitIntoRanks"};
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
inline void check_verbs(const Group& g, Arrays& arrays, size_t n, size_t k) {
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

  expect(R == static_cast<int>(g.members.size()) && comm.rank() == me,
         fmt::format("{}: rank {} of {} (expected {} of {})", at, comm.rank(), R, me, g.members.size()));
  // Every test job runs on one machine.
  expect(comm.local_size() == R && comm.local_rank() == comm.rank(),
         fmt::format("{}: local rank {} of {} on one machine", at, comm.local_rank(), comm.local_size()));

  // ---- Collectives ----
  float* data = arrays.make(values(w, n));
  comm.allreduce_sum(data, n);
  expect_equal(at + ": allreduce_sum", arrays.read(data, n), sum_over_members(n, 0));

  float* buckets = arrays.make(values(w, n));
  comm.start_allreduce_sum(buckets + n / 2, n - n / 2);  // backward finishes the end first
  comm.progress();
  comm.start_allreduce_sum(buckets, n / 2);
  comm.wait_all();
  expect_equal(at + ": start_allreduce_sum in two buckets, wait_all", arrays.read(buckets, n), sum_over_members(n, 0));

  const double total = comm.allreduce_sum(static_cast<double>(w + 1));
  double expected_total = 0;
  for (int m : g.members) expected_total += m + 1;
  expect(total == expected_total, fmt::format("{}: allreduce_sum(double) {} (expected {})", at, total, expected_total));
  expect(comm.all_equal(42) && comm.all_equal(static_cast<uint64_t>(w)) == (R == 1),
         at + ": all_equal of one value and of the ranks' own");

  const int root = R - 1;  // not 0 where there are several ranks
  std::vector<float> bytes = comm.rank() == root ? values(w, n) : std::vector<float>(n, -1.0f);
  comm.broadcast(bytes.data(), n * sizeof(float), root);
  expect_equal(fmt::format("{}: broadcast from rank {} (host memory)", at, root), bytes, values(member(root), n));

  const size_t all = k * static_cast<size_t>(R), mine = k * static_cast<size_t>(comm.rank());
  const float* send = arrays.make(values(w, all));
  float* recv = arrays.make(std::vector<float>(k, -1.0f));
  comm.reduce_scatter_sum(send, recv, k);
  expect_equal(at + ": reduce_scatter_sum out of place", arrays.read(recv, k), sum_over_members(k, mine));
  expect_equal(at + ": reduce_scatter_sum leaves send alone", arrays.read(send, all), values(w, all));

  float* shards = arrays.make(values(w, all));
  comm.reduce_scatter_sum(shards, shards + mine, k);
  expect_equal(at + ": reduce_scatter_sum in place", arrays.read(shards + mine, k), sum_over_members(k, mine));

  std::vector<float> gathered(all);
  for (int r = 0; r < R; ++r) {
    const std::vector<float> part = values(member(r), k);
    std::copy(part.begin(), part.end(), gathered.begin() + static_cast<std::ptrdiff_t>(k) * r);
  }
  const float* part = arrays.make(values(w, k));
  float* whole = arrays.make(std::vector<float>(all, -1.0f));
  comm.all_gather(part, whole, k);
  expect_equal(at + ": all_gather out of place", arrays.read(whole, all), gathered);

  std::vector<float> own(all, -1.0f);
  std::copy_n(values(w, k).begin(), k, own.begin() + static_cast<std::ptrdiff_t>(mine));
  float* params = arrays.make(own);
  comm.all_gather(params + mine, params, k);
  expect_equal(at + ": all_gather in place", arrays.read(params, all), gathered);

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
    expect_equal(fmt::format("{}: send and recv with rank {}", at, peer), arrays.read(theirs, n),
                 values(member(peer), n));

    // A ring of blocking sends: even ranks send first, so some rank always receives.
    float* from_prev = arrays.make(std::vector<float>(n, -1.0f));
    if (comm.rank() % 2 == 0) {
      comm.send(mine_out, n, next);
      comm.recv(from_prev, n, prev);
    } else {
      comm.recv(from_prev, n, prev);
      comm.send(mine_out, n, next);
    }
    expect_equal(at + ": ring of send and recv", arrays.read(from_prev, n), values(member(prev), n));
  }
  // A ring of send_recv (with one rank, a copy to itself), each rank sending
  // n + its rank floats: the two counts of one call differ.
  const size_t out_count = n + static_cast<size_t>(comm.rank()), in_count = n + static_cast<size_t>(prev);
  const float* ring_out = arrays.make(values(w, out_count));
  float* ring_in = arrays.make(std::vector<float>(in_count, -1.0f));
  comm.send_recv(ring_out, out_count, next, ring_in, in_count, prev);
  expect_equal(fmt::format("{}: send_recv ring, {} floats out, {} in", at, out_count, in_count),
               arrays.read(ring_in, in_count), values(member(prev), in_count));

  // ---- Host values of other types: 64-bit counters beyond a float's 24
  // bits and doubles, moved as they are (host memory whatever `arrays`) ----
  const auto counters = [](int world_rank) {
    const auto r = static_cast<uint64_t>(world_rank);
    return std::vector<uint64_t>{(uint64_t{1} << 60) + 12345 + r, ~uint64_t{0} - r, r};
  };
  std::vector<uint64_t> gathered_counters(3 * static_cast<size_t>(R), 0), expected_counters;
  for (int r = 0; r < R; ++r) {
    const auto c = counters(member(r));
    expected_counters.insert(expected_counters.end(), c.begin(), c.end());
  }
  const std::vector<uint64_t> mine_counters = counters(w);
  comm.all_gather(mine_counters.data(), gathered_counters.data(), 3);
  expect(gathered_counters == expected_counters, at + ": all_gather of 64-bit counters");
  std::vector<uint64_t> in_place(3 * static_cast<size_t>(R), 0);
  std::copy(mine_counters.begin(), mine_counters.end(), in_place.begin() + 3 * comm.rank());
  comm.all_gather(in_place.data() + 3 * comm.rank(), in_place.data(), 3);
  expect(in_place == expected_counters, at + ": all_gather of 64-bit counters in place");
  const double third = 1.0 / 3.0 + w, from_prev_double_expected = 1.0 / 3.0 + member(prev);
  double from_prev_double = -1;
  comm.send_recv(&third, 1, next, &from_prev_double, 1, prev);
  expect(from_prev_double == from_prev_double_expected,
         fmt::format("{}: send_recv ring of a double: got {:.17g}, expected {:.17g}", at, from_prev_double,
                     from_prev_double_expected));
  comm.barrier();
}

// Bad arguments are refused at the front door, before any communication (so
// no rank waits for another), with the verb and the values named. Host
// pointers: no verb dereferences them.
inline void check_argument_errors(const Group& g) {
  Communicator& comm = *g.comm;
  const int R = comm.size(), me = comm.rank();
  const std::string at = fmt::format("{} [{}]: ", g.label, comm.name());
  std::vector<float> buf(4 * static_cast<size_t>(R) + 4, 0.0f);
  float* b = buf.data();
  const size_t mine = 2 * static_cast<size_t>(me);

  expect_rejects(at + "send to a rank past the end", [&] { comm.send(b, 1, R); },
                 fmt::format("send: peer {} is out of range for a communicator of {} rank(s)", R, R));
  expect_rejects(at + "recv from rank -1", [&] { comm.recv(b, 1, -1); }, "recv: peer -1 is out of range");
  expect_rejects(at + "send to itself", [&] { comm.send(b, 1, me); }, fmt::format("send: peer {} is this rank", me));
  expect_rejects(at + "recv from itself", [&] { comm.recv(b, 1, me); }, fmt::format("recv: peer {} is this rank", me));
  expect_rejects(at + "send of null", [&] { comm.send(nullptr, 3, (me + 1) % R); },
                 "send: data is null with a count of 3");
  expect_rejects(at + "broadcast from a root past the end", [&] { comm.broadcast(b, 4, R); },
                 fmt::format("broadcast: root {} is out of range", R));
  expect_rejects(at + "broadcast of null", [&] { comm.broadcast(nullptr, 4, 0); },
                 "broadcast: data is null with a count of 4");
  expect_rejects(at + "allreduce_sum of null", [&] { comm.allreduce_sum(nullptr, 3); },
                 "allreduce_sum: data is null with a count of 3");
  expect_rejects(at + "start_allreduce_sum of null", [&] { comm.start_allreduce_sum(nullptr, 3); },
                 "start_allreduce_sum: data is null with a count of 3");
  expect_rejects(at + "reduce_scatter_sum from null", [&] { comm.reduce_scatter_sum(nullptr, b, 2); },
                 fmt::format("reduce_scatter_sum: send is null with a count of {}", 2 * R));
  expect_rejects(at + "reduce_scatter_sum into a shifted chunk", [&] { comm.reduce_scatter_sum(b, b + mine + 1, 2); },
                 "reduce_scatter_sum: recv overlaps send but is not this rank's chunk");
  expect_rejects(at + "all_gather into null", [&] { comm.all_gather(b, nullptr, 2); },
                 fmt::format("all_gather: recv is null with a count of {}", 2 * R));
  expect_rejects(at + "all_gather from a shifted chunk", [&] { comm.all_gather(b + mine + 1, b, 2); },
                 "all_gather: send overlaps recv but is not this rank's chunk");
  expect_rejects(at + "send_recv with overlapping buffers", [&] { comm.send_recv(b, 3, 0, b + 2, 3, 0); },
                 "send_recv: send_data (3 floats) and recv_data (3 floats) overlap");
  expect_rejects(at + "send_recv to a rank past the end", [&] { comm.send_recv(b, 1, R, b + 2, 1, 0); },
                 fmt::format("send_recv: dest {} is out of range", R));
  expect_rejects(at + "send_recv with itself of two counts", [&] { comm.send_recv(b, 1, me, b + 2, 2, me); },
                 "send_recv: with itself, sends 1 floats but receives 2");
  expect_rejects(at + "split with a negative color", [&] { comm.split(-1, 0); }, "split: color -1 is negative");
  std::vector<uint64_t> u(2 * static_cast<size_t>(R) + 2, 0);
  expect_rejects(at + "all_gather of counters from a shifted chunk",
                 [&] { comm.all_gather(u.data() + 2 * me + 1, u.data(), 2); },
                 "all_gather: send overlaps recv but is not this rank's chunk");
  expect_rejects(at + "send_recv of doubles with overlapping buffers", [&] {
    std::vector<double> d(4, 0.0);
    comm.send_recv(d.data(), 3, 0, d.data() + 2, 2, 0);
  }, "send_recv: send_data (24 bytes) and recv_data (16 bytes) overlap");
  expect_rejects(at + "all_gather of counters whose bytes overflow a size",
                 [&] { comm.all_gather(u.data(), u.data(), SIZE_MAX / 4); }, "overflow a size");
  expect_rejects(at + "send_recv of doubles with itself of two counts", [&] {
    std::vector<double> d(4, 0.0);
    comm.send_recv(d.data(), 1, me, d.data() + 2, 2, me);
  }, "send_recv: with itself, sends 8 bytes but receives 16");
}

}  // namespace gpt2::testing
