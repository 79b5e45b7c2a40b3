#!/usr/bin/python3
"""Renders chat-template cases with Python Jinja2 configured as HF transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson with
ensure_ascii=False, raise_exception, strftime_now). Reads cases JSON on stdin, writes it back
on stdout with "py" (text or null) and "py_err" per case. Used by gen_tmpl_ref.js."""
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(msg):
    raise ValueError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    data = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    cache = {}
    for case in data["cases"]:
        name = case["template"]
        if name not in cache:
            cache[name] = env.from_string(data["templates"][name])
        try:
            case["py"] = cache[name].render(**case["ctx"])
            case["py_err"] = None
        except Exception as e:  # noqa: BLE001 - any template error is a recorded outcome
            case["py"] = None
            case["py_err"] = f"{type(e).__name__}: {e}"
    json.dump(data, sys.stdout, ensure_ascii=False, indent=1)


main()
