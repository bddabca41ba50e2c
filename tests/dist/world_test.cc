// World::from_env across nodes: torchrun, Slurm (srun) and OpenMPI describe the same
// rank of a 2-node job, each in its own variables.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "dist/world.h"
#include "test_util.h"

namespace {

// Sets the given variables (and clears every other launcher variable) for its lifetime.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                          "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                          "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID"})
      ::unsetenv(k);
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
    vars_ = vars;
  }
  ~Env() {
    for (const auto& kv : vars_) ::unsetenv(kv.first.c_str());
  }

 private:
  std::map<std::string, std::string> vars_;
};

void expect_rank_3_of_4_on_node_1(const glint::World& w) {
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.node, 1);
  EXPECT_EQ(w.num_nodes, 2);
  EXPECT_EQ(w.node_of(0), 0);
  EXPECT_EQ(w.node_of(2), 1);
  EXPECT_EQ(w.master_addr, "10.0.0.1");
}

TEST(World, TorchrunSlurmAndOpenMpiAgreeAcrossNodes) {
  {
    Env e({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"},
           {"MASTER_ADDR", "10.0.0.1"}});
    glint::World w = glint::World::from_env();
    EXPECT_EQ(w.launcher, "torchrun");
    expect_rank_3_of_4_on_node_1(w);
  }
  {
    // srun without --ntasks-per-node still sets SLURM_TASKS_PER_NODE.
    Env e({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "2(x2)"},
           {"SLURM_NODEID", "1"}, {"MASTER_ADDR", "10.0.0.1"}});
    glint::World w = glint::World::from_env();
    EXPECT_EQ(w.launcher, "slurm");
    expect_rank_3_of_4_on_node_1(w);
  }
  {
    Env e({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}});
    glint::World w = glint::World::from_env();
    EXPECT_EQ(w.launcher, "openmpi");
    expect_rank_3_of_4_on_node_1(w);
  }
}

TEST(World, RanksNotNumberedNodeByNodeAreRefused) {
  {
    // Slurm's cyclic distribution puts rank 2 on node 0 of 2, as its second task.
    Env e({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "2(x2)"},
           {"SLURM_NODEID", "0"}, {"MASTER_ADDR", "10.0.0.1"}});
    glint::testing::expect_error_naming([] { glint::World::from_env(); }, "SLURM_NODEID=0 but rank 2");
  }
  {
    Env e({{"RANK", "2"}, {"WORLD_SIZE", "5"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}});
    glint::testing::expect_error_naming([] { glint::World::from_env(); }, "not a multiple of the ranks per node");
  }
}

}  // namespace
