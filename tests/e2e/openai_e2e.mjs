// End to end with the official `openai` npm client: starts `tandem serve --config PROFILE --port 0`
// (the tiny chat model, tests/e2e/tiny_chat_model.cpp), waits for /health, runs the checks of
// spec/server.md §13 that a random-weight model can pass, then SIGTERMs the server and expects
// exit status 0. Usage: node openai_e2e.mjs --tandem build/bin/tandem --profile build/e2e/tiny-chat.yaml
import { spawn, spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

function arg(name) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) {
    console.error(`usage: node openai_e2e.mjs --tandem BIN --profile PROFILE.yaml (missing --${name})`);
    process.exit(2);
  }
  return process.argv[i + 1];
}

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch (e) {
  console.error(`e2e: the openai client is not installed (${e.code ?? e.message}): run scripts/setup.sh, ` +
                'which runs `npm ci` in tests/e2e');
  process.exit(1);
}

const KEY = 'e2e-key';       // the profile's server.api_key
const MODEL = 'tiny-chat';   // the profile's server.served_model_name (alias: tiny)
const OFF = { reasoning_effort: 'none' };  // thinking off: the answer is all content

// ---- the server ----

const server = spawn(arg('tandem'), ['serve', '--config', arg('profile'), '--port', '0', '--threads', '1'],
                     { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`no "listening on" line within 60 s:\n${log}`)), 60000);
  server.stderr.on('data', (d) => {
    log += d;
    const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  server.on('exit', (code) => reject(new Error(`tandem serve exited with ${code} before listening:\n${log}`)));
});
const base = `http://127.0.0.1:${port}`;
for (let t0 = Date.now(); ; ) {
  const h = await fetch(`${base}/health`).catch(() => null);
  if (h?.status === 200) break;
  if (h && h.status !== 503) throw new Error(`/health answered ${h.status}`);
  if (Date.now() - t0 > 60000) throw new Error(`the model did not load within 60 s:\n${log}`);
  await new Promise((r) => setTimeout(r, 50));
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });

// ---- a tiny runner: every check runs, failures are listed at the end ----

const results = [];
async function check(name, fn) {
  try {
    await fn();
    results.push([name, null]);
    console.log(`ok - ${name}`);
  } catch (e) {
    results.push([name, e]);
    console.log(`not ok - ${name}\n  ${String(e.stack ?? e).replace(/\n/g, '\n  ')}`);
  }
}

// The subset of JSON Schema the test schemas use, to validate constrained output independently.
function validate(schema, v, path = '$') {
  const type = (x) => (x === null ? 'null' : Array.isArray(x) ? 'array' : Number.isInteger(x) ? 'integer' : typeof x);
  if (schema.enum) assert.ok(schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)), `${path}: ${JSON.stringify(v)} not in enum`);
  if (schema.type) {
    const t = type(v);
    assert.ok(t === schema.type || (schema.type === 'number' && t === 'integer'), `${path}: ${t}, expected ${schema.type}`);
  }
  if (typeof v === 'string' && schema.maxLength !== undefined) assert.ok([...v].length <= schema.maxLength, `${path}: longer than ${schema.maxLength}`);
  if (Array.isArray(v)) {
    if (schema.maxItems !== undefined) assert.ok(v.length <= schema.maxItems, `${path}: more than ${schema.maxItems} items`);
    v.forEach((x, i) => schema.items && validate(schema.items, x, `${path}[${i}]`));
  }
  if (type(v) === 'object') {
    for (const r of schema.required ?? []) assert.ok(r in v, `${path}: missing required '${r}'`);
    for (const [k, x] of Object.entries(v)) {
      if (schema.properties?.[k]) validate(schema.properties[k], x, `${path}.${k}`);
      else assert.notEqual(schema.additionalProperties, false, `${path}: unexpected property '${k}'`);
    }
  }
}

