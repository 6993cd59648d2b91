// comm_bench: f32 all_gather / reduce_scatter / all_reduce through MpiCommunicator and through
// the raw MPI calls it makes, in the same run and on the same buffers. nccl-tests style table
// from rank 0, then one `summary:` line.
//
//   mpirun -np 4 bazel-bin/bench/comm_bench [--min-bytes 4K] [--max-bytes 64M]
//       [--step-factor 2] [--iters 20] [--warmup 5]
//
// Implementations (rows):
//   ours      Communicator::AllGather/ReduceScatter/AllReduce, check_args on (the default)
//   nocheck   the same with CommOptions::check_args = false
//   mpi-nb    MPI_Iallgather / MPI_Ireduce_scatter_block / MPI_Iallreduce + MPI_Wait (ours)
//   mpi       MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce (blocking)
//   ring      ours with CommOptions::reduce_scatter_algorithm = kRing (our ring over
//             MPI_Isend/Irecv, ring_reduce_scatter.h); the same as `ours` for the other ops
// Timing: per iteration every implementation runs once, in a rotating order; each run is
// preceded by MPI_Barrier and timed alone; the run's time is the maximum over ranks; the table
// shows the median over iterations. size S is the full array (all_gather: recv, reduce_scatter:
// send, all_reduce: the buffer), count = S / 4. algbw = S / t; busbw = algbw * (n-1)/n for
// all_gather and reduce_scatter, algbw * 2(n-1)/n for all_reduce (nccl-tests). #wrong counts,
// over all ranks, the elements that differ from the expected result in a separate verification
// run per implementation (recv cleared to NaN first).
// summary: <op>_busbw_ratio = ours / mpi-nb busbw at the largest size (goal >= 0.95), as the
// median over iterations of t(mpi-nb) / t(ours) from the same iteration: adjacent runs on a
// shared or busy machine see the same load, so the paired ratio is steadier than the ratio of
// the two medians in the table. Also <op>_vs_blocking (ours / mpi, paired the same way),
// <op>_busbw_gbs (ours, from the table) and wrong = total #wrong; rs_ring_vs_mpi = ring / mpi-nb
// reduce-scatter busbw (paired) and rs_ring_busbw_gbs; rs_ring_vs_mpi_min: the smallest of
// those paired ratios over all sizes, at rs_ring_vs_mpi_min_bytes (where MPI's own reduce-scatter
// comes closest to, or beats, the ring).
// Run it under plain mpirun, not tests/mpi_run.sh (which turns off OpenMPI's shared-memory
// single copy and slows large collectives).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "framework/device.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/mpi/mpi_error.h"
#include "framework/status.h"

namespace shardema {
namespace {

using bench::Median;

enum class Op { kAllGather, kReduceScatter, kAllReduce };
const char* OpName(Op op) {
  return op == Op::kAllGather       ? "all_gather"
         : op == Op::kReduceScatter ? "reduce_scatter"
                                    : "all_reduce";
}

// nccl-tests bus bandwidth factor.
double BusFactor(Op op, int n) {
  return op == Op::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
}

// Input element i of rank r: small integers, so sums over ranks are exact in f32.
float Val(int r, size_t i) { return float(int64_t((size_t(r) * 7 + i * 3) % 17) - 8); }

// Per-rank element count for a full array of `bytes` bytes.
size_t PerRankCount(Op op, size_t bytes, int n) {
  const size_t elems = bytes / sizeof(float);
  return op == Op::kAllReduce ? elems : elems / size_t(n);
}

struct Impl {
  std::string name;
  // Runs op with per-rank count c from send into recv.
  std::function<Status(Op, const float*, float*, size_t)> run;
};

Status RunOurs(Communicator* comm, Op op, const float* send, float* recv, size_t c) {
  switch (op) {
    case Op::kAllGather: return comm->AllGather(send, recv, c, DType::kF32);
    case Op::kReduceScatter: return comm->ReduceScatter(send, recv, c, DType::kF32);
    case Op::kAllReduce: return comm->AllReduce(send, recv, c, DType::kF32);
  }
  return Internal("unknown op");
}

Status RunRaw(MPI_Comm comm, bool nonblocking, Op op, const float* send, float* recv, size_t c) {
  const int n = int(c);
  int rc = MPI_SUCCESS;
  MPI_Request req = MPI_REQUEST_NULL;
  switch (op) {
    case Op::kAllGather:
      rc = nonblocking ? MPI_Iallgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, comm, &req)
                       : MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, comm);
      break;
    case Op::kReduceScatter:
      rc = nonblocking ? MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, comm, &req)
                       : MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, comm);
      break;
    case Op::kAllReduce:
      rc = nonblocking ? MPI_Iallreduce(send, recv, n, MPI_FLOAT, MPI_SUM, comm, &req)
                       : MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, comm);
      break;
  }
  if (rc == MPI_SUCCESS && nonblocking) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
  return MpiStatus(rc, OpName(op), -1);
}

