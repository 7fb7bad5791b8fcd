#include "protocol/json_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/strings.h"

namespace pillar::protocol {
namespace {

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

absl::StatusOr<InferenceRequest> Decode(std::string_view body) {
  InferenceRequestDecoder decoder;
  return decoder.Decode(body);
}

std::string Error(std::string_view body) {
  absl::StatusOr<InferenceRequest> r = Decode(body);
  EXPECT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

std::vector<std::string> Strings(const Tensor& t) {
  std::vector<std::string> out;
  EXPECT_TRUE(ForEachBytesElement(t.data, [&](std::string_view e) {
    out.emplace_back(e);
    return true;
  }));
  return out;
}

TEST(JsonCodecTest, BytesTensorsAreStringsFlatOrNestedAndReadBackTheSame) {
  auto r = Decode(
      R"({"inputs":[{"name":"text","shape":[2,2],"datatype":"BYTES",
                     "data":[["ol\u00e1","", "a\"b\nc"],["x"]]}]})");
  EXPECT_FALSE(r.ok());  // nested rows must match the shape: 3 entries where 2 are declared
  r = Decode(
      R"({"inputs":[{"name":"text","shape":[2,2],"datatype":"BYTES",
                     "data":[["ol\u00e1",""],["a\"b\nc","\u0000z"]]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& t = r->inputs[0];
  EXPECT_EQ(t.datatype, DataType::kBytes);
  EXPECT_EQ(Strings(t),
            (std::vector<std::string>{"ol\xc3\xa1", "", "a\"b\nc", std::string("\0z", 2)}));
  EXPECT_TRUE(t.DataFillsShape());
  // Encoded, the elements are the same strings, escaped where JSON needs it.
  InferenceResponse response{.model_name = "m", .model_version = "1", .id = "", .outputs = {t}};
  const std::string json = EncodeInferenceResponse(response);
  EXPECT_NE(json.find(R"("datatype":"BYTES","shape":[2,2],"data":["olá","","a\"b\nc","\u0000z"])"),
            std::string::npos)
      << json;
  InferenceResponseDecoder replies;
  auto back = replies.Decode(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->outputs[0].data, t.data);

  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[2],"datatype":"BYTES","data":["a",1]}]})")
                .find("'data' element 1 is not a string for datatype BYTES"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[2],"datatype":"BYTES","data":["a"]}]})")
                .find("has 1 elements but 'shape' needs 2"),
            std::string::npos);
  EXPECT_NE(Error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"BYTES\","
                  "\"data\":[\"\xff\"]}]}")
                .find("malformed JSON"),
            std::string::npos);
}

TEST(JsonCodecTest, DecodesFlatData) {
  auto r = Decode(
      R"({"id":"7","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2.5,3,4]}],
                     "outputs":[{"name":"y"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "7");
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values<float>(r->inputs[0]), (std::vector<float>{1, 2.5f, 3, 4}));
  EXPECT_EQ(r->requested_outputs, std::vector<std::string>{"y"});
}

TEST(JsonCodecTest, NestedAndFlatDataGiveTheSameBytes) {
  auto flat =
      Decode(R"({"inputs":[{"name":"x","shape":[2,3],"datatype":"INT32","data":[1,2,3,4,5,6]}]})");
  auto nested = Decode(
      R"({"inputs":[{"name":"x","shape":[2,3],"datatype":"INT32","data":[[1,2,3],[4,5,6]]}]})");
  ASSERT_TRUE(flat.ok() && nested.ok());
  EXPECT_EQ(flat->inputs[0].data, nested->inputs[0].data);
}

