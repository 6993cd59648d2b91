// Row-major Eigen maps over the f32 buffers of the CPU layers (internal to nn/).
#ifndef SHARDEMA_NN_EIGEN_MAPS_H_
#define SHARDEMA_NN_EIGEN_MAPS_H_

#include <Eigen/Core>

namespace shardema::nn {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;
// A [rows, cols] block of a wider row-major matrix (row stride `ld`).
using StridedC = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using RowVecMapC = Eigen::Map<const Eigen::RowVectorXf>;
using RowVecMap = Eigen::Map<Eigen::RowVectorXf>;

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_EIGEN_MAPS_H_
