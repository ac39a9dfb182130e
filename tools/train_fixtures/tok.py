"""The shared tokenizer of the trained test models: byte-level BPE (GPT-2's pre-tokenizer regex, no prefix space,
no normalizer), three special tokens, and a ChatML-style chat template.

train_tokenizer() uses Hugging Face `tokenizers` (BpeTrainer over the training corpus) when it is installed, and
otherwise the pure-Python trainer below (bpe_train: the same algorithm, most frequent pair first, pairs below
min_frequency never merged; ties by the pair's text, so not necessarily HF's merge order).  Either way the result
is a standard tokenizer.json; Encoder encodes it with `tokenizers` when installed, else with bpe_encode (merges
applied lowest rank first, the GPT-2/HF BPE rule).  TokenizerReference.TrainedBpeMatchesReferenceIds
(tests/tokenizer_reference_test.cpp) checks strata's encoder on the trained tokenizer.json against transformers.js
(tools/tokenizer_reference), an implementation independent of both.  --smoke may still use the stand-in without merges (the 256 byte tokens + the specials).
"""

import json
import os
import heapq
import re
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from make_fuzz_corpus import bytes_to_unicode  # noqa: E402  (tools/: GPT-2's byte -> character table)

# HF's ByteLevel pre-tokenizer (use_regex=True): GPT-2's pattern.
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT, IM_START, IM_END = 0, 1, 2   # ids: the trainer puts the special tokens first, in this order

# transformers' apply_chat_template renders this (jinja2, trim_blocks/lstrip_blocks); render_chat() is the same
# text for the training data.
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")


def render_chat(messages, add_generation_prompt=False):
    s = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return s + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def have_tokenizers():
    try:
        import tokenizers  # noqa: F401
        return True
    except ImportError:
        return False


def write_tokenizer_config(out_dir, model_max_length):
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for i, s in enumerate(SPECIALS)},
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": SPECIALS[EOT],
        "model_max_length": model_max_length,
        "pad_token": SPECIALS[EOT],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def train_tokenizer(texts, vocab_size, out_dir, model_max_length, allow_stand_in):
    """Trains on `texts` (a list of str) and writes out_dir/{tokenizer.json, tokenizer_config.json}; returns a
    description dict."""
    os.makedirs(out_dir, exist_ok=True)
    if have_tokenizers():
        import tokenizers
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tk.train_from_iterator(texts, trainer=trainer, length=len(texts))
        for i, s in enumerate(SPECIALS):
            assert tk.token_to_id(s) == i, f"special token {s} got id {tk.token_to_id(s)}"
        tk.save(os.path.join(out_dir, "tokenizer.json"))
        kind = f"tokenizers {tokenizers.__version__} BpeTrainer"
    elif allow_stand_in:
        write_stand_in(out_dir)
        kind = "stand-in: byte tokens only (no merges), tokenizers not installed"
    else:
        merges = bpe_train(texts, vocab_size - len(SPECIALS) - 256, min_frequency=2)
        write_tokenizer_json(out_dir, merges)
        kind = f"tools/train_fixtures/tok.py bpe_train (pure Python; `tokenizers` not installed), {len(merges)} merges"
    write_tokenizer_config(out_dir, model_max_length)
    enc = Encoder(out_dir)
    return {"kind": kind, "vocab_size": enc.vocab_size, "specials": SPECIALS}


def pre_tokenize(text):
    """HF ByteLevel(add_prefix_space=False, use_regex=True): GPT-2's split, each piece's UTF-8 bytes as characters."""
    import regex
    b2u = bytes_to_unicode()
    pat = getattr(pre_tokenize, "pat", None) or regex.compile(GPT2_SPLIT)
    pre_tokenize.pat = pat
    return ["".join(b2u[b] for b in piece.encode("utf-8")) for piece in pat.findall(text)]


def split_specials(text):
    """The text between special tokens (HF matches added tokens before pre-tokenizing)."""
    return [p for p in re.split("|".join(re.escape(s) for s in SPECIALS), text) if p]