TEST(JsonCodecTest, EveryDatatypeDecodes) {
  struct Case {
    const char* type;
    const char* data;
    size_t bytes;
  };
  for (const Case& c :
       std::vector<Case>{{"BOOL", "[true,false]", 2},
                         {"UINT8", "[0,255]", 2},
                         {"UINT16", "[0,65535]", 4},
                         {"UINT32", "[0,4294967295]", 8},
                         {"UINT64", "[0,18446744073709551615]", 16},
                         {"INT8", "[-128,127]", 2},
                         {"INT16", "[-32768,32767]", 4},
                         {"INT32", "[-2147483648,2147483647]", 8},
                         {"INT64", "[-9223372036854775808,9223372036854775807]", 16},
                         {"FP32", "[-1.5,3]", 8},
                         {"FP64", "[1e300,-2]", 16}}) {
    auto r = Decode(std::string(R"({"inputs":[{"name":"x","shape":[2],"datatype":")") + c.type +
                    R"(","data":)" + c.data + "}]}");
    ASSERT_TRUE(r.ok()) << c.type << ": " << r.status();
    EXPECT_EQ(r->inputs[0].data.size(), c.bytes) << c.type;
  }
}

TEST(JsonCodecTest, RangeChecksPerDatatype) {
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[256]}]})")
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[-129]}]})")
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT32","data":[-1]}]})")
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT64","data":[1.5]}]})")
                .find("not an integer"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]})")
                .find("not a boolean"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["1"]}]})")
                .find("not a number"),
            std::string::npos);
}

// Found by review helper-126: FP32's largest value as pillar writes it (3.4028235e+38) was out of
// range, since the text is a little above it and the check compared doubles.
TEST(JsonCodecTest, WhatRoundsToFp32sLargestValueIsInRange) {
  auto r = Decode(R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32",)"
                  R"("data":[3.4028235e+38,-3.4028235e38,3.4028235677973362e38]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  float values[3];
  ASSERT_EQ(r->inputs[0].data.size(), sizeof(values));
  std::memcpy(values, r->inputs[0].data.data(), sizeof(values));
  EXPECT_EQ(values[0], std::numeric_limits<float>::max());
  EXPECT_EQ(values[1], -std::numeric_limits<float>::max());
  EXPECT_EQ(values[2], std::numeric_limits<float>::max());
  // From the midpoint up, it would be infinity.
  for (const char* v : {"3.4028235677973366e38", "-3.5e38", "1e39"}) {
    const std::string error =
        Error(std::string(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[)") + v +
              "]}]}");
    EXPECT_NE(error.find("out of range for FP32"), std::string::npos) << v << ": " << error;
  }
}

TEST(JsonCodecTest, PreciseErrors) {
  EXPECT_NE(Error("").find("malformed JSON"), std::string::npos);
  EXPECT_NE(Error("{").find("malformed JSON"), std::string::npos);
  EXPECT_NE(Error("null").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(Error("{}").find("missing 'inputs'"), std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[]})").find("'inputs' is empty"), std::string::npos);
  EXPECT_NE(Error(R"({"inputs":{}})").find("'inputs' must be an array"), std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]})").find("no 'name'"),
            std::string::npos);
  EXPECT_NE(
      Error(R"({"inputs":[{"name":"x","datatype":"FP32","data":[1]}]})").find("missing 'shape'"),
      std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"data":[1]}]})").find("missing 'datatype'"),
            std::string::npos);
  EXPECT_NE(
      Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]})").find("missing 'data'"),
      std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[1]}]})")
                .find("non-negative"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,2,3]}]})")
                .find("more elements"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1]}]})")
                .find("has 1 elements but 'shape' needs 3"),
            std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP16","data":[1]}]})")
                .find("FP16 is not supported"),
            std::string::npos);
  EXPECT_NE(
      Error(
          R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]},{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})")
          .find("appears twice"),
      std::string::npos);
  EXPECT_NE(Error(R"({"inputs":[],"inputs":[]})").find("duplicate key 'inputs'"),
            std::string::npos);
  EXPECT_NE(Error("{\"id\":\"\xc3\x28\",\"inputs\":[]}").find("malformed JSON"), std::string::npos);
}

TEST(JsonCodecTest, HugeShapesAreRefusedBeforeAllocating) {
  EXPECT_NE(
      Error(
          R"({"inputs":[{"name":"x","shape":[4294967296,4294967296],"datatype":"FP32","data":[]}]})")
          .find("more elements than allowed"),
      std::string::npos);
}

