#!/usr/bin/python3
"""Reference renderings of real chat templates, for tests/chat_template_test.cpp.

Renders every template in tests/fixtures/chat_templates/*.jinja with python3-jinja2
set up exactly as transformers sets it up in `_compile_jinja_template`
(transformers/utils/chat_template_utils.py):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    globals["raise_exception"] = raise jinja2.exceptions.TemplateError(message)
    globals["strftime_now"]    = datetime.now().strftime(format)   # pinned here, see CLOCK

and calls `template.render(messages=..., tools=..., documents=None,
add_generation_prompt=..., **kwargs)` as `render_jinja_template` does, on a set
of conversations (system + user, multi-turn, tool calls with dict and string
arguments, tool results, tool schemas, reasoning fields, unicode). Each case
is written with the exact context and either the rendered text or the error
python raised, to tests/fixtures/chat_templates/cases.json.

It also renders small snippets exercising expressions, filters, tests and
whitespace control one at a time (snippets.json).

Run with Debian's python3-jinja2 (3.1.2 when these fixtures were made):
    /usr/bin/python3 tools/make_chat_template_fixtures.py
"""
import copy
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

# strftime_now reads this fixed local time; the C++ test pins the same clock.
CLOCK = datetime.datetime(2025, 1, 15, 9, 30, 5)


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker as seen from a plain render: the body of
    {% generation %} ... {% endgeneration %} is rendered in place."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return CLOCK.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def render(source, context):
    """(output, None) or (None, 'ExceptionType: message').

    The context is copied first: a template can change the objects it is given
    (list.pop is allowed by the sandbox, and jinja2's indent filter extends a
    list argument in place), and the fixture must hold what was passed in."""
    context = copy.deepcopy(context)
    try:
        template = ENV.from_string(source)
    except Exception as e:  # syntax errors, unknown filters outside {% if %}
        return None, f"{type(e).__name__}: {e}"
    try:
        return template.render(**context), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------- conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["location"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation index.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for"},
                "top_k": {"type": "integer", "description": "How many hits", "default": 5},
                "filters": {
                    "type": "object",
                    "description": "Optional filters",
                    "properties": {
                        "lang": {"type": "string", "enum": ["en", "fr", "zh"]},
                        "after": {"type": "string", "nullable": True},
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tag list"},
                "scores": {"type": "array", "items": {"type": "number"}},
                "mode": {"oneOf": [{"type": "string"}, {"type": "integer"}], "description": "Mode"},
                "exact": {"type": "boolean", "default": False},
                "extra": {"type": ["string", "null"], "description": "Union type"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}

NOARG_TOOL = {
    "type": "function",
    "function": {"name": "now", "description": "Current time. Takes no arguments.", "parameters": {"type": "object", "properties": {}}},
}

UNICODE = "Grüße, naïve café — 你好，世界！ 😀🚀 «quotes» \"double\" 'single' back\\slash tab\there\nnew line"


def weather_call(args_as_string, call_id="call_1", city="Paris, France"):
    args = {"location": city, "unit": "celsius"}
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(args) if args_as_string else args},
    }


def conversations():
    """(name, messages, extra context) triples."""
    out = []
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    out.append(("system_user", [sys_msg, {"role": "user", "content": "Hello! What can you do?"}], {}))
    out.append(("user_only", [{"role": "user", "content": "Hi"}], {}))
    out.append(
        (
            "multi_turn",
            [
                sys_msg,
                {"role": "user", "content": "What is 2 + 2?"},
                {"role": "assistant", "content": "2 + 2 = 4."},
                {"role": "user", "content": "And times 3?"},
                {"role": "assistant", "content": "12."},
                {"role": "user", "content": "Thanks."},
            ],
            {},
        )
    )
    out.append(
        (
            "two_system",
            [sys_msg, {"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Why is the sky blue?"}],
            {},
        )
    )
    for as_string in (False, True):
        tag = "string_args" if as_string else "dict_args"
        out.append(
            (
                f"tool_call_{tag}",
                [
                    sys_msg,
                    {"role": "user", "content": "What's the weather in Paris?"},
                    {"role": "assistant", "content": "", "tool_calls": [weather_call(as_string)]},
                    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temperature": 18, "sky": "cloudy"}'},
                    {"role": "assistant", "content": "It is 18 °C and cloudy in Paris."},
                    {"role": "user", "content": "And in Tokyo?"},
                ],
                {"tools": [WEATHER_TOOL, SEARCH_TOOL]},
            )
        )
        out.append(
            (
                f"tool_call_pending_{tag}",
                [
                    {"role": "user", "content": "Weather in Paris and Tokyo please."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [weather_call(as_string, "call_a"), weather_call(as_string, "call_b", "東京, 日本")],
                    },
                    {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "18C cloudy"},
                    {"role": "tool", "tool_call_id": "call_b", "name": "get_weather", "content": "22C 晴れ"},
                ],
                {"tools": [WEATHER_TOOL]},
            )
        )
    out.append(
        (
            "tool_call_with_content",
            [
                {"role": "user", "content": "Search the docs for 'tokenizer'."},
                {
                    "role": "assistant",
                    "content": "Let me look that up.",
                    "tool_calls": [
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {
                                "name": "search_docs",
                                "arguments": {"query": "tokenizer", "top_k": 3, "filters": {"lang": "en"}, "tags": ["a", "b"], "exact": True, "ratio": 0.5, "none": None},
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c9", "name": "search_docs", "content": "3 hits"},
            ],
            {"tools": [SEARCH_TOOL, NOARG_TOOL]},
        )
    )
    out.append(
        (
            "reasoning",
            [
                sys_msg,
                {"role": "user", "content": "Is 91 prime?"},
                {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "thinking": "91 = 7 * 13.", "content": "No, 91 = 7 × 13."},
                {"role": "user", "content": "And 97?"},
                {"role": "assistant", "reasoning_content": "Check primes up to 9.", "thinking": "Check primes up to 9.", "content": "Yes, 97 is prime."},
            ],
            {},
        )
    )
    out.append(
        (
            "think_in_content",
            [
                {"role": "user", "content": "Is 91 prime?"},
                {"role": "assistant", "content": "<think>\n91 = 7 * 13.\n</think>\n\nNo, 91 = 7 × 13."},
                {"role": "user", "content": "And 97?"},
            ],
            {},
        )
    )
    out.append(
        (
            "unicode",
            [{"role": "system", "content": UNICODE}, {"role": "user", "content": UNICODE + " {{ not a tag }} {% raw %}"}],
            {"tools": [{"type": "function", "function": {"name": "echo", "description": UNICODE, "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "é ü 中 😀"}}}}}]},
        )
    )
    out.append(
        (
            "unicode_tool_args",
            [
                {"role": "user", "content": "Echo this."},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "e1", "type": "function", "function": {"name": "echo", "arguments": {"text": UNICODE, "n": 3, "ok": False, "x": None}}}],
                },
                {"role": "tool", "tool_call_id": "e1", "name": "echo", "content": UNICODE},
            ],
            {},
        )
    )
    out.append(("empty_content", [{"role": "user", "content": ""}], {}))
    out.append(("no_messages", [], {}))
    out.append(
        (
            "multimodal_parts",
            [
                {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, {"type": "image", "image": "x.png"}]},
            ],
            {},
        )
    )
    return out


# Template-specific conversations and kwargs.
def extra_cases(name):
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    user = {"role": "user", "content": "Hello"}
    if name.startswith("Qwen-Qwen3"):
        return [
            ("enable_thinking_false", [user], {"enable_thinking": False}, True),
            ("enable_thinking_true", [user], {"enable_thinking": True}, True),
            (
                "tool_response_as_user",
                [user, {"role": "user", "content": "<tool_response>\nx\n</tool_response>"}],
                {},
                True,
            ),
        ]
    convs = {c: (m, x) for (c, m, x) in conversations()}
    if name.startswith("deepseek-ai-DeepSeek-V3"):
        tool_msgs, tool_extra = convs["tool_call_dict_args"]
        pending_msgs, pending_extra = convs["tool_call_pending_dict_args"]
        return [
            ("tool_call_thinking", tool_msgs, dict(tool_extra, thinking=True), True),
            ("tool_call_pending_thinking", pending_msgs, dict(pending_extra, thinking=True), True),
            ("reasoning_thinking_multi", convs["reasoning"][0], {"thinking": True}, False),
            ("thinking_true", [sys_msg, user], {"thinking": True}, True),
            ("enable_thinking_true", [user], {"enable_thinking": True}, True),
            (
                "prefix_thinking",
                [user, {"role": "assistant", "content": "Partial", "prefix": True}],
                {"thinking": True},
                False,
            ),
            (
                "reasoning_thinking",
                [user, {"role": "assistant", "content": "Hi!", "reasoning_content": "Greet back."}, {"role": "user", "content": "Bye"}],
                {"thinking": True},
                True,
            ),
        ]
    if name == "openai-gpt-oss-120b":
        return [
            ("reasoning_effort_high", [sys_msg, user], {"reasoning_effort": "high"}, True),
            ("builtin_tools", [user], {"builtin_tools": ["browser", "python"], "model_identity": "You are a test model."}, True),
            ("developer_role", [{"role": "developer", "content": "Be terse."}, user], {}, True),
            (
                "channel_tags_raise",
                [user, {"role": "assistant", "content": "<|channel|>final<|message|>hi"}],
                {},
                True,
            ),
            (
                "content_and_thinking_with_tool_raise",
                [user, {"role": "assistant", "content": "x", "thinking": "y", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}],
                {},
                True,
            ),
            ("tool_without_call_raise", [user, {"role": "tool", "content": "orphan"}], {}, True),
            ("final_assistant_training", [user, {"role": "assistant", "thinking": "hmm", "content": "Done."}], {}, False),
        ]
    if name == "Kimi-K3":
        return [
            ("thinking_false", [sys_msg, user], {"thinking": False}, True),
            ("thinking_effort_low", [user], {"thinking_effort": "low"}, True),
            ("thinking_effort_bad_raise", [user], {"thinking_effort": "medium"}, True),
            ("tool_choice_required", [user], {"tools": [WEATHER_TOOL], "tool_choice": "required"}, True),
            ("tool_choice_none", [user], {"tool_choice": "none"}, True),
            ("response_format_json_object", [user], {"response_format": {"type": "json_object"}}, True),
            (
                "response_format_json_schema",
                [user],
                {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}}}},
                True,
            ),
            (
                "image_prompts",
                [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "see <|kimi_image_placeholder|> too"}]}],
                {"image_prompts": ["<img0>", "<img1>"]},
                True,
            ),
            ("image_prompts_mismatch_raise", [{"role": "user", "content": [{"type": "image"}]}], {"image_prompts": []}, True),
            ("named_user", [{"role": "user", "name": "alice", "content": "hi & \"bye\""}], {}, True),
            ("dynamic_tools", [{"role": "system", "tools": [NOARG_TOOL]}, user], {}, True),
        ]
    if name.startswith("Kimi-K2") or name == "moonshotai-Kimi-K2":
        return [("named_user", [{"role": "user", "name": "alice", "content": "hi"}], {}, True)]
    return []


