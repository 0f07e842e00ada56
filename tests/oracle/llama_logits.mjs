// The llama.cpp oracle: runs GGUF models through node-llama-cpp's prebuilt CPU build of llama.cpp and
// writes the logits of every position of every prompt as float32 .npy files ([n_tokens, n_vocab]).
//
//   node tests/oracle/llama_logits.mjs job.json
//
// job.json: {"threads": 1, "runs": [{"model": "m.gguf", "prompts": [{"tokens": [1, 5, 9], "out": "p0.npy"}]}]}
//
// Each prompt is evaluated as one batch from an emptied sequence (no state carried between prompts),
// with the GPU off, flash attention off, an F32 KV cache and a fixed thread count, so the numbers
// depend only on the model file and the CPU's ggml variant. The logits come from controlledEvaluate's
// `generateNext.logits`, which returns the raw logits row of that batch position: the default sampler
// chain is greedy only, so nothing (temperature, penalties, bias) touches them.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function npyBytes(rows, cols, data) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${rows}, ${cols}), }`;
  const unpadded = 10 + header.length + 1;
  header += " ".repeat((64 - (unpadded % 64)) % 64) + "\n";
  const out = Buffer.alloc(10 + header.length + data.byteLength);
  out.write("\x93NUMPY", 0, "latin1");
  out.writeUInt8(1, 6);
  out.writeUInt8(0, 7);
  out.writeUInt16LE(header.length, 8);
  out.write(header, 10, "latin1");
  Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(out, 10 + header.length);
  return out;
}

// Logits [n, vocab] of every position of `tokens`, evaluated as one batch from an empty sequence.
async function evaluate(sequence, tokens, where) {
  await sequence.clearHistory(); // a fresh state: the KV cache and the Mamba states are emptied
  const results = await sequence.controlledEvaluate(tokens.map((t) => [t, { generateNext: { logits: true } }]));
  let vocab = 0;
  let data = null;
  for (let i = 0; i < tokens.length; ++i) {
    const logits = results[i]?.next?.logits;
    if (!logits) throw new Error(`${where}: no logits for position ${i}`);
    if (data === null) {
      vocab = logits.size;
      data = new Float32Array(tokens.length * vocab).fill(NaN);
    }
    if (logits.size !== vocab) throw new Error(`${where}: position ${i} has ${logits.size} logits, expected ${vocab}`);
    for (const [token, value] of logits) data[i * vocab + token] = value;
  }
  return { vocab, data };
}

async function main() {
  if (process.argv.length !== 3) {
    console.error("usage: node llama_logits.mjs job.json");
    process.exit(2);
  }
  const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const threads = job.threads ?? 1;
  const llama = await getLlama({
    gpu: false,
    build: "never", // the prebuilt @node-llama-cpp/linux-x64 binaries, never a local compile
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    logLevel: LlamaLogLevel.error,
    maxThreads: threads,
  });
  for (const run of job.runs) {
    const model = await llama.loadModel({ modelPath: run.model, gpuLayers: 0 });
    const longest = Math.max(...run.prompts.map((p) => p.tokens.length));
    const context = await model.createContext({
      contextSize: Math.max(64, longest),
      batchSize: Math.max(64, longest), // a whole prompt in one batch, as tandem's prefill
      sequences: 1,
      threads,
      flashAttention: false,
      experimentalKvCacheKeyType: "F32",
      experimentalKvCacheValueType: "F32",
    });
    try {
      const sequence = context.getSequence();
      for (const p of run.prompts) {
        const { vocab, data } = await evaluate(sequence, p.tokens, p.out);
        fs.writeFileSync(p.out, npyBytes(p.tokens.length, vocab, data));
      }
    } finally {
      await context.dispose();
      await model.dispose();
    }
  }
  await llama.dispose();
}

main().catch((e) => {
  console.error(`llama_logits.mjs: ${e?.stack ?? e}`);
  process.exit(1);
});
