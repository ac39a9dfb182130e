// What the end-to-end tests of `strata serve` share: starting a server on a
// free port and waiting for it, named checks that count failures, and
// expecting an OpenAI error from the official client.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import assert from "node:assert/strict";

// The command line every test takes (STRATA_BINARY WORK_DIR
// QWEN3_TOKENIZER_DIR), WORK_DIR emptied, and the small Qwen3-shaped model
// with the real tokenizer that they serve, synthesized afresh in it.
export function setUp(script) {
  const [strata, work, tokenizerDir] = process.argv.slice(2);
  if (!strata || !work || !tokenizerDir) {
    console.error(`usage: node ${script} STRATA_BINARY WORK_DIR QWEN3_TOKENIZER_DIR`);
    process.exit(2);
  }
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const model = `${work}/qwen3-tiny`;
  execFileSync(strata, ["synth", "--preset", "qwen3-30b-a3b", "--size", "0.2", "--format", "safetensors",
    "--tokenizer", tokenizerDir, "--out", model, "--seed", "5"], { stdio: "inherit" });
  return { strata, work, tokenizerDir, model };
}

// Starts `strata serve DIR` on a free port with --threads 2 and --ctx 2048
// (unless `extra` gives its own); resolves once it listens, with the
// process's `url`.
export function startServer(strata, dir, extra = []) {
  return new Promise((resolve, reject) => {
    const ctx = extra.includes("--ctx") ? [] : ["--ctx", "2048"];
    // STRATA_DEVICE: every server computes there (ctest's server_e2e_vulkan).
    const device = process.env.STRATA_DEVICE ? ["--device", process.env.STRATA_DEVICE] : [];
    const p = spawn(strata, ["serve", dir, "--port", "0", "--threads", "2", ...ctx, ...device, ...extra],
      { stdio: ["ignore", "inherit", "pipe"] });
    let err = "";
    p.stderr.on("data", (d) => {
      err += d.toString();
      process.stderr.write(d);
      const m = err.match(/listening on (http:\/\/[^ ]+) /);
      if (m && !p.url) { p.url = m[1]; resolve(p); }
    });
    p.on("exit", (code) => { if (!p.url) reject(new Error(`strata serve exited ${code}: ${err}`)); });
  });
}

export async function waitReady(url) {
  for (let i = 0; i < 600; ++i) {
    const r = await fetch(`${url}/health`).catch(() => null);
    if (r && r.status === 200) return;
    if (r && r.status === 500) throw new Error(`load failed: ${await r.text()}`);
    await new Promise((s) => setTimeout(s, 100));
  }
  throw new Error("server never became ready");
}

export const stopServer = (p) => new Promise((s) => { p.on("exit", s); p.kill("SIGTERM"); });

export const sleep = (ms) => new Promise((s) => setTimeout(s, ms));

let failures = 0;
export async function check(name, fn) {
  const t0 = Date.now();
  const took = () => `(${((Date.now() - t0) / 1000).toFixed(1)} s)`;
  try { await fn(); console.log(`ok   ${name} ${took()}`); }
  catch (e) { failures++; console.log(`FAIL ${name} ${took()}: ${e.stack || e}`); }
}
// Ends the run: exit 1 when a check failed.
export function finish() {
  if (failures) { console.log(`${failures} check(s) failed`); process.exit(1); }
  console.log("all checks passed");
}

export async function expectApiError(promise, status, type) {
  try { await promise; } catch (e) {
    assert.equal(e.status, status, `status ${e.status}: ${e.message}`);
    if (type) assert.equal(e.error?.type ?? e.type, type);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}
