// Checkpoint engine micro-benchmark: every figure is measured side by side with its
// baseline in the same process and the same run, repeated --reps times (median and
// all samples reported). Output: one JSON document (stdout, or --out FILE).
//
//   stall        Stager::Stage of the state (ring already allocated by a warm-up save)
//                vs memcpy of the same bytes into a pre-faulted buffer.
//   persist      WriteShard (hash each chunk as it is written, tmp, fsync, rename,
//                dir fsync) of a staged snapshot to --dir, as the persister does for an
//                unsealed slot, vs `dd if=/dev/zero of=<dir>/ddfile bs=8M count=N
//                conv=fsync`; also the same WriteShard with the hashes precomputed
//                (sealed slot). checksum_cost: per repetition, the difference of the two
//                writes (in alternating order); seal: hashing alone.
//                sync(2) runs before each timed write so none pays for earlier writeback.
//   restore_disk StepReader::Open + Load of every tensor (each chunk verified) into
//                pre-faulted buffers vs `dd if=<file> of=/dev/null bs=8M`, both with
//                the page cache of the file dropped first (cold) and not (warm).
//   restore_mem  Stager::Restore (copy + verify every chunk) vs memcpy.
//   memory       the ring's mapped bytes vs slots x state bytes.
//   push         PushSnapshot of the sealed state to a PeerServer on loopback (into a
//                warm replica ring) vs the same bytes over plain loopback TCP into a
//                pre-faulted buffer; push_cost: the process's CPU seconds and peak
//                growth of anonymous resident memory (RssAnon) of each.
//
// Usage: ckpt_bench [--tensors 64] [--tensor-mib 8] [--reps 5] [--persist-reps 3*reps]
//                   [--slots 3]
//                   [--dir DISK_DIR] [--shm /dev/shm] [--out FILE]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "ckpt/peer.h"
#include "ckpt/staging.h"

extern char** environ;

namespace ck = bulwark::ckpt;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckpt_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const bulwark::Status& st, const char* what) {
  if (!st.ok()) Die(std::string(what) + ": " + st.ToString());
}

template <typename T>
T Take(bulwark::Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string Arr(const std::vector<double>& v) {
  std::ostringstream o;
  o.precision(9);
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

// Anonymous buffer, every page written (pre-faulted).
struct Buf {
  std::unique_ptr<uint8_t[]> p;
  size_t n = 0;
  explicit Buf(size_t bytes) : p(new uint8_t[bytes]), n(bytes) { std::memset(p.get(), 1, n); }
};

// Runs argv, waits; returns wall seconds (fork/exec included: ~1 ms).
double RunTimed(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);  // dd's summary
  pid_t pid;
  double t0 = Now();
  if (posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) Die("spawn dd");
  int status = 0;
  waitpid(pid, &status, 0);
  double t = Now() - t0;
  posix_spawn_file_actions_destroy(&fa);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("dd failed: " + args[1] + " " + args[2]);
  return t;
}

// This process's user + system CPU seconds (every thread).
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// A "Vm...:" field of /proc/self/status in KiB (0 if absent).
double StatusKiB(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double v = 0;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, field, n) == 0) v = std::atof(line + n);
  }
  std::fclose(f);
  return v;
}