async function expectError(promise, Class, status, code) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof Class, `expected ${Class.name}, got ${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, status);
    assert.equal(e.code, code);
    return true;
  });
}

const user = (text) => [{ role: 'user', content: text }];
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city.',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 12 },
        days: { type: 'integer', enum: [1, 2, 3] },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'days'],
    },
  },
};
const timeTool = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'JST'] } }, required: ['zone'] } },
};

// ---- the checks ----

await check('models.list returns the served name and its alias', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [MODEL, 'tiny']);
});

await check('models.retrieve: the served name and the alias; an unknown id is NotFoundError model_not_found', async () => {
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  assert.deepEqual(await client.models.retrieve(MODEL), list[0]);
  assert.deepEqual(await client.models.retrieve('tiny'), list[1]);
  await expectError(client.models.retrieve('gpt-4o'), OpenAI.NotFoundError, 404, 'model_not_found');
});

let plain;
await check('chat, thinking off: content, finish_reason, usage that adds up', async () => {
  plain = await client.chat.completions.create({ model: MODEL, messages: user('Say hello.'), max_tokens: 24, temperature: 0, ...OFF });
  assert.match(plain.id, /^chatcmpl-[A-Za-z0-9]{24}$/);
  assert.equal(plain.object, 'chat.completion');
  assert.ok(plain._request_id, 'x-request-id surfaces as _request_id');
  const c = plain.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.equal(c.message.reasoning_content, undefined);
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  const u = plain.usage;
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(u.completion_tokens >= 1 && u.completion_tokens <= 24);
});

await check('chat streamed with include_usage: role first, same text, usage chunk last', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages: user('Say hello.'), max_tokens: 24, temperature: 0, ...OFF,
    stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(text, plain.choices[0].message.content);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  // The same prompt again: the prefix cache (on by default) restores all of it, the rest is equal.
  const { prompt_tokens_details: cached, ...usage } = last.usage;
  const { prompt_tokens_details: _, ...plainUsage } = plain.usage;
  assert.deepEqual(usage, plainUsage);
  assert.equal(cached.cached_tokens, usage.prompt_tokens);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
  assert.equal(chunks.at(-2).choices[0].finish_reason, plain.choices[0].finish_reason);
});

await check('thinking on with a budget: reasoning_content, then the answer; streamed deltas join to the same text', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: user('Think first.'), max_tokens: 40, temperature: 0, reasoning_effort: 'high',
    thinking_token_budget: 8, ignore_eos: true,
  });
  const m = r.choices[0].message;
  assert.equal(typeof m.reasoning_content, 'string');
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 8);
  assert.ok(!(m.content ?? '').includes('</think>'));
  // The SDK's accumulator concatenates `content` but overwrites fields it does not know
  // (Object.assign in ChatCompletionStream), so reasoning deltas are joined here from the chunks.
  const stream = client.chat.completions.stream({
    model: MODEL, messages: user('Think first.'), max_tokens: 40, temperature: 0, reasoning_effort: 'high',
    thinking_token_budget: 8, ignore_eos: true,
  });
  let reasoning = '';
  for await (const c of stream) for (const ch of c.choices) reasoning += ch.delta.reasoning_content ?? '';
  const final = await stream.finalChatCompletion();
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(final.choices[0].message.content, m.content);
});

await check('tools round trip: a named call with typed arguments, the result sent back, a reply', async () => {
  const tools = [weatherTool, timeTool];
  const messages = user('What is the weather in Tokyo?');
  const r = await client.chat.completions.create({
    model: MODEL, messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
    max_tokens: 200, temperature: 0, ...OFF,
  });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  validate(weatherTool.function.parameters, args);
  assert.ok(Number.isInteger(args.days), 'days is a JSON number');

  // The same call streamed and merged by the SDK's accumulator.
  const merged = await client.chat.completions
    .stream({ model: MODEL, messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200, temperature: 0, ...OFF })
    .finalChatCompletion();
  assert.equal(merged.choices[0].finish_reason, 'tool_calls');
  assert.equal(merged.choices[0].message.tool_calls[0].function.name, call.function.name);
  assert.equal(merged.choices[0].message.tool_calls[0].function.arguments, call.function.arguments);

  const reply = await client.chat.completions.create({
    model: MODEL, tools, max_tokens: 16, temperature: 0, ...OFF, tool_choice: 'none',
    messages: [...messages, c.message, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "sky": "clear"}' }],
  });
  assert.equal(typeof reply.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(reply.choices[0].finish_reason));
  assert.equal(reply.choices[0].message.tool_calls, undefined);
  const alone = await client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: 'none', max_tokens: 1, ...OFF });
  assert.ok(reply.usage.prompt_tokens > alone.usage.prompt_tokens + 30, 'the call and its result are in the prompt');
});

await check('tool_choice required: exactly one call to a declared function, then the end', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: user('What time is it in Japan?'), tools: [weatherTool, timeTool], tool_choice: 'required',
    max_tokens: 200, temperature: 0, ...OFF,
  });
  const calls = r.choices[0].message.tool_calls;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(calls.length, 1);
  const tool = [weatherTool, timeTool].find((t) => t.function.name === calls[0].function.name);
  assert.ok(tool, calls[0].function.name);
  validate(tool.function.parameters, JSON.parse(calls[0].function.arguments));
});

await check('response_format json_schema: the answer parses and validates', async () => {
  const schema = {
    type: 'object',
    properties: {
      city: { type: 'string', maxLength: 12 },
      unit: { enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer', enum: [1, 2, 3] },
      ok: { type: 'boolean' },
      tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
    },
    required: ['city', 'unit', 'days', 'ok'],
    additionalProperties: false,
  };
  for (const reasoning_effort of ['none', 'high']) {
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('The weather, as JSON.'), max_tokens: 300, temperature: 0, reasoning_effort,
      thinking_token_budget: 6, response_format: { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema } },
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    validate(schema, JSON.parse(r.choices[0].message.content));
  }
  const o = await client.chat.completions.create({
    model: MODEL, messages: user('Any JSON object.'), max_tokens: 1500, temperature: 0, ...OFF, response_format: { type: 'json_object' },
  });
  assert.equal(o.choices[0].finish_reason, 'stop');
  const v = JSON.parse(o.choices[0].message.content);
  assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
});

await check('errors: each class with its status and code as the SDK surfaces them', async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
  await expectError(bad.models.list(), OpenAI.AuthenticationError, 401, 'invalid_api_key');
  await expectError(client.post('/chat/completions', { body: '{"messages": [', headers: { 'content-type': 'application/json' } }),
                    OpenAI.BadRequestError, 400, 'invalid_json');
  await expectError(client.chat.completions.create({ model: 'gpt-4o', messages: user('hi'), max_tokens: 4 }),
                    OpenAI.NotFoundError, 404, 'model_not_found');
  await expectError(client.chat.completions.create({ model: MODEL, messages: user('x'.repeat(4000)), max_tokens: 4 }),
                    OpenAI.BadRequestError, 400, 'context_length_exceeded');
  await expectError(client.chat.completions.create({ model: MODEL, messages: user('hi'), response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'string', pattern: '^a' } } } }),
                    OpenAI.BadRequestError, 400, 'invalid_value');
});

// ---- logprobs, echo and n, checked against `tandem logits` ----

// log_softmax of every row of `tandem logits` on `ids` ([n][vocab], float64).
function referenceLogprobs(ids) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tandem-e2e-'));
  try {
    fs.writeFileSync(path.join(dir, 'ids.txt'), ids.join(' '));
    const out = path.join(dir, 'logits.npy');
    const r = spawnSync(arg('tandem'), ['logits', '--config', arg('profile'), '--threads', '1',
                                        '--tokens', path.join(dir, 'ids.txt'), '--out', out], { encoding: 'utf8' });
    assert.equal(r.status, 0, `tandem logits failed: ${r.stderr}`);
    const buf = fs.readFileSync(out);
    assert.equal(buf.subarray(0, 6).toString('latin1'), '\x93NUMPY');
    const major = buf[6];
    const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
    const start = (major === 1 ? 10 : 12) + hlen;
    const header = buf.subarray(major === 1 ? 10 : 12, start).toString('latin1');
    assert.match(header, /'descr': '<f4'/);
    const [n, vocab] = header.match(/'shape': \((\d+), (\d+)\)/).slice(1).map(Number);
    assert.equal(n, ids.length);
    const data = new Float32Array(buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + start + n * vocab * 4));
    const rows = [];
    for (let i = 0; i < n; ++i) {
      const row = data.subarray(i * vocab, (i + 1) * vocab);
      let hi = -Infinity;
      for (const x of row) hi = Math.max(hi, x);
      let sum = 0;
      for (const x of row) sum += Math.exp(x - hi);
      const lse = hi + Math.log(sum);
      rows.push(Float64Array.from(row, (x) => x - lse));
    }
    return rows;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
const near = (a, b, what) => assert.ok(Math.abs(a - b) <= 1e-4, `${what}: ${a} vs ${b} (tandem logits)`);

const chatPrompt = async (messages) => {
  const r = await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messages, ...OFF }),
  });
  return (await r.json()).tokens;
};

let scored;  // a completion with echo and logprobs: its ids and its logprobs object
await check('completions echo + logprobs (lm-eval loglikelihood): every logprob is log_softmax of tandem logits', async () => {
  const ids = await chatPrompt(user('Count to three.'));
  const r = await client.completions.create({
    model: MODEL, prompt: [ids], max_tokens: 6, temperature: 0, logprobs: 2, echo: true, return_tokens: true,
  });
  const c = r.choices[0];
  const lp = c.logprobs;
  const seq = [...ids, ...c.tokens];
  assert.equal(lp.tokens.length, seq.length);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.ok(lp.text_offset.at(-1) <= [...c.text].length, 'offsets point into the text, the prompt included');
  const ref = referenceLogprobs(seq);
  for (let j = 1; j < seq.length; ++j) {
    near(lp.token_logprobs[j], ref[j - 1][seq[j]], `token ${j}`);
    const top = lp.top_logprobs[j];
    // Up to logprobs + 1 alternatives (the taken token among them); tokens with the same text (control
    // tokens have none) share one key, as in OpenAI's dicts.
    assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 3, JSON.stringify(top));
    assert.ok(Math.max(...Object.values(top)) >= lp.token_logprobs[j]);
    if (j >= ids.length) assert.equal(lp.token_logprobs[j], Math.max(...Object.values(top)), 'greedy: the taken token is the top one');
  }
  for (let j = 1; j < seq.length; ++j) assert.ok(lp.text_offset[j] >= lp.text_offset[j - 1]);
  scored = { ids, tokens: c.tokens, lp };
});

await check('chat logprobs + top_logprobs: OpenAI shape, the numbers of the same tokens as a completion', async () => {
  const messages = user('Count to three.');
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, ...OFF,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  const gen = scored.lp.token_logprobs.slice(scored.ids.length);
  const ref = referenceLogprobs([...scored.ids, ...scored.tokens]);
  content.forEach((e, j) => {
    assert.equal(typeof e.token, 'string');
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].logprob, e.logprob, 'greedy: the first alternative is the taken token');
    near(e.logprob, ref[scored.ids.length - 1 + j][scored.tokens[j]], `chat token ${j}`);
    near(e.logprob, gen[j], `chat token ${j} vs the completion`);
  });
  // Streamed through the SDK: the chunks' entries join to the same list.
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, ...OFF, stream: true,
  });
  const streamed = [];
  for await (const ch of stream) for (const c of ch.choices) streamed.push(...(c.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);
});

await check('n with a seed: choice i equals a single request with seed + i, streamed per index too', async () => {
  const body = { model: MODEL, messages: user('Tell a story.'), max_tokens: 12, temperature: 1, top_p: 1, seed: 77, ...OFF };
  const r = await client.chat.completions.create({ ...body, n: 3, logprobs: true });
  assert.equal(r.choices.length, 3);
  let sum = 0;
  for (let i = 0; i < 3; ++i) {
    assert.equal(r.choices[i].index, i);
    const one = await client.chat.completions.create({ ...body, seed: 77 + i, logprobs: true });
    assert.equal(r.choices[i].message.content, one.choices[0].message.content, `choice ${i}`);
    assert.deepEqual(r.choices[i].logprobs, one.choices[0].logprobs, `choice ${i} logprobs`);
    sum += one.usage.completion_tokens;
  }
  assert.equal(r.usage.completion_tokens, sum);
  const texts = ['', '', ''];
  const stream = await client.chat.completions.create({ ...body, n: 3, stream: true });
  for await (const ch of stream) for (const c of ch.choices) texts[c.index] += c.delta.content ?? '';
  assert.deepEqual(texts, r.choices.map((c) => c.message.content));
  const comp = await client.completions.create({ model: MODEL, prompt: scored.ids, max_tokens: 8, temperature: 1, seed: 5, n: 2 });
  for (let i = 0; i < 2; ++i) {
    const one = await client.completions.create({ model: MODEL, prompt: scored.ids, max_tokens: 8, temperature: 1, seed: 5 + i });
    assert.equal(comp.choices[i].text, one.choices[0].text, `completion choice ${i}`);
  }
});

await check('logprobs, top_logprobs, n: bad values are BadRequestError naming the field', async () => {
  const bad = async (body, param) => {
    await assert.rejects(client.chat.completions.create({ model: MODEL, messages: user('hi'), max_tokens: 2, ...body }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, e?.message);
      assert.equal(e.param, param);
      return true;
    });
  };
  await bad({ top_logprobs: 2 }, 'top_logprobs');
  await bad({ logprobs: true, top_logprobs: 21 }, 'top_logprobs');
  await bad({ n: 0 }, 'n');
  await bad({ n: 99 }, 'n');
});

// ---- SIGTERM: drain and exit 0 ----

const exit = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
server.kill('SIGTERM');
const st = await Promise.race([exit, new Promise((r) => setTimeout(() => r({ code: 'timeout' }), 15000))]);
await check('SIGTERM drains and exits 0', async () => assert.deepEqual(st, { code: 0, signal: null }, log.slice(-2000)));
if (st.code === 'timeout') server.kill('SIGKILL');

const failed = results.filter(([, e]) => e).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
