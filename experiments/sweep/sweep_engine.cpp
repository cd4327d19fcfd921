// The sweep engine (see sweep_engine.hpp).
#include "experiments/sweep/sweep_engine.hpp"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/names.hpp"
#include "experiments/common/progress.hpp"
#include "experiments/common/warning.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/varlen.hpp"
#include "experiments/methods/memory_estimate.hpp"
#include "experiments/sweep/mpi_env.hpp"
#include "sim/golden/golden.hpp"
#include "sim/pipeline/counters.hpp"

namespace attnsim {

namespace fs = std::filesystem;

GridAxis parse_grid_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= text.size()) {
    throw UsageError("--grid '" + abbreviate(text) + "' is not KEY=V1,V2,...");
  }
  GridAxis a;
  a.key = text.substr(0, eq);
  std::size_t pos = eq + 1;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const std::string v =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (v.empty()) throw UsageError("--grid '" + abbreviate(text) + "' has an empty value");
    if (std::find(a.values.begin(), a.values.end(), v) == a.values.end()) a.values.push_back(v);
  }
  return a;
}

std::vector<MethodConfig> expand_grid(const std::vector<MethodConfig>& methods,
                                      const std::vector<GridAxis>& grid) {
  for (std::size_t i = 0; i < grid.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (grid[i].key == grid[j].key)
        throw UsageError("--grid key '" + abbreviate(grid[i].key) + "' given twice");
    }
    bool used = false;
    for (const auto& m : methods) {
      for (const auto& p : m.spec->params) used = used || p.key == grid[i].key;
    }
    if (!used) {
      std::set<std::string> keys;
      for (const auto& m : methods) {
        for (const auto& p : m.spec->params) keys.insert(p.key);
      }
      throw UsageError(
          "--grid key '" + abbreviate(grid[i].key) +
          "' is an option of none of the methods (their options: " +
          (keys.empty() ? std::string("none") : join_choices({keys.begin(), keys.end()})) + ")");
    }
  }
  // The number of methods before expanding: a few axes of a few dozen values each make millions
  // of parsed configurations (about 8 KiB each with their canonical strings), refused by the
  // memory limit instead of filling it.
  double count = 0;
  for (const auto& m : methods) {
    double n = 1;
    for (const auto& a : grid) {
      for (const auto& p : m.spec->params) {
        if (p.key == a.key) n *= double(a.values.size());
      }
    }
    count += n;
  }
  char what[96];
  if (grid.empty())
    std::snprintf(what, sizeof what, "parsing the sweep's %.4g method%s", count,
                  count == 1 ? "" : "s");
  else
    std::snprintf(what, sizeof what, "--grid expanding to %.4g method%s", count,
                  count == 1 ? "" : "s");
  check_memory(8192.0 * count, what);
  std::vector<MethodConfig> out;
  std::set<std::string> seen;
  for (const auto& m : methods) {
    std::vector<const GridAxis*> axes;
    for (const auto& a : grid) {
      for (const auto& p : m.spec->params) {
        if (p.key == a.key) axes.push_back(&a);
      }
    }
    // Odometer over the axes, last axis fastest.
    std::vector<std::size_t> idx(axes.size(), 0);
    while (true) {
      std::string text = m.spec->name;
      bool first = true;
      for (const auto& p : m.spec->params) {
        std::string v = m.values.at(p.key);
        for (std::size_t a = 0; a < axes.size(); ++a) {
          if (axes[a]->key == p.key) v = axes[a]->values[idx[a]];
        }
        if (v.empty()) continue;  // a stage override that is not set
        text += (first ? ":" : ",") + p.key + "=" + v;
        first = false;
      }
      MethodConfig c = parse_method(text);  // validates grid values with the method's own message
      if (seen.insert(c.canonical()).second) {
        out.push_back(c);
      } else if (!grid.empty()) {
        warn("--grid makes " + abbreviate(c.short_name()) +
             " more than once (the methods differ only in the grid's keys); it runs once");
      }
      std::size_t a = axes.size();
      while (a > 0 && ++idx[a - 1] == axes[a - 1]->values.size()) idx[--a] = 0;
      if (a == 0) break;
    }
  }
  return out;
}

