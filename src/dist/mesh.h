// DeviceMesh: the world's ranks arranged as a grid with named axes, the last axis
// varying fastest (so with axes {"ep_fsdp": 2, "ep": 2}, ranks {0,1} and {2,3} form the
// ep groups, {0,2} and {1,3} the ep_fsdp groups), and one Comm per axis slice.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm.h"

namespace glint {

class DeviceMesh {
 public:
  // Collective: every rank of `world` constructs the mesh with the same axes. Throws
  // glint::Error naming the axes when their sizes do not multiply to the world size.
  DeviceMesh(std::shared_ptr<Comm> world, std::vector<std::pair<std::string, int>> axes);

  Comm& world() { return *world_; }
  Comm& axis(const std::string& name);               // this rank's group along `name`
  std::shared_ptr<Comm> axis_comm(const std::string& name);  // the same, shared
  int size(const std::string& name) const;           // ranks along `name`
  int coordinate(const std::string& name) const;     // this rank's index along `name`
  // The world ranks of this rank's group along `name`, ascending.
  std::vector<int> axis_ranks(const std::string& name) const;

 private:
  size_t index_of(const std::string& name) const;
  std::shared_ptr<Comm> world_;
  std::vector<std::pair<std::string, int>> axes_;
  std::vector<int> coords_;
  std::vector<std::shared_ptr<Comm>> comms_;
};

}  // namespace glint
