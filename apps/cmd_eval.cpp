// `tandem eval`: perplexity of a model on a text cut into rows, and its mean KL divergence and top-1
// agreement against a reference (a second model run first in the same process, or a saved logprob
// file); --per-layer adds the residual stream's relative RMS error after every layer. Definitions and
// the logprob file format: docs/eval.md.
#include "cmd_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "eval_logprobs.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/text/text_codec.h"
#include "tandem/weights.h"

namespace tandem::cli {

namespace {

constexpr size_t kRefMemoryBytes = size_t(4) << 30;  // larger references go to a temporary file

// One side of the comparison: its profile, and the checkpoint opened (not loaded) to read its config.
struct Side {
  Profile profile;
  std::string format;
  std::unique_ptr<Checkpoint> checkpoint;
  ModelDesc desc;
};

Side open_side(Profile p, PluginRegistry& reg) {
  Side s;
  s.profile = std::move(p);
  s.checkpoint = open_checkpoint(s.profile.load, reg, &s.format);
  s.desc = parse_model_config(s.checkpoint->config_json(), s.checkpoint->path() + " (config)");
  return s;
}

// The reference's profile: --ref-config's, or the model's flags with --ref-model's path.
Profile ref_profile(const Args& a, const Profile& model) {
  Profile p = a.has("ref-config") ? load_profile(a.str("ref-config")) : model;
  if (a.has("ref-model")) p.load.path = a.str("ref-model");
  if (a.has("ref-device")) p.load.device = a.str("ref-device");
  p.load.progress = nullptr;
  return p;
}

// The row's tokens and the log-probabilities of its predicting positions 0 … n − 2.
void row_logprobs(Model& m, const std::vector<int32_t>& row, std::vector<float>& logits, std::vector<float>& out) {
  auto seq = m.new_sequence(int64_t(row.size()));
  m.forward(*seq, row, ForwardMode::Prefill, logits, true);
  const int V = m.desc().vocab;
  out.resize((row.size() - 1) * size_t(V));
  parallel_for(int64_t(row.size()) - 1, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) log_softmax(logits.data() + size_t(p) * size_t(V), V, out.data() + size_t(p) * size_t(V));
  });
}

// The residual stream after every layer of the last forward, [layers][n · hidden], on the host.
std::vector<std::vector<float>> download_taps(Model& m) {
  std::vector<std::vector<float>> out(m.taps().size());
  for (size_t j = 0; j < out.size(); ++j) {
    Tensor t = m.tap(j);
    out[j].resize(size_t(t.numel()));
    m.backend().download(out[j].data(), t.data, out[j].size() * 4);
  }
  return out;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o + "\"";
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof(b), "%.17g", v);
  return b;
}

}  // namespace

const CommandSpec& eval_spec() {
  static const CommandSpec spec{
      "eval",
      "Perplexity, mean KL divergence and top-1 agreement of a model against a reference on a text cut into rows.",
      with_model_flags({
          {"text", "FILE", "the text, through the model's tokenizer (BOS first in every row when it adds one)"},
          {"tokens", "FILE", "the tokens instead, as whitespace-separated ids (used as given)"},
          {"rows", "R", "rows to score (default 8, or the --ref-logits file's)"},
          {"row-tokens", "N", "tokens a row (default 1024, or the --ref-logits file's)"},
          {"score-second-half", "", "score only the second half of each row, as llama-perplexity does"},
          {"ref-config", "PROFILE.yaml", "the reference model's profile"},
          {"ref-model", "PATH", "the reference model (other flags as the model's)"},
          {"ref-device", "cpu|cuda", "where the reference runs (default: as the model)"},
          {"ref-logits", "FILE", "the reference's log-probabilities, from --save-logits"},
          {"save-logits", "FILE", "write the model's log-probabilities of every row (f32, see docs/eval.md)"},
          {"per-layer", "", "relative RMS error of the residual stream after every layer (both models loaded)"},
          {"json", "FILE", "the results as JSON"},
      }),
      "",
      "Rows are consecutive runs of N tokens of the input. Position p of a row predicts token p + 1;\n"
      "scored are positions 0 ... N-2 (every token but the row's first is a target), or with\n"
      "--score-second-half positions N/2 ... N-2, as llama-perplexity. KL is KL(reference || model)\n"
      "from full distributions in double (docs/eval.md). Without a reference: perplexity only."};
  return spec;
}

