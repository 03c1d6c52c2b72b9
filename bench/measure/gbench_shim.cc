// The C shim over Google Benchmark (see gbench_shim.h).
#include "gbench_shim.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef LAYERBENCH_GBENCH_VERSION
#define LAYERBENCH_GBENCH_VERSION "unknown"
#endif

namespace {

// One call of the benchmark function by Google Benchmark: warm-up, an estimation
// run or a reported run. We cannot tell which while it runs, so all are recorded.
struct Segment {
    size_t first;
    size_t count;
    double sum;
};

// A callback whose time is (close to) zero drives Google Benchmark's iteration count
// towards its limit of 1e9; past this many recorded samples the run stops with an error.
constexpr size_t kMaxSamples = 10000000;

struct Recorder {
    gbs_iteration_fn fn;
    void *user;
    std::vector<double> samples;
    std::vector<Segment> segments;
    bool failed = false;
    const char *why = "";
    double cost = 0.0;  // what Google Benchmark counted, all calls
};

// Collects the reported per-repetition runs (not the aggregates).
class CollectReporter : public benchmark::BenchmarkReporter {
  public:
    struct Reported {
        int64_t iterations;
        double seconds;
        bool error;
        std::string message;
    };
    std::vector<Reported> runs;
    bool ReportContext(const Context &) override { return true; }
    void ReportRuns(const std::vector<Run> &reports) override {
        for (const Run &r : reports)
            if (r.run_type == Run::RT_Iteration)
                runs.push_back({static_cast<int64_t>(r.iterations), r.real_accumulated_time, r.error_occurred,
                                r.error_message});
    }
};

void run_segment(benchmark::State &state, Recorder *rec)
{
    Segment seg{rec->samples.size(), 0, 0.0};
    for (auto _ : state) {
        auto w0 = std::chrono::steady_clock::now();
        double t = rec->fn(rec->user);
        double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
        if (!(t >= 0.0) || rec->samples.size() >= kMaxSamples) {
            rec->failed = true;
            rec->why = t >= 0.0 ? "more than 10 million samples: the timed call takes no measurable time"
                                : "the timed iteration failed";
            state.SkipWithError(rec->why);
            break;
        }
        // Google Benchmark's budget (warm-up, --min-time) counts what the iteration cost,
        // untimed parts included (a cache flush before a cold sample, a GPU's hold and
        // synchronisation): the larger of the sample and the call's wall time.
        double cost = t > wall ? t : wall;
        state.SetIterationTime(cost);
        rec->samples.push_back(t);
        seg.sum += cost;  // same order of additions as Google Benchmark's manual time
        rec->cost += cost;
        seg.count++;
    }
    rec->segments.push_back(seg);
}

}  // namespace

extern "C" int gbs_run(const char *name, gbs_iteration_fn fn, void *user, const gbs_options *opt, gbs_result *out,
                       char *err, int errlen)
{
    Recorder rec;
    rec.fn = fn;
    rec.user = user;
    std::memset(out, 0, sizeof *out);
    benchmark::ClearRegisteredBenchmarks();
    benchmark::internal::Benchmark *b = benchmark::RegisterBenchmark(name, run_segment, &rec)
                                            ->UseManualTime()
                                            ->Repetitions(opt->repetitions > 0 ? opt->repetitions : 1)
                                            ->Unit(benchmark::kMicrosecond);
    if (opt->iterations > 0) { // a fixed count: no min time (Google Benchmark takes one or the other)
        b->Iterations(opt->iterations);
    } else {
        b->MinTime(opt->min_time);
        b->MinWarmUpTime(opt->warmup_time);
    }
    CollectReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter, "");
    benchmark::ClearRegisteredBenchmarks();
    if (rec.failed) {
        std::snprintf(err, static_cast<size_t>(errlen), "%s", rec.why);
        return -1;
    }
    if (reporter.runs.empty()) {
        std::snprintf(err, static_cast<size_t>(errlen), "Google Benchmark reported no run");
        return -1;
    }
    // Each reported run is the first segment, after the previous match, whose iteration
    // count and summed time are the ones Google Benchmark reported; the segments before
    // it were warm-up or iteration-count estimation.
    std::vector<double> kept;
    size_t next = 0;
    for (const auto &run : reporter.runs) {
        if (run.error) {
            std::snprintf(err, static_cast<size_t>(errlen), "%s", run.message.c_str());
            return -1;
        }
        size_t found = next;
        while (found < rec.segments.size() &&
               !(static_cast<int64_t>(rec.segments[found].count) == run.iterations &&
                 std::fabs(rec.segments[found].sum - run.seconds) <= 1e-12 * std::fabs(run.seconds)))
            found++;
        if (found == rec.segments.size()) {
            std::snprintf(err, static_cast<size_t>(errlen),
                          "a reported run (%lld iterations) matches no recorded segment",
                          static_cast<long long>(run.iterations));
            return -1;
        }
        const Segment &seg = rec.segments[found];
        if (kept.empty())
            out->first_kept = static_cast<int64_t>(seg.first);
        kept.insert(kept.end(), rec.samples.begin() + static_cast<long>(seg.first),
                    rec.samples.begin() + static_cast<long>(seg.first + seg.count));
        out->iterations = run.iterations;
        next = found + 1;
    }
    out->n_samples = static_cast<int64_t>(kept.size());
    out->cost = rec.cost;
    out->repetitions = static_cast<int>(reporter.runs.size());
    out->discarded = static_cast<int64_t>(rec.samples.size()) - out->n_samples;
    out->samples = static_cast<double *>(std::malloc((kept.size() ? kept.size() : 1) * sizeof(double)));
    if (!out->samples) {
        std::snprintf(err, static_cast<size_t>(errlen), "out of memory");
        return -1;
    }
    std::copy(kept.begin(), kept.end(), out->samples);
    return 0;
}

extern "C" const char *gbs_version(void) { return LAYERBENCH_GBENCH_VERSION; }
