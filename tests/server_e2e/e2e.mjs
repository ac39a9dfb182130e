// End-to-end test of `strata serve` with the official `openai` npm client and
// curl, as a user would point their tools at it. Run by CTest:
//   node e2e.mjs STRATA_BINARY WORK_DIR QWEN3_TOKENIZER_DIR
// It synthesizes a tiny Qwen3-MoE model carrying the real Qwen3 tokenizer and
// chat template, serves it, and checks: non-streamed and streamed chat and
// completions, usage, stop sequences, seeded reproducibility, logprobs,
// logit_bias (against the model's own logits from `strata generate --logits`),
// concurrent requests, client disconnects, and error shapes (400, 401, 404,
// 413, 429), fields strata does not implement or know, and deep nesting.
import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import assert from "node:assert/strict";
import OpenAI, { APIUserAbortError } from "openai";
import { check, expectApiError, finish, setUp, sleep, startServer as startServerOn, stopServer, waitReady } from "./harness.mjs";

const { strata, work, tokenizerDir, model } = setUp("e2e.mjs");

const KEY = "sk-test-key";
const startServer = (extra = [], dir = model) => startServerOn(strata, dir, extra);

const server = await startServer(["--api-key", KEY, "--max-running", "4", "--max-queue", "8"]);
const url = server.url;
const client = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
const modelId = "qwen3-tiny";

await check("health reports loading then ok", async () => {
  await waitReady(url);
  const r = await fetch(`${url}/health`);
  assert.equal(r.status, 200);
});

await check("models lists the served model", async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, modelId);
  assert.equal(list.data[0].strata.approximation, null);  // the synthesized weights, as written
  // With --api-key, /metrics is behind it too (unless --metrics-public).
  assert.equal((await fetch(`${url}/metrics`)).status, 401);
  const m = await (await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).text();
  assert.match(m, /^strata_model_approximation\{label=""\} 0$/m);
});

const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Name a color." }];

await check("chat, not streamed: content, usage, finish_reason", async () => {
  const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

await check("chat, streamed: deltas add up to the non-streamed text, usage at the end", async () => {
  const full = await client.chat.completions.create({ model: modelId, messages, max_tokens: 12, temperature: 0, ignore_eos: true });
  const stream = await client.chat.completions.create({ model: modelId, messages, max_tokens: 12, temperature: 0,
    ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  let text = "", reasoning = "", finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      reasoning += c.delta.reasoning_content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, full.choices[0].message.content ?? "");
  assert.equal(reasoning, full.choices[0].message.reasoning_content ?? "");
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 12);
});

await check("completions, streamed and not, with a stop sequence", async () => {
  const base = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ignore_eos: true });
  const text = base.choices[0].text;
  assert.ok(text.length > 0);
  // Stop at a piece of the text it will produce: the output ends right before it.
  const cut = Math.max(1, Math.floor(text.length / 2));
  const stop = text.slice(cut, cut + 2);
  assert.ok(stop.length === 2 && text.indexOf(stop) === cut, `no usable stop string in ${JSON.stringify(text)}`);
  {
    const r = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 16, temperature: 0, stop: [stop], ignore_eos: true });
    assert.equal(r.choices[0].text, text.slice(0, cut));
    assert.equal(r.choices[0].finish_reason, "stop");
    const s = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 16, temperature: 0, stop: stop, stream: true, ignore_eos: true });
    let streamed = "";
    for await (const c of s) streamed += c.choices[0]?.text ?? "";
    assert.equal(streamed, text.slice(0, cut));
  }
});

await check("the same seed gives the same text; temperature 1", async () => {
  const req = { model: modelId, messages, max_tokens: 10, temperature: 1, seed: 1234, ignore_eos: true };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  const c = await client.chat.completions.create({ ...req, seed: 99 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.ok(a.usage.completion_tokens === 10 && c.usage.completion_tokens === 10);
});

await check("logprobs and top_logprobs", async () => {
  const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 3);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);  // greedy picks the top one
  }
});

