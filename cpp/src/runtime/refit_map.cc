#include "runtime/refit_map.h"

#include <algorithm>

namespace kaiwu {

namespace {

int64_t KeySize(const RefitMapSpec::Key& k) { return NumElements(k.shape); }

}  // namespace

RefitMap::RefitMap(const RefitMapSpec& spec, const Graph& graph) : keys_(spec.keys) {
  for (size_t i = 0; i < keys_.size(); ++i)
    by_name_.emplace(std::string_view(keys_[i].name), std::make_pair(Kind::kKey, static_cast<int>(i)));
  names_.reserve(spec.aliases.size() + spec.ignorable.size());  // views below stay valid
  for (const auto& [alias, target] : spec.aliases) {
    auto it = by_name_.find(target);
    if (it == by_name_.end() || it->second.first != Kind::kKey)
      Fail(StatusCode::kRefit, "refit map: alias '", alias, "' reads '", target,
           "', which is not a key of the map");
    const int key = it->second.second;
    names_.push_back(alias);
    by_name_.emplace(std::string_view(names_.back()), std::make_pair(Kind::kAlias, key));
  }
  for (const std::string& name : spec.ignorable) {
    names_.push_back(name);
    by_name_.emplace(std::string_view(names_.back()), std::make_pair(Kind::kIgnorable, -1));
  }

  auto key_index = [&](const std::string& name, const std::string& weight) {
    auto it = by_name_.find(name);
    if (it == by_name_.end() || it->second.first != Kind::kKey)
      Fail(StatusCode::kRefit, "refit map: weight '", weight, "' reads '", name,
           "', which is not a key of the map");
    return it->second.second;
  };
  for (const RefitMapSpec::Entry& e : spec.entries) {
    const int v = graph.Find(e.weight);
    if (v < 0 || graph.values[v].kind != ValueKind::kWeight || !graph.values[v].data)
      Fail(StatusCode::kRefit, "refit map: '", e.weight, "' is not a weight of this model");
    const Tensor& w = *graph.values[v].data;
    const int64_t n = w.size();
    Entry out;
    out.value = v;
    auto add_key = [&](const std::string& name) {
      const int k = key_index(name, e.weight);
      if (keys_[k].dtype != w.dtype())
        Fail(StatusCode::kRefit, "refit map: weight '", e.weight, "' has dtype ",
             DTypeName(w.dtype()), " but key '", name, "' has ", DTypeName(keys_[k].dtype));
      auto it = std::find(out.keys.begin(), out.keys.end(), k);
      if (it != out.keys.end()) return static_cast<int>(it - out.keys.begin());
      out.keys.push_back(k);
      return static_cast<int>(out.keys.size() - 1);
    };
    auto check_total = [&](int64_t got) {
      if (got != n)
        Fail(StatusCode::kRefit, "refit map: weight '", e.weight, "' has ", n,
             " elements but its entry gives ", got);
    };
    switch (e.op) {
      case RefitMapSpec::Entry::Op::kCopy: {
        if (e.keys.size() != 1) Fail(StatusCode::kRefit, "refit map: copy of '", e.weight, "' needs one key");
        add_key(e.keys[0]);
        check_total(KeySize(keys_[out.keys[0]]));
        CopyBlock b;
        b.cols = n;
        b.row_stride = n;
        out.blocks.push_back(b);
        break;
      }
      case RefitMapSpec::Entry::Op::kTranspose: {
        if (e.keys.size() != 1) Fail(StatusCode::kRefit, "refit map: transpose of '", e.weight, "' needs one key");
        add_key(e.keys[0]);
        const Shape& in = keys_[out.keys[0]].shape;
        check_total(NumElements(in));
        std::vector<int64_t> index = TransposeIndex(in, e.perm);
        out.blocks = CompressElementMap(nullptr, index.data(), n);
        break;
      }
      case RefitMapSpec::Entry::Op::kRuns: {
        int64_t at = 0;
        for (const auto& r : e.runs) {
          const int src = add_key(r.key);
          if (r.start < 0 || r.length < 0 || r.start + r.length > KeySize(keys_[out.keys[src]]))
            Fail(StatusCode::kRefit, "refit map: weight '", e.weight, "' reads elements [",
                 r.start, ", ", r.start + r.length, ") of '", r.key, "', which has ",
                 KeySize(keys_[out.keys[src]]));
          if (r.length == 0) continue;
          CopyBlock b;
          b.src = src;
          b.src_offset = r.start;
          b.cols = r.length;
          b.row_stride = r.length;
          b.dst_offset = at;
          out.blocks.push_back(b);
          at += r.length;
        }
        check_total(at);
        break;
      }
      case RefitMapSpec::Entry::Op::kGather: {
        std::vector<int64_t> offsets{0};
        for (const std::string& k : e.keys) {
          const int src = add_key(k);
          if (src != static_cast<int>(offsets.size()) - 1)
            Fail(StatusCode::kRefit, "refit map: gather for '", e.weight, "' names key '", k, "' twice");
          offsets.push_back(offsets.back() + KeySize(keys_[out.keys[src]]));
        }
        check_total(static_cast<int64_t>(e.index.size()));
        std::vector<int32_t> src(e.index.size());
        std::vector<int64_t> local(e.index.size());
        for (size_t i = 0; i < e.index.size(); ++i) {
          const int64_t g = e.index[i];
          if (g < 0 || g >= offsets.back())
            Fail(StatusCode::kRefit, "refit map: gather for '", e.weight, "' reads element ", g,
                 " of ", offsets.back());
          const auto k = std::upper_bound(offsets.begin(), offsets.end(), g) - offsets.begin() - 1;
          src[i] = static_cast<int32_t>(k);
          local[i] = g - offsets[k];
        }
        out.blocks = CompressElementMap(src.data(), local.data(), n);
        break;
      }
    }
    entries_.push_back(std::move(out));
  }
}

RefitMap::Kind RefitMap::Find(std::string_view name, int* key) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return Kind::kUnknown;
  *key = it->second.second;
  return it->second.first;
}

}  // namespace kaiwu
