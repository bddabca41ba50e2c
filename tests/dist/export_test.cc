// A checkpoint is always usable: `glint export` writes what it trained as the finished run
// writes it (the adapter, each tenant's, or the model), from a checkpoint saved on any mesh;
// generate and merge take a checkpoint as --adapter; a resume with nothing left to train
// writes the outputs; the resume line after a stop starts the job as it was started.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/fs.h"
#include "dist/tiny_run.h"

namespace {

namespace fs = std::filesystem;
using glint::read_file;
using glint::testing::launch;
using glint::testing::RunResult;
using glint::testing::run_glint;

struct Mesh {
  int ranks;
  std::string flags;
};

const char* kRun = " --steps 3 --batch-size 4 --save-every 3 --eval-every 0 --lora-targets all --seed 5";

// The export of a run's last checkpoint holds the very tensors of the adapter the run
// wrote when it finished: on one process, with experts sharded (--ep 2), with layers
// sharded (--fsdp), and both over four ranks.
TEST(CheckpointExport, EveryMeshsCheckpointExportsAsTheFinishedRunsAdapter) {
  const std::string d = glint::testing::fresh_temp_dir("export_meshes");
  const std::string model = glint::testing::make_model(d);
  const std::string data = glint::testing::make_data(d + "/data.jsonl", 24, 1);
  int k = 0;
  for (const Mesh& m : {Mesh{1, ""}, Mesh{2, "--ep 2"}, Mesh{2, "--fsdp"}, Mesh{4, "--ep 2 --fsdp"}}) {
    SCOPED_TRACE(std::to_string(m.ranks) + " ranks " + m.flags);
    const std::string out = d + "/run" + std::to_string(k++);
    RunResult r = launch(m.ranks, "train --model " + model + " --data " + data + kRun + " " + m.flags + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_glint("export " + out + "/checkpoints/step-3 --output " + out + "/exported");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("exported the adapter of step 3"), std::string::npos) << r.output;
    EXPECT_EQ(read_file(out + "/exported/adapter_model.safetensors"), read_file(out + "/adapter/adapter_model.safetensors"));
    EXPECT_EQ(read_file(out + "/exported/adapter_config.json"), read_file(out + "/adapter/adapter_config.json"));
  }
}

// An interrupted run (--stop-after) has no OUT/adapter: its checkpoint is tried with
// generate and merged as a PEFT directory would be, and exported. Resuming with the
// step it stopped at as --steps writes the outputs instead of refusing.
TEST(CheckpointExport, AnInterruptedRunsCheckpointIsGeneratedMergedAndFinished) {
  const std::string d = glint::testing::fresh_temp_dir("export_stopped");
  const std::string model = glint::testing::make_model(d);
  const std::string data = glint::testing::make_data(d + "/data.jsonl", 24, 2);
  RunResult r = run_glint("train --model " + model + " --data " + data +
                          " --steps 6 --stop-after 3 --batch-size 4 --eval-every 0 --output " + d + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_FALSE(fs::exists(d + "/run/adapter"));
  EXPECT_NE(r.output.find("to continue: glint train --resume " + d + "/run"), std::string::npos) << r.output;
  r = run_glint("export " + d + "/run --output " + d + "/adapter");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // generate: the checkpoint and its export give the same tokens (greedy).
  const std::string gen = "generate --model " + model + " --prompt-ids 1,2,3 --max-new-tokens 6 --temperature 0 --adapter ";
  RunResult a = run_glint(gen + d + "/run/checkpoints/step-3"), b = run_glint(gen + d + "/adapter");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.output, b.output);
  // merge: the same merged weights.
  r = run_glint("merge --model " + model + " --adapter " + d + "/run --output " + d + "/merged_ckpt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_glint("merge --model " + model + " --adapter " + d + "/adapter --output " + d + "/merged_peft");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(d + "/merged_ckpt/model.safetensors"), read_file(d + "/merged_peft/model.safetensors"));
  // Nothing left to train at --steps 3: the run's outputs, from its checkpoint.
  r = run_glint("train --resume " + d + "/run --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nothing is left to train"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d + "/run/adapter/adapter_model.safetensors"), read_file(d + "/adapter/adapter_model.safetensors"));
  // An existing export is not overwritten without --overwrite.
  r = run_glint("export " + d + "/run --output " + d + "/adapter");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
}

// A tenant run's checkpoint exports each tenant's adapter as the run wrote it; a full
// fine-tuning checkpoint (layers sharded over two ranks) exports the model the run wrote.
TEST(CheckpointExport, TenantAndFullCheckpointsExportAsTheirRunsOutputs) {
  const std::string d = glint::testing::fresh_temp_dir("export_kinds");
  const std::string model = glint::testing::make_model(d);
  const std::string a = glint::testing::make_data(d + "/a.jsonl", 16, 3), b = glint::testing::make_data(d + "/b.jsonl", 16, 4);
  RunResult r = run_glint("train --model " + model + " --tenant name=a,r=4,data=" + a + ",batch=4 --tenant name=b,r=2,data=" +
                          b + ",batch=2 --steps 2 --save-every 2 --eval-every 0 --output " + d + "/tenants");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_glint("export " + d + "/tenants --output " + d + "/tenants_out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* t : {"a", "b"})
    EXPECT_EQ(read_file(d + "/tenants_out/" + t + "/adapter_model.safetensors"),
              read_file(d + "/tenants/" + t + "/adapter/adapter_model.safetensors"))
        << t;
  r = run_glint("export " + d + "/tenants --tenant b --output " + d + "/b_out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(d + "/b_out/adapter_model.safetensors"), read_file(d + "/tenants/b/adapter/adapter_model.safetensors"));
  // generate without --tenant on a tenant checkpoint: told to choose, by name.
  r = run_glint("generate --model " + model + " --prompt-ids 1,2 --max-new-tokens 2 --adapter " + d + "/tenants");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("a, b"), std::string::npos) << r.output;

  r = launch(2, "train --model " + model + " --data " + a +
                    " --full --fsdp --steps 2 --batch-size 4 --save-every 2 --eval-every 0 --output " + d + "/full");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_glint("export " + d + "/full --output " + d + "/full_out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported the model of step 2"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d + "/full_out/model.safetensors"), read_file(d + "/full/model/model.safetensors"));
  // A full checkpoint is no adapter: said so, with the way to use it.
  r = run_glint("generate --model " + model + " --prompt-ids 1,2 --max-new-tokens 2 --adapter " + d + "/full");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("full fine-tuning checkpoint"), std::string::npos) << r.output;
}