int cmd_eval(const std::vector<std::string>& argv) {
  Args a(argv, eval_spec());
  Profile mp = resolve_profile(a);
  check(a.has("text") != a.has("tokens"), "tandem eval: give exactly one of --text FILE or --tokens FILE");
  const bool ref_model = a.has("ref-config") || a.has("ref-model");
  check(!(ref_model && a.has("ref-logits")),
        "tandem eval: give one reference: --ref-config/--ref-model or --ref-logits, not both");
  check(!a.flag("per-layer") || ref_model, "tandem eval: --per-layer needs a reference model (--ref-config or --ref-model)");
  check(!a.has("ref-device") || ref_model, "tandem eval: --ref-device needs --ref-config or --ref-model");

  PluginRegistry reg;
  reg.load_default();
  Side model = open_side(mp, reg);
  const int V = model.desc.vocab;

  // The reference is opened (not loaded) first, so that a missing or mismatched one fails at once.
  std::unique_ptr<Side> ref;
  if (ref_model) {
    ref = std::make_unique<Side>(open_side(ref_profile(a, mp), reg));
    check(ref->desc.vocab == V, "tandem eval: the reference '", ref->profile.load.path, "' has a vocabulary of ",
          ref->desc.vocab, " tokens, the model '", mp.load.path, "' ", V, "; both must share one vocabulary");
    if (a.flag("per-layer"))
      check(ref->desc.layers.size() == model.desc.layers.size() && ref->desc.hidden == model.desc.hidden,
            "tandem eval: --per-layer needs models of one shape: the reference has ", ref->desc.layers.size(),
            " layers of ", ref->desc.hidden, ", the model ", model.desc.layers.size(), " of ", model.desc.hidden);
  }
  // The reference file fixes the rows; flags given must agree with it.
  std::unique_ptr<LogprobReader> ref_file;
  int R = 8, N = 1024;
  if (a.has("ref-logits")) {
    ref_file = std::make_unique<LogprobReader>(a.str("ref-logits"));
    const LogprobHeader& h = ref_file->header();
    check(h.vocab == V, "tandem eval: the reference '", a.str("ref-logits"), "' has a vocabulary of ", h.vocab,
          " tokens, the model '", mp.load.path, "' ", V, "; both must share one vocabulary");
    R = int(a.integer("rows", h.rows)), N = int(a.integer("row-tokens", h.row_tokens));
    check(N == h.row_tokens, "tandem eval: --row-tokens ", N, " but '", a.str("ref-logits"), "' holds rows of ",
          h.row_tokens);
    check(R <= h.rows, "tandem eval: --rows ", R, " but '", a.str("ref-logits"), "' holds ", h.rows, " rows");
  } else {
    R = int(a.integer("rows", 8)), N = int(a.integer("row-tokens", 1024));
  }
  check(R >= 1, "tandem eval: --rows must be at least 1, found ", R);
  check(N >= 4, "tandem eval: --row-tokens must be at least 4, found ", N);

  std::vector<int32_t> tokens;
  int32_t bos = -1;
  std::string input;
  if (a.has("text")) {
    input = a.str("text");
    std::ifstream f(input, std::ios::binary);
    check(f.good(), "tandem eval: text file '", input, "' cannot be read");
    std::stringstream ss;
    ss << f.rdbuf();
    auto codec = make_text_codec(model.profile, *model.checkpoint);
    if (auto m = codec->missing_tokenizer(); !m.empty())
      fail("tandem eval: --text needs a tokenizer, and '", mp.load.path, "' has none (", m,
           "); give --tokenizer FILE or use --tokens");
    tokens = codec->encode(ss.str(), true, false);
    // Every row starts as the text does, with the tokenizer's BOS when it adds one (as llama-perplexity).
    std::vector<int32_t> with = codec->encode("a", true, false), without = codec->encode("a", false, false);
    if (with.size() > without.size() && (without.empty() || with[0] != without[0])) bos = with[0];
  } else {
    input = a.str("tokens");
    tokens = read_tokens(input);
  }
  for (int32_t t : tokens)
    check(t >= 0 && t < V, "tandem eval: token ", t, " of '", input, "' is outside the model's vocabulary of ", V);
  check(tokens.size() >= size_t(N), "tandem eval: '", input, "' is ", tokens.size(), " tokens, shorter than one row of ",
        N, " (--row-tokens)");
  const int rows = int(std::min<size_t>(size_t(R), tokens.size() / size_t(N)));
  const size_t tokens_in = tokens.size();
  tokens.resize(size_t(rows) * size_t(N));
  if (bos >= 0)
    for (int r = 0; r < rows; ++r) tokens[size_t(r) * size_t(N)] = bos;
  auto row_of = [&](int r) {
    return std::vector<int32_t>(tokens.begin() + ptrdiff_t(r) * N, tokens.begin() + ptrdiff_t(r + 1) * N);
  };
  if (ref_file) {
    const auto& ft = ref_file->tokens();
    for (size_t i = 0; i < tokens.size(); ++i)
      check(ft[i] == tokens[i], "tandem eval: token ", i % size_t(N), " of row ", i / size_t(N), " is ", tokens[i],
            ", the reference '", a.str("ref-logits"), "' was made on ", ft[i],
            " (another text, tokenizer or row length)");
  }
  if (rows < R)
    std::fprintf(stderr, "note: '%s' holds %zu tokens: %d rows of %d instead of %d\n", input.c_str(), tokens_in, rows, N, R);
  // Positions p predict token p + 1; scored: p ≥ first (0, or N/2 as llama-perplexity).
  const int first = a.flag("score-second-half") ? N / 2 : 0;
  const LogprobHeader hdr{V, rows, N};

  std::unique_ptr<Model> ref_loaded;
  std::unique_ptr<RefStore> store;
  std::vector<float> logits, lp;
  if (ref_model) {
    Profile& rp = ref->profile;
    rp.load.progress = progress_printer("loading the reference");
    ref_loaded = Model::load(std::move(ref->checkpoint), ref->format, rp.load, reg);
    if (!a.flag("per-layer")) {
      // One model at a time: the reference over every row, then freed before the model loads.
      store = std::make_unique<RefStore>(hdr, tokens, kRefMemoryBytes);
      if (store->on_disk())
        std::fprintf(stderr, "the reference's log-probabilities (%.2f GB) go to %s\n",
                     double(rows) * double(hdr.row_floats()) * 4e-9, store->file().c_str());
      auto bar = progress_printer("reference rows");
      for (int r = 0; r < rows; ++r) {
        row_logprobs(*ref_loaded, row_of(r), logits, lp);
        store->put(r, lp.data());
        bar(double(r + 1) / rows);
      }
      ref_loaded.reset();
    }
  }

  mp.load.progress = progress_printer("loading the model");
  auto m = Model::load(std::move(model.checkpoint), model.format, mp.load, reg);
  const int L = int(m->desc().layers.size());
  std::vector<double> err_sq(size_t(L), 0.0), ref_sq(size_t(L), 0.0);
  if (a.flag("per-layer")) {
    std::vector<int> all(static_cast<size_t>(L));
    for (int l = 0; l < L; ++l) all[size_t(l)] = l;
    m->set_taps(all);
    ref_loaded->set_taps(all);
  }
  std::unique_ptr<LogprobWriter> save;
  if (a.has("save-logits")) save = std::make_unique<LogprobWriter>(a.str("save-logits"), hdr, tokens);

  EvalStats st;
  std::vector<float> ref_row;
  auto bar = progress_printer("model rows");
  for (int r = 0; r < rows; ++r) {
    const std::vector<int32_t> row = row_of(r);
    const float* ref_lp = nullptr;
    std::vector<std::vector<float>> ref_taps;
    if (ref_loaded) {  // --per-layer: the reference row by row beside the model
      row_logprobs(*ref_loaded, row, logits, ref_row);
      ref_taps = download_taps(*ref_loaded);
      ref_lp = ref_row.data();
    } else if (store) {
      ref_lp = store->get(r);
    } else if (ref_file) {
      ref_file->read_row(r, ref_row);
      ref_lp = ref_row.data();
    }
    row_logprobs(*m, row, logits, lp);
    if (save) save->write_row(lp.data());
    if (!ref_taps.empty()) {
      auto taps = download_taps(*m);
      for (int l = 0; l < L; ++l)
        for (size_t i = 0; i < taps[size_t(l)].size(); ++i) {
          const double x = ref_taps[size_t(l)][i], d = double(taps[size_t(l)][i]) - x;
          err_sq[size_t(l)] += d * d, ref_sq[size_t(l)] += x * x;
        }
    }
    st.add(lp.data() + size_t(first) * size_t(V), ref_lp ? ref_lp + size_t(first) * size_t(V) : nullptr, V,
           row.data() + first + 1, N - 1 - first);
    bar(double(r + 1) / rows);
  }
  if (save) save->close();

  const std::string ref_name = ref ? ref->profile.load.path : ref_file ? a.str("ref-logits") : "";
  const char* scoring = first ? "second half of each row (llama-perplexity)" : "every position but each row's first";
  std::printf("model       %s (%s)\n", mp.load.path.c_str(), m->format_name().c_str());
  if (!ref_name.empty()) std::printf("reference   %s\n", ref_name.c_str());
  std::printf("rows        %d × %d tokens, %lld positions scored: %s\n\n", rows, N, (long long)st.positions, scoring);
  std::printf("%-22s %14s %14s\n", "", "model", st.has_ref ? "reference" : "");
  std::printf("%-22s %14.6f", "perplexity", st.perplexity());
  if (st.has_ref) std::printf(" %14.6f", st.ref_perplexity());
  std::printf("\n");
  if (st.has_ref) {
    std::printf("%-22s %14.6g ± %.2g\n", "mean KL (ref||model)", st.mean_kl(), st.kl_stderr());
    std::printf("%-22s %14.6g\n", "max KL", st.kl_max);
    std::printf("%-22s %13.4f %%\n", "top-1 agreement", 100.0 * st.top1());
  }
  if (a.flag("per-layer")) {
    std::printf("\n%-6s %-10s %s\n", "layer", "kind", "relative RMS error of the residual stream");
    for (int l = 0; l < L; ++l)
      std::printf("%-6d %-10s %.6g\n", l, layer_kind_name(m->desc().layers[size_t(l)].kind),
                  std::sqrt(err_sq[size_t(l)] / std::max(ref_sq[size_t(l)], 1e-300)));
  }

  if (a.has("json")) {
    std::ofstream j(a.str("json"));
    check(j.good(), "tandem eval: --json file '", a.str("json"), "' cannot be written");
    j << "{\n  \"model\": " << json_str(mp.load.path) << ",\n  \"reference\": "
      << (ref_name.empty() ? "null" : json_str(ref_name)) << ",\n  \"rows\": " << rows << ",\n  \"row_tokens\": " << N
      << ",\n  \"scoring\": " << json_str(first ? "second-half" : "all-but-first") << ",\n  \"positions\": " << st.positions
      << ",\n  \"perplexity\": " << num(st.perplexity()) << ",\n  \"mean_nll\": " << num(st.nll_model / double(st.positions));
    if (st.has_ref)
      j << ",\n  \"ref_perplexity\": " << num(st.ref_perplexity()) << ",\n  \"mean_kl\": " << num(st.mean_kl())
        << ",\n  \"kl_stderr\": " << num(st.kl_stderr()) << ",\n  \"max_kl\": " << num(st.kl_max)
        << ",\n  \"top1\": " << num(st.top1()) << ",\n  \"top1_same\": " << st.top1_same;
    if (a.flag("per-layer")) {
      j << ",\n  \"per_layer\": [";
      for (int l = 0; l < L; ++l)
        j << (l ? ", " : "") << "{\"layer\": " << l << ", \"kind\": " << json_str(layer_kind_name(m->desc().layers[size_t(l)].kind))
          << ", \"rel_rms\": " << num(std::sqrt(err_sq[size_t(l)] / std::max(ref_sq[size_t(l)], 1e-300))) << "}";
      j << "]";
    }
    j << "\n}\n";
    check(j.good(), "tandem eval: --json file '", a.str("json"), "' cannot be written");
  }
  return 0;
}

}  // namespace tandem::cli