TEST(JsonCodecTest, AHugeShapeWithLittleDataGetsTheCountMismatch) {
  // 60 million FP64 elements would be 480 MB; the body is 80 bytes. The decoder reserves only
  // what the body could hold, then reports the mismatch.
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[60000000],"datatype":"FP64","data":[1]}]})")
                .find("'data' has 1 elements but 'shape' needs 60000000"),
            std::string::npos);
}

TEST(JsonCodecTest, DeepNestingIsRefused) {
  std::string deep = std::string(40, '[') + "1" + std::string(40, ']');
  EXPECT_NE(Error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":)" + deep + "}]}")
                .find("nested too deeply"),
            std::string::npos);
}

std::string Input(std::string_view shape, std::string_view data) {
  return StrCat(R"({"inputs":[{"name":"x","datatype":"INT32","shape":)", shape, R"(,"data":)", data,
                "}]}");
}

TEST(JsonCodecTest, NestedDataMustMatchTheShapeNotJustTheCount) {
  // 64 values, but laid out as 2 rows of which the second is nested three deep.
  std::string attack = "[[0";
  for (int i = 1; i < 63; ++i) attack += ",0";
  attack += "],[[[1]]]]";
  EXPECT_EQ(Error(Input("[1,64]", attack)),
            "input 'x': nested 'data' does not match 'shape' [1,64]: data has 2 entries, but "
            "dimension 0 is 1");
  // The short form of the same attack from the finding.
  EXPECT_NE(
      Error(Input("[1,64]", "[[63],[[[1]]]]")).find("data has 2 entries, but dimension 0 is 1"),
      std::string::npos);
}

TEST(JsonCodecTest, RaggedRowsAreRefusedWithTheRowThatIsWrong) {
  EXPECT_EQ(Error(Input("[2,3]", "[[1,2,3],[4,5]]")),
            "input 'x': nested 'data' does not match 'shape' [2,3]: data[1] has 2 entries, but "
            "dimension 1 is 3");
  // Same element count as the shape, rows of the wrong lengths.
  EXPECT_NE(Error(Input("[2,3]", "[[1,2],[3,4,5,6]]")).find("data[0] has 2 entries"),
            std::string::npos);
  EXPECT_NE(Error(Input("[2,2,2]", "[[[1,2],[3,4]],[[5,6],[7]]]")).find("data[1][1] has 1 entries"),
            std::string::npos);
}

TEST(JsonCodecTest, NestingDeeperThanTheShapeIsRefused) {
  EXPECT_EQ(Error(Input("[2,2]", "[[1,2],[3,[4]]]")),
            "input 'x': 'data' is nested too deeply: data[1][1] is an array, but 'shape' [2,2] has "
            "2 dimensions");
  // One row too many levels: [[1,2,3]] is not a vector of 3.
  EXPECT_NE(Error(Input("[3]", "[[1,2,3]]")).find("data has 1 entries, but dimension 0 is 3"),
            std::string::npos);
  EXPECT_NE(Error(Input("[1,1]", "[[[1]]]")).find("nested too deeply: data[0][0] is an array"),
            std::string::npos);
}

TEST(JsonCodecTest, NestingShallowerThanTheShapeIsRefused) {
  EXPECT_EQ(Error(Input("[2,2]", "[[1,2],3]")),
            "input 'x': 'data' is not nested deeply enough: data[1] is a value, but dimension 1 "
            "of 'shape' [2,2] needs an array of 2");
  EXPECT_NE(
      Error(Input("[1,2,2]", "[[1,2,3,4]]")).find("data[0] has 4 entries, but dimension 1 is 2"),
      std::string::npos);
  // Flat first, then an array: neither spelling.
  EXPECT_NE(Error(Input("[2,1]", "[1,[2]]")).find("mixes values and arrays"), std::string::npos);
}