// Elements of recv (per-rank count c) that differ from the expected result on this rank.
int64_t CountWrong(Op op, const float* recv, size_t c, int rank, int n) {
  int64_t wrong = 0;
  auto sum_at = [n](size_t j) {
    float s = 0;
    for (int q = 0; q < n; ++q) s += Val(q, j);
    return s;
  };
  if (op == Op::kAllGather) {
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < c; ++i) wrong += !(recv[size_t(q) * c + i] == Val(q, i));
  } else {
    const size_t base = op == Op::kReduceScatter ? size_t(rank) * c : 0;
    for (size_t i = 0; i < c; ++i) wrong += !(recv[i] == sum_at(base + i));
  }
  return wrong;
}

std::string FormatBytes(size_t b) {
  char buf[32];
  if (b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu", b);
  }
  return buf;
}

struct Flags {
  std::string min_bytes = "4K";
  std::string max_bytes = "64M";
  int step_factor = 2;
  int iters = 20;
  int warmup = 5;
  size_t ring_chunk = size_t(1) << 20;
};

struct Row {
  double time_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
  std::vector<double> times;  // slowest rank's seconds, one per timed iteration
};

// Median over iterations of base[it] / ours[it]: busbw(ours) / busbw(base), paired per iteration.
double PairedRatio(const Row& ours, const Row& base) {
  std::vector<double> r;
  for (size_t it = 0; it < ours.times.size() && it < base.times.size(); ++it) {
    if (ours.times[it] > 0) r.push_back(base.times[it] / ours.times[it]);
  }
  return Median(r);  // 0 when empty
}

class Bench {
 public:
  Bench(MpiCommunicator* ours, MpiCommunicator* nocheck, MpiCommunicator* ring, MPI_Comm raw,
        const Flags& f)
      : rank_(ours->rank()), n_(ours->world_size()), raw_(raw), flags_(f) {
    impls_ = {
        {"ours",
         [ours](Op op, const float* s, float* r, size_t c) { return RunOurs(ours, op, s, r, c); }},
        {"nocheck", [nocheck](Op op, const float* s, float* r,
                              size_t c) { return RunOurs(nocheck, op, s, r, c); }},
        {"mpi-nb", [raw](Op op, const float* s, float* r,
                         size_t c) { return RunRaw(raw, true, op, s, r, c); }},
        {"mpi", [raw](Op op, const float* s, float* r,
                      size_t c) { return RunRaw(raw, false, op, s, r, c); }},
        {"ring",
         [ring](Op op, const float* s, float* r, size_t c) { return RunOurs(ring, op, s, r, c); }},
    };
  }

  // Allocates send and recv for arrays of up to max_bytes.
  Status Allocate(size_t max_bytes) {
    ASSIGN_OR_RETURN(send_, Buffer::Allocate(max_bytes + 64, Device::Cpu()));
    ASSIGN_OR_RETURN(recv_, Buffer::Allocate(max_bytes + 64, Device::Cpu()));
    return Status::Ok();
  }