std::string SweepPlan::fingerprint() const {
  // FNV-1a 64 over every point's method and input.
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto eat = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;
  };
  eat("attnsim-sweep-1");
  for (const auto& m : methods) eat(m.canonical());
  for (const auto& c : cases) {
    eat(c.name);
    eat(std::to_string(c.seed));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

SweepPlan make_plan(const std::vector<std::string>& method_lists,
                    const std::vector<std::string>& grid, const std::vector<std::string>& dumps,
                    const std::vector<std::string>& synthetic, int seeds) {
  if (method_lists.empty()) throw UsageError("sweep needs --methods");
  if (dumps.empty() && synthetic.empty()) throw UsageError("sweep needs --input or --synthetic");
  if (seeds < 1) throw UsageError("--seeds must be >= 1");
  SweepPlan plan;
  std::vector<MethodConfig> base;
  // A method given twice (the same canonical string, however spelled) runs once, and says so;
  // inputs given twice likewise (below): a results file never holds two rows of one point.
  std::map<std::string, std::string> method_text;  // canonical -> as first given
  for (const auto& list : method_lists) {
    for (const auto& m : split_method_list(list)) {
      MethodConfig c = parse_method(m);
      const auto [it, fresh] = method_text.emplace(c.canonical(), m);
      if (!fresh) {
        warn("--methods gives " + abbreviate(c.short_name()) + " twice ('" +
             abbreviate(it->second) + "' and '" + abbreviate(m) + "'); it runs once");
        continue;
      }
      base.push_back(std::move(c));
    }
  }
  // `--methods ""` (or only commas): a sweep of no points would write an empty results file.
  if (base.empty()) throw UsageError("--methods names no method");
  std::vector<GridAxis> axes;
  for (const auto& g : grid) axes.push_back(parse_grid_axis(g));
  plan.methods = expand_grid(base, axes);
  // Inputs: every group of every dump (or the one FILE:GROUP names); every synthetic spec at seeds
  // base..base+N-1. The same file and group twice (also through another spelling of the path)
  // runs once.
  std::set<std::pair<std::string, std::string>> seen_dumps;
  for (const auto& text : dumps) {
    const DumpSelection sel = select_dump_input(text);
    std::error_code ec;
    const std::string id = fs::weakly_canonical(sel.file, ec).string();
    for (const auto& prefix : sel.prefixes) {
      const std::string name = dump_input_name(sel.file, prefix);
      if (!seen_dumps.insert({ec ? sel.file : id, prefix}).second) {
        warn("--input gives " + abbreviate(name) + " more than once; it runs once");
        continue;
      }
      if (const auto shape = dump_shape(sel.file, prefix))
        check_causal_rows(*shape, dump_causal(sel.file, prefix), name);
      // A varlen dump: a case per sequence (named FILE#seqN, as `attnsim run` names its rows).
      const std::vector<LaunchSeq> seqs = dump_varlen(sel.file, prefix);
      if (seqs.empty()) {
        plan.cases.push_back({name, "dump", sel.file, prefix, "", 0});
      } else {
        for (int q = 0; q < int(seqs.size()); ++q)
          plan.cases.push_back({name + "#seq" + std::to_string(q), "dump", sel.file, prefix, "", 0, q});
      }
    }
  }
  std::vector<std::string> specs;
  std::vector<std::uint64_t> first_seeds;
  for (const auto& spec : synthetic) {
    const std::uint64_t seed = synthetic_seed(spec);  // validates
    if (std::find(specs.begin(), specs.end(), spec) != specs.end()) {
      warn("--synthetic gives " + abbreviate(spec) + " more than once; it runs once");
      continue;
    }
    check_causal_rows(synthetic_shape(spec), synthetic_causal(spec), "synthetic:" + spec);
    specs.push_back(spec);
    first_seeds.push_back(seed);
  }
  check_plan_memory(plan, specs, seeds);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    for (int s = 0; s < seeds; ++s)
      plan.cases.push_back({"synthetic:" + specs[i], "synthetic", "", "", specs[i],
                            first_seeds[i] + std::uint64_t(s)});
  }
  return plan;
}