// Ids and the model's own logits from the CLI on the same checkpoint: what
// logit_bias must do is worked out from them, not written down. Run without
// blocking the event loop: a loop blocked past the server's keep-alive would
// send the next request on a connection the server has closed.
const cli = async (args) => (await promisify(execFile)(strata, args, { maxBuffer: 1 << 28 })).stdout;
const tokenize = async (text) => JSON.parse(await cli(["tokenize", "--model", model, "--text", text, "--json"])).ids;
const detokenize = async (ids) => (await cli(["tokenize", "--model", model, "--ids", ids.join(",")])).slice(0, -1);
async function firstLogits(promptIds) {
  const r = JSON.parse(await cli(["generate", "--model", model, "--prompt-ids", promptIds.join(","), "-n", "1",
    "--json", "--logits", "--ignore-eos", "--threads", "2", "--ctx", "2048"]));
  return { token: r.tokens[0], row: r.logits[0] };
}
const argmax = (row) => row.reduce((best, v, i) => (v > row[best] ? i : best), 0);
const biased = (row, bias) => { const r = row.slice(); for (const [id, b] of Object.entries(bias)) r[Number(id)] += b; return r; };
const rowMax = (row) => row.reduce((m, v) => Math.max(m, v), -Infinity);
const rowMin = (row) => row.reduce((m, v) => Math.min(m, v), Infinity);
const logSoftmax = (row, id) => { const m = rowMax(row); return row[id] - m - Math.log(row.reduce((s, v) => s + Math.exp(v - m), 0)); };

await check("logit_bias bans and pushes tokens, greedy, as the model's own logits say", async () => {
  const prompt = await tokenize("Once upon a time");
  const { token: top, row } = await firstLogits(prompt);
  assert.equal(top, argmax(row));
  const once = (extra) => client.completions.create({ model: modelId, prompt, max_tokens: 1, temperature: 0, logprobs: 1, ...extra });
  const plain = await once({});
  assert.equal(plain.choices[0].text, await detokenize([top]));
  // -100 on the greedy token: the next one by the model's logits comes instead.
  const ban = { [top]: -100 };
  const second = argmax(biased(row, ban));
  assert.notEqual(second, top);
  assert.notEqual(await detokenize([second]), await detokenize([top]));  // else the text could not tell them apart
  const banned = await once({ logit_bias: ban });
  assert.equal(banned.choices[0].text, await detokenize([second]));
  // +100 on a token the model does not favour: it comes instead.
  const dragonIds = await tokenize(" dragon");
  assert.equal(dragonIds.length, 1);
  const [dragon] = dragonIds;
  assert.notEqual(dragon, top);
  const push = { [dragon]: 100 };
  assert.equal(argmax(biased(row, push)), dragon);
  const pushed = await once({ logit_bias: push });
  assert.equal(pushed.choices[0].text, " dragon");
  // Logprobs stay the model's own (before the bias): documented in runtime/logprobs.h.
  assert.ok(Math.abs(pushed.choices[0].logprobs.token_logprobs[0] - logSoftmax(row, dragon)) < 1e-3,
    `${pushed.choices[0].logprobs.token_logprobs[0]} vs ${logSoftmax(row, dragon)}`);
  // Streamed, the same.
  const s = await once({ logit_bias: push, stream: true });
  let streamed = "";
  for await (const c of s) streamed += c.choices[0]?.text ?? "";
  assert.equal(streamed, " dragon");
  // Chat: +100 is more than this model's whole spread of logits, so it wins at every position.
  assert.ok(rowMax(row) - rowMin(row) < 100);
  const chat = await client.chat.completions.create({ model: modelId, messages, max_tokens: 3, temperature: 0, ignore_eos: true,
    logit_bias: push });
  assert.equal(chat.choices[0].message.content, " dragon dragon dragon");
});