  // Times every implementation of `op` on a full array of `bytes`; fills rows[impl].
  Status Measure(Op op, size_t bytes, std::vector<Row>* rows) {
    const size_t c = PerRankCount(op, bytes, n_);
    const size_t full = op == Op::kAllReduce ? c : c * size_t(n_);
    const size_t send_elems = op == Op::kReduceScatter ? full : c;
    const size_t recv_elems = op == Op::kAllGather ? full : c;
    float* send = send_.as<float>();
    float* recv = recv_.as<float>();
    for (size_t i = 0; i < send_elems; ++i) send[i] = Val(rank_, i);
    std::fill(recv, recv + recv_elems, 0.f);
    const size_t k = impls_.size();
    std::vector<std::vector<double>> times(k);
    for (int it = 0; it < flags_.warmup + flags_.iters; ++it) {
      for (size_t j = 0; j < k; ++j) {
        const size_t m = (j + size_t(it)) % k;  // rotate which implementation goes first
        RETURN_IF_ERROR(MpiStatus(MPI_Barrier(raw_), "barrier", rank_));
        const double t0 = MPI_Wtime();
        RETURN_IF_ERROR(impls_[m].run(op, send, recv, c));
        double dt = MPI_Wtime() - t0, slowest = 0;
        RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, raw_),
                                  "time reduction", rank_));
        if (it >= flags_.warmup) times[m].push_back(slowest);
      }
    }
    rows->assign(k, Row());
    for (size_t m = 0; m < k; ++m) {
      std::fill(recv, recv + recv_elems, std::numeric_limits<float>::quiet_NaN());
      RETURN_IF_ERROR(impls_[m].run(op, send, recv, c));
      int64_t wrong = CountWrong(op, recv, c, rank_, n_), total = 0;
      RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, raw_),
                                "wrong-count reduction", rank_));
      Row& row = (*rows)[m];
      const double t = Median(times[m]);
      const double s = double(full) * sizeof(float);
      row.time_us = t * 1e6;
      row.algbw = t > 0 ? s / t / 1e9 : 0;
      row.busbw = row.algbw * BusFactor(op, n_);
      row.wrong = total;
      row.times = std::move(times[m]);
    }
    return Status::Ok();
  }

  const std::vector<Impl>& impls() const { return impls_; }

 private:
  int rank_, n_;
  MPI_Comm raw_;
  Flags flags_;
  std::vector<Impl> impls_;
  Buffer send_, recv_;
};