void check_plan_memory(const SweepPlan& plan, const std::vector<std::string>& synthetic,
                       int seeds) {
  // Before the synthetic cases exist (2^31 seeds would not fit): every case's worst point,
  // evaluated `threads` at a time (run_plan: a chunk of `threads` cases with their golden
  // references, then their points in parallel, each simulator on one thread), plus the rows every
  // point leaves until the results file is written (its strings, its per-head metrics with their
  // ULP histograms, and their text form in the gather: about 2 KiB per head).
  const int threads = std::max(1, omp_get_max_threads());
  struct Case {
    double count, peak, heads, name;
  };
  std::vector<Case> cases;
  for (const auto& c : plan.cases) {
    const auto shape = dump_shape(c.file, c.prefix);
    double peak = dump_read_bytes(c.file, c.prefix), heads = 1;
    if (shape) {
      heads = double(shape->batch) * shape->heads_q;
      for (const auto& m : plan.methods)
        peak = std::max(peak, point_memory_bytes(m, *shape, 1) - fixed_memory_bytes(m));
    }
    cases.push_back({1, peak, heads, double(c.name.size())});
  }
  for (const auto& spec : synthetic) {
    const AttentionShape shape = synthetic_shape(spec);
    double peak = 0;
    for (const auto& m : plan.methods)
      peak = std::max(peak, point_memory_bytes(m, shape, 1) - fixed_memory_bytes(m));
    cases.push_back({double(seeds), peak, double(shape.batch) * shape.heads_q,
                     10.0 + double(spec.size())});
  }
  double ncases = 0, worst = 0, rows = 0, method_chars = 0;
  for (const auto& m : plan.methods) method_chars += 3.0 * double(m.canonical().size());
  const double nmethods = double(plan.methods.size());
  for (const Case& c : cases) {
    ncases += c.count;
    worst = std::max(worst, c.peak);
    rows += c.count * (sizeof(SweepCase) + 2.0 * c.name +
                       nmethods * ((1.0 + c.heads) * 2048.0 + 3.0 * c.name) + method_chars);
  }
  const double in_flight = std::min(double(threads), ncases * nmethods);
  const double need = in_flight * worst + rows + fixed_memory_bytes(plan.methods);
  char what[160];
  std::snprintf(
      what, sizeof what, "sweep of %.0f point%s (%.0f method%s x %.0f input%s, %d thread%s)",
      ncases * nmethods, ncases * nmethods == 1 ? "" : "s", nmethods, nmethods == 1 ? "" : "s",
      ncases, ncases == 1 ? "" : "s", threads, threads == 1 ? "" : "s");
  check_memory(need, what);
}

// ---- checkpoints ------------------------------------------------------------------------------
//
// CHECKPOINT_BASE.ckpt.<rank>: a header line "attnsim-checkpoint<TAB>1<TAB>fingerprint<TAB>points"
// and one serialize_row() line per completed point, appended and flushed as each point finishes.
// A line cut by a crash is ignored (and trimmed before appending). Any rank count can resume any
// set of checkpoint files: every rank reads all of them.

namespace {

// With --counters the header ends in "\tcounters": a checkpoint without counters does not resume a
// sweep with them, nor the other way round.
std::string header_line(const SweepPlan& plan, bool counters) {
  return "attnsim-checkpoint\t1\t" + plan.fingerprint() + "\t" + std::to_string(plan.points()) +
         (counters ? "\tcounters" : "");
}

struct Checkpoint {
  std::FILE* f = nullptr;
  int cleanup_slot = -1;  // registered with the signal handlers while it holds no point
  std::chrono::steady_clock::time_point last_sync = std::chrono::steady_clock::now();
  ~Checkpoint() {
    if (f) std::fclose(f);
    unregister_cleanup_path(cleanup_slot);
  }
  void append(const std::string& line) {
    if (!f) return;
    std::fputs(line.c_str(), f);
    std::fputc('\n', f);
    // Flushed to the OS after every point (survives a killed process); fsync'd at most once a
    // second (survives a crashed node, minus the last second).
    if (std::fflush(f) != 0) throw UsageError("cannot append to the sweep checkpoint");
    if (cleanup_slot >= 0 && line.rfind("attnsim-checkpoint", 0) != 0) {
      unregister_cleanup_path(cleanup_slot);  // a point is in: keep it for --resume
      cleanup_slot = -1;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sync > std::chrono::seconds(1)) {
      ::fsync(::fileno(f));
      last_sync = now;
    }
  }
};

}  // namespace

