#include "runtime/signature.h"

#include <gtest/gtest.h>

namespace pillar::runtime {
namespace {

using protocol::DataType;
using protocol::Tensor;

models::ModelConfig TwoInputs(int64_t max_batch) {
  models::ModelConfig c;
  c.max_batch_size = max_batch;
  c.inputs = {{"a", DataType::kFp32, {2}}, {"b", DataType::kInt64, {-1}}};
  c.outputs = {{"y", DataType::kFp32, {1}}};
  return c;
}

Tensor T(std::string name, DataType type, std::vector<int64_t> shape) {
  Tensor t{std::move(name), type, std::move(shape), ""};
  t.data.assign(size_t(t.ElementCount()) * protocol::ElementSize(type), '\0');
  return t;
}

TEST(SignatureTest, ReordersInputsAndReturnsRows) {
  protocol::InferenceRequest r;
  r.inputs = {T("b", DataType::kInt64, {3, 5}), T("a", DataType::kFp32, {3, 2})};
  absl::StatusOr<int64_t> rows = CheckRequest(TwoInputs(8), r);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 3);
  EXPECT_EQ(r.inputs[0].name, "a");
}

TEST(SignatureTest, NamesWhatIsWrong) {
  auto error = [](std::vector<Tensor> inputs, int64_t max_batch = 8,
                  std::vector<std::string> outputs = {}) {
    protocol::InferenceRequest r;
    r.inputs = std::move(inputs);
    r.requested_outputs = std::move(outputs);
    absl::StatusOr<int64_t> rows = CheckRequest(TwoInputs(max_batch), r);
    EXPECT_FALSE(rows.ok());
    return std::string(rows.status().message());
  };
  EXPECT_EQ(error({T("a", DataType::kFp32, {1, 2})}), "missing input 'b'");
  EXPECT_EQ(error({T("a", DataType::kFp32, {1, 2}), T("b", DataType::kInt64, {1, 1}),
                   T("c", DataType::kFp32, {1})}),
            "unknown input 'c'");
  EXPECT_EQ(error({T("a", DataType::kFp64, {1, 2}), T("b", DataType::kInt64, {1, 1})}),
            "input 'a': datatype FP64 does not match the model's FP32");
  EXPECT_EQ(error({T("a", DataType::kFp32, {1, 3}), T("b", DataType::kInt64, {1, 1})}),
            "input 'a': shape [1,3] does not match the model's [-1,2]");
  EXPECT_EQ(error({T("a", DataType::kFp32, {9, 2}), T("b", DataType::kInt64, {9, 1})}),
            "input 'a': batch of 9 rows is outside [1, 8]");
  EXPECT_EQ(error({T("a", DataType::kFp32, {2, 2}), T("b", DataType::kInt64, {3, 1})}),
            "inputs disagree on the batch dimension");
  EXPECT_EQ(error({T("a", DataType::kFp32, {1, 2}), T("b", DataType::kInt64, {1, 1})}, 8, {"z"}),
            "unknown output 'z'");
  EXPECT_EQ(error({T("a", DataType::kFp32, {1, 2}), T("b", DataType::kInt64, {1})}, 0),
            "input 'a': shape [1,2] does not match the model's [2]");
}

}  // namespace
}  // namespace pillar::runtime