def special_tokens(name):
    if name.startswith("deepseek") or name == "DeepSeek-V3":
        return {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
    if name.startswith("Qwen"):
        return {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    if "Kimi" in name:
        return {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]"}
    if "gpt-oss" in name:
        return {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"}
    return {}


def make_cases(templates):
    cases = []
    for name in sorted(templates):
        source = templates[name]
        convs = [(c, m, x, agp) for (c, m, x) in conversations() for agp in (True, False)]
        convs += extra_cases(name)
        for conv_name, messages, extra, agp in convs:
            # Exactly what render_jinja_template passes: tools is None when
            # there are none, documents is None, then the kwargs.
            context = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": agp}
            context.update(special_tokens(name))
            context.update(extra)
            variants = [("", context)]
            if conv_name == "system_user":
                # The server may leave keys out entirely (undefined, not None).
                bare = {k: v for k, v in context.items() if k not in ("tools", "documents")}
                variants.append(("_no_tools_key", bare))
            for suffix, ctx in variants:
                out, err = render(source, ctx)
                case = {"name": f"{name}/{conv_name}{suffix}/agp={int(agp)}", "template": name, "context": ctx}
                if err is None:
                    case["expected"] = out
                else:
                    case["error"] = err
                cases.append(case)
    return cases


# ---------------------------------------------------------------- snippets

SNIPPET_CONTEXT = {
    "s": "Hello, World",
    "u": "naïve 你好 😀",
    "n": 42,
    "neg": -7,
    "f": 2.5,
    "t": True,
    "z": None,
    "l": [3, 1, 2],
    "words": ["banana", "Apple", "cherry", "apple"],
    "d": {"b": 2, "a": 1, "items": "key named items"},
    "msgs": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi", "name": "bob"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "r"},
    ],
    "nested": {"a": {"b": [10, {"c": "deep"}]}},
    "empty": [],
    "text": "  line one\nline two\n\n  line four  ",
}

SNIPPETS = [
    # output of values as Python prints them
    "{{ 1 }}|{{ 1.0 }}|{{ 1.5e300 }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ -0.0 }}|{{ 3.14159 }}",
    "{{ true }}|{{ True }}|{{ false }}|{{ none }}|{{ None }}|{{ z }}|{{ t }}",
    "{{ [1, 'a', none, true, 1.5] }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}|{{ {'k': 'v', 1: [2]} }}",
    "{{ ['it\\'s', \"q\\\"\", 'a\\nb', 'tab\\t', 'back\\\\', u] }}",
    "{{ undefined_name }}|{{ d.missing }}|{{ d['missing'] }}|{{ l[10] }}|{{ z.attr }}",
    "{{ d }}|{{ nested }}|{{ msgs[1] }}",
    # literals and escapes
    "{{ 'a\\tb\\\\c\\x41\\u00e9\\U0001F600\\101\\q' }}",
    "{{ \"double 'quoted'\" }}|{{ 'adjacent' ' strings' }}|{{ 1_000 }}|{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1.5e3 }}|{{ 1_0.5 }}",
    # arithmetic
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}",
    "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ true + 1 }} {{ 3 * 'ab' }} {{ 'ab' * 0 }} {{ [1] * 3 }} {{ [1, 2] + [3] }}",
    "{{ 'a' ~ 1 ~ none ~ undefined_name ~ [1] }}|{{ -n }}|{{ +f }}|{{ -(3) }}|{{ n - neg }}",
    "{{ 1 / 0 }}",
    "{{ 'a' + 1 }}",
    "{{ undefined_name + 1 }}",
    "{{ 5 // 0 }}",
    # comparisons and logic
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'x' != 'y' }}",
    "{{ 'ell' in s }} {{ 2 in l }} {{ 'a' in d }} {{ 'zz' not in d }} {{ 1 in undefined_name }} {{ 'role' in msgs[0] }}",
    "{{ 1 < 'a' }}",
    "{{ 1 in 5 }}",
    "{{ none or 'x' }} {{ 0 and 'y' }} {{ 'a' and 'b' }} {{ not empty }} {{ not l }} {{ z or empty or 'last' }}",
    "{{ 'yes' if t else 'no' }}|{{ 'yes' if z }}|{{ 'a' if false else 'b' if false else 'c' }}",
    # attribute / item access, slicing
    "{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ nested.a.b[1].c }} {{ nested['a']['b'][0] }} {{ l[-1] }} {{ s[0] }} {{ u[2] }}",
    "{{ l[::-1] }} {{ l[1:] }} {{ l[:2] }} {{ s[::-1] }} {{ u[1:4] }} {{ s[-5:] }} {{ l[::2] }} {{ s[100:] }} {{ l[5:1:-1] }}",
    "{{ d.items is defined }}|{{ s.upper is defined }}|{{ l.pop is defined }}|{{ l.append is defined }}",
    "{{ d['items'] }}|{{ d.get('a') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}",
    "{{ undefined_name.attr }}",
    "{{ undefined_name['x'] }}",
    "{{ l[1:2:0] }}",
    # filters: strings
    "{{ s|upper }} {{ s|lower }} {{ 'hello world-foo(bar'|title }} {{ 'hELLO'|capitalize }} {{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}",
    "{{ s|replace('o', '0') }} {{ s|replace('l', 'L', 2) }} {{ s|length }} {{ u|length }} {{ u|count }} {{ s|reverse }} {{ u|reverse }}",
    "{{ text|indent }}|{{ text|indent(2, true) }}|{{ text|indent('> ', blank=true) }}",
    "{{ 'abc'|center(9) }}|{{ s|truncate(9) }}|{{ s|truncate(9, true) }}|{{ 'one two three four'|wordcount }}",
    "{{ '%s is %d years, %.2f%%'|format('Bob', 42, 99.5) }}|{{ '%(a)s-%(b)s'|format(a=1, b=2) }}|{{ '%5s|%-5s|%05d|%x|%r'|format('ab', 'cd', 42, 255, 'q') }}",
    "{{ 'x=%s' % 5 }}|{{ '%s+%s' % (1, 2) }}|{{ '%c%c' % (65, 'b') }}|{{ '%e' % 12345.678 }}|{{ '%g' % 0.00001 }}",
    "{{ s|string }}{{ n|string }}{{ none|string }}{{ l|string }}|{{ 42|string|length }}",
    "{{ s|safe }}|{{ '<b>'|e }}|{{ '<b>'|escape }}|{{ ('<b>'|safe) + '<i>' }}|{{ '<i>' + ('<b>'|safe) }}|{{ '<i>' ~ ('<b>'|safe) }}",
    # filters: numbers
    "{{ '42'|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1F'|int(0, 16) }} {{ '0b11'|int(base=0) }} {{ ' 12 '|int }} {{ '1_000'|int }}",
    "{{ '3.5'|float }} {{ 'nan'|float }} {{ 'x'|float }} {{ 2|float }} {{ ' 1e3 '|float }} {{ none|int }} {{ true|int }}",
    "{{ -3|abs }} {{ -2.5|abs }} {{ 2.675|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 42.55|round(1, 'floor') }} {{ 42.51|round(0, 'ceil') }} {{ 25|round(-1) }} {{ 1234.5678|round(-2) }} {{ 7|round }}",
    "{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ msgs|map(attribute='role')|list|length }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ words|min }} {{ words|max }} {{ empty|min }}",
    # filters: sequences
    "{{ l|first }} {{ l|last }} {{ s|first }} {{ d|first }} {{ d|last }} {{ empty|first }} {{ l|list }} {{ s|list }} {{ d|list }}",
    "{{ l|sort }} {{ l|sort(reverse=true) }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ msgs|sort(attribute='role')|map(attribute='role')|join(',') }}",
    "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ [1, 1.0, true, 2]|unique|list }}",
    "{{ l|join }} {{ l|join(', ') }} {{ msgs|join('|', attribute='role') }} {{ [1, none, 'x']|join('-') }}",
    "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value') }} {{ {'B': 1, 'a': 2}|dictsort }} {{ {'B': 1, 'a': 2}|dictsort(true) }} {{ d|dictsort(reverse=true) }}",
    "{{ msgs|map(attribute='content')|list }} {{ msgs|map(attribute='name', default='anon')|list }} {{ words|map('upper')|list }} {{ l|map('string')|join }}",
    "{{ msgs|selectattr('tool_calls')|list|length }} {{ msgs|rejectattr('content')|map(attribute='role')|list }} {{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='name')|first }} {{ msgs|selectattr('role', '==', 'tool')|list|length }}",
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ l|select('greaterthan', 1)|list }} {{ words|select('in', ['Apple', 'apple'])|list }}",
    # generators: truthy even when empty, used up by one pass, no len()
    "{% if empty|select %}T{% else %}F{% endif %}|{% set g = l|select('odd') %}{{ g|list }}{{ g|list }}|{{ 3 in l|select }}|{{ l|reverse|list }}|{{ d|reverse|list }}|{{ (l|map('string')|first) }}",
    "{% set g = l|map('string') %}{{ '3' in g }}{{ g|list }}|{% for x in words|unique %}{{ loop.index }}/{{ loop.length }}{{ x }} {% endfor %}|{{ none|select|list }}|{{ (3|items) is defined }}",
    "{{ l|map('string')|length }}",
    "{{ l|select|last }}",
    "{{ l|select|tojson }}",
    "{{ (l|select)[0] }}|{{ l|reverse|reverse }}",
    "{{ l|batch(2)|list }} {{ l|batch(2, 'x')|list }} {{ [1,2,3,4,5]|slice(2)|list }} {{ [1,2,3,4]|slice(3, 0)|list }}",
    "{{ l|default('d') }} {{ undefined_name|default('d') }} {{ undefined_name|d('dd') }} {{ z|default('d') }} {{ ''|default('d', true) }} {{ empty|default('e', boolean=true) }}",
    "{{ d|attr('items') is defined }} {{ d|attr('b') }} {{ undefined_name|length }} {{ undefined_name|list }} {{ undefined_name|join }} {{ undefined_name|trim }}|{{ undefined_name|first }}",
    # tojson
    "{{ d|tojson }}|{{ nested|tojson }}|{{ msgs[2]|tojson }}|{{ u|tojson }}|{{ u|tojson(ensure_ascii=true) }}|{{ 'a\"b\\\\c\\n\\u0001\\u007f'|tojson }}",
    "{{ nested|tojson(indent=2) }}|{{ l|tojson(indent=0) }}|{{ d|tojson(indent='\\t') }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ empty|tojson(indent=2) }}|{{ {}|tojson(indent=2) }}",
    "{{ [1.0, 1e16, 1e-7, -0.0, 3, true, none]|tojson }}|{{ {1: 'int key', none: 'n', true: 't', 2.5: 'f'}|tojson }}|{{ (1, 2)|tojson }}|{{ s|tojson(2) }}",
    "{{ undefined_name|tojson }}",
    "{{ namespace(a=1)|tojson }}",
    # tests
    "{{ n is number }} {{ t is number }} {{ f is float }} {{ n is integer }} {{ t is integer }} {{ t is boolean }} {{ t is true }} {{ 1 is true }} {{ z is none }} {{ z is false }}",
    "{{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ n is iterable }} {{ l is sequence }} {{ d is sequence }} {{ undefined_name is sequence }} {{ undefined_name is iterable }}",
    "{{ x is defined }} {{ n is defined }} {{ x is undefined }} {{ x is not defined }} {{ n is not none }} {{ d.zz is defined }} {{ z is defined }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 2 is in l }} {{ n is equalto 42 }} {{ n is eq 41 }} {{ n is ne 41 }}",
    "{{ n is gt 10 }} {{ n is ge 42 }} {{ n is lt 10 }} {{ n is le 42 }} {{ n is greaterthan 50 }} {{ n is lessthan 50 }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }} {{ z is sameas none }} {{ t is sameas true }}",
    "{{ ('x'|safe) is escaped }} {{ 'x' is escaped }} {{ range is callable }} {{ s is callable }} {{ s.upper is callable }}",
    # python methods
    "{{ s.upper() }} {{ s.lower() }} {{ s.startswith('Hell') }} {{ s.endswith(('x', 'ld')) }} {{ s.split(', ') }} {{ 'a b  c'.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
    "{{ text.strip() }}|{{ text.lstrip() }}|{{ text.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ text.splitlines() }}|{{ 'a\\r\\nb\\rc'.splitlines(true) }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('zz') }} {{ s.count('l') }} {{ u.find('你') }} {{ s.index('W') }}",
    "{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format('x', 'y') }} {{ '{1}{0}{name}'.format('a', 'b', name='c') }} {{ '{:>6}|{:<4}|{:^7}|{:05d}|{:.3f}|{:,}|{:x}|{!r}'.format('ab', 'c', 'mid', 42, 3.14159, 1234567, 255, 'q') }}",
    "{{ s.title() }} {{ 'hello world'.capitalize() }} {{ 'Hi'.swapcase() }} {{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ '  '.isspace() }} {{ 'AB'.isupper() }} {{ '7'.zfill(3) }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ 'ab'.center(5, '*') }}",
    "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }}",
    "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.copy() }} {{ l.index(2) }} {{ l.count(3) }} {{ (1, 2, 1).count(1) }}",
    "{% set x = [1, 2, 3] %}{{ x.pop() }}{{ x }}{{ x.pop(0) }}{{ x }}{{ x.clear() }}{{ x }}",
    "{% set x = [1] %}{{ x.append(2) }}",
    "{{ d.update({'c': 3}) }}",
    "{{ d.pop }}|{{ l.sort }}|done",
    "{{ ''.join([1, 2]) }}",
    "{{ s.split('') }}",
    # statements
    "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}:{{ x }} {% endfor %}",
    "{% for x in l %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}|{% for a in [1, 2] %}{% for b in [3] %}{{ loop.depth }}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in empty %}{{ x }}{% else %}empty{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [[1, 2], 'xy'] %}{{ a }}{{ b }}{% endfor %}",
    "{% for k in d %}{{ k }},{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}|{% for x in undefined_name %}x{% else %}none{% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in z %}{% endfor %}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "{% set x = 1 %}{% for i in range(2) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}|{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}",
    "{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, %}{{ t }}|{% set x %}block {{ n }}{% endset %}{{ x }}|{% set y | upper %}shout{% endset %}{{ y }}",
    "{% set x = 5 %}{% set x.attr = 1 %}",
    "{% if n > 40 %}big{% elif n > 10 %}mid{% else %}small{% endif %}|{% if z %}z{% elif empty %}e{% else %}neither{% endif %}|{% if undefined_name %}u{% endif %}",
    "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }} {{ greet() }}",
    "{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}|{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside {{ n }}{% endcall %}|{% macro list(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) list([1, 2]) %}<{{ x }}>{% endcall %}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}",
    "{% macro m() %}{{ z2 }}{% endmacro %}{% set z2 = 'top' %}{{ m() }}{% for i in [1] %}{% set z2 = 'loop' %}{{ m() }}{% endfor %}",
    "{% for x in [1, [2, [3]], 4] recursive %}<{% if x is sequence %}{{ loop(x) }}{% else %}{{ x }}@{{ loop.depth }}/{{ loop.depth0 }}/{{ loop.index }}{% endif %}>{% endfor %}",
    "{% for x in [1] %}{{ loop(x) }}{% endfor %}",
    "{% set d2 = dict(msgs[0], extra=1) %}{{ d2 }}{{ dict(a=1)|tojson }}{{ namespace(msgs[0]).role }}|{{ '%-10s|%+d|% d|%.3s|%5.1f%%' % ('ab', 5, 3, 'abcdef', 99.44) }}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% else %}else-ran{% endfor %}|{% for x in l %}{% continue %}{% else %}else-ran{% endfor %}|{% for x in l %}{% break %}{% else %}else-ran{% endfor %}",
    "{{ d.items() }}|{{ d.keys()|list }}|{{ 'a' in d.keys() }}|{{ d.values()|length }}|{{ d.items()|first }}|{{ d.keys()|last }}|{% if {}.items() %}T{% else %}F{% endif %}",
    "{{ d.keys()|tojson }}",
    "{{ 'x=%s' % undefined_name }}|{{ 'abc' % [] }}|{{ '%s' % [1, 2] }}|{{ '%s' % {} }}",
    "{{ 'abc' % 5 }}",
    "{{ ('<b>'|safe)|list }}|{{ ('<b>'|safe)|first }}|{{ ('<b>'|safe)[0] }}|{{ ('<b>'|safe).upper() + '<i>' }}|{{ ('<b>'|safe).replace('<', '&') }}",
    "{{ l[1:] + undefined_name }}",
    "{{ n[1:] }}",
    "{{ d[1:] }}",
    "{{ l['a':] }}",
    "{{ 'abc'|truncate(5)|length }}|{{ l|truncate(5) }}|{{ 'hello world foo bar baz'|truncate(12) }}|{{ 'hello world foo bar baz'|truncate(12, end='..', leeway=0) }}",
    "{{ n|indent }}",
    "{% filter upper %}shout {{ s }}{% endfilter %}|{% filter indent(2, true) %}a\nb{% endfilter %}",
    "{% with a = 1, b = n %}{{ a }}{{ b }}{% endwith %}{{ a }}",
    "{% raw %}{{ not rendered }}{% endraw %}|{% generation %}gen {{ n }}{% endgeneration %}",
    "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ namespace(a=1).a }}",
    "{{ range(100001)|length }}",
    "{{ raise_exception('custom failure message') }}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}|{{ strftime_now('%d %b %Y') }}",
    "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}|{% set j = joiner('/') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}",
    # whitespace control
    "a  {% if true %}  b  {% endif %}  c",
    "line1\n    {% if true %}\n    inside\n    {% endif %}\nline2\n",
    "x {{- ' y ' -}} z|  {%- if true -%}  q  {%- endif -%}  |",
    "  {%+ if true %}kept indent{% endif %}\n  {# comment #}\nafter comment\n{#- trimmed -#}\n  end",
    "{% for i in l %}\n  {{ i }}\n{% endfor %}\n",
    "a\n{% set x = 1 %}\nb\n{%- set y = 2 %}\nc {{ x }}{{ y }}\n\n",
    "{% raw -%}\n   raw  {{ x }}\n{%- endraw %}\nend",
    "\t{% if true %}\ttab{% endif %}\n {{ n }} {% if true %}{% endif %}\n",
    "one\r\ntwo\r{{ n }}\r\n",
    "{{ {'a': {'b': 1}} }}|{{ {'a': {'b': 1}}['a'] }}",
    # syntax and name errors
    "{% if x %}unclosed",
    "{% for %}",
    "{{ 1 + }}",
    "{{ x|no_such_filter }}",
    "{% if x %}{{ x|no_such_filter }}{% endif %}ok",
    "{% if n %}{{ n|no_such_filter }}{% endif %}",
    "{{ x is no_such_test }}",
    "{% unknown_tag %}",
    "{% endfor %}",
    "{% break %}",
    "{{ 'unterminated }}",
    "{{ (1, 2 }}",
    "{# unterminated comment",
    "{{ x.__class__ }}",
    "{% include 'other.jinja' %}",
    "{{ n() }}",
    "{{ undefined_name() }}",
    "{{ msgs[0].content.startswith('s') }} {{ msgs[2].content.startswith }}",
    "{{ msgs[2].content.startswith('x') }}",
]


def make_snippets():
    out = []
    for src in SNIPPETS:
        res, err = render(src, SNIPPET_CONTEXT)
        case = {"template": src}
        if err is None:
            case["expected"] = res
        else:
            case["error"] = err
        out.append(case)
    return {"context": SNIPPET_CONTEXT, "cases": out}


def main():
    print(f"jinja2 {jinja2.__version__} from {jinja2.__file__}", file=sys.stderr)
    templates = {}
    for fn in sorted(os.listdir(FIXTURES)):
        if fn.endswith(".jinja"):
            with open(os.path.join(FIXTURES, fn), encoding="utf-8", newline="") as f:
                templates[fn[: -len(".jinja")]] = f.read()
    cases = make_cases(templates)
    with open(os.path.join(FIXTURES, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"clock": CLOCK.isoformat(), "jinja2": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    snippets = make_snippets()
    with open(os.path.join(FIXTURES, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump(snippets, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    s_err = sum(1 for c in snippets["cases"] if "error" in c)
    print(f"{len(cases)} template cases ({n_err} raise), {len(snippets['cases'])} snippets ({s_err} raise)", file=sys.stderr)


if __name__ == "__main__":
    main()