TEST(JsonCodecTest, FlatAndExactlyNestedDataAreAccepted) {
  for (std::string_view data : {"[1,2,3,4,5,6]", "[[1,2,3],[4,5,6]]"}) {
    auto r = Decode(Input("[2,3]", data));
    ASSERT_TRUE(r.ok()) << data << ": " << r.status();
    EXPECT_EQ(Values<int32_t>(r->inputs[0]), (std::vector<int32_t>{1, 2, 3, 4, 5, 6})) << data;
  }
  auto deep = Decode(Input("[2,1,2]", "[[[1,2]],[[3,4]]]"));
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(Values<int32_t>(deep->inputs[0]), (std::vector<int32_t>{1, 2, 3, 4}));
  // Empty dimensions: nested rows of nothing, or flat nothing.
  EXPECT_TRUE(Decode(Input("[2,0]", "[[],[]]")).ok());
  EXPECT_TRUE(Decode(Input("[2,0]", "[]")).ok());
  EXPECT_NE(Error(Input("[2,0]", "[[]]")).find("data has 1 entries, but dimension 0 is 2"),
            std::string::npos);
}

TEST(JsonCodecTest, EncodesResponses) {
  InferenceResponse response;
  response.model_name = "m";
  response.model_version = "2";
  response.id = "q";
  Tensor t{"y", DataType::kFp32, {1, 2}, std::string(8, '\0')};
  float values[2] = {0.25f, -1};
  std::memcpy(t.data.data(), values, 8);
  response.outputs.push_back(t);
  Tensor b{"flags", DataType::kBool, {2}, std::string("\x01\x00", 2)};
  response.outputs.push_back(b);
  EXPECT_EQ(
      EncodeInferenceResponse(response),
      R"({"model_name":"m","model_version":"2","id":"q","outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[0.25,-1]},{"name":"flags","datatype":"BOOL","shape":[2],"data":[true,false]}]})");
}

TEST(JsonCodecTest, ARequestEncodedForAnUpstreamDecodesToTheSameRequest) {
  InferenceRequest request;
  request.id = "r\"1";
  Tensor x{"x", DataType::kInt64, {2}, std::string(16, '\0')};
  int64_t values[2] = {-5, 1LL << 40};
  std::memcpy(x.data.data(), values, 16);
  request.inputs.push_back(x);
  request.inputs.push_back(Tensor{"on", DataType::kBool, {1}, std::string("\x01", 1)});
  request.requested_outputs = {"y"};
  const std::string json = EncodeInferenceRequest(request);
  EXPECT_EQ(
      json,
      R"({"id":"r\"1","inputs":[{"name":"x","datatype":"INT64","shape":[2],"data":[-5,1099511627776]},{"name":"on","datatype":"BOOL","shape":[1],"data":[true]}],"outputs":[{"name":"y"}]})");
  absl::StatusOr<InferenceRequest> back = InferenceRequestDecoder().Decode(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, request.id);
  ASSERT_EQ(back->inputs.size(), 2u);
  EXPECT_EQ(back->inputs[0].data, x.data);
  EXPECT_EQ(back->requested_outputs, request.requested_outputs);
}

TEST(JsonCodecTest, AnUpstreamReplyDecodesToWhatWasEncoded) {
  InferenceResponse response;
  response.model_name = "digits";
  response.model_version = "3";
  Tensor y{"y", DataType::kFp32, {1, 2}, std::string(8, '\0')};
  float values[2] = {0.5f, -2};
  std::memcpy(y.data.data(), values, 8);
  response.outputs.push_back(y);
  InferenceResponseDecoder decoder;
  absl::StatusOr<InferenceResponse> back = decoder.Decode(EncodeInferenceResponse(response));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model_name, "digits");
  EXPECT_EQ(back->model_version, "3");
  ASSERT_EQ(back->outputs.size(), 1u);
  EXPECT_EQ(back->outputs[0].shape, y.shape);
  EXPECT_EQ(back->outputs[0].data, y.data);
}

