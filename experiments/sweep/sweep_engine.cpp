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
#include <set>

#include "experiments/cli/error.hpp"
#include "experiments/cli/names.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/sweep/mpi_env.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

namespace fs = std::filesystem;

GridAxis parse_grid_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= text.size()) {
    throw UsageError("--grid '" + text + "' is not KEY=V1,V2,...");
  }
  GridAxis a;
  a.key = text.substr(0, eq);
  std::size_t pos = eq + 1;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const std::string v =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (v.empty()) throw UsageError("--grid '" + text + "' has an empty value");
    if (std::find(a.values.begin(), a.values.end(), v) == a.values.end()) a.values.push_back(v);
  }
  return a;
}

std::vector<MethodConfig> expand_grid(const std::vector<MethodConfig>& methods,
                                      const std::vector<GridAxis>& grid) {
  for (std::size_t i = 0; i < grid.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (grid[i].key == grid[j].key)
        throw UsageError("--grid key '" + grid[i].key + "' given twice");
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
          "--grid key '" + grid[i].key + "' is an option of none of the methods (their options: " +
          (keys.empty() ? std::string("none") : join_choices({keys.begin(), keys.end()})) + ")");
    }
  }
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
        text += (first ? ":" : ",") + p.key + "=" + v;
        first = false;
      }
      MethodConfig c = parse_method(text);  // validates grid values with the method's own message
      if (seen.insert(c.canonical()).second) out.push_back(c);
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
  for (const auto& list : method_lists) {
    for (const auto& m : split_method_list(list)) base.push_back(parse_method(m));
  }
  std::vector<GridAxis> axes;
  for (const auto& g : grid) axes.push_back(parse_grid_axis(g));
  plan.methods = expand_grid(base, axes);
  // Inputs: every layer group of every dump; every synthetic spec at seeds base..base+N-1.
  for (const auto& path : dumps) {
    for (const auto& prefix : dump_prefixes(path)) {
      plan.cases.push_back(
          {path + (prefix.empty() ? "" : ":" + prefix.substr(0, prefix.size() - 1)), "dump", path,
           prefix, "", 0});
    }
  }
  for (const auto& spec : synthetic) {
    const std::uint64_t first = synthetic_seed(spec);  // also validates the spec
    for (int s = 0; s < seeds; ++s)
      plan.cases.push_back(
          {"synthetic:" + spec, "synthetic", "", "", spec, first + std::uint64_t(s)});
  }
  return plan;
}

// ---- checkpoints ------------------------------------------------------------------------------
//
// CHECKPOINT_BASE.ckpt.<rank>: a header line "attnsim-checkpoint<TAB>1<TAB>fingerprint<TAB>points"
// and one serialize_row() line per completed point, appended and flushed as each point finishes.
// A line cut by a crash is ignored (and trimmed before appending). Any rank count can resume any
// set of checkpoint files: every rank reads all of them.

namespace {

std::string header_line(const SweepPlan& plan) {
  return "attnsim-checkpoint\t1\t" + plan.fingerprint() + "\t" + std::to_string(plan.points());
}

struct Checkpoint {
  std::FILE* f = nullptr;
  std::chrono::steady_clock::time_point last_sync = std::chrono::steady_clock::now();
  ~Checkpoint() {
    if (f) std::fclose(f);
  }
  void append(const std::string& line) {
    if (!f) return;
    std::fputs(line.c_str(), f);
    std::fputc('\n', f);
    // Flushed to the OS after every point (survives a killed process); fsync'd at most once a
    // second (survives a crashed node, minus the last second).
    if (std::fflush(f) != 0) throw UsageError("cannot append to the sweep checkpoint");
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
    if (name.rfind(stem, 0) == 0 && name.find(".tmp.") == std::string::npos)
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
  if (!opt.checkpoint_base.empty()) {
    const std::string header = header_line(plan);
    if (opt.resume) {
      for (const auto& file : checkpoint_files(opt.checkpoint_base)) {
        std::ifstream in(file);
        std::string line;
        if (!std::getline(in, line)) continue;
        if (line != header) {
          throw UsageError("checkpoint '" + file +
                           "' belongs to a different sweep (other methods, inputs or "
                           "seeds); remove it or run without --resume");
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
    if (opt.resume && fs::exists(own)) {
      // Trim a record cut by a crash, then append.
      std::ifstream in(own, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto nl = text.rfind('\n');
      fs::resize_file(own, nl == std::string::npos ? 0 : nl + 1);
    }
    const bool fresh = !fs::exists(own) || fs::file_size(own) == 0;
    ckpt.f = std::fopen(own.c_str(), fresh ? "w" : "a");
    if (!ckpt.f) throw UsageError("cannot write the sweep checkpoint '" + own + "'");
    if (fresh) ckpt.append(header);
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
  auto last_draw = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  auto draw = [&](bool force) {
    if (!opt.progress || rank != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_draw < std::chrono::milliseconds(100)) return;
    last_draw = now;
    const double el = std::chrono::duration<double>(now - t0).count();
    const std::int64_t fresh = finished - outcome.restored;
    const double eta = fresh > 0 ? el / double(fresh) * double(local_total - finished) : 0.0;
    const int width = 30;
    const int fill =
        local_total ? int(double(width) * double(finished) / double(local_total)) : width;
    std::fprintf(stderr, "\r[%s%s] %lld/%lld points%s  %.1fs elapsed  ETA %.1fs   ",
                 std::string(std::size_t(fill), '#').c_str(),
                 std::string(std::size_t(width - fill), '.').c_str(), (long long)finished,
                 (long long)local_total,
                 size > 1 ? (" (rank 0 of " + std::to_string(size) + ")").c_str() : "", el, eta);
  };
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
    std::vector<AttentionInput> inputs(static_cast<std::size_t>(ncases));
    std::vector<std::vector<double>> goldens(static_cast<std::size_t>(ncases));
#pragma omp parallel for schedule(dynamic, 1) if (ncases > 1)
    for (int k = 0; k < ncases; ++k) {
      try {
        const SweepCase& c = plan.cases[std::size_t(chunk_cases[std::size_t(k)])];
        if (c.kind == "dump") {
          // libhdf5 may be built without thread safety: one reader at a time.
#pragma omp critical(attnsim_hdf5)
          inputs[std::size_t(k)] = read_attention_dump(c.file, c.prefix, opt.allow_nonfinite);
        } else {
          inputs[std::size_t(k)] = make_synthetic(c.spec, c.seed);
        }
        goldens[std::size_t(k)] = golden_attention_ref(inputs[std::size_t(k)]);
      } catch (const UsageError& e) {
        capture(e.what(), e.code());
      } catch (const std::exception& e) {
        capture(e.what(), 2);
      }
    }
    if (failed) break;
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
        const MethodOutput out = m.run(inputs[k]);
        PointRow row =
            measure_point(point, m, c.name, std::int64_t(c.seed), inputs[k], out, goldens[k]);
        const std::string line = serialize_row(row);
#pragma omp critical(attnsim_sweep_rows)
        {
          ckpt.append(line);
          rows.push_back(std::move(row));
          ++finished;
          ++outcome.computed;
          draw(false);
        }
      } catch (const UsageError& e) {
        capture(e.what(), e.code());
      } catch (const std::exception& e) {
        capture(e.what(), 2);
      }
    }
    next = end;
  }
  draw(true);
  if (opt.progress && rank == 0) std::fprintf(stderr, "\n");
  if (failed) throw UsageError(error, error_code);
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