def bpe_train(texts, n_merges, min_frequency):
    """Byte-level BPE merges, most frequent adjacent pair first (counted over distinct pre-tokenized words times
    their frequency), until n_merges or no pair occurs min_frequency times.  Returns [(left, right), ...]."""
    words = Counter()
    for t in texts:
        for part in split_specials(t):
            words.update(pre_tokenize(part))
    syms = [list(w) for w in words]
    freq = list(words.values())
    pairs = Counter()
    where = defaultdict(set)
    for i, w in enumerate(syms):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freq[i]
            where[(a, b)].add(i)
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    merges, done = [], set()
    while heap and len(merges) < n_merges:
        negc, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -negc:
            continue  # stale: the count changed since this entry was pushed
        if -negc < min_frequency:
            break
        if pair not in done:  # a pair may form again by another route ('t'+'he' after 'th'+'e'): merged, not listed
            done.add(pair)
            merges.append(pair)
        merged = pair[0] + pair[1]
        changed = set()
        for i in where.pop(pair, ()):
            w = syms[i]
            out, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == pair[0] and w[k + 1] == pair[1]:
                    out.append(merged)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            if len(out) == len(w):
                continue
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] -= freq[i]
                changed.add((a, b))
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += freq[i]
                where[(a, b)].add(i)
                changed.add((a, b))
            syms[i] = out
        pairs.pop(pair, None)
        for p in changed:
            c = pairs.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            elif p in pairs:
                del pairs[p]
    return merges


def bpe_encode(word, ranks):
    """One pre-tokenized word: the adjacent pair of lowest merge rank is merged (every occurrence, left to right)
    until none is in `ranks`."""
    w = list(word)
    while len(w) > 1:
        best = min(((ranks.get((a, b), 1 << 30), a, b) for a, b in zip(w, w[1:])))
        if best[0] == 1 << 30:
            break
        _, a, b = best
        out, k = [], 0
        while k < len(w):
            if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                out.append(a + b)
                k += 2
            else:
                out.append(w[k])
                k += 1
        w = out
    return w


def write_tokenizer_json(out_dir, merges):
    b2u = bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[b2u[b]] = len(SPECIALS) + b
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    write_tokenizer_doc(out_dir, vocab, [f"{a} {b}" for a, b in merges])


def write_stand_in(out_dir):
    write_tokenizer_json(out_dir, [])


def write_tokenizer_doc(out_dir, vocab, merges):
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(SPECIALS)]
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(doc, f, ensure_ascii=False)


class Encoder:
    """Encodes with `tokenizers` when installed, else in pure Python (pre_tokenize + bpe_encode, any merges)."""

    def __init__(self, tok_dir):
        path = os.path.join(tok_dir, "tokenizer.json")
        with open(path) as f:
            doc = json.load(f)
        self.vocab_size = len(doc["model"]["vocab"]) + sum(1 for a in doc["added_tokens"]
                                                           if a["content"] not in doc["model"]["vocab"])
        self.tk = None
        if have_tokenizers():
            from tokenizers import Tokenizer
            self.tk = Tokenizer.from_file(path)
            self.vocab_size = self.tk.get_vocab_size()
        else:
            self.vocab = doc["model"]["vocab"]
            self.ranks = {tuple(m.split(" ")) if isinstance(m, str) else tuple(m): r
                          for r, m in enumerate(doc["model"]["merges"])}
            self.cache = {}
            self.inv_vocab = {i: t for t, i in self.vocab.items()}
            self.u2b = {u: b for b, u in bytes_to_unicode().items()}
            b2u = bytes_to_unicode()
            self.byte_id = [doc["model"]["vocab"][b2u[b]] for b in range(256)]
            self.special = {a["content"]: a["id"] for a in doc["added_tokens"]}
            self.split = re.compile("(" + "|".join(re.escape(s) for s in self.special) + ")")
            self.id_bytes = {i: bytes([b]) for b, i in enumerate(self.byte_id)}

    def encode_batch(self, texts):
        if self.tk is not None:
            return [e.ids for e in self.tk.encode_batch(texts)]
        out = []
        for t in texts:
            ids = []
            for piece in self.split.split(t):
                if piece in self.special:
                    ids.append(self.special[piece])
                elif piece:
                    for word in pre_tokenize(piece):
                        got = self.cache.get(word)
                        if got is None:
                            got = [self.vocab[t] for t in bpe_encode(word, self.ranks)]
                            self.cache[word] = got
                        ids.extend(got)
            out.append(ids)
        return out

    def decode(self, ids):
        if self.tk is not None:
            return self.tk.decode(ids, skip_special_tokens=False)
        inv = {v: k for k, v in self.special.items()}
        return b"".join(inv[i].encode() if i in inv else bytes(self.u2b[c] for c in self.inv_vocab[i])
                        for i in ids).decode("utf-8", "replace")
