#include "train/batch.h"

namespace shardema {

RowSpan MicroBatchSpan(int64_t batch, int64_t grad_accum, int64_t micro, int rank, int world) {
  const int64_t per_micro = batch / grad_accum;
  const int64_t per_rank = per_micro / world;
  RowSpan s;
  s.begin = micro * per_micro + int64_t(rank) * per_rank;
  s.end = s.begin + per_rank;
  return s;
}

RowSpan EvalSpan(int64_t rows, int rank, int world) {
  return RowSpan{rows * rank / world, rows * (rank + 1) / world};
}

}  // namespace shardema
