//===- ExecuTorchBackendTest.cpp - Core ML programs in ExecuTorch's runtime ===//
//
// ExecuTorch's own runtime (its Module: program loader, memory planning,
// kernels, the aten::copy_ write-back) runs the committed export_llm programs
// with anefit's backend serving the Core ML delegates; the results are held
// against anefit's Stepper, which imitates that runtime. Built only when
// ExecuTorch's runtime was found, so every test here runs.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "executorch/CoreMLBackend.h"
#include "io/ModelIO.h"
#include "io/Pte.h"
#include "runtime/ExecuTorch.h"
#include "runtime/ModelRun.h"
#include "runtime/Stepper.h"
#include "support/FileSystem.h"
#include "support/TestUtil.h"

#include <executorch/runtime/backend/interface.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace anefit {
namespace {

using runtime::DeclaredInput;
using runtime::ExecuTorchEngine;
using runtime::Tensor;
using test::errorOf;
using test::ScratchDir;
using ::testing::HasSubstr;
namespace et = executorch::runtime;

std::string fixture(const std::string &name) {
  return std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/" + name + ".pte";
}

std::shared_ptr<ExecuTorchEngine> engine() {
  std::string why;
  auto e = ExecuTorchEngine::load(&why);
  EXPECT_TRUE(e) << why;
  return e;
}

/// ExecuTorch's run of an export_llm program vs the Stepper on its Core ML
/// delegate with the program's write-back (hostCarries), step by step.
void expectSameAsStepper(const std::string &name, double tolerance) {
  SCOPED_TRACE(name);
  auto et = engine();
  ASSERT_TRUE(et);
  std::string path = fixture(name);
  std::optional<int64_t> vocab = et->metadataInt(path, "get_vocab_size");
  ASSERT_TRUE(vocab);
  EXPECT_EQ(*vocab, 256);
  runtime::LlmDecodeInputs inputs(*vocab, 7);
  const int64_t steps = 8;
  auto got = et->run(path, "forward", steps, {}, std::ref(inputs));
  ASSERT_EQ(got.size(), size_t(steps));

  auto model = loadModel(path);
  const Function &fn = *model->defaultFunction();
  runtime::Stepper stepper(fn, runtime::hostCarries(*model, fn),
                           runtime::runStepperOptions(runtime::RunOptions{}));
  const auto &external = stepper.externalInputs();
  ASSERT_EQ(external.size(), 2u); // tokens and the position, the method's inputs in order
  for (int64_t k = 0; k < steps; ++k) {
    runtime::TensorMap in;
    for (size_t i = 0; i < external.size(); ++i)
      in[external[i]->name] = *inputs.drawn(k, i);
    auto outs = stepper.step(in);
    const Tensor *logits = nullptr;
    for (const auto &o : outs)
      if (o.tensor.numElements() == *vocab)
        logits = &o.tensor;
    ASSERT_TRUE(logits);
    ASSERT_EQ(got[k].size(), 1u);
    EXPECT_EQ(got[k][0].numElements(), *vocab);
    runtime::Comparison c({tolerance, 0});
    c.compare("step " + std::to_string(k) + ": logits", *logits, got[k][0]);
    EXPECT_TRUE(c.ok()) << c.firstMismatch();
  }
}

TEST(ExecuTorchBackend, RunsTheFp16ExportLikeTheStepper) {
  expectSameAsStepper("lfm2_export_llm_fp16", 0.0);
}

TEST(ExecuTorchBackend, RunsThe4wExportLikeTheStepper) {
  expectSameAsStepper("lfm2_export_llm_4w", 0.0);
}

TEST(ExecuTorchBackend, KeepsCoreMLStatesPerDelegate) {
  // The buffers are Core ML states here: the backend keeps them between
  // calls, and the Stepper keeps them in its state context.
  expectSameAsStepper("lfm2_export_llm_states", 0.0);
}

TEST(ExecuTorchBackend, MetadataMethodsAnswer) {
  auto et = engine();
  ASSERT_TRUE(et);
  std::string path = fixture("lfm2_export_llm_fp16");
  EXPECT_EQ(et->metadataInt(path, "get_max_context_len"), 32);
  EXPECT_EQ(et->metadataInt(path, "get_n_layers"), 16);
  EXPECT_EQ(et->metadataInt(path, "no_such_method"), std::nullopt);
  EXPECT_EQ(et->version(), ANEFIT_EXECUTORCH_VERSION);
}

TEST(ExecuTorchBackend, AProgramNeedingAnOperatorTheRuntimeLacksSaysSo) {
  // Three Core ML delegates with ExecuTorch's silu between them: the pip
  // wheel's Linux kernels (1.5.1) have no aten::silu.out, so ExecuTorch
  // itself refuses the method; the message says which error, in one line.
  auto et = engine();
  ASSERT_TRUE(et);
  runtime::LlmDecodeInputs inputs(256, 7);
  std::string error =
      errorOf([&] { et->run(fixture("llama_coreml_multi"), "forward", 1, {}, std::ref(inputs)); });
  EXPECT_THAT(error, HasSubstr("llama_coreml_multi.pte: method 'forward': ExecuTorch error 0x14 "
                               "(Error::OperatorMissing) loading the method: kernel "
                               "'aten::silu.out' not found"));
}

/// The bytes of `path`'s first Core ML payload.
std::string payloadOf(const std::string &path) {
  auto pte = PteFile::open(path);
  for (const PteDelegate &d : pte->delegates())
    if (d.isCoreML()) {
      auto p = pte->payload(d);
      return std::string(reinterpret_cast<const char *>(p.data()), p.size());
    }
  ADD_FAILURE() << "no Core ML payload in " << path;
  return "";
}

et::Result<et::DelegateHandle *> initWith(const std::string &bytes) {
  char message[256];
  EXPECT_EQ(anefit_executorch_register("fp32", 1, 0, message, sizeof message), 0) << message;
  et::BackendInterface *backend = et::get_backend_class("CoreMLBackend");
  EXPECT_TRUE(backend);
  et::BackendInitContext context(nullptr, nullptr, "forward");
  et::FreeableBuffer buffer(bytes.data(), bytes.size(), nullptr);
  return backend->init(context, &buffer, {});
}

/// Named data holding one payload under one key, as a program that shares
/// weights between methods holds its Core ML payloads.
class OnePayload final : public et::NamedDataMap {
public:
  OnePayload(std::string key, std::string bytes) : key_(std::move(key)), bytes_(std::move(bytes)) {}
  et::Result<const et::TensorLayout> get_tensor_layout(std::string_view) const override {
    return et::Error::NotImplemented;
  }
  et::Result<et::FreeableBuffer> get_data(std::string_view key) const override {
    if (key != key_)
      return et::Error::NotFound;
    return et::FreeableBuffer(bytes_.data(), bytes_.size(), nullptr);
  }
  et::Error load_data_into(std::string_view, void *, size_t) const override {
    return et::Error::NotImplemented;
  }
  et::Result<uint32_t> get_num_keys() const override { return 1u; }
  et::Result<const char *> get_key(uint32_t) const override { return key_.c_str(); }

private:
  std::string key_, bytes_;
};

TEST(ExecuTorchBackend, FollowsACmjrReferenceIntoNamedData) {
  char message[256];
  ASSERT_EQ(anefit_executorch_register("fp32", 1, 0, message, sizeof message), 0) << message;
  et::BackendInterface *backend = et::get_backend_class("CoreMLBackend");
  ASSERT_TRUE(backend);
  OnePayload named("shared_0", payloadOf(fixture("lfm2_export_llm_fp16")));
  std::string reference = R"(CMJR{"key": "shared_0"})";
  et::FreeableBuffer buffer(reference.data(), reference.size(), nullptr);
  et::BackendInitContext context(nullptr, nullptr, "forward", &named);
  auto r = backend->init(context, &buffer, {});
  ASSERT_TRUE(r.ok());
  backend->destroy(r.get());

  // A key the program's named data does not hold, and no named data at all.
  std::string missing = R"(CMJR{"key": "shared_1"})";
  et::FreeableBuffer other(missing.data(), missing.size(), nullptr);
  auto bad = backend->init(context, &other, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), et::Error::DelegateInvalidCompatibility);
  et::BackendInitContext none(nullptr, nullptr, "forward");
  et::FreeableBuffer again(reference.data(), reference.size(), nullptr);
  EXPECT_FALSE(backend->init(none, &again, {}).ok());
}