// The line a stopped multi-rank run prints to continue it starts the ranks as the run
// did, and it works; resumed on one process instead, the mesh error says how.
TEST(CheckpointExport, TheResumeLineAfterGlintLaunchStartsTheSameJob) {
  const std::string d = glint::testing::fresh_temp_dir("export_resume_line");
  const std::string model = glint::testing::make_model(d);
  const std::string data = glint::testing::make_data(d + "/data.jsonl", 24, 5);
  RunResult r = launch(2, "train --model " + model + " --data " + data +
                              " --ep 2 --steps 4 --stop-after 2 --batch-size 4 --eval-every 0 --output " + d + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string line = "glint launch -n 2 -- glint train --resume " + d + "/run";
  ASSERT_NE(r.output.find("to continue: " + line), std::string::npos) << r.output;
  // The printed line, with this build's binary for `glint`.
  r = glint::testing::run("GLINT_DIST_TIMEOUT_SECONDS=60 " + glint::testing::glint_bin() + " launch -n 2 -- " +
                          glint::testing::glint_bin() + " train --resume " + d + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d + "/run/adapter/adapter_model.safetensors"));
  // One process: --ep 2 (from the run's config) cannot hold; the error gives both ways.
  r = launch(2, "train --model " + model + " --data " + data +
                    " --ep 2 --steps 4 --stop-after 2 --batch-size 4 --eval-every 0 --output " + d + "/run2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_glint("train --resume " + d + "/run2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--ep 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("glint launch -n 2 -- glint train --resume " + d + "/run2"), std::string::npos) << r.output;
  r = run_glint("train --resume " + d + "/run2 --ep 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