std::vector<std::string> checkpoint_files(const std::string& base) {
  std::vector<std::string> out;
  const fs::path p(base);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string stem = p.filename().string() + ".ckpt.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // Regular files only: a directory (or a FIFO) of that name is not ours to read or remove.
    std::error_code kind;
    if (name.rfind(stem, 0) == 0 && name.find(".tmp.") == std::string::npos &&
        it->is_regular_file(kind))
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void remove_checkpoints(const std::string& base) {
  for (const auto& f : checkpoint_files(base)) std::remove(f.c_str());
}

SweepOutcome run_plan(const SweepPlan& plan, const SweepRunOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = mpi_rank(), size = mpi_size();
  const std::int64_t npoints = plan.points(), nmethods = std::int64_t(plan.methods.size());
  SweepOutcome outcome;
  std::vector<PointRow> rows;  // this rank's rows
  std::set<std::int64_t> done;

  Checkpoint ckpt;
  bool fresh_checkpoint = false;
  std::string own_checkpoint;
  if (!opt.checkpoint_base.empty()) {
    const std::string header = header_line(plan, opt.counters);
    if (opt.resume) {
      for (const auto& file : checkpoint_files(opt.checkpoint_base)) {
        std::ifstream in(file);
        std::string line;
        if (!std::getline(in, line)) continue;
        if (line != header) {
          throw UsageError("checkpoint '" + file +
                           "' belongs to a different sweep (other methods, inputs, seeds or "
                           "--counters); remove it or run without --resume");
        }
        while (std::getline(in, line)) {
          if (in.eof()) break;  // the last line had no '\n': cut mid-write
          PointRow r;
          if (!parse_row(line, &r) || r.point < 0 || r.point >= npoints) continue;
          if (!done.insert(r.point).second) continue;
          if (r.point % size == rank) rows.push_back(std::move(r));
        }
      }
      outcome.restored = std::int64_t(rows.size());
    } else if (rank == 0) {
      remove_checkpoints(opt.checkpoint_base);
    }
    mpi_barrier();  // nobody writes a checkpoint before every rank has read them all
    const std::string own = opt.checkpoint_base + ".ckpt." + std::to_string(rank);
    std::error_code ec;
    if (fs::exists(fs::symlink_status(own, ec)) && !fs::is_regular_file(own, ec)) {
      throw UsageError("cannot write the sweep checkpoint '" + own +
                       "': it exists and is not a regular file");
    }
    if (opt.resume && fs::exists(own)) {
      // Trim a record cut by a crash, then append.
      std::ifstream in(own, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto nl = text.rfind('\n');
      fs::resize_file(own, nl == std::string::npos ? 0 : nl + 1);
    }
    fresh_checkpoint = !fs::exists(own) || fs::file_size(own) == 0;
    own_checkpoint = own;
    {
      // Until it holds a point, the checkpoint goes with the run (an error or SIGINT/SIGTERM
      // leaves nothing to resume, so nothing behind). Created and registered with those signals
      // held back, so that none arrives in between.
      const CleanupSignalsHeld held;
      ckpt.f = std::fopen(own.c_str(), fresh_checkpoint ? "w" : "a");
      if (!ckpt.f) throw UsageError("cannot write the sweep checkpoint '" + own + "'");
      if (fresh_checkpoint) ckpt.cleanup_slot = register_cleanup_path(own);
    }
    if (fresh_checkpoint) ckpt.append(header);
  }

  // This rank's remaining points, in point order (so case by case).
  std::vector<std::int64_t> todo;
  for (std::int64_t i = rank; i < npoints; i += size) {
    if (!done.count(i)) todo.push_back(i);
  }
  std::int64_t local_total = 0;
  for (std::int64_t i = rank; i < npoints; i += size) ++local_total;

  const int threads = std::max(1, omp_get_max_threads());
  omp_set_max_active_levels(1);  // a parallel loop over points runs each simulator on one thread
  std::atomic<std::int64_t> started{0};
  std::atomic<bool> stopped{false}, failed{false};
  std::string error;
  int error_code = 0;
  std::int64_t finished = std::int64_t(rows.size());
  // The progress line (rank 0, a terminal): points done, what the current chunk of cases is
  // doing, and the work the simulators report (sim/progress.hpp: golden attention's row blocks).
  std::atomic<std::int64_t> shown{finished};
  std::atomic<int> phase{0};  // 0 reading inputs, 1 golden references, 2 methods
  std::atomic<int> chunk_cases_shown{0};
  WorkSince work;
  ProgressLine line(opt.progress && rank == 0, "sweep", [&] {
    const std::int64_t done = shown.load();
    const int width = 30;
    const int fill = local_total ? int(double(width) * double(done) / double(local_total)) : width;
    std::string st = "[" + std::string(std::size_t(fill), '#') +
                     std::string(std::size_t(width - fill), '.') + "] " + std::to_string(done) +
                     "/" + std::to_string(local_total) + " points";
    if (size > 1) st += " (rank 0 of " + std::to_string(size) + ")";
    const int ph = phase.load();
    const std::string w = work.text();
    if (done < local_total) {
      const int nc = chunk_cases_shown.load();
      st += std::string("  ") +
            (ph == 0   ? "reading"
             : ph == 1 ? "golden"
                       : "methods") +
            " of " + std::to_string(nc) + " input" + (nc == 1 ? "" : "s") +
            (w.empty() ? "" : " " + w);
    }
    const std::int64_t fresh = done - outcome.restored;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (fresh > 0 && done < local_total)
      st += "  ETA " + std::to_string(int(el / double(fresh) * double(local_total - done))) + "s";
    return st;
  });
  auto capture = [&](const std::string& what, int code) {
#pragma omp critical(attnsim_sweep_error)
    if (error.empty()) {
      error = what;
      error_code = code;
      failed = true;
    }
  };

  std::size_t next = 0;
  while (next < todo.size() && !failed && !stopped) {
    // A chunk: the points of up to `threads` consecutive cases, evaluated together.
    std::vector<std::int64_t> chunk_cases;
    std::size_t end = next;
    while (end < todo.size()) {
      const std::int64_t c = todo[end] / nmethods;
      if (chunk_cases.empty() || chunk_cases.back() != c) {
        if (int(chunk_cases.size()) == threads) break;
        chunk_cases.push_back(c);
      }
      ++end;
    }
    const int ncases = int(chunk_cases.size());
    chunk_cases_shown = ncases;
    phase = 0;
    work.restart();
    std::vector<AttentionInput> inputs(static_cast<std::size_t>(ncases));
    // Each case's golden attention (bottom-right below; a top-left golden on first use by a
    // top-left kernel on a causal input with len_q != len_kv).
    std::vector<std::unique_ptr<Goldens>> goldens(static_cast<std::size_t>(ncases));
    // Dumps are read here, one at a time on this thread: libhdf5 may be built without thread
    // safety, and in a thread-safe build the silencing of its error stacks (hdf5_io.cpp) holds
    // for the main thread only. No exception may leave an OpenMP region (it would terminate the
    // process): workers capture errors, rethrown below after the region.
    for (int k = 0; k < ncases && !failed; ++k) {
      const SweepCase& c = plan.cases[std::size_t(chunk_cases[std::size_t(k)])];
      if (c.kind != "dump") continue;
      try {
        inputs[std::size_t(k)] = read_attention_dump(c.file, c.prefix, opt.allow_nonfinite);
        if (c.seq >= 0)
          inputs[std::size_t(k)] = varlen_sequence(inputs[std::size_t(k)],
                                                   dump_varlen(c.file, c.prefix), c.seq, 132);
      } catch (const UsageError& e) {
        capture(e.what(), e.code());
      } catch (const std::exception& e) {
        capture(describe_exception(e), 2);
      }
    }
    phase = 1;
    work.restart();
#pragma omp parallel for schedule(dynamic, 1) if (ncases > 1)
    for (int k = 0; k < ncases; ++k) {
      if (failed) continue;
      try {
        const SweepCase& c = plan.cases[std::size_t(chunk_cases[std::size_t(k)])];
        if (c.kind != "dump") inputs[std::size_t(k)] = make_synthetic(c.spec, c.seed);
        goldens[std::size_t(k)] = std::make_unique<Goldens>(inputs[std::size_t(k)]);
        goldens[std::size_t(k)]->get(CausalAlign::kBottomRight);
      } catch (const UsageError& e) {
        capture(e.what(), e.code());
      } catch (const std::exception& e) {
        capture(describe_exception(e), 2);
      }
    }
    if (failed) break;
    phase = 2;
    work.restart();
    const std::int64_t npts = std::int64_t(end - next);
#pragma omp parallel for schedule(dynamic, 1) if (npts > 1)
    for (std::int64_t j = 0; j < npts; ++j) {
      const std::int64_t point = todo[next + std::size_t(j)];
      if (failed || stopped) continue;
      if (opt.max_points >= 0 && started.fetch_add(1) >= opt.max_points) {
        stopped = true;
        continue;
      }
      try {
        const std::int64_t ci = point / nmethods;
        const std::size_t k = std::size_t(std::find(chunk_cases.begin(), chunk_cases.end(), ci) -
                                          chunk_cases.begin());
        const SweepCase& c = plan.cases[std::size_t(ci)];
        const MethodConfig& m = plan.methods[std::size_t(point % nmethods)];
        PointRow row;
        bool computed = true;
        MethodOutput out;
        StageCounters counted;
        try {
          // Inside an active parallel region (points sharing the threads) the point's own thread
          // counts; a point alone (a chunk of one, or one thread) lets the simulator use the
          // threads, and they all count into its sink.
          const CounterScope scope(
              opt.counters ? &counted : nullptr,
              omp_in_parallel() ? CounterScope::kThisThread : CounterScope::kProcess);
          out = m.run(inputs[k]);
        } catch (const UsageError& e) {
          // --skip-unsupported: the method refuses this input (its kernel does not take the
          // shape or the head_dim); options were validated when the plan was made.
          if (!opt.skip_unsupported || e.code() != 2) throw;
          row = skipped_point(point, m, c.name, std::int64_t(c.seed), inputs[k], e.what());
          computed = false;
        }
        if (computed)
          row = measure_point(point, m, c.name, std::int64_t(c.seed), inputs[k], out, *goldens[k]);
        if (computed && opt.counters) row.counters = counted.column_values();
        const std::string line = serialize_row(row);
        // No exception may leave a critical section either: the append's error is captured.
        std::string append_error;
#pragma omp critical(attnsim_sweep_rows)
        {
          try {
            ckpt.append(line);
            rows.push_back(std::move(row));
            ++finished;
            ++outcome.computed;
            shown = finished;
          } catch (const std::exception& e) {
            append_error = describe_exception(e);
          }
        }
        if (!append_error.empty()) capture(append_error, 2);
      } catch (const UsageError& e) {
        capture(e.what(), e.code());
      } catch (const std::exception& e) {
        capture(describe_exception(e), 2);
      }
    }
    next = end;
  }
  line.stop();
  if (failed) {
    // A checkpoint this run created and added no point to records nothing worth resuming.
    if (ckpt.f && fresh_checkpoint && outcome.computed == 0) {
      std::fclose(ckpt.f);
      ckpt.f = nullptr;
      std::remove(own_checkpoint.c_str());
      unregister_cleanup_path(ckpt.cleanup_slot);
      ckpt.cleanup_slot = -1;
    }
    throw UsageError(error, error_code);
  }
  if (ckpt.f) {
    ::fsync(::fileno(ckpt.f));
    std::fclose(ckpt.f);
    ckpt.f = nullptr;
  }
  if (mpi_any(bool(stopped))) {
    outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return outcome;
  }

  // Gather every rank's rows to rank 0, which puts them in point order.
  std::string mine;
  for (const auto& r : rows) mine += serialize_row(r) + "\n";
  rows.clear();
  const std::vector<std::string> all = mpi_gather_to_root(mine);
  if (rank == 0) {
    std::vector<PointRow> gathered;
    for (const auto& text : all) {
      std::size_t pos = 0;
      while (pos < text.size()) {
        const auto nl = text.find('\n', pos);
        PointRow r;
        if (!parse_row(text.substr(pos, nl - pos), &r))
          throw UsageError("internal error: unreadable gathered row");
        gathered.push_back(std::move(r));
        pos = nl + 1;
      }
    }
    std::sort(gathered.begin(), gathered.end(),
              [](const PointRow& a, const PointRow& b) { return a.point < b.point; });
    if (std::int64_t(gathered.size()) != npoints) {
      throw UsageError("internal error: gathered " + std::to_string(gathered.size()) +
                       " rows for " + std::to_string(npoints) + " points");
    }
    for (auto& r : gathered) outcome.table.add(std::move(r));
  }
  outcome.complete = true;
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return outcome;
}

}  // namespace attnsim