TEST(ExecuTorchBackend, ATruncatedPayloadFailsInit) {
  std::string bytes = payloadOf(fixture("lfm2_export_llm_fp16"));
  long live = anefit_executorch_live_delegates();
  auto r = initWith(bytes.substr(0, bytes.size() / 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), et::Error::DelegateInvalidCompatibility);
  EXPECT_EQ(anefit_executorch_live_delegates(), live);
}

TEST(ExecuTorchBackend, AnOpWithoutAKernelFailsInitNamingIt) {
  // A payload whose model has local_response_norm, which the interpreter
  // cannot run: init refuses it (not the first call).
  ScratchDir dir;
  auto model = loadModelText(R"(main[CoreML7](%x: (1, 4, 2, 2, fp32)(Tensor)) {
  block0() {
    %size: (int32)(Tensor) = const(val=3, name="size")
    %y: (1, 4, 2, 2, fp32)(Tensor) = local_response_norm(x=%x, size=%size, name="y")
  } -> (%y)
}
)",
                             "lrn.mil", dir.path().string());
  std::string package = dir.file("lrn.mlpackage");
  saveModel(*model, package);
  std::vector<FlatFileOut> files;
  for (const auto &entry : std::filesystem::recursive_directory_iterator(package))
    if (entry.is_regular_file()) {
      FlatFileOut f;
      f.path = "model.mlpackage/" + std::filesystem::relative(entry.path(), package).string();
      f.data.addFile(entry.path().string(), entry.file_size());
      files.push_back(std::move(f));
    }
  FlatFileOut metadata;
  metadata.path = "metadata.json";
  metadata.data.addOwned(R"({"inputNames": ["x"], "outputNames": ["y"]})");
  files.push_back(std::move(metadata));
  ByteChunks flat = writeFlattenedDirectory("lowered_module", std::move(files));
  std::string payloadPath = dir.file("payload.bin");
  {
    AtomicFile out(payloadPath, OutputOptions::replacing());
    flat.writeTo(out);
    out.commit();
  }
  std::ifstream in(payloadPath, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto r = initWith(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), et::Error::DelegateInvalidCompatibility);
}

