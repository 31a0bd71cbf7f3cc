#include "ops/einsum_parse.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace kaiwu {
namespace {

struct Term {
  std::vector<int> letters_before, letters_after;  // around the ellipsis
  bool has_ellipsis = false;
};

Term ParseTerm(const OpContext& ctx, const std::string& s) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '.') {
      if (t.has_ellipsis || s.compare(i, 3, "...") != 0)
        ctx.Error("malformed ellipsis in einsum term '", s, "'");
      t.has_ellipsis = true;
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      (t.has_ellipsis ? t.letters_after : t.letters_before).push_back(c);
    } else {
      ctx.Error("invalid character '", c, "' in einsum term '", s, "'");
    }
  }
  return t;
}

// Labels of a term with `ell` ellipsis dims, right-aligned in `max_ell`.
std::vector<int> Expand(const Term& t, int ell, int max_ell) {
  std::vector<int> labels = t.letters_before;
  for (int j = 0; j < ell; ++j) labels.push_back(kEllipsisLabel + (max_ell - ell) + j);
  labels.insert(labels.end(), t.letters_after.begin(), t.letters_after.end());
  return labels;
}

void CheckUnique(const OpContext& ctx, const std::vector<int>& labels, const std::string& s) {
  std::vector<int> sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    ctx.Error("einsum output term '", s, "' repeats a label");
}

}  // namespace

EinsumSpec ParseEinsum(const OpContext& ctx, const std::string& equation,
                       const std::vector<int>& ranks) {
  std::string eq;
  for (char c : equation)
    if (!std::isspace(static_cast<unsigned char>(c))) eq.push_back(c);
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  for (;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size())
    ctx.Error("einsum equation '", equation, "' has ", terms.size(), " operands, the node has ",
              ranks.size(), " inputs");

  EinsumSpec spec;
  std::vector<Term> parsed;
  std::vector<int> ell(terms.size(), 0);
  int max_ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    parsed.push_back(ParseTerm(ctx, terms[i]));
    int named = static_cast<int>(parsed[i].letters_before.size() + parsed[i].letters_after.size());
    if (parsed[i].has_ellipsis ? ranks[i] < named : ranks[i] != named)
      ctx.Error("einsum term '", terms[i], "' does not match input ", i, " of rank ", ranks[i]);
    ell[i] = ranks[i] - named;
    max_ell = std::max(max_ell, ell[i]);
  }
  std::map<int, int> counts;
  for (size_t i = 0; i < terms.size(); ++i) {
    spec.inputs.push_back(Expand(parsed[i], ell[i], max_ell));
    for (int l : spec.inputs[i]) ++counts[l];
  }

  if (arrow != std::string::npos) {
    std::string rhs = eq.substr(arrow + 2);
    Term out = ParseTerm(ctx, rhs);
    spec.output = Expand(out, out.has_ellipsis ? max_ell : 0, max_ell);
    CheckUnique(ctx, spec.output, rhs);
    for (int l : spec.output)
      if (!counts.count(l))
        ctx.Error("einsum output label '", l < kEllipsisLabel ? std::string(1, char(l)) : "...",
                  "' appears in no input");
  } else {
    // Implicit output: ellipsis dims, then letters seen exactly once, sorted.
    for (int j = 0; j < max_ell; ++j) spec.output.push_back(kEllipsisLabel + j);
    for (const auto& [label, n] : counts)
      if (label < kEllipsisLabel && n == 1) spec.output.push_back(label);
  }
  return spec;
}

}  // namespace kaiwu
