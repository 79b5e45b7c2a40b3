#!/usr/bin/python3
"""Vocab-only GGUF from an HF tokenizer, the way llama.cpp's converter writes one
(convert_hf_to_gguf.py --vocab-only: get_vocab_base + _set_vocab_gpt2 + gguf-py's SpecialVocab),
so cllm's GGUF tokenizer can be tested against the HF tokenizer the file came from.

    /usr/bin/python3 tools/ref/gguf_vocab.py DIR OUT.gguf --pre qwen35
        [--vocab-size N]    ids 0..N-1 (the model config's vocab_size; default: largest id + 1)
        [--config FILE]     a config.json: vocab_size (top level or text_config) and the
                            *_token_id fallbacks, as the converter reads them
        [--arch qwen35moe]  general.architecture

DIR holds tokenizer.json, tokenizer_config.json (optional) and chat_template.jinja (optional,
used when tokenizer_config.json has no chat_template).

What is written (GGUF v3, little endian, no tensors, nothing after the key/values):
  tokenizer.ggml.model "gpt2", tokenizer.ggml.pre (given: the converter picks it from a hash
  of the HF tokenizer's output, which needs transformers), tokenizer.ggml.tokens (every id in
  order, HF's vocabulary spelling; ids the tokenizer lacks are "[PAD<id>]" of type UNUSED),
  tokenizer.ggml.token_type (1 normal, 3 control: added and special or looking special, 4
  user-defined: other added tokens, 5 unused), tokenizer.ggml.merges ("a b", a space inside
  a part written as U+0120 + its code), bos/eos/unk/sep/pad/mask ids from the tokenizer_config
  names (then config.json), add_bos/add_eos, tokenizer.chat_template (and the named ones).
Not done: the converter re-normalizes an added token with normalized=false through
decode(encode(t)) using transformers; here the content is kept as is (the same for every
token of the Qwen tokenizers), and TemplateProcessing post-processors are not read.

Standard library only (no gguf-py: this is an independent writer).
"""
import argparse
import json
import os
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
# gguf value types (ggml's gguf.h)
T_U32, T_I32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 7, 8, 9
# token types (llama_token_type)
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
           "sep": "seperator_token_id", "pad": "padding_token_id", "mask": "mask_token_id"}


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value, sub=None):
    out = gstr(key) + struct.pack("<I", vtype)
    if vtype == T_STRING:
        return out + gstr(value)
    if vtype == T_U32:
        return out + struct.pack("<I", value)
    if vtype == T_BOOL:
        return out + struct.pack("<B", 1 if value else 0)
    if vtype == T_ARRAY:
        if not value:
            raise ValueError("%s: an empty array (the converter refuses those)" % key)
        out += struct.pack("<IQ", sub, len(value))
        if sub == T_STRING:
            return out + b"".join(gstr(v) for v in value)
        if sub == T_I32:
            return out + struct.pack("<%di" % len(value), *value)
    raise ValueError("unhandled type %d for %s" % (vtype, key))