TEST(ExecuTorchBackend, AWrongArgumentCountFailsExecute) {
  std::string bytes = payloadOf(fixture("lfm2_export_llm_fp16"));
  auto r = initWith(bytes);
  ASSERT_TRUE(r.ok());
  et::BackendInterface *backend = et::get_backend_class("CoreMLBackend");
  et::BackendExecutionContext context;
  et::EValue one(int64_t(1));
  et::EValue *args[] = {&one};
  EXPECT_EQ(backend->execute(context, r.get(), {args, 1}), et::Error::InvalidArgument);
  long live = anefit_executorch_live_delegates();
  backend->destroy(r.get());
  EXPECT_EQ(anefit_executorch_live_delegates(), live - 1);
}

TEST(ExecuTorchBackend, ACorruptProgramEndsInOneLine) {
  // The payload's middle overwritten: ExecuTorch's load_method fails with
  // the backend's error code, and the message carries anefit's line.
  ScratchDir dir;
  std::string path = dir.file("corrupt.pte");
  std::filesystem::copy_file(fixture("lfm2_export_llm_fp16"), path);
  auto pte = PteFile::open(fixture("lfm2_export_llm_fp16"));
  uint64_t at = 0;
  for (const PteDelegate &d : pte->delegates())
    if (d.isCoreML())
      at = uint64_t(pte->payload(d).data() - pte->bytes().data()) + pte->payload(d).size() - 64;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(std::string(64, '\xff').data(), 64);
  }
  auto et = engine();
  ASSERT_TRUE(et);
  runtime::LlmDecodeInputs inputs(256, 7);
  std::string error = errorOf([&] { et->run(path, "forward", 1, {}, std::ref(inputs)); });
  EXPECT_THAT(error, HasSubstr("corrupt.pte: method 'forward': ExecuTorch error 0x"));
  EXPECT_THAT(error, HasSubstr("loading the method"));
  EXPECT_THAT(error, HasSubstr("anefit CoreMLBackend"));
}

TEST(ExecuTorchBackend, RegisteringTwiceKeepsOneBackend) {
  char message[256] = {0};
  EXPECT_EQ(anefit_executorch_register("fp32", 0, 0, message, sizeof message), 0);
  size_t count = et::get_num_registered_backends();
  EXPECT_EQ(anefit_executorch_register("fp16", 2, 0, message, sizeof message), 0);
  EXPECT_EQ(et::get_num_registered_backends(), count);
  EXPECT_EQ(anefit_executorch_register("fp8", 0, 0, message, sizeof message), 2);
  EXPECT_THAT(message, HasSubstr("fp8"));
  EXPECT_EQ(anefit_executorch_register("fp32", -1, 0, message, sizeof message), 2);
  EXPECT_THAT(message, HasSubstr("threads"));
  EXPECT_EQ(anefit_executorch_register("fp32", 0, 0, message, sizeof message), 0);
}

} // namespace
} // namespace anefit
