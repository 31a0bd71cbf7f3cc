#include "ops/view_chain.h"

#include <algorithm>
#include <utility>

namespace kaiwu {
namespace {

// A dim of the view: its factors (size, stride), outermost first; its size is
// their product (1 when empty). A Reshape that merges dims which are not
// contiguous in the base keeps their factors apart, so that a later Reshape
// can split them again (torch's heads: [L, B*H, d] and back to [B, H, L, d]).
using Factor = std::pair<int64_t, int64_t>;
using Dim = std::vector<Factor>;

int64_t SizeOf(const Dim& d) {
  int64_t s = 1;
  for (const Factor& f : d) s *= f.first;
  return s;
}

// Drops size-1 factors and merges neighbours that are contiguous.
Dim Simplify(const Dim& d) {
  Dim out;
  for (const Factor& f : d) {
    if (f.first == 1) continue;
    if (!out.empty() && out.back().second == f.first * f.second) {
      out.back() = {out.back().first * f.first, f.second};
    } else {
      out.push_back(f);
    }
  }
  return out;
}

bool Axis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= rank) return false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

bool Reshape(std::vector<Dim>* dims, std::vector<int64_t> target) {
  int64_t total = 1;
  for (const Dim& d : *dims) total *= SizeOf(d);
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0) {
      if (i >= dims->size()) return false;
      target[i] = SizeOf((*dims)[i]);
    }
    if (target[i] == -1) {
      if (infer >= 0) return false;
      infer = static_cast<int64_t>(i);
    } else if (target[i] < 0) {
      return false;
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || total % known != 0) return false;
    target[infer] = total / known;
  } else if (known != total) {
    return false;
  }
  // The factors in order, regrouped into the target's dims (splitting a factor
  // where a dim ends inside it).
  Dim all;
  for (const Dim& d : *dims) all.insert(all.end(), d.begin(), d.end());
  std::vector<Factor> flat = Simplify(all);
  size_t next = 0;
  std::vector<Dim> out;
  for (int64_t t : target) {
    Dim d;
    int64_t need = t;
    while (need > 1) {
      if (next >= flat.size()) return false;
      Factor& f = flat[next];
      if (need % f.first == 0) {
        d.push_back(f);
        need /= f.first;
        ++next;
      } else if (f.first % need == 0) {
        d.push_back({need, f.second * (f.first / need)});
        f = {f.first / need, f.second};
        need = 1;
      } else {
        return false;
      }
    }
    out.push_back(std::move(d));
  }
  if (next != flat.size()) return false;
  *dims = std::move(out);
  return true;
}

}  // namespace

bool ComposeView(const Shape& base, const std::vector<int64_t>& recipe,
                 const std::function<std::vector<int64_t>(int64_t)>& target, StridedView* out) {
  for (int64_t d : base)
    if (d < 1) return false;  // an empty tensor: nothing to view
  std::vector<Dim> dims(base.size());
  int64_t stride = 1;
  for (size_t i = base.size(); i-- > 0;) {
    dims[i] = {{base[i], stride}};
    stride *= base[i];
  }
  int64_t offset = 0;
  size_t at = 0;
  auto take = [&](int64_t* v) {
    if (at >= recipe.size()) return false;
    *v = recipe[at++];
    return true;
  };
  while (at < recipe.size()) {
    const auto step = static_cast<ViewStep>(recipe[at++]);
    const int64_t rank = static_cast<int64_t>(dims.size());
    if (step == ViewStep::kTranspose) {
      int64_t r = 0;
      if (!take(&r) || r != rank) return false;
      std::vector<Dim> next(dims.size());
      std::vector<bool> seen(dims.size(), false);
      for (int64_t i = 0; i < r; ++i) {
        int64_t p = 0;
        if (!take(&p) || p < 0 || p >= rank || seen[p]) return false;
        seen[p] = true;
        next[i] = dims[p];
      }
      dims = std::move(next);
    } else if (step == ViewStep::kReshape) {
      int64_t k = 0;
      if (!take(&k) || !Reshape(&dims, target(k))) return false;
    } else if (step == ViewStep::kSqueeze || step == ViewStep::kUnsqueeze) {
      int64_t count = 0;
      if (!take(&count) || count < 0) return false;
      const bool squeeze = step == ViewStep::kSqueeze;
      const int64_t out_rank = squeeze ? rank - count : rank + count;
      std::vector<bool> marked(squeeze ? rank : out_rank, false);
      for (int64_t i = 0; i < count; ++i) {
        int64_t a = 0, n = 0;
        if (!take(&a) || !Axis(a, squeeze ? rank : out_rank, &n) || marked[n]) return false;
        marked[n] = true;
      }
      std::vector<Dim> next;
      size_t src = 0;
      for (size_t i = 0; i < marked.size(); ++i) {
        if (squeeze) {
          if (marked[i] && SizeOf(dims[i]) != 1) return false;
          if (!marked[i]) next.push_back(dims[i]);
        } else {
          next.push_back(marked[i] ? Dim{} : dims[src++]);
        }
      }
      dims = std::move(next);
    } else if (step == ViewStep::kGather) {
      int64_t a = 0, axis = 0, index = 0;
      if (!take(&a) || !take(&index) || !Axis(a, rank, &axis)) return false;
      const int64_t size = SizeOf(dims[axis]);
      if (index < 0) index += size;
      if (index < 0 || index >= size) return false;
      for (size_t f = dims[axis].size(); f-- > 0;) {  // the index over the dim's factors
        offset += (index % dims[axis][f].first) * dims[axis][f].second;
        index /= dims[axis][f].first;
      }
      dims.erase(dims.begin() + axis);
    } else {
      return false;
    }
  }
  out->shape.clear();
  out->strides.clear();
  for (const Dim& d : dims) {
    const Dim s = Simplify(d);
    if (s.size() > 1) return false;
    out->shape.push_back(SizeOf(d));
    out->strides.push_back(s.empty() ? 0 : s[0].second);
  }
  out->offset = offset;
  return true;
}

}  // namespace kaiwu
