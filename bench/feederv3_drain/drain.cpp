// Drain Chakra's FeederV3 (the feeder ASTRA-sim 2.0 uses) the way ASTRA-sim's Workload does, to
// compare its nodes/s and memory with chakra_tools.feed.ETFeeder on the same files
// (bench/bench_feederv3.py). Not part of chakra-tools: built only by build.sh, against the
// Chakra feeder sources of an ASTRA-sim checkout given on its command line.
//
//   feederv3_drain [--repeat N] FILE...   -> one JSON line: nodes, files, wall_s, peak_rss_kb, base_rss_kb
//   feederv3_drain --hold FILE...         -> the same, every file's feeder constructed first and
//                                            held (as ASTRA-sim holds one per rank), then each
//                                            drained; adds open_s and open_rss_kb (after opening)
//
// Per file: construct an ETFeeder (it indexes the file and checks the graph), then, as
// Workload::issue_dep_free_nodes and Workload::call do with every resource free: copy the
// dependency-free set into an ordered set, look each node up and read the fields Workload reads
// for its kind, take it; finish the in-flight nodes one at a time (lowest id first), re-reading
// the dependency-free set after each finish.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "src/feeder_v3/et_feeder.h"

using Chakra::FeederV3::ETFeeder;
using Chakra::FeederV3::ETFeederNode;

// The process's peak resident set (VmHWM, kB): unlike getrusage's ru_maxrss it starts afresh at
// exec, so a small driver run is not charged its parent's memory.
static long peak_rss_kb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  }
  if (f) std::fclose(f);
  return kb;
}

// The attribute reads of Workload::issue_* for the node's kind; summed so none is optimised out.
static uint64_t touch(const ETFeederNode& node) {
  uint64_t sum = node.type() + node.name().size() + node.runtime() + node.is_cpu_op<bool>(false);
  switch (node.type()) {
    case ChakraProtoMsg::COMP_NODE:
      sum += node.num_ops<uint64_t>(0) + node.tensor_size<uint64_t>(0);
      break;
    case ChakraProtoMsg::COMM_COLL_NODE:
      sum += node.comm_type<uint64_t>(0) + node.comm_size<uint64_t>(0);
      break;
    case ChakraProtoMsg::COMM_SEND_NODE:
    case ChakraProtoMsg::COMM_RECV_NODE:
      sum += node.comm_size<uint64_t>(0) + node.comm_src<uint32_t>(0) + node.comm_dst<uint32_t>(0) +
             node.comm_tag<uint32_t>(0);
      break;
    case ChakraProtoMsg::MEM_LOAD_NODE:
    case ChakraProtoMsg::MEM_STORE_NODE:
      sum += node.tensor_size<uint64_t>(0);
      break;
    default:
      break;
  }
  return sum;
}

static uint64_t drain_feeder(ETFeeder& feeder, uint64_t* checksum) {
  auto& resolver = feeder.getDependancyResolver();
  std::set<uint64_t> in_flight;
  uint64_t finished = 0;
  while (true) {
    std::set<uint64_t> free_ids(resolver.get_dependancy_free_nodes().begin(),
                                resolver.get_dependancy_free_nodes().end());
    for (uint64_t id : free_ids) {
      *checksum += touch(*feeder.lookupNode(id));
      resolver.take_node(id);
      in_flight.insert(id);
    }
    if (in_flight.empty()) break;
    uint64_t id = *in_flight.begin();
    in_flight.erase(in_flight.begin());
    resolver.finish_node(id);
    ++finished;
  }
  return finished;
}

static uint64_t drain(const std::string& path, uint64_t* checksum) {
  ETFeeder feeder(path);
  return drain_feeder(feeder, checksum);
}

int main(int argc, char** argv) {
  int repeat = 1;
  bool hold = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (a == "--hold") {
      hold = true;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty() || repeat < 1) {
    std::fprintf(stderr, "usage: feederv3_drain [--repeat N] FILE...\n");
    return 2;
  }
  long base = peak_rss_kb();
  uint64_t nodes = 0, checksum = 0, opened = 0;
  auto t0 = std::chrono::steady_clock::now();
  if (hold) {
    std::vector<std::unique_ptr<ETFeeder>> feeders;
    for (const auto& f : files) feeders.push_back(std::make_unique<ETFeeder>(f));
    double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    long open_rss = peak_rss_kb();
    for (auto& f : feeders) {
      nodes += drain_feeder(*f, &checksum);
      ++opened;
    }
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"nodes\": %llu, \"files\": %llu, \"wall_s\": %.6f, \"open_s\": %.6f, \"peak_rss_kb\": %ld, "
                "\"open_rss_kb\": %ld, \"base_rss_kb\": %ld, \"checksum\": %llu}\n",
                (unsigned long long)nodes, (unsigned long long)opened, wall, open_s, peak_rss_kb(), open_rss,
                base, (unsigned long long)checksum);
    return 0;
  }
  for (int r = 0; r < repeat; ++r) {
    for (const auto& f : files) {
      nodes += drain(f, &checksum);
      ++opened;
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"nodes\": %llu, \"files\": %llu, \"wall_s\": %.6f, \"peak_rss_kb\": %ld, "
              "\"base_rss_kb\": %ld, \"checksum\": %llu}\n",
              (unsigned long long)nodes, (unsigned long long)opened, wall, peak_rss_kb(), base,
              (unsigned long long)checksum);
  return 0;
}