def looks_special(t):
    """does_token_look_special of the converter: names some models forget to mark special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<\uff5c") and t.endswith("\uff5c>"))
            or (t.startswith("<unused") and t.endswith(">")))


def vocab_lists(tok, vocab_size):
    """tokens and types in id order, as get_vocab_base makes them."""
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]  # HF's get_vocab: an added token wins over the model's entry
    if vocab_size is None:
        vocab_size = max(by_id) + 1
    if max(by_id) >= vocab_size:
        sys.exit("gguf_vocab: id %d is not below vocab_size %d" % (max(by_id), vocab_size))
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append("[PAD%d]" % i)
            types.append(UNUSED)
        elif i in added:
            t = by_id[i]
            if added[i].get("special") or looks_special(t):
                types.append(CONTROL)
            else:
                t = t.replace("\u2581", " ")  # the converter pre-normalizes user-defined spaces
                types.append(USER_DEFINED)
            tokens.append(t)
        else:
            tokens.append(by_id[i])
            types.append(NORMAL)
    return tokens, types


def merge_strings(merges):
    if merges and isinstance(merges[0], list):
        # pairs (transformers >= 4.45): a space inside a part would be ambiguous in "a b", so
        # the converter writes it as chr(ord(' ') + 256)
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part)
                         for part in pair) for pair in merges]
    return list(merges)


def special_ids(tok, cfg, model_cfg, n_vocab):
    """SpecialVocab: tokenizer_config names matched to added tokens, then config.json ids."""
    ids = {}
    added = tok.get("added_tokens", [])
    for typ in SPECIAL_TYPES:
        entry = cfg.get("%s_token" % typ)
        if isinstance(entry, dict):
            entry = entry.get("content")
        if not isinstance(entry, str):
            continue
        tid = next((a["id"] for a in added if a["content"] == entry), None)
        if isinstance(tid, int) and tid < n_vocab:
            ids[typ] = tid
    for typ in SPECIAL_TYPES:
        tid = model_cfg.get("%s_token_id" % typ)
        if tid is None:
            tid = model_cfg.get("text_config", {}).get("%s_token_id" % typ)
        if typ not in ids and isinstance(tid, int) and 0 <= tid < n_vocab:
            ids[typ] = tid
    return ids


def build(tok_dir, pre, vocab_size=None, config=None, arch="qwen35moe"):
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    cfg = {}
    cpath = os.path.join(tok_dir, "tokenizer_config.json")
    if os.path.exists(cpath):
        with open(cpath, encoding="utf-8") as f:
            cfg = json.load(f)
    model_cfg = {}
    if config:
        with open(config, encoding="utf-8") as f:
            model_cfg = json.load(f)
        if vocab_size is None:
            vocab_size = model_cfg.get("vocab_size",
                                       model_cfg.get("text_config", {}).get("vocab_size"))
    if tok["model"].get("type") != "BPE":
        sys.exit("gguf_vocab: only BPE tokenizers (llama.cpp's gpt2 model)")
    tokens, types = vocab_lists(tok, vocab_size)
    out = [kv("general.architecture", T_STRING, arch),
           kv("tokenizer.ggml.model", T_STRING, "gpt2"),
           kv("tokenizer.ggml.pre", T_STRING, pre),
           kv("tokenizer.ggml.tokens", T_ARRAY, tokens, T_STRING),
           kv("tokenizer.ggml.token_type", T_ARRAY, types, T_I32)]
    merges = merge_strings(tok["model"].get("merges", []))
    if merges:
        out.append(kv("tokenizer.ggml.merges", T_ARRAY, merges, T_STRING))
    for typ, tid in special_ids(tok, cfg, model_cfg, len(tokens)).items():
        if typ in ID_KEYS:
            out.append(kv("tokenizer.ggml." + ID_KEYS[typ], T_U32, tid))
    for typ in SPECIAL_TYPES:
        if isinstance(cfg.get("add_%s_token" % typ), bool) and typ in ("bos", "eos", "sep"):
            out.append(kv("tokenizer.ggml.add_%s_token" % typ, T_BOOL, cfg["add_%s_token" % typ]))
    template = cfg.get("chat_template")
    jinja = os.path.join(tok_dir, "chat_template.jinja")
    if template is None and os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    if isinstance(template, list):
        named = []
        for choice in template:
            name = "".join(c if c.isascii() and c.isalnum() else "_"
                           for c in choice.get("name", ""))
            if name and choice.get("template") is not None:
                if name == "default":
                    out.append(kv("tokenizer.chat_template", T_STRING, choice["template"]))
                else:
                    named.append(name)
                    out.append(kv("tokenizer.chat_template." + name, T_STRING,
                                  choice["template"]))
        if named:
            out.append(kv("tokenizer.chat_templates", T_ARRAY, named, T_STRING))
    elif isinstance(template, str):
        out.append(kv("tokenizer.chat_template", T_STRING, template))
    return (GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, 0, len(out)) + b"".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--pre", required=True, help="tokenizer.ggml.pre, e.g. qwen2, qwen35")
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--config")
    ap.add_argument("--arch", default="qwen35moe")
    a = ap.parse_args()
    data = build(a.dir, a.pre, a.vocab_size, a.config, a.arch)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