Status Run(const Flags& f) {
  const StatusOr<uint64_t> min_parsed = bench::ParseBytes(f.min_bytes, "--min-bytes");
  const StatusOr<uint64_t> max_parsed = bench::ParseBytes(f.max_bytes, "--max-bytes");
  if (!min_parsed.ok() || !max_parsed.ok() || *min_parsed > *max_parsed) {
    return InvalidArgument("comm_bench: bad --min-bytes '", f.min_bytes, "' / --max-bytes '",
                           f.max_bytes, "' (want 0 < min <= max, e.g. 4K and 64M)");
  }
  const size_t min_bytes = size_t(*min_parsed), max_bytes = size_t(*max_parsed);
  if (f.step_factor < 2 || f.iters < 1 || f.warmup < 0) {
    return InvalidArgument("comm_bench: need --step-factor >= 2, --iters >= 1, --warmup >= 0");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> ours, MpiCommunicator::Create());
  CommOptions off;
  off.check_args = false;
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> nocheck, MpiCommunicator::Create(off));
  CommOptions ring_options;
  ring_options.reduce_scatter_algorithm = ReduceScatterAlgorithm::kRing;
  ring_options.ring_chunk_bytes = f.ring_chunk;
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> ring, MpiCommunicator::Create(ring_options));
  MPI_Comm raw = MPI_COMM_NULL;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &raw), "MPI_Comm_dup", ours->rank()));
  MPI_Comm_set_errhandler(raw, MPI_ERRORS_RETURN);
  const int rank = ours->rank(), n = ours->world_size();

  Bench bench(ours.get(), nocheck.get(), ring.get(), raw, f);
  Status st = bench.Allocate(max_bytes);
  if (rank == 0) {
    std::printf("# comm_bench: MPI backend, %d ranks, f32 sum, iters %d, warmup %d\n", n, f.iters,
                f.warmup);
    std::printf(
        "# time = median over iterations of the slowest rank; size = full array; "
        "busbw per nccl-tests\n");
    std::printf("# %-14s %10s %12s %5s %-8s %11s %11s %11s %7s\n", "op", "size", "count", "type",
                "impl", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  std::map<Op, std::vector<Row>> largest;
  int64_t total_wrong = 0;
  double ring_vs_mpi_min = std::numeric_limits<double>::infinity();
  size_t ring_vs_mpi_min_bytes = 0;
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce}) {
    for (size_t bytes = min_bytes; st.ok() && bytes <= max_bytes; bytes *= size_t(f.step_factor)) {
      std::vector<Row> rows;
      st = bench.Measure(op, bytes, &rows);
      if (!st.ok()) break;
      const size_t full = PerRankCount(op, bytes, n) * (op == Op::kAllReduce ? 1 : size_t(n));
      for (size_t m = 0; m < rows.size(); ++m) {
        total_wrong += rows[m].wrong;
        if (rank != 0) continue;
        std::printf("  %-14s %10s %12zu %5s %-8s %11.1f %11.3f %11.3f %7lld\n", OpName(op),
                    FormatBytes(full * sizeof(float)).c_str(), full, "float",
                    bench.impls()[m].name.c_str(), rows[m].time_us, rows[m].algbw, rows[m].busbw,
                    static_cast<long long>(rows[m].wrong));
      }
      largest[op] = rows;
      if (op == Op::kReduceScatter && rank == 0) {  // impls: 2 mpi-nb, 4 ring
        const double r = PairedRatio(rows[4], rows[2]);
        if (r < ring_vs_mpi_min) ring_vs_mpi_min = r, ring_vs_mpi_min_bytes = full * sizeof(float);
      }
      if (bytes > max_bytes / size_t(f.step_factor)) break;  // no overflow past max
    }
    if (!st.ok()) break;
  }
  if (st.ok() && rank == 0) {
    // impls: 0 ours, 1 nocheck, 2 mpi-nb, 3 mpi, 4 ring.
    auto ratio = [&](Op op, size_t base) { return PairedRatio(largest[op][0], largest[op][base]); };
    const double ring_vs_mpi =
        PairedRatio(largest[Op::kReduceScatter][4], largest[Op::kReduceScatter][2]);
    std::printf(
        "summary: rs_busbw_ratio=%.3f ag_busbw_ratio=%.3f ar_busbw_ratio=%.3f "
        "rs_vs_blocking=%.3f ag_vs_blocking=%.3f ar_vs_blocking=%.3f "
        "rs_busbw_gbs=%.3f ag_busbw_gbs=%.3f ar_busbw_gbs=%.3f wrong=%lld ranks=%d "
        "max_bytes=%zu rs_ring_vs_mpi=%.3f rs_ring_busbw_gbs=%.3f rs_ring_vs_mpi_min=%.3f "
        "rs_ring_vs_mpi_min_bytes=%zu\n",
        ratio(Op::kReduceScatter, 2), ratio(Op::kAllGather, 2), ratio(Op::kAllReduce, 2),
        ratio(Op::kReduceScatter, 3), ratio(Op::kAllGather, 3), ratio(Op::kAllReduce, 3),
        largest[Op::kReduceScatter][0].busbw, largest[Op::kAllGather][0].busbw,
        largest[Op::kAllReduce][0].busbw, static_cast<long long>(total_wrong), n, max_bytes,
        ring_vs_mpi, largest[Op::kReduceScatter][4].busbw, ring_vs_mpi_min, ring_vs_mpi_min_bytes);
  }
  std::fflush(stdout);
  MPI_Comm_free(&raw);
  RETURN_IF_ERROR(st);
  return total_wrong == 0 ? Status::Ok() : DataLoss("comm_bench: ", total_wrong, " wrong elements");
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  shardema::Flags f;
  CLI::App app{"comm_bench: MpiCommunicator vs raw MPI collectives (run under mpirun)"};
  app.add_option("--min-bytes", f.min_bytes, "smallest full array size (e.g. 4K)");
  app.add_option("--max-bytes", f.max_bytes, "largest full array size (e.g. 64M)");
  app.add_option("--step-factor", f.step_factor, "size multiplier between rows (2 or 4)");
  app.add_option("--iters", f.iters, "timed iterations per size");
  app.add_option("--warmup", f.warmup, "untimed iterations per size");
  app.add_option("--ring-chunk", f.ring_chunk, "ring reduce-scatter chunk in bytes");
  CLI11_PARSE(app, argc, argv);
  const shardema::Status st = shardema::Run(f);
  const shardema::Status fin = shardema::MpiCommunicator::FinalizeMpi();
  return shardema::bench::ExitWith("comm_bench", st.ok() ? fin : st);
}
