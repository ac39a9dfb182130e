"""Writes tests/fixtures/tokenizer/strings.json: the strings strata's tokenizer
is checked on against the reference encoders (code in several languages, CJK,
Japanese, Korean, other scripts, emoji with ZWJ sequences and skin tones,
numbers of many lengths, whitespace runs, contractions, URLs, special tokens of
both models, NFC-sensitive text, and seeded random mixtures).

  python3 tools/tokenizer_reference/make_strings.py

Then regenerate the expected ids (make_reference.mjs, make_tiktoken_reference.py).
Strings on which transformers.js and HF tokenizers disagree (JavaScript's \s
differs from Unicode White_Space at U+0085 and U+FEFF) must not be added here;
they are tested separately against HF ids in tokenizer_reference_test.cpp.
"""
import json
import os
import random

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "tokenizer", "strings.json")
S = []
def add(*xs): S.extend(xs)

# --- English prose, contractions, apostrophes
add("Hello, world!", "hello world", "Hello World", "HELLO WORLD", " Hello", "Hello ", "  Hello  ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure it's fine, isn't it? We've been here; they'll come; you'd know.",
    "I'M SURE IT'S FINE; WE'VE BEEN; THEY'LL; YOU'D; DON'T; WE'RE",
    "It’s a curly apostrophe — don’t panic.", "rock 'n' roll", "'s 't 're 've 'm 'll 'd",
    "O'Neill's dog's bone", "y'all'd've", "'''", "\"quoted\" and 'single'",
    "Mr. Smith went to Washington D.C. on Jan. 3rd, 2024.",
    "Supercalifragilisticexpialidocious", "antidisestablishmentarianism " * 3,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababababababababababab", "ThisIsCamelCaseAndSnake_case_and-kebab-case",
    "e.g. i.e. etc. vs. a.k.a.", "Q&A: R&D, AT&T, 50% off!!!", "What?!?! No way...",
    "Ellipsis… and em—dash and en–dash", "¿Dónde está la biblioteca? ¡Aquí!",
    "Über naïve café résumé façade coöperate", "Straße Maß Fuß ÄÖÜ äöü",
    "Ça va? Très bien, merci. L'été dernier, j'ai visité l'Hôtel-Dieu.",
    "Zażółć gęślą jaźń", "Příliš žluťoučký kůň úpěl ďábelské ódy",
    "İstanbul ıiİI ğüşöç", "Ærøskøbing Ångström",
)
# --- code
add('int main() {\n    printf("Hello, %s!\\n", name);\n    return 0;\n}\n',
    "#include <vector>\ntemplate <typename T>\nstd::vector<T> f(const T& x) { return {x, x}; }\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo(Bar):\n\tdef __init__(self, *args, **kwargs):\n\t\tsuper().__init__(*args, **kwargs)\n",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![1, 2, 3];\n    println!(\"{:?}\", v);\n    Ok(())\n}",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%bob%' ORDER BY id DESC;",
    "<!DOCTYPE html>\n<html lang=\"en\">\n  <body><div class=\"x\">Hi &amp; bye</div></body>\n</html>",
    '{"key": "value", "n": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done 2>&1 | tee log\n",
    "main :: IO ()\nmain = mapM_ print $ take 10 $ filter even [1..]",
    "x += 1; y -= 2; z *= 3; w /= 4; a <<= 1; b >>= 2; c &&= d || e;",
    "if (a != b && c <= d || !e) { return a->b.c[0]; }",
    "    indented with four spaces\n        and eight\n",
    "\t\ttab indented\n\t\t\tthree tabs", "foo_bar_baz = FooBarBaz.qux_quux()",
    "// comment\n/* block\n   comment */\n# hash comment\n-- sql comment",
    "@decorator\ndef f(): pass", "$var = @array[0]; %hash{'k'} => 1;",
    "0x1F 0b1010 0o777 1_000_000 3.14159f 1e-9 .5 5.",
    "a[i][j] = b[i - 1][j + 1] * c[k];", "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
    "std::unique_ptr<std::map<std::string, std::vector<int>>> p;",
    "```python\nprint('hi')\n```", "lambda x: x**2 + 2*x + 1",
    "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "C:\\Users\\name\\Documents\\file.txt", "/usr/local/bin/python3 -m pip install -U pip",
    "git commit -m \"fix: handle CRLF\" && git push origin main",
)
# --- CJK, Japanese, Korean and other scripts
add("你好，世界！", "我爱自然语言处理。", "今天天气很好，我们去公园散步吧。", "機器學習與深度學習的區別是什麼？",
    "中文English混合text測試", "北京2024年奥运会", "龘靐齉齾", "　全角スペース　", "𠀀𠀁𪚥 (CJK Ext B)",
    "こんにちは、世界！", "日本語のテキストを分割します。", "カタカナとひらがなと漢字", "ｶﾀｶﾅ ﾊﾝｶｸ", "東京都渋谷区",
    "ゐゑヰヱヴ ー〜", "お元気ですか？元気です。", "ラーメンを食べたい！",
    "안녕하세요, 세계!", "한국어 텍스트 토큰화 테스트입니다.", "대한민국 서울특별시",
    "مرحبا بالعالم", "اللغة العربية جميلة جداً", "שלום עולם", "नमस्ते दुनिया", "हिन्दी में लिखा गया पाठ",
    "สวัสดีชาวโลก", "Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок",
    "Γειά σου Κόσμε! αβγδεζηθ", "Tiếng Việt có dấu: Hà Nội, Đà Nẵng", "ქართული ენა", "Հայերեն",
    "ᚠᛇᚻ᛫ᛒᛦᚦ", "ⲁⲛⲟⲕ", "ꦗꦮ", "አማርኛ", "தமிழ் மொழி", "বাংলা ভাষা", "ಕನ್ನಡ", "ພາສາລາວ", "မြန်မာ",
    "Ελληνικά και English και 中文 και 日本語 και 한국어",
)
# --- emoji
add("😀", "😀😃😄😁", "I ❤️ NY", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦 family", "👩🏽‍💻 coder", "🏳️‍🌈 flag",
    "🇺🇸🇬🇧🇯🇵🇨🇳", "1️⃣2️⃣3️⃣ #️⃣", "☺︎ vs ☺️", "🧑‍🤝‍🧑", "Emoji at end 🎉", "🎉Emoji at start",
    "mixed😀text😃here", "🤖🧠💡🚀✨🔥💯", "❤️‍🔥 ❤️‍🩹", "👁️‍🗨️", "🐻‍❄️", "😶‍🌫️ 🫠 🫶",
    "★☆✓✗✔✘→←↑↓⇒⇔∀∃∈∉∑∏∫√∞≈≠≤≥", "♠♣♥♦ ♪♫ ☀☁☂☃", "©®™ ℃℉ №", "¼ ½ ¾ ⅓ ⅔",
)
# --- numbers
for n in range(1, 21):
    add("".join(str((i * 7 + 3) % 10) for i in range(n)))
add("1", "12", "123", "1234", "12345", "123456", "1234567", "0", "00", "000", "0000",
    "3.14159265358979", "-42", "+7", "1,000,000", "1.000.000,50", "2^10 = 1024", "1e10", "6.022e23",
    "v1.2.3", "192.168.0.1", "2024-01-15T10:30:00Z", "10:45pm", "$1,234.56", "€99.99", "¥1000",
    "１２３４５ 全角数字", "٠١٢٣٤٥٦٧٨٩", "०१२३४५", "x² + y³ = z⁴", "Ⅻ ⅻ Ⅳ", "①②③", "𝟙𝟚𝟛",
    "phone: +1 (555) 123-4567", "ISBN 978-3-16-148410-0", "0.1 + 0.2 != 0.3", "100%", "1/2 3/4",
    "abc123def456", "a1b2c3", "123abc", "12 345 678", "99 bottles of beer", "3rd 21st 42nd 100th",
)
# --- whitespace
for n in (1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 64):
    add(" " * n)
add("a" + " " * 5 + "b", "a" + " " * 16 + "b", "\t", "\t\t", "\t\t\t\t", "\n", "\n\n", "\n\n\n", "\r\n",
    "\r\n\r\n", "\r", "line1\nline2\nline3", "line1\r\nline2\r\nline3\r\n", "a\n\n\nb", "a \n b",
    "a  \n  b", "a\t\n\tb", " \t \n \r\n ", "trailing spaces   ", "   leading spaces", "  both  ",
    "word\u00a0nbsp", "em\u2003space", "ideo\u3000space", "thin\u2009space", "line\u2028sep",
    "para\u2029sep", "vt\x0bff\x0c", "nel\x85x", "zero\u200bwidth", "zwj\u200djoiner", "nul\x00byte",
    "tab\tseparated\tvalues\t1\t2", "a\n \n \nb", "  \n\n  ", "x\n    \n    y", "\n    def f():\n        pass",
    "end with newline\n", "\n\nstart with newlines", "spaces before newline    \nnext",
    "\u00a0\u00a0\u00a0", " \u3000 ", "a \u200b b", "mixed\t \t \tws",
)
# --- URLs, emails, markup
add("https://www.example.com/path/to/page?query=1&b=2#frag", "http://localhost:8080/api/v1/users/42",
    "mailto:someone@example.org", "user.name+tag@sub.domain.co.uk", "ftp://ftp.example.com/pub/file.tar.gz",
    "www.google.com", "See https://en.wikipedia.org/wiki/Byte_pair_encoding for details.",
    "# Title\n\n## Subtitle\n\n- item 1\n- item 2\n\n**bold** _italic_ `code`",
    "| a | b |\n|---|---|\n| 1 | 2 |", "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$",
    "\\begin{equation} E = mc^2 \\end{equation}", "[link](http://x.y/z) ![img](a.png)", "<br/><hr />",
    "@user #hashtag $TICKER", "->> <<- <=> === !== ?? ?. ::", "((((((()))))))", "[[[]]]{{{}}}",
    "....", "----", "____", "====", "****", "~~~~", "!!!!", "????", "''''", "\"\"\"\"", "____init____",
)
# --- special / added tokens
add("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
    "<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>", "<｜User｜> spaced <｜Assistant｜> ",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "<｜fim▁begin｜>def f():<｜fim▁hole｜>\n<｜fim▁end｜>", "<｜▁pad▁｜><｜▁pad▁｜>", "<think>\nreasoning\n</think>\n\nanswer",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "<|endoftext|><|endoftext|>", "text<|endoftext|>text", " <|im_start|> ", "<|im_start|><|im_end|>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<tool_response>ok</tool_response>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
    "<|im_start", "im_start|>", "<|im_start |>", "<｜User", "｜>", "<｜begin▁of▁sentence｜", "<<|im_end|>>",
    "<|im_end|><｜end▁of▁sentence｜>", "<s></s><unk>[BOS][EOS]", "<|reserved_special_token_0|>",
    "▁ ▁▁ Ġ Ċ ĠĠ", "<|im_user|>user<|im_middle|>hi<|im_end|><|reserved_token_128100|>[EOS]", "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(1,2)<|box_end|>",
)
# --- Unicode normalization (NFC) and combining marks
add("e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u2126", "\u1100\u1161\u11a8", "\u1100\u1161 \u1112\u1161\u11ab",
    "a\u0323\u0307", "a\u0307\u0323", "q\u0307\u0323", "\uf900\uf901", "\u0344", "\u0958", "\u2000",
    "o\u0308\u0304", "n\u0303o\u0303", "\u00c5 \u0041\u030a", "\u1e9b\u0323", "\u0f73", "Z\u0335\u0336\u0337",
    "z\u0351\u0352\u0353\u0354\u0355\u0356", "\u0915\u093c", "\uac00\u11a8", "\u3131\u314f", "ﬁ ﬂ ﬀ",
)
# --- mixed / misc
add("", "a", "A", " ", ".", "'", "\"", "\\", "?", "中", "あ", "한", "😀", "é",
    "Hello 世界 🌍 123 !!!", "User: 你好\nAssistant: Hello! 😊", "Price: ¥500 (约$70)", "Tokyo東京Tokyo",
    "日本語とEnglishのmix、数字123も", "한국어English123😀", "Αθήνα2004Athens", "a—b–c-d", "«guillemets» „quotes“ 「括弧」『二重』",
    "《书名号》【方括号】〔龟甲〕", "。，、；：？！", "\u00ad soft hyphen", "x\u0300\u0301\u0302\u0303\u0304y",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", " !a \"b #c $d %e &f 'g (h", ".net ,x ;y :z -w +v",
    "a.b,c;d:e-f+g", "😀a😀b", "𝐇𝐞𝐥𝐥𝐨 𝕎𝕠𝕣𝕝𝕕", "ⓐⓑⓒ", "Ｈｅｌｌｏ　Ｗｏｒｌｄ", "ℌ𝔢𝔩𝔩𝔬",
)
# --- characters at the edges of \s (U+FEFF, U+0085, U+180E are not White_Space-equal across engines)
add("\ufeffBOM at start", "a\ufeff b", "a\x85\x85b", "x\u180ey", "\u2028\u2029", "\u1680ogham\u202fnarrow\u205fmath")
# --- deterministic pseudo-random mixtures from a character pool
pool = list("abcdefghijXYZ0123456789 \t\n\r.,;:!?'\"-_/()[]{}<>@#$%^&*+=~`|\\") + \
       list("你好世界中文日本語こんにちはカタカナ안녕하세요éüñçøßАБВгдеαβγδ") + \
       ["😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "\u00a0", "\u3000", "  ", "\n\n", "\r\n", "'s", "'LL",
        "<|im_end|>", "<｜end▁of▁sentence｜>", "<think>", "123456", "e\u0301", "\u200d", "Ġ"]
rng = random.Random(20240613)
for i in range(70):
    n = rng.randint(1, 40)
    S.append("".join(rng.choice(pool) for _ in range(n)))
# --- a long paragraph
S.append(("Large language models (LLMs) are trained on trillions of tokens. 大型语言模型在数万亿个词元上训练。"
          "大規模言語モデルは数兆のトークンで訓練されます。 대규모 언어 모델은 수조 개의 토큰으로 학습됩니다. "
          "def f(x):\n    return x * 2  # 🚀\n") * 8)

seen = set(); out = []
for s in S:
    if s not in seen:
        seen.add(s); out.append(s)
print(f"{len(out)} strings")
with open(OUT, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=0)