await check("fields strata does not implement or know are a 400 naming them", async () => {
  const e1 = await expectApiError(client.chat.completions.create({ model: modelId, messages, response_format: { type: "json_object" } }),
    400, "invalid_request_error");
  assert.equal(e1.param, "response_format");
  assert.match(e1.message, /response_format/);
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
  const e2 = await expectApiError(client.chat.completions.create({ model: modelId, messages, tools, tool_choice: "required" }), 400);
  assert.equal(e2.param, "tool_choice");
  // Unknown fields: passed straight through by the client, or as the whole body.
  const e3 = await expectApiError(client.chat.completions.create({ model: modelId, messages, frobnicate: true }), 400, "invalid_request_error");
  assert.equal(e3.error.message, "Unrecognized request argument supplied: frobnicate");
  assert.equal(e3.param, "frobnicate");
  const e4 = await expectApiError(client.completions.create({ model: modelId, prompt: "x" },
    { body: { model: modelId, prompt: "x", max_tokens: 1, best_of_luck: 1 } }), 400);
  assert.equal(e4.error.message, "Unrecognized request argument supplied: best_of_luck");
  const e5 = await expectApiError(client.chat.completions.create({ model: modelId, messages, logit_bias: { "not-an-id": 5 } }), 400);
  assert.equal(e5.param, "logit_bias");
  const e6 = await expectApiError(client.completions.create({ model: modelId, prompt: "x", logit_bias: { 5: 101 } }), 400);
  assert.equal(e6.param, "logit_bias");
  // What OpenAI accepts and changes nothing here, and the defaults of what would: a 200.
  const ok = await client.chat.completions.create({ model: modelId, messages, max_tokens: 2, user: "u", metadata: { a: "b" },
    store: false, service_tier: "auto", response_format: { type: "text" }, tools, tool_choice: "none", parallel_tool_calls: true,
    n: 1, stream_options: null });
  assert.equal(ok.choices.length, 1);
  // tool_choice "none" keeps the tools from the (Jinja) template: the prompt is the one without them.
  const noTools = await client.chat.completions.create({ model: modelId, messages, max_tokens: 1 });
  const withTools = await client.chat.completions.create({ model: modelId, messages, max_tokens: 1, tools });
  assert.ok(withTools.usage.prompt_tokens > noTools.usage.prompt_tokens);
  assert.equal(ok.usage.prompt_tokens, noTools.usage.prompt_tokens);
});

// 1,000,000 deep (2 MB, under the body limit) took the server down before the depth check.
await check("a body nested 100,000 or 1,000,000 deep is a 400 and the server lives on", async () => {
  for (const n of [100000, 1000000]) for (const shape of ["bare", "in a message"]) {
    const deep = "[".repeat(n) + "]".repeat(n);
    const body = shape === "bare" ? deep : `{"messages": [{"role": "user", "content": "x", "extra": ${deep}}]}`;
    const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", body, headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" } });
    assert.equal(r.status, 400);
    assert.match((await r.json()).error.message, /nests deeper/);
  }
  const r = await client.completions.create({ model: modelId, prompt: "Hi", max_tokens: 1 });
  assert.equal(r.choices.length, 1);
});

await check("four concurrent streams are all answered", async () => {
  const runs = [0, 1, 2, 3].map((i) => client.chat.completions.create({ model: modelId, max_tokens: 6, temperature: 1, seed: i, ignore_eos: true,
    messages: [{ role: "user", content: `Count to ${i + 3}.` }] }));
  const rs = await Promise.all(runs);
  for (const r of rs) assert.equal(r.usage.completion_tokens, 6);
});

