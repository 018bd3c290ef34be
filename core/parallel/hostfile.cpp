#include "parallel/hostfile.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cctype>
#include <set>
#include <sstream>
#include <stdexcept>

#include "util/files.h"
#include "util/text.h"

namespace gpt2 {

namespace {

// The IPv4/IPv6 addresses `host` resolves to, as text; empty if it does not.
std::set<std::string> addresses(const std::string& host) {
  std::set<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* p = res; p; p = p->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* a = p->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr)
                                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr);
    if (inet_ntop(p->ai_family, a, buf, sizeof buf)) out.insert(buf);
  }
  freeaddrinfo(res);
  return out;
}

bool is_loopback(const std::set<std::string>& addrs) {
  for (const std::string& a : addrs) {
    if (a.rfind("127.", 0) == 0 || a == "::1") return true;
  }
  return false;
}

std::string short_name(const std::string& h) { return h.substr(0, h.find('.')); }

// Whether hostfile entry `entry` names the machine this process runs on.
bool names_this_machine(const std::string& entry, const std::string& me, const std::set<std::string>& my_addrs) {
  if (entry == me || short_name(entry) == short_name(me)) return true;
  const std::set<std::string> a = addresses(entry);
  if (is_loopback(a)) return true;
  for (const std::string& x : a) {
    if (my_addrs.count(x)) return true;
  }
  return false;
}

}  // namespace

std::vector<HostEntry> read_hostfile(const std::string& path) {
  std::istringstream f(read_input_file(path, kMaxTextInputBytes, "hostfile", "an MPICH hostfile"));
  std::vector<HostEntry> hosts;
  int n = 0;
  for (std::string raw; std::getline(f, raw);) {
    ++n;
    // One line for every refusal: the file, the line, a short excerpt of it
    // (util/text.h: a line can be megabytes, or binary), and what a line
    // should be.
    const auto refuse = [&](const std::string& why) {
      return std::invalid_argument(fmt::format("hostfile {}:{}: '{}' is not an MPICH hostfile line ({}); expected "
                                               "host[:count], e.g. 'node1' or 'node1:4', '#' for a comment",
                                               path, n, excerpt(raw), why));
    };
    std::string line = raw.substr(0, raw.find('#'));
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, e - b + 1);
    HostEntry h;
    h.line = n;
    const size_t colon = line.find(':');
    h.host = line.substr(0, colon);
    if (h.host.empty()) throw refuse("no host name");
    // A host name or IPv4 address: letters, digits, '.', '-', '_'.
    for (const char c : h.host) {
      const auto u = static_cast<unsigned char>(c);
      if (!(std::isalnum(u) || c == '.' || c == '-' || c == '_')) {
        throw refuse(u == ' ' || u == '\t' ? "a space in the host name"
                                          : fmt::format("'{}' in the host name", excerpt(std::string(1, c))));
      }
    }
    if (colon != std::string::npos) {
      const std::string s = line.substr(colon + 1);
      try {
        size_t used = 0;
        if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) throw std::invalid_argument(s);
        h.slots = std::stoi(s, &used);
        if (used != s.size() || h.slots <= 0) throw std::invalid_argument(s);
      } catch (const std::exception&) {
        throw refuse(fmt::format("the count after ':' must be a positive integer, got '{}'", excerpt(s, 20)));
      }
    }
    if (addresses(h.host).empty()) {
      throw std::invalid_argument(fmt::format("hostfile {}:{}: cannot resolve host '{}'", path, n, excerpt(h.host)));
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) throw std::invalid_argument(fmt::format("hostfile '{}': lists no hosts", path));
  return hosts;
}

void check_placement(const std::vector<HostEntry>& hosts, const std::string& path, Communicator& comm) {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  const std::string me = buf;
  const std::set<std::string> my_addrs = addresses(me);
  // counts[i]: ranks on the machine of entry i (the first entry naming it);
  // counts.back(): ranks on no listed machine.
  // Host values, so the scalar collective: the float allreduce works on the
  // backend's memory (a GPU's in the MPI+CUDA stage).
  std::vector<float> counts(hosts.size() + 1, 0.0f);
  size_t mine = hosts.size();
  for (size_t i = 0; i < hosts.size() && mine == hosts.size(); ++i) {
    if (names_this_machine(hosts[i].host, me, my_addrs)) mine = i;
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    counts[i] = static_cast<float>(comm.allreduce_sum(i == mine ? 1.0 : 0.0));
  }
  if (counts.back() > 0) {
    throw std::invalid_argument(fmt::format("hostfile '{}': {} rank(s) run on machines it does not list (e.g. '{}')",
                                            path, static_cast<int>(counts.back()), me));
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (counts[i] > static_cast<float>(hosts[i].slots)) {
      throw std::invalid_argument(fmt::format("hostfile {}:{}: host '{}' has {} slot(s), but {} ranks run there", path,
                                              hosts[i].line, hosts[i].host, hosts[i].slots, static_cast<int>(counts[i])));
    }
  }
}

}  // namespace gpt2