TEST(JsonCodecTest, NegativeZeroKeepsItsSignThroughAGateway) {
  // An upstream pillar wrote -0.0f as "-0", which the gateway read as the integer 0 and passed
  // on as +0.0: a model's output changed in transit.
  InferenceResponse response;
  response.model_name = "m";
  Tensor y{"y", DataType::kFp32, {3}, std::string(12, '\0')};
  const float values[3] = {-0.0f, 0.0f, -1.5f};
  std::memcpy(y.data.data(), values, sizeof values);
  response.outputs.push_back(y);
  const std::string json = EncodeInferenceResponse(response);
  EXPECT_NE(json.find("\"data\":[-0.0,0,-1.5]"), std::string::npos) << json;
  absl::StatusOr<InferenceResponse> back = InferenceResponseDecoder().Decode(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->outputs.size(), 1u);
  const std::vector<float> read = Values<float>(back->outputs[0]);
  ASSERT_EQ(read.size(), 3u);
  EXPECT_TRUE(std::signbit(read[0]));
  EXPECT_FALSE(std::signbit(read[1]));
  EXPECT_EQ(back->outputs[0].data, y.data);
  // The same for an FP64 input a gateway encodes for its upstream.
  InferenceRequest request;
  Tensor x{"x", DataType::kFp64, {1}, std::string(8, '\0')};
  const double minus_zero = -0.0;
  std::memcpy(x.data.data(), &minus_zero, 8);
  request.inputs.push_back(x);
  absl::StatusOr<InferenceRequest> sent = Decode(EncodeInferenceRequest(request));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->inputs[0].data, x.data);
}

std::string ReplyError(std::string_view body) {
  absl::StatusOr<InferenceResponse> r = InferenceResponseDecoder().Decode(body);
  EXPECT_FALSE(r.ok()) << body;
  return std::string(r.status().message());
}

TEST(JsonCodecTest, ABadUpstreamReplyIsRefusedWithWhatIsWrong) {
  EXPECT_NE(ReplyError("{\"outputs\":[").find("malformed JSON"), std::string::npos);
  EXPECT_EQ(ReplyError("[]"), "the reply must be a JSON object");
  EXPECT_EQ(ReplyError("{\"model_name\":\"m\"}"), "missing 'outputs'");
  EXPECT_EQ(ReplyError(R"({"error":"CUDA out of memory","outputs":[]})"),
            "the reply carries an error: CUDA out of memory");
  EXPECT_EQ(ReplyError(R"({"outputs":[],"outputs":[]})"), "duplicate key 'outputs'");
  EXPECT_EQ(ReplyError(R"({"outputs":[{"datatype":"FP32","shape":[1],"data":[1]}]})"),
            "an output has no 'name'");
  EXPECT_EQ(ReplyError(R"({"outputs":[{"name":"y","datatype":"FP32","shape":[2],"data":[1]}]})"),
            "output 'y': 'data' has 1 elements but 'shape' needs 2");
  EXPECT_EQ(ReplyError(R"({"outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[1]},)"
                       R"({"name":"y","datatype":"FP32","shape":[1],"data":[1]}]})"),
            "output 'y' appears twice");
  EXPECT_EQ(ReplyError(R"({"model_name":7,"outputs":[]})"), "'model_name' must be a string");
  EXPECT_NE(ReplyError(R"({"outputs":[{"name":"y","datatype":"INT8","shape":[1],"data":[300]}]})")
                .find("out of range"),
            std::string::npos);
}

TEST(JsonCodecTest, ANameInAnErrorIsCutShort) {
  const std::string name(100'000, 'n');
  const std::string message = ReplyError(R"({"outputs":[{"name":")" + name +
                                         R"(","datatype":"FP32","shape":[2],"data":[1]}]})");
  EXPECT_LT(message.size(), 200u) << message.size();
  EXPECT_NE(message.find("'data' has 1 elements but 'shape' needs 2"), std::string::npos);
}

TEST(JsonCodecTest, DecoderIsReusable) {
  InferenceRequestDecoder decoder;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(decoder.Decode("{").ok());
    EXPECT_TRUE(
        decoder.Decode(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})")
            .ok());
  }
}

}  // namespace
}  // namespace pillar::protocol