await check("a client that disconnects cancels its sequence", async () => {
  const metrics = async () => (await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).text();
  const generated = (m) => Number(m.match(/^strata_generated_tokens_total (\S+)$/m)[1]);
  const before = generated(await metrics());
  const ac = new AbortController();
  const s = await client.chat.completions.create({ model: modelId, messages, max_tokens: 1500, ignore_eos: true, stream: true }, { signal: ac.signal });
  let n = 0;
  try { for await (const _ of s) { if (++n === 3) ac.abort(); } } catch (_) {}
  // The server keeps answering (the cancelled sequence does not hold a slot forever).
  const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 2, temperature: 0 });
  assert.ok(r.choices.length === 1);
  // The server sees the disconnect when a write fails, a step or two after
  // the abort: on a loaded CI machine with lavapipe a step takes ~0.3 s.
  // Whether it ended early is told by the tokens made, not by the clock.
  let m = await metrics();
  for (let i = 0; i < 300 && !/^strata_running_sequences 0$/m.test(m); ++i) { await sleep(100); m = await metrics(); }
  assert.match(m, /^strata_running_sequences 0$/m);
  const made = generated(m) - before;
  assert.ok(made < 1500, `the cancelled sequence ran on: ${made} tokens made`);
});

await check("errors have OpenAI's shape: 401, 404, 400", async () => {
  const noKey = new OpenAI({ apiKey: "wrong", baseURL: `${url}/v1`, maxRetries: 0 });
  await expectApiError(noKey.chat.completions.create({ model: modelId, messages }), 401);
  await expectApiError(client.chat.completions.create({ model: "no-such-model", messages }), 404);
  await expectApiError(client.chat.completions.create({ model: modelId, messages: [] }), 400, "invalid_request_error");
  await expectApiError(client.chat.completions.create({ model: modelId, messages, temperature: 7 }), 400);
  await expectApiError(client.completions.create({ model: modelId, prompt: "x", max_tokens: 0 }), 400);
  // An image part: a clear 400 until multimodal input exists (Kimi K3's vision tower is not loaded).
  const image = await expectApiError(client.chat.completions.create({ model: modelId, messages: [{ role: "user",
    content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] }), 400, "invalid_request_error");
  assert.match(image.message, /image input is not supported/);
  for (const body of ["{", "[]", "null", '{"messages": 3}', '{"model": 5}', "\u0000\u0001"]) {
    const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", body, headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" } });
    assert.equal(r.status, 400, body);
    const j = await r.json();
    assert.equal(typeof j.error.message, "string");
  }
  const r404 = await fetch(`${url}/v1/nothing`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(r404.status, 404);
});

await check("an oversize body gets 413, an over-long prompt 400", async () => {
  const big = "x".repeat(9 << 20);
  const r = await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: big }), headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" } });
  assert.equal(r.status, 413);
  const long = "word ".repeat(3000);
  const e = await expectApiError(client.completions.create({ model: modelId, prompt: long, max_tokens: 2 }), 400);
  assert.match(e.message, /context/);
});

await check("curl: a streamed completion ends with data: [DONE]", async () => {
  const out = execFileSync("curl", ["-sN", `${url}/v1/completions`, "-H", `Authorization: Bearer ${KEY}`, "-H", "Content-Type: application/json",
    "-d", JSON.stringify({ prompt: "Hello", max_tokens: 4, stream: true, temperature: 0 })]).toString();
  assert.match(out, /^data: /);
  assert.match(out, /data: \[DONE\]\n\n$/);
});

await stopServer(server);

