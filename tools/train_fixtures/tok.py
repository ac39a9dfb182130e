"""The shared tokenizer of the trained test models: byte-level BPE (GPT-2's pre-tokenizer regex, no prefix space,
no normalizer), three special tokens, and a ChatML-style chat template.

train_tokenizer() uses Hugging Face `tokenizers` (BpeTrainer over the training corpus) when it is installed; without
it (this repository's machines) it writes a stand-in with the same tokenizer.json structure and no merges (the 256
byte tokens + the specials), encoded here in pure Python, so that the training pipeline and strata's loading can be
smoke-tested anywhere.  The stand-in is never used for the committed models (train.py refuses it outside --smoke).
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from make_fuzz_corpus import bytes_to_unicode  # noqa: E402  (tools/: GPT-2's byte -> character table)

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
    else:
        if not allow_stand_in:
            raise SystemExit("the `tokenizers` package is missing (the byte-level stand-in is for --smoke only)")
        write_stand_in(out_dir)
        kind = "stand-in: byte tokens only (no merges), tokenizers not installed"
    write_tokenizer_config(out_dir, model_max_length)
    enc = Encoder(out_dir)
    return {"kind": kind, "vocab_size": enc.vocab_size, "specials": SPECIALS}


def write_stand_in(out_dir):
    b2u = bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[b2u[b]] = len(SPECIALS) + b
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(SPECIALS)]
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(doc, f, ensure_ascii=False)


class Encoder:
    """Encodes with `tokenizers` when installed, else (a stand-in tokenizer.json only) in pure Python."""

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
            if doc["model"]["merges"]:
                raise SystemExit(f"{path} has merges: encoding it needs the `tokenizers` package")
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
                    ids.extend(self.byte_id[b] for b in piece.encode("utf-8"))
            out.append(ids)
        return out

    def decode(self, ids):
        if self.tk is not None:
            return self.tk.decode(ids, skip_special_tokens=False)
        inv = {v: k for k, v in self.special.items()}
        return b"".join(inv[i].encode() if i in inv else self.id_bytes[i] for i in ids).decode("utf-8", "replace")