// Runs f while a thread samples RssAnon (anonymous resident memory: not the shared
// memory rings, whose pages exist before and after) every millisecond; returns the
// largest growth over its value before f, in bytes.
double PeakAnonGrowth(const std::function<void()>& f) {
  const double before = StatusKiB("RssAnon:");
  std::atomic<bool> done{false};
  double peak = before;
  std::thread sampler([&] {
    while (!done.load()) {
      peak = std::max(peak, StatusKiB("RssAnon:"));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  f();
  done = true;
  sampler.join();
  return (std::max(peak, StatusKiB("RssAnon:")) - before) * 1024;
}

struct Opts {
  int tensors = 64;
  double tensor_mib = 8;
  int reps = 5;
  int persist_reps = 0;  // 0: 3 x reps (persist figures are the noisiest: virtual disk)
  int slots = 3;
  std::string dir;
  std::string shm = "/dev/shm";
  std::string out;
};

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--tensors")
      o.tensors = std::stoi(next());
    else if (a == "--tensor-mib")
      o.tensor_mib = std::stod(next());
    else if (a == "--reps")
      o.reps = std::stoi(next());
    else if (a == "--persist-reps")
      o.persist_reps = std::stoi(next());
    else if (a == "--slots")
      o.slots = std::stoi(next());
    else if (a == "--dir")
      o.dir = next();
    else if (a == "--shm")
      o.shm = next();
    else if (a == "--out")
      o.out = next();
    else
      Die("unknown flag " + a + " (see the header of bench/ckpt/ckpt_bench.cc)");
  }
  if (o.dir.empty()) Die("--dir DISK_DIR is required (a directory on a real disk, not tmpfs)");
  ck::Env* env = ck::Env::Default();

  // Work directories (removed at the end).
  std::string shm_tmpl = o.shm + "/bw-ckpt-bench-XXXXXX";
  std::string disk_tmpl = o.dir + "/bw-ckpt-bench-XXXXXX";
  if (!mkdtemp(shm_tmpl.data())) Die("mkdtemp " + shm_tmpl);
  Check(env->MkdirAll(o.dir), "mkdir --dir");
  if (!mkdtemp(disk_tmpl.data())) Die("mkdtemp " + disk_tmpl);
  const std::string staging = shm_tmpl, root = disk_tmpl + "/ckpt", ddfile = disk_tmpl + "/ddfile";
  Check(env->MkdirAll(root), "mkdir root");

  // State: `tensors` float32 tensors of random data.
  const uint64_t tbytes = static_cast<uint64_t>(o.tensor_mib * (1 << 20)) / 4 * 4;
  const uint64_t total = tbytes * o.tensors;
  std::vector<std::unique_ptr<float[]>> src(o.tensors);
  std::vector<ck::TensorView> views(o.tensors);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < o.tensors; ++t) {
    src[t].reset(new float[tbytes / 4]);
    for (uint64_t i = 0; i < tbytes / 4; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      src[t][i] = static_cast<float>(static_cast<int64_t>(x >> 11)) * 1e-15f;
    }
    views[t].meta.name = "layer" + std::to_string(t) + ".weight";
    views[t].meta.dtype = ck::DType::kF32;
    views[t].meta.shape = {static_cast<int64_t>(tbytes / 4)};
    views[t].data = src[t].get();
  }
  // Pre-faulted destinations for the memcpy baselines and the restores.
  std::vector<Buf> dst;
  dst.reserve(o.tensors);
  for (int t = 0; t < o.tensors; ++t) dst.emplace_back(tbytes);
  auto memcpy_all = [&] {
    double t0 = Now();
    for (int t = 0; t < o.tensors; ++t) std::memcpy(dst[t].p.get(), src[t].get(), tbytes);
    return Now() - t0;
  };
  std::vector<std::pair<ck::TensorMeta, void*>> dsts;
  for (int t = 0; t < o.tensors; ++t) dsts.emplace_back(views[t].meta, dst[t].p.get());

  auto stager = Take(ck::Stager::Open(staging, 0, 1, o.slots), "Stager::Open");
  long step = 0;
  // Warm-up: allocates the ring (first save) and touches every slot once.
  double first_stage_s = 0;
  for (int i = 0; i < o.slots; ++i) {
    double t0 = Now();
    Take(stager->Stage(++step, views), "warm-up Stage");
    if (i == 0) first_stage_s = Now() - t0;
  }
  memcpy_all();

  // 1. Stall vs memcpy (order alternates per rep).
  std::vector<double> stall, stall_memcpy;
  for (int r = 0; r < o.reps; ++r) {
    auto stage = [&] {
      double t0 = Now();
      Take(stager->Stage(++step, views), "Stage");
      stall.push_back(Now() - t0);
    };
    if (r % 2) {
      stage();
      stall_memcpy.push_back(memcpy_all());
    } else {
      stall_memcpy.push_back(memcpy_all());
      stage();
    }
  }

  // 2. Persist (seal + write + fsync + rename + dir fsync) vs dd conv=fsync.
  auto reader = Take(ck::RingReader::Open(ck::RingPath(staging, 0)), "RingReader::Open");
  const uint64_t dd_count = (total + (8 << 20) - 1) / (8 << 20);
  std::vector<double> persist, persist_noseal, seal, checksum_cost, dd_write;
  long last_persisted = -1;
  const int persist_reps = o.persist_reps > 0 ? o.persist_reps : 3 * o.reps;
  for (int r = 0; r < persist_reps; ++r) {
    auto do_persist = [&] {
      auto sr = Take(stager->Stage(++step, views), "Stage for persist");
      // Free the previous step's blocks first, as dd's baseline frees its old file: on a
      // thin-provisioned virtual disk, writing never-used blocks is far slower than
      // rewriting freed ones, which would otherwise bias the comparison.
      if (last_persisted >= 0) Check(ck::RemoveTree(env, ck::StepDir(root, last_persisted)), "rm");
      double hash_s = 0;
      // Seal (hash every chunk) outside the timing, for the "hashes precomputed" run and
      // as a figure of its own.
      auto snap = Take(reader->Pin(sr.slot, sr.seq, &hash_s, true), "Pin+seal");
      seal.push_back(hash_s);
      // The persister's path for an unsealed slot: WriteShard hashes each chunk as it
      // writes it. Same bytes, same options; only whether hashes are computed differs.
      std::vector<ck::TensorView> unhashed = snap->tensors();
      for (ck::TensorView& v : unhashed) v.chunk_hashes = nullptr;
      ck::WriteOptions wo;
      auto timed_write = [&](const std::vector<ck::TensorView>& ts, std::vector<double>* out) {
        if (env->IsDir(ck::StepDir(root, step))) {
          Check(ck::RemoveTree(env, ck::StepDir(root, step)), "rm step");
          Check(env->SyncDir(root), "sync root");
        }
        ::sync();  // start every timed write with no other dirty data pending
        ck::ShardStats ss;
        double t0 = Now();
        Check(ck::WriteShard(env, root, step, 0, 1, ts, wo, &ss), "WriteShard");
        out->push_back(Now() - t0);
      };
      if (r % 2) {
        timed_write(unhashed, &persist);
        timed_write(snap->tensors(), &persist_noseal);
      } else {
        timed_write(snap->tensors(), &persist_noseal);
        timed_write(unhashed, &persist);
      }
      checksum_cost.push_back(persist.back() - persist_noseal.back());
      last_persisted = step;
    };
    auto do_dd = [&] {
      Check(env->RemoveFile(ddfile), "rm ddfile");
      ::sync();
      dd_write.push_back(RunTimed({"dd", "if=/dev/zero", "of=" + ddfile, "bs=8M",
                                   "count=" + std::to_string(dd_count), "conv=fsync"}));
    };
    if (r % 2) {
      do_persist();
      do_dd();
    } else {
      do_dd();
      do_persist();
    }
  }
  Check(ck::Commit(env, root, last_persisted, 1), "Commit");
  const std::string shard = ck::StepDir(root, last_persisted) + "/" + ck::ShardFileName(0, 1);
  const uint64_t shard_bytes = Take(env->FileSize(shard), "shard size");

  // 3. Restore from disk vs dd read, cold (page cache dropped) and warm.
  std::vector<double> rd_cold, rd_cold_dd, rd_warm, rd_warm_dd;
  auto load_all = [&] {
    double t0 = Now();
    auto rdr = Take(ck::StepReader::Open(env, root, last_persisted), "StepReader::Open");
    for (int t = 0; t < o.tensors; ++t) Check(rdr->Load(views[t].meta, dst[t].p.get()), "Load");
    return Now() - t0;
  };
  auto dd_read = [&] { return RunTimed({"dd", "if=" + ddfile, "of=/dev/null", "bs=8M"}); };
  for (int r = 0; r < o.reps; ++r) {
    auto a = [&] {
      env->DropCache(shard);
      rd_cold.push_back(load_all());
    };
    auto b = [&] {
      env->DropCache(ddfile);
      rd_cold_dd.push_back(dd_read());
    };
    if (r % 2) {
      a();
      b();
    } else {
      b();
      a();
    }
  }
  if (std::memcmp(dst[0].p.get(), src[0].get(), tbytes) != 0) Die("restored bytes differ");
  for (int r = 0; r < o.reps; ++r) {
    // Warm: the previous read left both files cached.
    if (r % 2) {
      rd_warm.push_back(load_all());
      rd_warm_dd.push_back(dd_read());
    } else {
      rd_warm_dd.push_back(dd_read());
      rd_warm.push_back(load_all());
    }
  }

  // 4. Restore from the memory tier vs memcpy.
  std::vector<double> rm, rm_memcpy;
  for (int r = 0; r < o.reps; ++r) {
    auto a = [&] {
      double t0 = Now();
      Check(stager->Restore(last_persisted, dsts), "Stager::Restore");
      rm.push_back(Now() - t0);
    };
    if (r % 2) {
      a();
      rm_memcpy.push_back(memcpy_all());
    } else {
      rm_memcpy.push_back(memcpy_all());
      a();
    }
  }
  // Hash throughput alone (xxh3 over the state, 4 MiB chunks).
  std::vector<double> hash_only;
  for (int r = 0; r < o.reps; ++r) {
    double t0 = Now();
    uint64_t acc = 0;
    for (int t = 0; t < o.tensors; ++t)
      for (uint64_t off = 0; off < tbytes; off += ck::kDefaultChunkSize)
        acc ^= ck::ChunkHash(reinterpret_cast<const uint8_t*>(src[t].get()) + off,
                             std::min<uint64_t>(ck::kDefaultChunkSize, tbytes - off));
    hash_only.push_back(Now() - t0);
    if (acc == 42) std::fprintf(stderr, " ");
  }
  // Peer push: PushSnapshot of the sealed state to a PeerServer on loopback (received
  // straight into the replica ring, every chunk verified, then sealed) vs the same
  // bytes over a plain loopback TCP connection into a pre-faulted buffer. Wall and
  // process CPU seconds (the sampler thread's included, alike for both), and the peak
  // growth of anonymous resident memory during each. Warm: `slots` pushes fill the
  // replica ring first, as in steady-state training.
  std::vector<double> push, push_raw, push_cpu, push_raw_cpu, push_rss, push_raw_rss;
  {
    auto r = Take(stager->Stage(++step, views), "Stage for push");
    auto push_reader = Take(ck::RingReader::Open(ck::RingPath(staging, 0)), "RingReader::Open");
    auto snap = Take(push_reader->Pin(r.slot, r.seq), "Pin for push");
    ck::PeerServerOptions po;
    po.replica_dir = staging + "/replicas";
    po.slots = o.slots;
    po.max_snapshot_bytes = total + (1 << 20);
    auto server = Take(ck::PeerServer::Start(po), "PeerServer::Start");
    for (int i = 0; i < o.slots; ++i) {
      Check(ck::PushSnapshot("127.0.0.1", server->port(), *snap, 60), "warm-up push");
    }
    int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(lfd, 4) != 0 || ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
      Die("raw listener");
    }
    Buf sink(total);
    auto raw = [&] {
      std::thread rx([&] {
        int c = ::accept(lfd, nullptr, nullptr);
        if (c < 0) Die("accept");
        for (uint64_t got = 0; got < total;) {
          ssize_t n = ::read(c, sink.p.get() + got, total - got);
          if (n <= 0) Die("raw read");
          got += static_cast<uint64_t>(n);
        }
        ::close(c);
      });
      int c = ::socket(AF_INET, SOCK_STREAM, 0);
      if (c < 0 || ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect");
      for (int t = 0; t < o.tensors; ++t) {
        const uint8_t* p = reinterpret_cast<const uint8_t*>(src[t].get());
        for (uint64_t off = 0; off < tbytes;) {
          ssize_t n = ::write(c, p + off, tbytes - off);
          if (n <= 0) Die("raw write");
          off += static_cast<uint64_t>(n);
        }
      }
      ::close(c);
      rx.join();
    };
    auto timed = [&](const std::function<void()>& f, std::vector<double>* wall,
                     std::vector<double>* cpu, std::vector<double>* rss) {
      const double cpu0 = CpuSeconds(), t0 = Now();
      double wall_s = 0;
      rss->push_back(PeakAnonGrowth([&] {
        f();
        wall_s = Now() - t0;
      }));
      wall->push_back(wall_s);
      cpu->push_back(CpuSeconds() - cpu0);
    };
    auto pushed = [&] { Check(ck::PushSnapshot("127.0.0.1", server->port(), *snap, 60), "push"); };
    for (int rep = 0; rep < o.reps; ++rep) {
      if (rep % 2 == 0) {
        timed(pushed, &push, &push_cpu, &push_rss);
        timed(raw, &push_raw, &push_raw_cpu, &push_raw_rss);
      } else {
        timed(raw, &push_raw, &push_raw_cpu, &push_raw_rss);
        timed(pushed, &push, &push_cpu, &push_rss);
      }
    }
    ::close(lfd);
  }
  const uint64_t mapped = stager->mapped_bytes();
  reader.reset();
  stager.reset();

  // Clean up.
  Check(ck::RemoveTree(env, root), "rm root");
  Check(env->RemoveFile(ddfile), "rm ddfile");
  Check(env->RemoveDir(disk_tmpl), "rm disk dir");
  Check(ck::RemoveTree(env, staging), "rm staging");

  const double mib = static_cast<double>(total) / (1 << 20);
  auto bw = [&](double s) { return s > 0 ? mib / s : 0; };
  std::ostringstream j;
  j.precision(6);
  j << "{\n";
  j << "  \"config\": {\"tensors\": " << o.tensors << ", \"tensor_bytes\": " << tbytes
    << ", \"state_bytes\": " << total << ", \"reps\": " << o.reps << ", \"slots\": " << o.slots
    << ", \"chunk_bytes\": " << ck::kDefaultChunkSize << ", \"disk_dir\": \"" << o.dir
    << "\", \"shm_dir\": \"" << o.shm << "\"},\n";
  auto fig = [&](const char* name, const std::vector<double>& a, const std::vector<double>& b,
                 const char* aname, const char* bname, bool last = false) {
    j << "  \"" << name << "\": {\"" << aname << "_s\": " << Median(a) << ", \"" << bname
      << "_s\": " << Median(b) << ", \"" << aname << "_mib_s\": " << bw(Median(a)) << ", \""
      << bname << "_mib_s\": " << bw(Median(b)) << ", \"" << aname << "_samples\": " << Arr(a)
      << ", \"" << bname << "_samples\": " << Arr(b) << "}" << (last ? "\n" : ",\n");
  };
  fig("stall", stall, stall_memcpy, "stage", "memcpy");
  fig("persist", persist, dd_write, "persist", "dd");
  fig("persist_noseal", persist_noseal, dd_write, "persist", "dd");
  fig("seal", seal, persist, "seal", "persist");
  fig("checksum_cost", checksum_cost, persist, "cost", "persist");
  fig("restore_disk_cold", rd_cold, rd_cold_dd, "load", "dd");
  fig("restore_disk_warm", rd_warm, rd_warm_dd, "load", "dd");
  fig("restore_mem", rm, rm_memcpy, "restore", "memcpy");
  fig("hash", hash_only, stall_memcpy, "xxh3", "memcpy");
  fig("push", push, push_raw, "push", "tcp");
  j << "  \"push_cost\": {\"push_cpu_s\": " << Median(push_cpu)
    << ", \"tcp_cpu_s\": " << Median(push_raw_cpu)
    << ", \"push_rss_growth_bytes\": " << Median(push_rss)
    << ", \"tcp_rss_growth_bytes\": " << Median(push_raw_rss)
    << ", \"push_cpu_samples\": " << Arr(push_cpu) << ", \"push_rss_samples\": " << Arr(push_rss)
    << "},\n";
  j << "  \"first_stage_s\": " << first_stage_s << ",\n";
  j << "  \"shard_bytes\": " << shard_bytes << ",\n";
  j << "  \"memory\": {\"ring_mapped_bytes\": " << mapped
    << ", \"slots_x_state_bytes\": " << static_cast<uint64_t>(o.slots) * total << "}\n";
  j << "}\n";
  if (o.out.empty()) {
    std::fputs(j.str().c_str(), stdout);
  } else {
    FILE* f = std::fopen(o.out.c_str(), "w");
    if (!f) Die("open " + o.out);
    std::fputs(j.str().c_str(), f);
    std::fclose(f);
  }
  return 0;
}
