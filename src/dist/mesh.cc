#include "dist/mesh.h"

#include "core/error.h"

namespace glint {

DeviceMesh::DeviceMesh(std::shared_ptr<Comm> world, std::vector<std::pair<std::string, int>> axes)
    : world_(std::move(world)), axes_(std::move(axes)) {
  int product = 1;
  std::string shape;
  for (const auto& [name, n] : axes_) {
    GLINT_CHECK(n >= 1, "device mesh: axis '", name, "' has size ", n);
    product *= n;
    shape += (shape.empty() ? "" : " x ") + name + "=" + std::to_string(n);
  }
  GLINT_CHECK(product == world_->size(), "device mesh ", shape, " holds ", product,
              " ranks but the world has ", world_->size());
  // Row-major coordinates: the last axis varies fastest.
  int rest = world_->rank();
  coords_.assign(axes_.size(), 0);
  for (size_t a = axes_.size(); a-- > 0;) {
    coords_[a] = rest % axes_[a].second;
    rest /= axes_[a].second;
  }
  for (const auto& axis : axes_) {
    std::vector<int> ranks = axis_ranks(axis.first);
    comms_.push_back(ranks.size() == size_t(world_->size()) ? world_
                                                             : world_->subgroup(ranks, "mesh." + axis.first));
  }
}

size_t DeviceMesh::index_of(const std::string& name) const {
  for (size_t a = 0; a < axes_.size(); ++a)
    if (axes_[a].first == name) return a;
  fail("device mesh has no axis '", name, "'");
}

Comm& DeviceMesh::axis(const std::string& name) { return *comms_[index_of(name)]; }
std::shared_ptr<Comm> DeviceMesh::axis_comm(const std::string& name) { return comms_[index_of(name)]; }
int DeviceMesh::size(const std::string& name) const { return axes_[index_of(name)].second; }
int DeviceMesh::coordinate(const std::string& name) const { return coords_[index_of(name)]; }

std::vector<int> DeviceMesh::axis_ranks(const std::string& name) const {
  size_t a = index_of(name);
  std::vector<int> out;
  for (int i = 0; i < axes_[a].second; ++i) {
    std::vector<int> c = coords_;
    c[a] = i;
    int r = 0;
    for (size_t k = 0; k < axes_.size(); ++k) r = r * axes_[k].second + c[k];
    out.push_back(r);
  }
  return out;
}

}  // namespace glint