// A full queue answers 429 with Retry-After.
const tight = await startServer(["--max-running", "1", "--max-queue", "0"]);
const c2 = new OpenAI({ apiKey: "none", baseURL: `${tight.url}/v1`, maxRetries: 0 });
await check("a full queue gets 429 with Retry-After", async () => {
  await waitReady(tight.url);
  // The long request holds the one running slot; once the 429 is seen it is
  // cancelled (on a slow device its 400 tokens would take minutes).
  const stop = new AbortController();
  const long = c2.chat.completions.create({ model: modelId, messages, max_tokens: 400, ignore_eos: true },
    { signal: stop.signal });
  let longError;
  const settled = long.then(() => {}, (e) => { longError = e; });
  try {
    await new Promise((s) => setTimeout(s, 300));
    const r = await fetch(`${tight.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ messages, max_tokens: 2 }), headers: { "Content-Type": "application/json" } });
    assert.equal(r.status, 429);
    assert.equal(r.headers.get("retry-after"), "1");
    // Still running when cancelled: nothing but the abort may have ended it.
    assert.equal(longError, undefined, `the long request failed: ${longError}`);
  } finally {
    stop.abort();
    await settled;
  }
  assert.ok(longError === undefined || longError instanceof APIUserAbortError, `the long request failed: ${longError}`);
});
await stopServer(tight);

// A model with more rows than its tokenizer has tokens (as real checkpoints
// pad theirs): the qwen_gqa fixture (352 rows) with a byte-level tokenizer of
// 256 tokens. A token past the tokenizer is a token without text, not a 500.
const bytes = `${work}/bytes-model`;
mkdirSync(bytes, { recursive: true });
const fixture = new URL("../fixtures/models/qwen_gqa/", import.meta.url).pathname;
for (const f of ["config.json", "generation_config.json", "model.safetensors"]) symlinkSync(`${fixture}${f}`, `${bytes}/${f}`);
// GPT-2's byte-to-character map: printable bytes stand for themselves, the rest from U+0100 on.
const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
const byteVocab = {};
for (let b = 0, n = 0; b < 256; ++b) byteVocab[String.fromCodePoint(printable(b) ? b : 256 + n++)] = b;
writeFileSync(`${bytes}/tokenizer.json`, JSON.stringify({ version: "1.0", added_tokens: [],
  pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, use_regex: true }, decoder: { type: "ByteLevel" },
  model: { type: "BPE", vocab: byteVocab, merges: [] } }));
// The fixture holds 128 positions; the servers here run at 2048.
const padded = await startServer(["--allow-long-ctx"], bytes);
const c3 = new OpenAI({ apiKey: "none", baseURL: `${padded.url}/v1`, maxRetries: 0 });
await check("a token past the tokenizer's vocabulary has no text and is not an error", async () => {
  await waitReady(padded.url);
  const vocab = JSON.parse(readFileSync(`${bytes}/config.json`)).vocab_size;
  assert.ok(vocab > 256);
  const last = vocab - 1;
  const r = await c3.completions.create({ model: "bytes-model", prompt: "Hello", max_tokens: 2, temperature: 0, logprobs: 2,
    logit_bias: { [last]: 100 } });
  assert.equal(r.choices[0].text, "");
  assert.equal(r.usage.completion_tokens, 2);
  assert.deepEqual(r.choices[0].logprobs.tokens, ["", ""]);
  // Beside it, a token the tokenizer has keeps its text: "A" is byte 65.
  const a = await c3.completions.create({ model: "bytes-model", prompt: "Hello", max_tokens: 2, temperature: 0, logit_bias: { 65: 100 } });
  assert.equal(a.choices[0].text, "AA");
  const s = await c3.completions.create({ model: "bytes-model", prompt: "Hello", max_tokens: 3, temperature: 1, seed: 3,
    logit_bias: { [last]: 100 }, stream: true });
  let text = "", finish = null;
  for await (const chunk of s) for (const ch of chunk.choices) { text += ch.text ?? ""; finish = ch.finish_reason ?? finish; }
  assert.equal(text, "");
  assert.equal(finish, "length");
});
await stopServer(padded);

// The same fixture without a tokenizer: prompts as ids, and logprobs name
// tokens as vLLM does (token_id:N); this took the server down before.
const bare = await startServer(["--allow-long-ctx"], fixture);  // "…/qwen_gqa/": the trailing slash still names it qwen_gqa
await check("without a tokenizer, logprobs name tokens by id", async () => {
  await waitReady(bare.url);
  const c4 = new OpenAI({ apiKey: "none", baseURL: `${bare.url}/v1`, maxRetries: 0 });
  const r = await c4.completions.create({ model: "qwen_gqa", prompt: [1, 2, 3], max_tokens: 2, temperature: 0, logprobs: 1,
    logit_bias: { 7: 100 } });
  assert.deepEqual(r.choices[0].logprobs.tokens, ["token_id:7", "token_id:7"]);
  assert.equal(r.choices[0].text, "");
});
await stopServer(bare);

// A pack whose experts were re-quantized says so in /v1/models and /metrics,
// with the figures `strata pack` measured against the source.
const lossyPack = `${work}/qwen_gqa-int4`;
execFileSync(strata, ["pack", fixture, "--out", lossyPack, "--experts", "int4", "--threads", "2", "-q"], { stdio: "inherit" });
// A key, and /metrics public: a scraper needs none.
const lossy = await startServer(["--allow-long-ctx", "--api-key", KEY, "--metrics-public"], lossyPack);
await check("a re-quantized pack is labelled in /v1/models and /metrics", async () => {
  const r = await (await fetch(`${lossy.url}/v1/models`, { headers: { Authorization: `Bearer ${KEY}` } })).json();
  assert.match(r.data[0].strata.approximation, /^approximation: experts re-quantized to int4 \(top-1 agreement [0-9.]+, mean KL [0-9.e-]+ vs the source on 8 built-in prompts\)$/);
  const m = await (await fetch(`${lossy.url}/metrics`)).text();
  assert.ok(m.includes(`strata_model_approximation{label="${r.data[0].strata.approximation}"} 1`), m);
});
await stopServer(lossy);

// Speculative decoding: the served model drafts for itself (a draft model
// sharing the tokenizer); four concurrent requests each draft, their
// verifications batched in the same steps, and each one's text and
// logprobs are those of the same request with "draft": false. A fixed
// draft length: drafting with the target itself never pays, and the
// adaptive length would rightly turn it off.
const tracePath = `${work}/serve-trace.jsonl`;
const drafting = await startServer(["--draft", model, "--draft-max", "4", "--draft-fixed", "--max-running", "4", "--trace", tracePath]);
await check("serve --draft: output as without drafting, concurrent requests, usage and metrics", async () => {
  await waitReady(drafting.url);
  const c5 = new OpenAI({ apiKey: "none", baseURL: `${drafting.url}/v1`, maxRetries: 0 });
  const req = (i, draft) => ({ model: modelId, max_tokens: 12, temperature: i === 0 ? 0 : 0.8, seed: 40 + i, ignore_eos: true,
    logprobs: true, top_logprobs: 2, messages: [{ role: "user", content: `Say ${i + 1} things about rivers.` }], draft });
  const on = await Promise.all([0, 1, 2, 3].map((i) => c5.chat.completions.create(req(i, true))));
  const off = await Promise.all([0, 1, 2, 3].map((i) => c5.chat.completions.create(req(i, false))));
  for (let i = 0; i < 4; ++i) {
    assert.equal(on[i].choices[0].message.content, off[i].choices[0].message.content);
    assert.deepEqual(on[i].choices[0].logprobs, off[i].choices[0].logprobs);
    assert.equal(off[i].usage.completion_tokens_details, undefined);
    const d = on[i].usage.completion_tokens_details;
    assert.ok(d && d.accepted_prediction_tokens > 0, JSON.stringify(on[i].usage));
    assert.ok(d.accepted_prediction_tokens <= on[i].usage.completion_tokens);
  }
  const m = await (await fetch(`${drafting.url}/metrics`)).text();
  const drafted = Number(m.match(/^strata_draft_tokens_total (\S+)$/m)[1]);
  const kept = Number(m.match(/^strata_draft_accepted_tokens_total (\S+)$/m)[1]);
  assert.ok(drafted > 0 && kept > 0 && kept <= drafted, m);
  // --trace: a line per computed row, eight sequences, every MoE layer's choices.
  const lines = readFileSync(tracePath, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(new Set(lines.map((l) => l.seq)).size, 8);
  assert.ok(lines.every((l) => l.experts.some((e) => e.length > 0)));
});
await stopServer(drafting);

finish();
