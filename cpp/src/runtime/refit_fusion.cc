#include "runtime/refit_fusion.h"

#include <algorithm>

#include "runtime/weight_pool.h"

namespace kaiwu {

namespace {

// Calls fn(dst, src, index) for every element the blocks write.
template <typename Fn> void ForEachElement(const std::vector<CopyBlock>& blocks, Fn fn) {
  for (const CopyBlock& b : blocks)
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t c = 0; c < b.cols; ++c)
        fn(b.dst_offset + r * b.cols + c, b.src,
           b.src_offset + r * b.row_stride + c * b.col_stride);
}

int32_t LocalSource(const StaticProgram::Step& step, int value) {
  const auto& src = step.sources;
  return static_cast<int32_t>(std::find(src.begin(), src.end(), value) - src.begin());
}

}  // namespace

bool ComposeBlocks(const std::vector<CopyBlock>& outer, int64_t outer_size,
                   const std::vector<const std::vector<CopyBlock>*>& inner,
                   const std::vector<const std::vector<int>*>& inner_keys,
                   const std::vector<int64_t>& inner_sizes, std::vector<CopyBlock>* blocks,
                   std::vector<int>* keys) {
  const size_t ns = inner.size();
  // Every source a whole copy of one key (a Gemm's weight): the outer blocks
  // with their sources renamed.
  bool copies = true;
  for (size_t s = 0; s < ns && copies; ++s) {
    copies = inner[s] && inner[s]->size() == 1;
    if (!copies) break;
    const CopyBlock& b = (*inner[s])[0];
    copies = b.src_offset == 0 && b.dst_offset == 0 && b.col_stride == 1 &&
             (b.rows == 1 || b.row_stride == b.cols) && b.size() == inner_sizes[s];
  }
  if (copies) {
    keys->clear();
    std::vector<int32_t> local(ns, -1);
    *blocks = outer;
    for (CopyBlock& b : *blocks) {
      if (b.src < 0 || static_cast<size_t>(b.src) >= ns) return false;
      if (local[b.src] < 0) {
        const int g = (*inner_keys[b.src])[(*inner[b.src])[0].src];
        auto it = std::find(keys->begin(), keys->end(), g);
        if (it == keys->end()) it = keys->insert(keys->end(), g);
        local[b.src] = static_cast<int32_t>(it - keys->begin());
      }
      b.src = local[b.src];
    }
    return true;
  }
  // Element maps of the inner blocks: element j of source s is element
  // index[s][j] of global key key[s][j].
  std::vector<std::vector<int32_t>> key(ns);
  std::vector<std::vector<int64_t>> index(ns);
  for (size_t s = 0; s < ns; ++s) {
    if (!inner[s]) return false;
    key[s].assign(static_cast<size_t>(inner_sizes[s]), -1);
    index[s].assign(static_cast<size_t>(inner_sizes[s]), 0);
    bool ok = true;
    ForEachElement(*inner[s], [&](int64_t d, int32_t src, int64_t i) {
      if (d < 0 || d >= inner_sizes[s]) {
        ok = false;
        return;
      }
      key[s][d] = (*inner_keys[s])[src];
      index[s][d] = i;
    });
    if (!ok) return false;
  }
  std::vector<int32_t> src(static_cast<size_t>(outer_size), -1);
  std::vector<int64_t> at(static_cast<size_t>(outer_size), 0);
  keys->clear();
  bool ok = true;
  ForEachElement(outer, [&](int64_t d, int32_t s, int64_t i) {
    if (!ok || d < 0 || d >= outer_size || s < 0 || static_cast<size_t>(s) >= ns || i < 0 ||
        i >= inner_sizes[s] || key[s][i] < 0) {
      ok = false;
      return;
    }
    const int g = key[s][i];
    auto it = std::find(keys->begin(), keys->end(), g);
    if (it == keys->end()) it = keys->insert(keys->end(), g);
    src[d] = static_cast<int32_t>(it - keys->begin());
    at[d] = index[s][i];
  });
  if (!ok) return false;
  for (int32_t s : src)
    if (s < 0) return false;  // an element no block writes
  *blocks = CompressElementMap(src.data(), at.data(), outer_size);
  return true;
}

bool CoversSource(const std::vector<CopyBlock>& blocks, int32_t src, int64_t n) {
  std::vector<char> seen(static_cast<size_t>(n), 0);
  int64_t count = 0;
  ForEachElement(blocks, [&](int64_t, int32_t s, int64_t i) {
    if (s == src && i >= 0 && i < n && !seen[i]) {
      seen[i] = 1;
      ++count;
    }
  });
  return count == n;
}

bool InvertBlocks(const std::vector<CopyBlock>& blocks, int32_t src, int64_t n,
                  std::vector<CopyBlock>* out) {
  std::vector<int64_t> from(static_cast<size_t>(n), -1);
  ForEachElement(blocks, [&](int64_t d, int32_t s, int64_t i) {
    if (s == src && i >= 0 && i < n) from[i] = d;
  });
  for (int64_t d : from)
    if (d < 0) return false;
  *out = CompressElementMap(nullptr, from.data(), n);
  return true;
}

RefitFusion::RefitFusion(const Graph& graph, const StaticProgram& statics,
                         const std::vector<int>& weight_ids)
    : graph_(graph), statics_(statics) {
  const size_t nv = graph.values.size();
  const auto& steps = statics.steps();
  skippable_.assign(nv, 0);
  consumers_.resize(nv);
  cover_.assign(nv, -1);
  restore_.resize(nv);
  restore_ready_.assign(nv, 0);
  map_ok_.assign(steps.size(), 0);
  map_blocks_.resize(steps.size());
  map_keys_.resize(steps.size());

  // Read elsewhere: by a node run per step, as a graph output, or by a kernel step.
  std::vector<char> read(nv, 0);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (statics.prepared(static_cast<int>(n))) continue;
    for (int in : graph.nodes[n].inputs)
      if (in >= 0) read[in] = 1;
  }
  for (int v : graph.outputs) read[v] = 1;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!steps[i].copy) {
      for (int v : steps[i].sources) read[v] = 1;
      continue;
    }
    for (int v : steps[i].sources)
      if (consumers_[v].empty() || consumers_[v].back() != static_cast<int>(i))
        consumers_[v].push_back(static_cast<int>(i));
  }
  for (int v : weight_ids) {
    if (read[v] || consumers_[v].empty() || statics.dropped(v)) continue;
    const int64_t n = NumElements(statics.shape(v));
    for (int i : consumers_[v]) {
      if (CoversSource(steps[i].blocks, LocalSource(steps[i], v), n)) {
        cover_[v] = i;  // the restoring blocks are made when first needed
        skippable_[v] = 1;
        break;
      }
    }
  }
}

void RefitFusion::SetMap(const RefitMap* map) {
  const auto& steps = statics_.steps();
  std::fill(map_ok_.begin(), map_ok_.end(), 0);
  if (!map) return;
  std::vector<int> entry_of(graph_.values.size(), -1);
  for (size_t e = 0; e < map->entries().size(); ++e)
    entry_of[map->entries()[e].value] = static_cast<int>(e);
  std::vector<const std::vector<CopyBlock>*> inner;
  std::vector<const std::vector<int>*> inner_keys;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StaticProgram::Step& s = steps[i];
    if (!s.copy) continue;
    inner.clear();
    inner_keys.clear();
    sizes.clear();
    for (int v : s.sources) {
      const int e = entry_of[v];
      inner.push_back(e >= 0 ? &map->entries()[e].blocks : nullptr);
      inner_keys.push_back(e >= 0 ? &map->entries()[e].keys : nullptr);
      sizes.push_back(NumElements(statics_.shape(v)));
    }
    const int64_t n = NumElements(statics_.shape(s.outputs[0]));
    map_ok_[i] =
        ComposeBlocks(s.blocks, n, inner, inner_keys, sizes, &map_blocks_[i], &map_keys_[i]);
  }
}

void RefitFusion::Restore(const WeightSet& ws, int value) const {
  const bool pooled = value >= 0 && static_cast<size_t>(value) < ws.buffers.size();
  WeightBuffer* b = pooled ? ws.buffers[value] : nullptr;
  if (!b || b->host_current.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(b->host_fill_mu);
  if (b->host_current.load(std::memory_order_acquire)) return;
  const StaticProgram::Step& step = statics_.steps()[cover_[value]];
  const std::vector<CopyBlock>* restore = nullptr;
  {
    std::lock_guard<std::mutex> made(restore_mu_);
    if (!restore_ready_[value]) {
      const int64_t n = NumElements(statics_.shape(value));
      if (!InvertBlocks(step.blocks, LocalSource(step, value), n, &restore_[value]))
        Fail(StatusCode::kInternal, "refit: no blocks restore '", graph_.values[value].name, "'");
      restore_ready_[value] = 1;
    }
    restore = &restore_[value];  // never changed once made
  }
  const void* from = ws.pointers[step.outputs[0]];
  CopyFault fault;
  CopyBlocks(*restore, &from, b->host.data(), statics_.dtype(value), false, &fault);
  b->host_current.store(true, std::memory_order_release);
}

}  // namespace kaiwu
